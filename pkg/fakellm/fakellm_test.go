package fakellm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

// sseData returns the data payloads of an SSE body.
func sseData(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

func TestOpenAIWire(t *testing.T) {
	s := New(Config{})
	rec := post(t, s, "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},
		"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"hi \"you\""}]}]}`)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %v", rec.Code, rec.Header())
	}
	data := sseData(t, rec.Body.String())
	if data[len(data)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", data)
	}
	var text strings.Builder
	var sawUsage, sawFinish bool
	for _, d := range data[:len(data)-1] {
		var c struct {
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			sawFinish = sawFinish || ch.FinishReason != nil
		}
		sawUsage = sawUsage || (c.Usage != nil && c.Usage.PromptTokens > 0)
	}
	if text.String() != `echo: hi "you"` || !sawUsage || !sawFinish {
		t.Fatalf("text %q usage %v finish %v", text.String(), sawUsage, sawFinish)
	}
	if r := s.Requests()[0]; r.System != "sys" || r.LastUserText() != `hi "you"` || !r.IncludeUsage {
		t.Fatalf("recorded %+v", r)
	}

	rec = post(t, s, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	var whole map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &whole); err != nil || whole["object"] != "chat.completion" {
		t.Fatalf("whole %s: %v", rec.Body, err)
	}
}

func TestAnthropicWireEventOrder(t *testing.T) {
	s := New(Config{})
	rec := post(t, s, "/v1/messages", `{"model":"m","max_tokens":10,"stream":true,
		"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":"go [[tool:clock {\"a\":[1,[2]]}]]"}]}`)
	body := rec.Body.String()
	var events []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok && e != "ping" {
			events = append(events, e)
		}
	}
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(events, " "); got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(body, `"partial_json"`) || !s.Requests()[0].SystemCached {
		t.Fatalf("body %s", body)
	}
}

func TestFailureResponses(t *testing.T) {
	tests := []struct {
		text   string
		status int
		retry  string
		inBody string
	}{
		{"[[fail:429 retry=2]]", 429, "2", "rate_limit"},
		{"[[fail:500]]", 500, "", "server_error"},
		{"[[fail:402]]", 402, "", "credits"},
		{"[[fail:overflow]]", 400, "", "context_length_exceeded"},
		{"[[fail:quota]]", 429, "", "insufficient_quota"},
	}
	for _, tt := range tests {
		s := New(Config{})
		rec := post(t, s, "/v1/chat/completions", `{"messages":[{"role":"user","content":"`+strings.ReplaceAll(tt.text, `"`, `\"`)+`"}]}`)
		if rec.Code != tt.status || rec.Header().Get("Retry-After") != tt.retry || !strings.Contains(rec.Body.String(), tt.inBody) {
			t.Errorf("%s: %d %q %s", tt.text, rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
	}
}

func TestTimesAndScript(t *testing.T) {
	s := New(Config{})
	body := `{"messages":[{"role":"user","content":"x [[fail:503 times=2]]"}]}`
	for i, want := range []int{503, 503, 200} {
		if rec := post(t, s, "/v1/chat/completions", body); rec.Code != want {
			t.Fatalf("request %d: %d, want %d", i, rec.Code, want)
		}
	}
	s.SetScript(func(r *Request) (Reply, bool) { return Reply{Text: "scripted"}, true })
	s.Enqueue(Reply{Text: "queued"})
	for _, want := range []string{"queued", "scripted"} {
		if rec := post(t, s, "/v1/chat/completions", body); !strings.Contains(rec.Body.String(), want) {
			t.Fatalf("want %q in %s", want, rec.Body)
		}
	}
}

func TestRunGracefulShutdown(t *testing.T) {
	s := New(Config{ChunkDelay: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for s.URL() == "" {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cancel() // in flight: the answer must still complete
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("body %q: %v", body, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestParseDirectives(t *testing.T) {
	tests := []struct {
		in    string
		kinds []Kind
		clean string
	}{
		{"plain text", nil, "plain text"},
		{"a [[tool:clock]] b", []Kind{KindTool}, "a b"},
		{`[[tool:x {"a":[[1]]}]] then`, []Kind{KindTool}, "then"},
		{"[[fail:429 retry=1.5 times=2]][[slow:10ms]]", []Kind{KindFail, KindSlow}, ""},
		{"[[drop:3]] [[latency:1s]]", []Kind{KindDrop, KindLatency}, ""},
		{"[[fail:999]] [[nope:1]] [[tool:bad name]] [[", nil, "[[fail:999]] [[nope:1]] [[tool:bad name]] [["},
		{"[[slow:1h]]", nil, "[[slow:1h]]"},
		{"what did I say? [[recall:user]]", []Kind{KindRecall}, "what did I say?"},
		{"[[recall:all]]", nil, "[[recall:all]]"},
	}
	for _, tt := range tests {
		dirs, clean := ParseDirectives(tt.in)
		var kinds []Kind
		for _, d := range dirs {
			kinds = append(kinds, d.Kind)
		}
		if clean != tt.clean || len(kinds) != len(tt.kinds) {
			t.Errorf("ParseDirectives(%q) = %v %q, want %v %q", tt.in, kinds, clean, tt.kinds, tt.clean)
			continue
		}
		for i := range kinds {
			if kinds[i] != tt.kinds[i] {
				t.Errorf("ParseDirectives(%q) kinds %v, want %v", tt.in, kinds, tt.kinds)
			}
		}
	}
	dirs, _ := ParseDirectives(`[[tool:x {"a":[[1]]}]]`)
	if dirs[0].Args != `{"a":[[1]]}` {
		t.Errorf("args %q", dirs[0].Args)
	}
}

func FuzzParseDirectives(f *testing.F) {
	for _, s := range []string{"hi", "[[tool:clock {}]]", `[[tool:x {"a":"]]"}]]`, "[[fail:429 retry=2 times=1]]", "[[drop:1]][[slow:5ms]]", "[[[[", "[[fail:overflow type=x]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dirs, clean := ParseDirectives(s)
		if len(clean) > len(s) {
			t.Fatalf("clean text grew: %q -> %q", s, clean)
		}
		for _, d := range dirs {
			if d.Kind == KindTool && !json.Valid([]byte(d.Args)) {
				t.Fatalf("invalid tool args %q from %q", d.Args, s)
			}
			if d.Delay < 0 || d.Delay > maxDelay || d.Failure.RetryAfter > maxDelay {
				t.Fatalf("delay out of range from %q", s)
			}
		}
	})
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c\n\t\x00", "\u2028é\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, b, err)
		}
		want, _ := json.Marshal(s)
		var w string
		_ = json.Unmarshal(want, &w)
		if got != w {
			t.Fatalf("round trip %q -> %q, want %q", s, got, w)
		}
	})
}

// A content field decodes to what contentText makes of its raw JSON (as
// the decoder hands it over), whichever path the decoding takes.
func FuzzContentDecoding(f *testing.F) {
	for _, s := range []string{`"plain"`, `"line\nbreak \"quoted\" \u00e9"`, "\"bad \xff utf8\"", `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, `null`, `""`, `[]`, `{"x":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		doc := []byte(`{"content":` + raw + `}`)
		var m struct {
			Content content `json:"content"`
		}
		var r struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(doc, &m); err != nil {
			return // not a JSON value: the request is refused before
		}
		if err := json.Unmarshal(doc, &r); err != nil {
			t.Fatal(err)
		}
		if want := contentText(r.Content); m.Content.text != want {
			t.Fatalf("content %s decoded to %q, want %q", raw, m.Content, want)
		}
	})
}

func BenchmarkOpenAIStream(b *testing.B) {
	s := New(Config{MaxRecorded: -1})
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"hello there, how are you today?"}]}`
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	}
}

