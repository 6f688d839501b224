package platform

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
)

// ServeHTTP serves srv on ln until ctx ends, then shuts down gracefully
// (requests in flight get grace to finish), or returns the listener's
// error. HTTP-based gateways use it as the body of Connect.
func ServeHTTP(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		// The listener failed; requests in flight keep their connections.
		return fmt.Errorf("serve http: %w", err)
	}
}

// ReadBody reads a request body of at most limit bytes. One that says it
// is longer (Content-Length) is refused before any of it is read — the
// client need not send it, nor the server wait for it — and one that
// turns out longer once limit bytes are read (chunked, a wrong length);
// both with an *http.MaxBytesError, which the caller answers with 413.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		// The rest of the body stays unread: the connection cannot
		// serve another request.
		w.Header().Set("Connection", "close")
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// Deliverer is what a webhook's handler needs of the kit's Conn: publish
// a message, or count and log one it refused.
type Deliverer interface {
	Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (Accepted, error)
	Reject(ctx context.Context, reason string, err error)
}

// webhookReadTimeout bounds reading one request, body included.
const webhookReadTimeout = 30 * time.Second

// ServeWebhook listens on addr and serves h until ctx ends, for gateways
// their platform calls (WhatsApp, SMS, Teams, LINE, BlueBubbles). Anyone
// can connect and send a body before its signature is checked, so every
// phase of a connection is bounded; an answer may wait up to ack for the
// bus. listening gets the listener's address (port 0 picks one) before
// conn is marked connected.
//
// A request whose handling panics is answered 200, logged and counted
// (RecoverHTTP with conn as its Rejecter): each of these platforms posts
// an event again on any other answer (WhatsApp for up to 7 days, LINE
// with redelivery on) or shows its user an error (Teams, Google Chat,
// Twilio's fallback), and a payload that panics once panics again.
func ServeWebhook(ctx context.Context, conn Conn, log *slog.Logger, platform, addr string, h http.Handler, ack time.Duration, listening func(addr string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           RecoverHTTP(h, log, platform, http.StatusOK, conn),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookReadTimeout + ack + 15*time.Second,
		IdleTimeout:       30 * time.Second,
	}
	listening(ln.Addr().String())
	conn.Connected()
	return ServeHTTP(ctx, srv, ln, 5*time.Second)
}

// HTTPComponent is the switchboard_panics_total component of a panic
// recovered in a gateway's HTTP handler (RecoverHTTP).
const HTTPComponent = "gateway_http"

// RecoverHTTP wraps a gateway's HTTP handler so that a panic in one
// request's handling costs only that request: it is recovered, logged at
// error level with the stack, the platform, the method and the path,
// counted in switchboard_panics_total{component="gateway_http"} and, with
// rej, as a rejected inbound payload, and the request answered status
// with an empty body. An answer already begun cannot take another
// status: its connection is cut (http.ErrAbortHandler, which net/http
// does not log). A handler's own http.ErrAbortHandler passes through
// uncounted.
//
// Without it net/http recovers the panic itself: it drops the connection
// without an answer and counts nothing, and a platform that retries
// posts the same payload into the same panic. status is the caller's
// choice by its platform's retry rules: 200 where the platform redelivers
// on any other answer (the payload is dropped after the log line, as
// Receive skips one), 500 where a client made a request and should learn
// that it failed (the API gateway, the generic webhook gateway, whose
// senders do not retry by themselves).
func RecoverHTTP(h http.Handler, log *slog.Logger, platform string, status int, rej Rejecter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &answerWriter{ResponseWriter: w}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			err := panics.Report(log, HTTPComponent, p, "platform", platform, "method", r.Method, "path", r.URL.Path)
			if rej != nil {
				rej.Reject(r.Context(), "request the gateway could not handle (panicked)", err)
			}
			if rw.started {
				panic(http.ErrAbortHandler)
			}
			w.Header().Set("Connection", "close") // the body may be unread
			w.WriteHeader(status)
		}()
		h.ServeHTTP(rw, r)
	})
}

// answerWriter notes whether the answer has begun. Unwrap gives
// http.ResponseController the server's writer; Flush is the handlers'
// http.Flusher (streamed answers).
type answerWriter struct {
	http.ResponseWriter
	started bool
}

func (w *answerWriter) WriteHeader(code int) {
	if code >= 200 {
		w.started = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.started = true
	return w.ResponseWriter.Write(b)
}

func (w *answerWriter) Flush() {
	w.started = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
