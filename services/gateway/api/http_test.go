package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		addr     string
		key      string
		insecure bool
		ok       bool
	}{
		{"key on any address", "0.0.0.0:8642", "k", false, true},
		{"no key, not insecure", "127.0.0.1:8642", "", false, false},
		{"no key, insecure loopback", "127.0.0.1:8642", "", true, true},
		{"no key, insecure localhost", "localhost:8642", "", true, true},
		{"no key, insecure ipv6 loopback", "[::1]:8642", "", true, true},
		{"no key, insecure all interfaces", ":8642", "", true, false},
		{"no key, insecure public", "10.0.0.1:8642", "", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Addr, cfg.Key, cfg.Insecure = c.addr, c.key, c.insecure
			if err := cfg.Validate(); (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
		})
	}
	const long = "0123456789abcdef01234567"
	for _, c := range []struct {
		name string
		key  string
		keys map[string]string
		err  string // "" when valid
	}{
		{"named keys alone", "", map[string]string{"team-a": long, "team_b": long + "x"}, ""},
		{"named keys beside the key", "k", map[string]string{"ci": long}, ""},
		{"a short key", "", map[string]string{"ci": "short"}, "gateways.api.keys.ci"},
		{"a name that is no name", "", map[string]string{"Team A": long}, "gateways.api.keys.Team A"},
		{"one key under two names", "", map[string]string{"a": long, "b": long}, "gateways.api.keys."},
		{"a named key that is the key", long, map[string]string{"a": long}, "gateways.api.keys.a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Addr, cfg.Key, cfg.Keys = "0.0.0.0:8642", c.key, c.keys
			err := cfg.Validate()
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one naming %s", err, c.err)
			}
			if strings.Contains(fmt.Sprint(err), long) {
				t.Fatalf("the error shows a key: %v", err)
			}
		})
	}
	for _, c := range []struct {
		name   string
		mutate func(*Config)
		err    string // "" when valid
	}{
		{"response_ttl below reply_timeout", func(c *Config) { c.ResponseTTL, c.ReplyTimeout = time.Minute, 5*time.Minute }, "gateways.api.response_ttl"},
		{"response_ttl of reply_timeout", func(c *Config) { c.ResponseTTL, c.ReplyTimeout = time.Minute, time.Minute }, ""},
		{"response_ttl by default", func(c *Config) { c.ResponseTTL, c.ReplyTimeout = 0, time.Hour }, ""},
		{"responses_max_bytes below a record", func(c *Config) { c.ResponsesMaxBytes = 64 << 10 }, "gateways.api.responses_max_bytes"},
		{"negative responses_max_bytes", func(c *Config) { c.ResponsesMaxBytes = -1 }, "gateways.api.responses_max_bytes"},
		{"responses_max_bytes by default", func(c *Config) { c.ResponsesMaxBytes = 0 }, ""},
		{"negative max_concurrent_runs", func(c *Config) { c.MaxConcurrentRuns = -1 }, "gateways.api.max_concurrent_runs"},
		{"no cap on concurrent runs", func(c *Config) { c.MaxConcurrentRuns = 0 }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Key = "k"
			c.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one naming %s", err, c.err)
			}
		})
	}
}

type httpResult struct {
	code   int
	header http.Header
	body   []byte
}

func do(t *testing.T, method, url, key, body string, headers map[string]string) httpResult {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range headers {
		if k == "Host" {
			req.Host = v // the client sends req.Host, not the header
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, data}
}

func errorCode(t *testing.T, r httpResult) string {
	t.Helper()
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("body %q is not an OpenAI error", r.body)
	}
	if e.Error.Code == nil {
		return ""
	}
	return *e.Error.Code
}

