package api

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRequestHeaders checks the headers the API gateway reads from a
// request: the bearer key is accepted only when it is the key (the
// scheme in any case); a session
// id is accepted only as a plain token (it is echoed in a response header
// and becomes a chat id); an Idempotency-Key always maps to the same
// request id within a session and to a different one in another session,
// and that id names this replica; a Responses API response id made of it
// is one the gateway looks up.
func FuzzRequestHeaders(f *testing.F) {
	f.Add("Bearer sk-1", "sk-1", "chat-1", "", "key-1")
	f.Add("Bearer  sk-1 ", "sk-1", "", "hermes.2", "")
	f.Add("bearer sk-1", "sk-1", "bad id", "", "k")
	f.Add("Bearer ", "", "", "", "\xff\r\n")
	f.Add("Basic c2stMQ==", "sk-1", strings.Repeat("a", 129), "ok", "")
	f.Fuzz(func(t *testing.T, authorization, key, session, hermes, idem string) {
		if keyMatches(authorization, key) {
			// The scheme, in any case, then the key.
			scheme, token, _ := strings.Cut(strings.TrimSpace(authorization), " ")
			if key == "" || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) != key {
				t.Fatalf("Authorization %q accepted for key %q", authorization, key)
			}
		}
		if key != "" && key == strings.TrimSpace(key) && !keyMatches("Bearer "+key, key) {
			t.Fatalf("the key %q itself refused", key)
		}

		h := http.Header{}
		h.Set(HeaderSession, session)
		h.Set(HeaderHermesSession, hermes)
		got, ok := sessionHeader(h)
		want := session
		if want == "" {
			want = hermes
		}
		if got != want {
			t.Fatalf("session %q, want %q", got, want)
		}
		if ok && got != "" {
			if len(got) > 128 || !utf8.ValidString(got) || strings.ContainsAny(got, " \t\r\n:/") {
				t.Fatalf("session id %q accepted", got)
			}
		}

		id := keyedID("who", got, idem)
		if id != keyedID("who", got, idem) {
			t.Fatal("request id not deterministic")
		}
		if keyedID("who", got+"x", idem) == id || keyedID("other", got, idem) == id {
			t.Fatal("the same key in another session or for another client is the same request")
		}
		if !sessionIDPattern.MatchString(id) {
			t.Fatalf("request id %q cannot be a session id (it is echoed as one)", id)
		}
		// The response id made of a request id can be looked up again.
		if resp := "resp_" + (&turn{id: id}).suffix(); !responseIDPattern.MatchString(resp) {
			t.Fatalf("response id %q is refused as one", resp)
		}
	})
}