func BenchmarkAnthropicStream(b *testing.B) {
	s := New(Config{MaxRecorded: -1})
	body := `{"model":"m","max_tokens":100,"stream":true,"system":"You are helpful.","messages":[{"role":"user","content":"hello there, how are you today?"}]}`
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body)))
	}
}

// HTTPClient reaches the started server in-process, streaming and not,
// concurrently on several connections; after Close it reaches nothing.
func TestHTTPClientReachesTheServerInProcess(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	hc := s.HTTPClient()
	call := func(body string) (int, string, error) {
		// The host is never dialed: any name reaches this server.
		resp, err := hc.Post("http://fake.invalid/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			stream, want := "false", `"content":"echo: hi"`
			if i%2 == 0 {
				stream, want = "true", "data: [DONE]"
			}
			code, body, err := call(`{"model":"m","stream":` + stream + `,"messages":[{"role":"user","content":"hi"}]}`)
			switch {
			case err != nil:
				errs <- err
			case code != http.StatusOK || !strings.Contains(body, want):
				errs <- fmt.Errorf("status %d body %s, want %s", code, body, want)
			default:
				errs <- nil
			}
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := len(s.Requests()); got != 8 {
		t.Fatalf("server recorded %d requests, want 8", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	hc.CloseIdleConnections()
	if _, _, err := call(`{"messages":[{"role":"user","content":"hi"}]}`); err == nil {
		t.Fatal("a call after Close succeeded")
	}
}

// EnqueueFor answers each model its own replies, whatever order the
// requests come in, before the shared queue; other models take the
// shared queue, then echo.
func TestEnqueueForAnswersPerModel(t *testing.T) {
	s := New(Config{})
	s.EnqueueFor("a", Reply{Text: "from a"})
	s.EnqueueFor("b", Reply{Failure: &Failure{Status: http.StatusTooManyRequests, Message: "slow down"}}, Reply{Text: "from b"})
	s.Enqueue(Reply{Text: "shared"})
	ask := func(model, api string) (int, string) {
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]`
		path := "/v1/chat/completions"
		if api == "anthropic" {
			body += `,"max_tokens":10`
			path = "/v1/messages"
		}
		rec := post(t, s, path, body+"}")
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		model, api, want string
		code             int
	}{
		{"b", "openai", "slow down", http.StatusTooManyRequests},
		{"c", "openai", "shared", 200},
		{"a", "anthropic", "from a", 200},
		{"b", "openai", "from b", 200},
		{"a", "openai", "echo: hi", 200},
	} {
		code, body := ask(tc.model, tc.api)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Fatalf("model %s: %d %s, want %d with %q", tc.model, code, body, tc.code, tc.want)
		}
	}
	s.EnqueueFor("a", Reply{Text: "forgotten"})
	s.Reset()
	if _, body := ask("a", "openai"); !strings.Contains(body, "echo: hi") {
		t.Fatalf("after Reset: %s", body)
	}
}

// GET /v1/models lists Config.Models (else Config.Model) in OpenAI's
// list shape, and wants the key as the other endpoints do.
func TestModelsList(t *testing.T) {
	s := New(Config{APIKey: "sk-1", Models: []string{"a", "vendor/b"}})
	for _, tc := range []struct {
		auth string
		code int
		ids  string
	}{{"Bearer sk-1", 200, "[a vendor/b]"}, {"Bearer sk-2", 401, "[]"}} {
		r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		r.Header.Set("Authorization", tc.auth)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		var body struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"data"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		ids := []string{}
		for _, d := range body.Data {
			ids = append(ids, d.ID)
		}
		if w.Code != tc.code || fmt.Sprint(ids) != tc.ids {
			t.Fatalf("%s: %d %s, want %d with %s", tc.auth, w.Code, w.Body, tc.code, tc.ids)
		}
	}
}