func TestHTTPErrorsAndHeaders(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) {
		c.ReplyTimeout = 200 * time.Millisecond
		c.CORSOrigins = []string{"https://chat.example.test"}
		c.MaxBodyBytes = 1024
	})
	base := "http://" + s.Addr()
	chat := base + "/v1/chat/completions"
	good := `{"model":"x","messages":[{"role":"user","content":"hi"}]}`

	cases := []struct {
		name    string
		method  string
		url     string
		key     string
		body    string
		headers map[string]string
		status  int
		code    string
	}{
		{"no key", "POST", chat, "", good, nil, 401, "invalid_api_key"},
		{"wrong key", "POST", chat, "nope", good, nil, 401, "invalid_api_key"},
		{"models without key", "GET", base + "/v1/models", "", "", nil, 401, "invalid_api_key"},
		{"malformed json", "POST", chat, testKey, `{"messages":`, nil, 400, "invalid_request"},
		{"no user message", "POST", chat, testKey, `{"messages":[{"role":"system","content":"x"}]}`, nil, 400, "invalid_request"},
		{"bad session id", "POST", chat, testKey, good, map[string]string{HeaderSession: "a:b"}, 400, "invalid_session_id"},
		{"too large", "POST", chat, testKey, `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`, nil, 413, "body_too_large"},
		{"stream_options without a stream", "POST", chat, testKey, `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, nil, 400, "invalid_request"},
		{"no answer in time", "POST", chat, testKey, good, nil, 504, "timeout"},
		{"unknown endpoint", "POST", base + "/v1/embeddings", testKey, good, nil, 404, "unknown_url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, c.method, c.url, c.key, c.body, c.headers)
			if r.code != c.status {
				t.Fatalf("status %d, want %d (%s)", r.code, c.status, r.body)
			}
			if got := errorCode(t, r); got != c.code {
				t.Fatalf("error code %q, want %q", got, c.code)
			}
			if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("X-Frame-Options") != "DENY" {
				t.Fatalf("security headers missing: %v", r.header)
			}
		})
	}

	t.Run("streamed answer not in time", func(t *testing.T) {
		// OpenAI's in-stream error event ends the stream, without [DONE].
		r := do(t, "POST", chat, testKey, `{"model":"x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
		body := string(r.body)
		if r.code != 200 || !strings.Contains(body, `"code":"timeout"`) || strings.Contains(body, "[DONE]") {
			t.Fatalf("status %d, stream %q", r.code, body)
		}
	})
	t.Run("cors for a configured origin", func(t *testing.T) {
		r := do(t, "OPTIONS", chat, "", "", map[string]string{"Origin": "https://chat.example.test", "Access-Control-Request-Method": "POST"})
		if r.code != 204 || r.header.Get("Access-Control-Allow-Origin") != "https://chat.example.test" {
			t.Fatalf("preflight %d %v", r.code, r.header)
		}
	})
	t.Run("no cors for other origins", func(t *testing.T) {
		r := do(t, "OPTIONS", chat, "", "", map[string]string{"Origin": "https://evil.example.test", "Access-Control-Request-Method": "POST"})
		if r.code == 204 || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("preflight for an unlisted origin: %d %v", r.code, r.header)
		}
		r = do(t, "GET", base+"/health", "", "", map[string]string{"Origin": "https://evil.example.test"})
		if r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("CORS header for an unlisted origin")
		}
	})
	t.Run("health", func(t *testing.T) {
		r := do(t, "GET", base+"/health", "", "", nil)
		if r.code != 200 || !strings.Contains(string(r.body), `"ok"`) {
			t.Fatalf("health %d %s", r.code, r.body)
		}
	})
	t.Run("web chat page", func(t *testing.T) {
		r := do(t, "GET", base+"/", "", "", nil)
		if r.code != 200 || !strings.Contains(string(r.body), "app.js") || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Fatalf("page %d %v", r.code, r.header)
		}
	})
}

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.RateLimit, c.RateBurst = 0.001, 2 })
	url := "http://" + s.Addr() + "/v1/models"
	for i := range 2 {
		if r := do(t, "GET", url, testKey, "", nil); r.code != 200 {
			t.Fatalf("request %d: %d", i, r.code)
		}
	}
	r := do(t, "GET", url, testKey, "", nil)
	if r.code != 429 || r.header.Get("Retry-After") == "" || errorCode(t, r) != "rate_limit_exceeded" {
		t.Fatalf("third request: %d %v %s", r.code, r.header, r.body)
	}
}

