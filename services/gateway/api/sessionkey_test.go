package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"
)

// scopeOf is the memory scope X-Hermes-Session-Key raw names for the
// client identity.
func scopeOf(identity, raw string) string {
	mac := hmac.New(sha256.New, []byte(identity))
	mac.Write([]byte(raw))
	return "api-server-" + hex.EncodeToString(mac.Sum(nil))
}

// X-Hermes-Session-Key, as Hermes reads it on chat completions, the
// Responses API and runs: the memory scope it names (a hash of the
// header under the client's key) is the message's user_id_alt, which the
// worker keeps memories and past conversations under, and the answer
// names it in the same header. The same header under another key is
// another scope; no header is no scope.
func TestSessionKeyScopesMemory(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	other := strings.Repeat("o", 32)
	s := startService(t, b, func(c *Config) { c.Keys = map[string]string{"other": other} })
	r := startResponder(t, b)
	single := identityFor(t, s, testKey)

	for _, c := range []struct {
		name, path, body, key, header string
		scope                         string
		status                        int
	}{
		{"chat completion", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}]}`, testKey, "channel-7", scopeOf(single, "channel-7"), 200},
		{"stream", "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"b"}]}`, testKey, " channel-7 ", scopeOf(single, "channel-7"), 200},
		{"response", "/v1/responses", `{"input":"c"}`, testKey, "channel-7", scopeOf(single, "channel-7"), 200},
		{"run", "/v1/runs", `{"input":"d"}`, testKey, "channel-7", scopeOf(single, "channel-7"), 202},
		{"another key", "/v1/chat/completions", `{"messages":[{"role":"user","content":"e"}]}`, other, "channel-7", scopeOf(namedPrefix+"other", "channel-7"), 200},
		{"no header", "/v1/chat/completions", `{"messages":[{"role":"user","content":"f"}]}`, testKey, "", "", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.received())
			headers := map[string]string{}
			if c.header != "" {
				headers[HeaderSessionKey] = c.header
			}
			res := do(t, http.MethodPost, "http://"+s.Addr()+c.path, c.key, c.body, headers)
			if res.code != c.status || res.header.Get(HeaderSessionKey) != c.scope {
				t.Fatalf("%d %s, %s %q, want %d and %q", res.code, res.body, HeaderSessionKey, res.header.Get(HeaderSessionKey), c.status, c.scope)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(r.received()) == before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			evs := r.received()
			if len(evs) != before+1 {
				t.Fatalf("%d messages, want %d", len(evs), before+1)
			}
			if got := evs[before].GetSource().GetUserIdAlt(); got != c.scope {
				t.Errorf("user_id_alt %q, want %q", got, c.scope)
			}
		})
	}
	if scopeOf(single, "channel-7") == scopeOf(namedPrefix+"other", "channel-7") {
		t.Error("two keys share a scope")
	}
}

// The header's refusals, Hermes's: a header too long (400), any header
// on a gateway without a key (403); nothing is published.
func TestSessionKeyRefused(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	keyed := startService(t, b, nil)
	keyless := startService(t, b, func(c *Config) { c.Key, c.Insecure = "", true })
	r := startResponder(t, b)
	for _, c := range []struct {
		name   string
		s      *Service
		path   string
		header string
		status int
		body   string
	}{
		{"too long", keyed, "/v1/chat/completions", strings.Repeat("k", 257), 400,
			`{"error":{"message":"Session key too long","type":"invalid_request_error","param":"X-Hermes-Session-Key","code":"invalid_session_key"}}`},
		{"too long, a run", keyed, "/v1/runs", strings.Repeat("k", 257), 400,
			`{"error":{"message":"Session key too long","type":"invalid_request_error","param":"X-Hermes-Session-Key","code":"invalid_session_key"}}`},
		{"no API key", keyless, "/v1/responses", "channel-7", 403,
			`{"error":{"message":"X-Hermes-Session-Key requires API key authentication. Configure API_SERVER_KEY to enable this feature.","type":"invalid_request_error","param":null,"code":null}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := testKey
			if c.s == keyless {
				key = ""
			}
			body := `{"input":"x","messages":[{"role":"user","content":"x"}]}`
			res := do(t, http.MethodPost, "http://"+c.s.Addr()+c.path, key, body, map[string]string{HeaderSessionKey: c.header, "Host": "localhost"})
			if res.code != c.status || strings.TrimSpace(string(res.body)) != c.body {
				t.Errorf("%d %s, want %d %s", res.code, res.body, c.status, c.body)
			}
		})
	}
	// 256 bytes is not too long.
	res := do(t, http.MethodPost, "http://"+keyed.Addr()+"/v1/chat/completions", testKey,
		`{"messages":[{"role":"user","content":"y"}]}`, map[string]string{HeaderSessionKey: strings.Repeat("k", 256)})
	if res.code != http.StatusOK {
		t.Errorf("a 256-byte key: %d %s", res.code, res.body)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(r.received()); n != 1 {
		t.Errorf("%d messages published, want 1", n)
	}
}

// identityFor is the identity the gateway gives a key.
func identityFor(t *testing.T, s *Service, key string) string {
	t.Helper()
	id, ok := s.identify("Bearer " + key)
	if !ok {
		t.Fatalf("key %q not known", key)
	}
	return id
}
