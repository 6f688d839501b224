package api

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web chat: static files, no build step. It talks to the same
// /v1/chat/completions endpoint (streamed) with an X-Session-Id it keeps
// in localStorage, and an Idempotency-Key per message, with which it asks
// again for an answer a reload, a lost connection or the end of the
// request's wait (reply_timeout) cut off. When the gateway has a key, the page asks for it once
// (after the first 401), keeps it in localStorage and sends the refused
// message with it; on a loopback
// gateway run with gateways.api.insecure it needs none.
//
//go:embed web
var webFiles embed.FS

func webChat() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeMethodNotAllowed(w, r, "GET, HEAD")
			return
		}
		switch r.URL.Path {
		case "/", "/index.html", "/app.js", "/app.css":
			w.Header().Set("Cache-Control", "no-cache")
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