// A failed turn is answered with OpenAI's error for its cause; the
// OpenAI SDKs are told not to retry any: the turn ran, and a retry would
// run the message again.
func TestTurnFailureAnswers(t *testing.T) {
	for _, c := range []struct {
		code, wantCode string
		status         int
	}{
		{"rate_limited", "rate_limit_exceeded", http.StatusTooManyRequests},
		{"quota", "insufficient_quota", http.StatusTooManyRequests},
		{"context_overflow", "context_length_exceeded", http.StatusBadRequest},
		{"auth", "upstream_auth_error", http.StatusBadGateway},
		{"provider", "upstream_error", http.StatusBadGateway},
		{"timeout", "timeout", http.StatusGatewayTimeout},
		// Stopped (/stop, /new) or failed on every attempt: sent again
		// by the client on its own, the message would run again.
		{"interrupted", "interrupted", http.StatusServiceUnavailable},
		{"internal", "internal_error", http.StatusInternalServerError},
		{"something new", "internal_error", http.StatusInternalServerError},
	} {
		w := httptest.NewRecorder()
		writeTurnError(w, c.code, "⚠️ The model is out of credit.")
		var body struct {
			Error struct {
				Message, Type string
				Code          *string
			}
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v %s", c.code, err, w.Body)
		}
		if w.Code != c.status || body.Error.Code == nil || *body.Error.Code != c.wantCode || body.Error.Message != "The model is out of credit." {
			t.Errorf("%s: %d %s", c.code, w.Code, w.Body)
		}
		if w.Header().Get("X-Should-Retry") != "false" {
			t.Errorf("%s: X-Should-Retry %q", c.code, w.Header().Get("X-Should-Retry"))
		}
	}
}

func TestRetryAfterIsWholeSecondsRoundedUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{time.Nanosecond, 1},
		{999 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{90 * time.Second, 90},
	} {
		if got := retryAfter(c.d); got != c.want {
			t.Errorf("retryAfter(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestInsecureLoopbackNeedsNoKey(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.Key, c.Insecure = "", true })
	if r := do(t, "GET", "http://"+s.Addr()+"/v1/models", "", "", nil); r.code != 200 {
		t.Fatalf("models without key on insecure loopback: %d", r.code)
	}
}

// A web page must not run turns through a local gateway: the keyless
// gateway answers only requests addressed to localhost (DNS rebinding),
// and no gateway takes a state-changing request from a foreign origin
// (a "simple" cross-site POST, which needs no preflight).
func TestBrowsersOfOtherSitesAreRefused(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	keyless := startService(t, b, func(c *Config) { c.Key, c.Insecure = "", true })
	keyed := startService(t, b, func(c *Config) { c.CORSOrigins = []string{"https://chat.example.test"} })
	body := `{"model":"x","messages":[{"role":"user","content":"hi"}]}`
	_, port, _ := net.SplitHostPort(keyless.Addr())
	tests := []struct {
		name    string
		s       *Service
		method  string
		key     string
		headers map[string]string
		status  int
		code    string
	}{
		{"rebound host", keyless, "POST", "", map[string]string{"Host": "evil.example.test:" + port}, 403, "host_not_allowed"},
		{"rebound host reading models", keyless, "GET", "", map[string]string{"Host": "evil.example.test"}, 403, "host_not_allowed"},
		{"cross-site post, keyless", keyless, "POST", "", map[string]string{"Origin": "https://evil.example.test", "Content-Type": "text/plain"}, 403, "origin_not_allowed"},
		{"cross-site post, keyed", keyed, "POST", testKey, map[string]string{"Origin": "https://evil.example.test"}, 403, "origin_not_allowed"},
		{"localhost by name", keyless, "GET", "", map[string]string{"Host": "localhost:" + port}, 200, ""},
		{"the web chat's own origin", keyless, "GET", "", map[string]string{"Origin": "http://" + keyless.Addr()}, 200, ""},
		{"a configured origin", keyed, "GET", testKey, map[string]string{"Origin": "https://chat.example.test"}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := "http://" + tt.s.Addr() + "/v1/chat/completions"
			b := body
			if tt.method == "GET" {
				url, b = "http://"+tt.s.Addr()+"/v1/models", ""
			}
			r := do(t, tt.method, url, tt.key, b, tt.headers)
			if r.code != tt.status {
				t.Fatalf("status %d, want %d (%s)", r.code, tt.status, r.body)
			}
			if tt.code != "" {
				if got := errorCode(t, r); got != tt.code {
					t.Fatalf("error code %q, want %q", got, tt.code)
				}
			}
		})
	}
}

// API_SERVER_CORS_ORIGINS is a comma-separated list, which Hermes reads
// with the spaces around each origin trimmed
// ("https://a.example.test, https://b.example.test"): every origin so
// listed is allowed, not only the first.
func TestCORSOriginsListedWithSpaces(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) {
		// As the comma-separated variable splits into the list.
		c.CORSOrigins = []string{"https://a.example.test", " https://b.example.test ", ""}
	})
	for _, origin := range []string{"https://a.example.test", "https://b.example.test"} {
		pre := do(t, "OPTIONS", "http://"+s.Addr()+"/v1/chat/completions", "", "",
			map[string]string{"Origin": origin, "Access-Control-Request-Method": "POST"})
		if pre.code != http.StatusNoContent || pre.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("%s: preflight %d, Access-Control-Allow-Origin %q", origin, pre.code, pre.header.Get("Access-Control-Allow-Origin"))
		}
		get := do(t, "GET", "http://"+s.Addr()+"/v1/models", testKey, "", map[string]string{"Origin": origin})
		if get.code != http.StatusOK || get.header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("%s: GET %d, Access-Control-Allow-Origin %q", origin, get.code, get.header.Get("Access-Control-Allow-Origin"))
		}
	}
}

// A page on an allowed origin reads only the response headers CORS
// exposes: the OpenAI SDK in a browser reads Retry-After and
// X-Should-Retry to decide whether and when to retry, as it does outside
// one, and the session headers to continue the conversation.
func TestAllowedOriginsSeeTheRetryHeaders(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.CORSOrigins = []string{"https://ui.example.test"} })
	r := do(t, "GET", "http://"+s.Addr()+"/v1/models", testKey, "", map[string]string{"Origin": "https://ui.example.test"})
	exposed := strings.Split(r.header.Get("Access-Control-Expose-Headers"), ", ")
	for _, h := range []string{"Retry-After", "X-Should-Retry", HeaderSession, HeaderHermesSession, HeaderSessionKey} {
		if !slices.Contains(exposed, h) {
			t.Errorf("%s not exposed: %q", h, exposed)
		}
	}
}

// A path asked with a method it is not served with is answered 405, its
// methods in Allow and OpenAI's error body, on every route — not the
// catch-all's 404 (unknown_url), which reads as a wrong base URL — while
// its own methods are served and an unknown path is still a 404.
func TestWrongMethodIsNotAllowed(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	base := "http://" + s.Addr()
	table := s.table()
	if len(table.paths) < 19 {
		t.Fatalf("%d routes", len(table.paths))
	}
	concrete := regexp.MustCompile(`\{[^}]+\}`)
	for _, path := range table.paths {
		url := base + concrete.ReplaceAllString(path, "x1")
		for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if slices.Contains(table.methods[path], method) {
				continue
			}
			r := do(t, method, url, "", "", nil)
			allow := allowOf(table.methods[path])
			if r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != allow || errorCode(t, r) != "method_not_allowed" {
				t.Errorf("%s %s: %d Allow %q %s; want 405 Allow %q", method, path, r.code, r.header.Get("Allow"), r.body, allow)
			}
		}
	}
	for _, c := range []struct {
		method, path, allow string
	}{
		{"GET", "/v1/chat/completions", "POST"},
		{"POST", "/v1/models", "GET, HEAD"},
		{"PUT", "/v1/responses/resp_1", "GET, HEAD, DELETE"},
		{"DELETE", "/api/jobs", "GET, HEAD, POST"},
		{"POST", "/health", "GET, HEAD"},
		{"POST", "/app.js", "GET, HEAD"}, // the web chat's
	} {
		if r := do(t, c.method, base+c.path, testKey, "", nil); r.code != http.StatusMethodNotAllowed || r.header.Get("Allow") != c.allow || errorCode(t, r) != "method_not_allowed" {
			t.Errorf("%s %s: %d Allow %q %s", c.method, c.path, r.code, r.header.Get("Allow"), r.body)
		}
	}
	if r := do(t, "GET", base+"/v1/models", testKey, "", nil); r.code != http.StatusOK {
		t.Errorf("GET /v1/models: %d", r.code)
	}
	if r := do(t, "HEAD", base+"/v1/models", testKey, "", nil); r.code != http.StatusOK {
		t.Errorf("HEAD /v1/models: %d", r.code)
	}
	if r := do(t, "GET", base+"/v1/embeddings", testKey, "", nil); r.code != http.StatusNotFound || errorCode(t, r) != "unknown_url" {
		t.Errorf("unknown path: %d %s", r.code, r.body)
	}
}
