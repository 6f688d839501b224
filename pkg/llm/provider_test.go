package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// quiet discards retry logs.
var quiet = slog.New(slog.DiscardHandler)

// startFake runs a fake on 127.0.0.1:0 for the test.
func startFake(t *testing.T, cfg fakellm.Config) *fakellm.Server {
	t.Helper()
	srv := fakellm.New(cfg)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

type backend struct {
	name string
	make func(srv *fakellm.Server) llm.Provider
}

var backends = []backend{
	{"openai", func(srv *fakellm.Server) llm.Provider {
		return llm.NewOpenAI(llm.OpenAIConfig{APIKey: "test", BaseURL: srv.URL() + "/v1", Model: "gpt-test"})
	}},
	{"anthropic", func(srv *fakellm.Server) llm.Provider {
		return llm.NewAnthropic(llm.AnthropicConfig{APIKey: "test", BaseURL: srv.URL(), Model: "claude-test"})
	}},
}

// collect streams req and returns the response and the deltas seen.
func collect(ctx context.Context, p llm.Provider, req llm.Request) (*llm.Response, []llm.Delta, error) {
	var deltas []llm.Delta
	resp, err := p.Stream(ctx, req, func(d llm.Delta) error {
		deltas = append(deltas, d)
		return nil
	})
	return resp, deltas, err
}

func userReq(text string) llm.Request {
	return llm.Request{System: "You are a test.", Messages: []llm.Message{{Role: llm.RoleUser, Content: text}}}
}

func TestText(t *testing.T) {
	for _, b := range backends {
		for _, streaming := range []bool{true, false} {
			name := b.name + "/whole"
			if streaming {
				name = b.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				srv := startFake(t, fakellm.Config{})
				p := b.make(srv)
				ctx := context.Background()
				req := userReq("hello there, world")
				var resp *llm.Response
				var deltas []llm.Delta
				var err error
				if streaming {
					resp, deltas, err = collect(ctx, p, req)
				} else {
					resp, err = llm.Complete(ctx, p, req)
				}
				if err != nil {
					t.Fatal(err)
				}
				if want := "echo: hello there, world"; resp.Text != want {
					t.Fatalf("text = %q, want %q", resp.Text, want)
				}
				if streaming {
					var joined strings.Builder
					for _, d := range deltas {
						joined.WriteString(d.Text)
					}
					if len(deltas) < 2 || joined.String() != resp.Text {
						t.Fatalf("deltas %+v do not add up to %q", deltas, resp.Text)
					}
				}
				if resp.StopReason != llm.StopEndTurn {
					t.Errorf("stop = %q", resp.StopReason)
				}
				if resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 {
					t.Errorf("usage = %+v", resp.Usage)
				}
				if resp.Model == "" {
					t.Errorf("model empty")
				}
				reqs := srv.Requests()
				if len(reqs) != 1 || reqs[0].System != "You are a test." || reqs[0].Stream != streaming {
					t.Fatalf("recorded %+v", reqs)
				}
				if streaming && b.name == "openai" && !reqs[0].IncludeUsage {
					t.Errorf("stream_options.include_usage not sent")
				}
			})
		}
	}
}

func TestToolCalls(t *testing.T) {
	tools := []llm.ToolSpec{{
		Name:        "clock",
		Description: "Current time",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}`),
	}}
	for _, b := range backends {
		for _, streaming := range []bool{true, false} {
			t.Run(b.name+map[bool]string{true: "/stream", false: "/whole"}[streaming], func(t *testing.T) {
				srv := startFake(t, fakellm.Config{})
				p := b.make(srv)
				ctx := context.Background()
				req := userReq(`what time is it? [[tool:clock {"tz":"UTC"}]]`)
				req.Tools = tools
				call := func() (*llm.Response, []llm.Delta) {
					t.Helper()
					if streaming {
						resp, deltas, err := collect(ctx, p, req)
						if err != nil {
							t.Fatal(err)
						}
						return resp, deltas
					}
					resp, err := llm.Complete(ctx, p, req)
					if err != nil {
						t.Fatal(err)
					}
					return resp, nil
				}
				resp, deltas := call()
				if resp.StopReason != llm.StopToolUse || len(resp.ToolCalls) != 1 {
					t.Fatalf("resp = %+v", resp)
				}
				tc := resp.ToolCalls[0]
				if tc.Name != "clock" || tc.ID == "" {
					t.Fatalf("tool call = %+v", tc)
				}
				var args map[string]string
				if err := json.Unmarshal([]byte(tc.Arguments), &args); err != nil || args["tz"] != "UTC" {
					t.Fatalf("arguments %q: %v", tc.Arguments, err)
				}
				if streaming && (len(deltas) == 0 || deltas[0].ToolCall == nil || deltas[0].ToolCall.Name != "clock") {
					t.Fatalf("no tool-call start delta: %+v", deltas)
				}
				req.Messages = append(req.Messages,
					llm.Message{Role: llm.RoleAssistant, ToolCalls: resp.ToolCalls},
					llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Name: "clock", Content: "12:00"},
				)
				resp, _ = call()
				if want := "echo: what time is it? [12:00]"; resp.Text != want || resp.StopReason != llm.StopEndTurn {
					t.Fatalf("final = %+v, want text %q", resp, want)
				}
				reqs := srv.Requests()
				last := reqs[len(reqs)-1]
				if len(last.Tools) != 1 || last.Tools[0].Name != "clock" || !strings.Contains(string(last.Tools[0].Parameters), `"tz"`) {
					t.Errorf("tools sent = %+v", last.Tools)
				}
				var sawCall, sawResult bool
				for _, m := range last.Messages {
					sawCall = sawCall || (len(m.ToolCalls) == 1 && m.ToolCalls[0].ID == tc.ID)
					sawResult = sawResult || (m.Role == "tool" && m.ToolCallID == tc.ID && m.Content == "12:00")
				}
				if !sawCall || !sawResult {
					t.Errorf("history sent = %+v", last.Messages)
				}
			})
		}
	}
}

// Anthropic takes tool-use ids of letters, digits, "_" and "-" alone
// (^[a-zA-Z0-9_-]+$) and refuses the whole request otherwise. A history
// whose calls came from an OpenAI-compatible server (Kimi's
// "functions.clock:0", a session that switched models with /model) is
// sent with its ids made valid, each call's and its result's alike, and
// two ids that differ only in refused characters stay apart; valid ids
// go as they are.
func TestAnthropicToolUseIDsAreMadeValid(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := backends[1].make(srv)
	req := userReq("what time is it?")
	calls := []llm.ToolCall{
		{ID: "functions.clock:0", Name: "clock", Arguments: "{}"},
		{ID: "functions.clock/0", Name: "clock", Arguments: "{}"},
		{ID: "toolu_01-ok", Name: "clock", Arguments: "{}"},
	}
	req.Messages = append(req.Messages, llm.Message{Role: llm.RoleAssistant, ToolCalls: calls})
	for _, c := range calls {
		req.Messages = append(req.Messages, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: "clock", Content: "12:00"})
	}
	if _, err := llm.Complete(context.Background(), p, req); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	sent := reqs[len(reqs)-1]
	var ids, results []string
	for _, m := range sent.Messages {
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
		if m.ToolCallID != "" {
			results = append(results, m.ToolCallID)
		}
	}
	valid := regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	seen := map[string]bool{}
	for _, id := range ids {
		if !valid.MatchString(id) || seen[id] {
			t.Errorf("tool_use ids sent %q: invalid or repeated", ids)
		}
		seen[id] = true
	}
	if !reflect.DeepEqual(ids, results) {
		t.Errorf("tool_use ids %q, tool_result ids %q: they must match", ids, results)
	}
	if len(ids) != 3 || ids[2] != "toolu_01-ok" {
		t.Errorf("tool_use ids %q: a valid id must go as it is", ids)
	}
}

func TestAnthropicCacheMarkers(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := backends[1].make(srv)
	req := userReq("hi")
	req.System = strings.Repeat("Long stable system prompt. ", 50)
	req.CacheSystem = true
	req.Tools = []llm.ToolSpec{{Name: "a"}, {Name: "b"}}
	first, err := llm.Complete(context.Background(), p, req)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := collect(context.Background(), p, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage.CacheWriteTokens == 0 || second.Usage.CacheReadTokens == 0 {
		t.Errorf("cache usage first=%+v second=%+v", first.Usage, second.Usage)
	}
	reqs := srv.Requests()
	if !reqs[0].SystemCached || reqs[0].Tools[0].Cached || !reqs[0].Tools[1].Cached {
		t.Errorf("markers: system=%v tools=%+v", reqs[0].SystemCached, reqs[0].Tools)
	}
	if reqs[0].System != reqs[1].System || reqs[0].System != req.System {
		t.Errorf("system prompts differ between calls")
	}
}

// fakeSleep records waits instead of sleeping.
type fakeSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (f *fakeSleep) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, d)
	return ctx.Err()
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name      string
		fail      fakellm.Failure
		failTimes int
		magic     string // instead of FailNext
		class     llm.Class
		ok        bool            // succeeds after retries
		waits     []time.Duration // sleeps WithRetry made
		attempts  int             // requests the fake saw
	}{
		{name: "429 retry-after honoured", fail: fakellm.Failure{Status: 429, RetryAfter: 3 * time.Second}, failTimes: 1,
			ok: true, waits: []time.Duration{3 * time.Second}, attempts: 2},
		{name: "500 retried with backoff", fail: fakellm.Failure{Status: 500}, failTimes: 2,
			ok: true, waits: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, attempts: 3},
		{name: "500 gives up", fail: fakellm.Failure{Status: 503}, failTimes: 10,
			class: llm.Server, waits: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, attempts: 3},
		{name: "402 quota not retried", fail: fakellm.Failure{Status: 402}, failTimes: 1, class: llm.Quota, attempts: 1},
		{name: "429 insufficient_quota", magic: "[[fail:quota]]", class: llm.Quota, attempts: 1},
		{name: "401 auth", fail: fakellm.Failure{Status: 401}, failTimes: 1, class: llm.Auth, attempts: 1},
		{name: "context overflow", magic: "[[fail:overflow]]", class: llm.ContextOverflow, attempts: 1},
		{name: "400 bad request", fail: fakellm.Failure{Status: 400}, failTimes: 1, class: llm.BadRequest, attempts: 1},
		{name: "magic 429 once", magic: "[[fail:429 retry=1 times=1]]", ok: true, waits: []time.Duration{time.Second}, attempts: 2},
		{name: "drop before output retried", fail: fakellm.Failure{DropAfter: 1}, failTimes: 1, ok: true,
			waits: []time.Duration{100 * time.Millisecond}, attempts: 2},
	}
	for _, b := range backends {
		for _, streaming := range []bool{true, false} {
			for _, tt := range tests {
				mode := map[bool]string{true: "stream", false: "whole"}[streaming]
				t.Run(b.name+"/"+mode+"/"+tt.name, func(t *testing.T) {
					srv := startFake(t, fakellm.Config{})
					if tt.failTimes > 0 {
						srv.FailNext(tt.failTimes, tt.fail)
					}
					if tt.name == "drop before output retried" && streaming {
						// A streamed drop after one chunk has emitted output:
						// covered by TestDropMidStreamNotRetried.
						srv.Reset()
						srv.FailNext(1, fakellm.Failure{Status: 502})
					}
					sl := &fakeSleep{}
					p := llm.WithRetry(b.make(srv), llm.RetryPolicy{
						MaxAttempts: 3, BaseDelay: 200 * time.Millisecond,
						Sleep: sl.Sleep, Jitter: func() float64 { return 0 }, Log: quiet,
					})
					req := userReq("question " + tt.magic)
					var err error
					if streaming {
						_, _, err = collect(context.Background(), p, req)
					} else {
						_, err = llm.Complete(context.Background(), p, req)
					}
					if tt.ok {
						if err != nil {
							t.Fatalf("err = %v", err)
						}
					} else {
						var le *llm.Error
						if !errors.As(err, &le) || le.Class != tt.class {
							t.Fatalf("err = %v, want class %s", err, tt.class)
						}
						if le.Retryable() != (tt.class == llm.Server || tt.class == llm.RateLimited) {
							t.Errorf("Retryable() = %v", le.Retryable())
						}
						if msg := llm.UserMessage(err); msg == "" || strings.Contains(msg, "x-api-key") {
							t.Errorf("user message %q", msg)
						}
					}
					if !equalDurations(sl.waits, tt.waits) {
						t.Errorf("waits = %v, want %v", sl.waits, tt.waits)
					}
					if n := len(srv.Requests()); n != tt.attempts {
						t.Errorf("fake saw %d requests, want %d", n, tt.attempts)
					}
				})
			}
		}
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDropMidStreamNotRetried(t *testing.T) {
	for _, b := range backends {
		for _, how := range []string{"api", "magic"} {
			t.Run(b.name+"/"+how, func(t *testing.T) {
				srv := startFake(t, fakellm.Config{})
				text := "tell me a long story"
				if how == "api" {
					srv.FailNext(1, fakellm.Failure{DropAfter: 1})
				} else {
					text += " [[drop:1]]"
				}
				sl := &fakeSleep{}
				p := llm.WithRetry(b.make(srv), llm.RetryPolicy{Sleep: sl.Sleep, Log: quiet})
				_, deltas, err := collect(context.Background(), p, userReq(text))
				if len(deltas) == 0 {
					t.Fatalf("no delta before the drop (err %v)", err)
				}
				if !errors.Is(err, llm.ErrInterrupted) || llm.ClassOf(err) != llm.Server {
					t.Fatalf("err = %v, want ErrInterrupted wrapping a Server error", err)
				}
				if n := len(srv.Requests()); n != 1 || len(sl.waits) != 0 {
					t.Fatalf("retried: %d requests, waits %v", n, sl.waits)
				}
			})
		}
	}
}

// A stream that drops after announcing a tool call, before any text or
// reasoning reached the caller, showed nothing to anyone: it is retried
// like a failure before the first byte, not ended as interrupted output.
func TestDropAfterAToolCallStartIsRetried(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := startFake(t, fakellm.Config{})
			srv.FailNext(1, fakellm.Failure{DropAfter: 1})
			sl := &fakeSleep{}
			p := llm.WithRetry(b.make(srv), llm.RetryPolicy{Sleep: sl.Sleep, Log: quiet})
			resp, _, err := collect(context.Background(), p, userReq(`[[tool:clock {"tz": "UTC"}]]`))
			if err != nil {
				t.Fatalf("err = %v, want the call retried", err)
			}
			if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "clock" || resp.ToolCalls[0].Arguments != `{"tz": "UTC"}` {
				t.Fatalf("tool calls %+v", resp.ToolCalls)
			}
			if n := len(srv.Requests()); n != 2 || len(sl.waits) != 1 {
				t.Fatalf("%d requests, waits %v; want one retry", n, sl.waits)
			}
		})
	}
}

func TestCallbackErrorStops(t *testing.T) {
	stop := errors.New("stop")
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := startFake(t, fakellm.Config{})
			p := llm.WithRetry(b.make(srv), llm.RetryPolicy{Log: quiet})
			_, err := p.Stream(context.Background(), userReq("hi"), func(llm.Delta) error { return stop })
			if !errors.Is(err, stop) || llm.ClassOf(err) != "" {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestAuthKeyChecked(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := startFake(t, fakellm.Config{APIKey: "right"})
			_, err := llm.Complete(context.Background(), b.make(srv), userReq("hi"))
			if llm.ClassOf(err) != llm.Auth {
				t.Fatalf("err = %v, want auth", err)
			}
		})
	}
}

func TestOpenAICredentials(t *testing.T) {
	srv := startFake(t, fakellm.Config{APIKey: "right"})
	tests := []struct {
		name string
		cfg  llm.OpenAIConfig
		ok   bool
	}{
		{"the key", llm.OpenAIConfig{APIKey: "right"}, true},
		{"a wrong key", llm.OpenAIConfig{APIKey: "wrong"}, false},
		{"no key", llm.OpenAIConfig{}, false},
		{"an Authorization header wins", llm.OpenAIConfig{APIKey: "wrong", Headers: map[string]string{"authorization": "Bearer right"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.BaseURL, tt.cfg.Model = srv.URL()+"/v1", "gpt-test"
			p := llm.NewOpenAI(tt.cfg)
			for _, stream := range []bool{false, true} {
				var err error
				if stream {
					_, _, err = collect(context.Background(), p, userReq("hi"))
				} else {
					_, err = llm.Complete(context.Background(), p, userReq("hi"))
				}
				if tt.ok && err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
				if !tt.ok && llm.ClassOf(err) != llm.Auth {
					t.Fatalf("stream=%v: err = %v, want auth", stream, err)
				}
			}
		})
	}
}

func TestCancelledContext(t *testing.T) {
	srv := startFake(t, fakellm.Config{Latency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := llm.WithRetry(backends[0].make(srv), llm.RetryPolicy{Log: quiet}).Stream(ctx, userReq("hi"), nil)
	if !errors.Is(err, context.Canceled) || llm.ClassOf(err) != "" {
		t.Fatalf("err = %v", err)
	}
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		env  map[string]string
		kind string
	}{
		{map[string]string{}, llm.KindNone},
		{map[string]string{"OPENAI_API_KEY": "k"}, llm.KindOpenAI},
		{map[string]string{"OPENAI_BASE_URL": "http://localhost:11434/v1"}, llm.KindOpenAI},
		{map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"}, llm.KindAnthropic},
		{map[string]string{"ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}, llm.KindAnthropic},
	}
	for _, tt := range tests {
		p, kind, err := llm.FromEnv(func(k string) string { return tt.env[k] }, nil)
		if kind != tt.kind || (kind == llm.KindNone) != (p == nil) || (kind == llm.KindNone) != errors.Is(err, llm.ErrNoProvider) {
			t.Errorf("env %v: kind %q, provider %v, err %v", tt.env, kind, p, err)
		}
	}
}

// Tool schemas reach the model as given (an empty one as an empty object
// schema), the same on a second call (from the provider's cache), and a
// schema that is not a JSON object is refused before anything is sent.
// A whole-answer call streams when the answer may be long: the Anthropic
// SDK refuses to wait more than 10 minutes for one response.
func TestWholeAnswerStreamsWhenTheAnswerMayBeLong(t *testing.T) {
	for _, c := range []struct {
		maxTokens  int
		wantStream bool
	}{{4096, false}, {64000, true}} {
		srv := startFake(t, fakellm.Config{})
		p := llm.NewAnthropic(llm.AnthropicConfig{APIKey: "test", BaseURL: srv.URL(), Model: "claude-test"})
		req := userReq("hello")
		req.MaxTokens = c.maxTokens
		resp, err := llm.Complete(context.Background(), p, req)
		if err != nil || resp.Text != "echo: hello" {
			t.Fatalf("max_tokens %d: %+v %v", c.maxTokens, resp, err)
		}
		if reqs := srv.Requests(); len(reqs) != 1 || reqs[0].Stream != c.wantStream {
			t.Fatalf("max_tokens %d: recorded %+v, want stream %v", c.maxTokens, reqs, c.wantStream)
		}
	}
}

func TestToolSchemas(t *testing.T) {
	schema := `{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}`
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			srv := startFake(t, fakellm.Config{})
			p := be.make(srv)
			req := userReq("hi")
			req.Tools = []llm.ToolSpec{{Name: "clock", Description: "time", Parameters: json.RawMessage(schema)}, {Name: "bare"}}
			for range 2 {
				if _, _, err := collect(context.Background(), p, req); err != nil {
					t.Fatal(err)
				}
			}
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			for i, r := range reqs {
				if len(r.Tools) != 2 || r.Tools[0].Name != "clock" || r.Tools[0].Description != "time" || r.Tools[1].Name != "bare" {
					t.Fatalf("call %d: tools %+v", i, r.Tools)
				}
				var got, want any
				_ = json.Unmarshal(r.Tools[0].Parameters, &got)
				_ = json.Unmarshal([]byte(schema), &want)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("call %d: schema %s, want %s", i, r.Tools[0].Parameters, schema)
				}
			}
			req.Tools = []llm.ToolSpec{{Name: "broken", Parameters: json.RawMessage(`[1]`)}}
			if _, _, err := collect(context.Background(), p, req); err == nil || !strings.Contains(err.Error(), "broken") {
				t.Fatalf("a non-object schema: %v", err)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Fatalf("the refused call reached the model (%d requests)", n)
			}
		})
	}
}

// A provider that stalls, before its answer or in the middle of a stream,
// ends the call after CallTimeout with a timeout the user is told about,
// and the call is not retried.
func TestCallTimeout(t *testing.T) {
	for _, b := range backends {
		for _, stall := range []string{"before the answer", "mid-stream"} {
			t.Run(b.name+"/"+stall, func(t *testing.T) {
				t.Parallel()
				srv := startFake(t, fakellm.Config{})
				text := "hello [[latency:1m]]"
				if stall == "mid-stream" {
					text = "hello [[slow:1m]]"
				}
				sl := &fakeSleep{}
				p := llm.WithRetry(b.make(srv), llm.RetryPolicy{CallTimeout: 200 * time.Millisecond, Sleep: sl.Sleep, Log: quiet})
				_, _, err := collect(context.Background(), p, userReq(text))
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err = %v, want a deadline", err)
				}
				if got := llm.UserMessage(err); !strings.Contains(got, "took too long") {
					t.Errorf("user message %q", got)
				}
				if n := len(srv.Requests()); n != 1 || len(sl.waits) != 0 {
					t.Errorf("retried: %d requests, waits %v", n, sl.waits)
				}
			})
		}
	}
}

func TestInstrumentCountsEveryAttempt(t *testing.T) {
	for _, b := range backends {
		for _, streaming := range []bool{true, false} {
			mode := map[bool]string{true: "stream", false: "whole"}[streaming]
			t.Run(b.name+"/"+mode, func(t *testing.T) {
				srv := startFake(t, fakellm.Config{})
				srv.FailNext(1, fakellm.Failure{Status: 429, RetryAfter: time.Second})
				provider := "test-" + b.name + "-" + mode // series of this test alone
				labels := func(extra ...string) map[string]string {
					l := map[string]string{"provider": provider, "model": "m1"}
					for i := 0; i+1 < len(extra); i += 2 {
						l[extra[i]] = extra[i+1]
					}
					return l
				}
				series := []struct {
					name   string
					labels map[string]string
					want   float64 // growth; -1: some
				}{
					{"switchboard_llm_requests_total", labels("result", "rate_limited"), 1},
					{"switchboard_llm_requests_total", labels("result", "ok"), 1},
					{"switchboard_llm_request_seconds", labels(), 2},
					{"switchboard_llm_time_to_first_token_seconds", labels(), map[bool]float64{true: 1, false: 0}[streaming]},
					{"switchboard_llm_tokens_total", labels("kind", "input"), -1},
					{"switchboard_llm_tokens_total", labels("kind", "output"), -1},
				}
				before := make([]float64, len(series))
				for i, s := range series {
					before[i] = telemetrytest.Value(t, s.name, s.labels)
				}
				p := llm.WithRetry(llm.Instrument(b.make(srv), provider), llm.RetryPolicy{
					MaxAttempts: 3, Sleep: (&fakeSleep{}).Sleep, Log: quiet})
				req := userReq("how are you")
				req.Model = "m1"
				var err error
				if streaming {
					_, _, err = collect(context.Background(), p, req)
				} else {
					_, err = llm.Complete(context.Background(), p, req)
				}
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range series {
					grew := telemetrytest.Value(t, s.name, s.labels) - before[i]
					if (s.want < 0 && grew <= 0) || (s.want >= 0 && grew != s.want) {
						t.Errorf("%s%v grew by %v, want %v", s.name, s.labels, grew, s.want)
					}
				}
			})
		}
	}
}

func TestInstrumentBoundsModelNames(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	provider := fmt.Sprintf("test-bounded-%d", time.Now().UnixNano()) // a fresh instrument's series
	p := llm.Instrument(backends[0].make(srv), provider)
	for i := range 40 {
		req := userReq("hi")
		req.Model = fmt.Sprintf("model-%d", i)
		if _, err := llm.Complete(context.Background(), p, req); err != nil {
			t.Fatal(err)
		}
	}
	telemetrytest.Want(t, "switchboard_llm_requests_total", map[string]string{"provider": provider, "model": "model-0", "result": "ok"}, 1)
	telemetrytest.Want(t, "switchboard_llm_requests_total", map[string]string{"provider": provider, "model": "other", "result": "ok"}, 40-32)
	if _, err := llm.Complete(context.Background(), p, userReq("hi")); err != nil {
		t.Fatal(err)
	}
	telemetrytest.Want(t, "switchboard_llm_requests_total", map[string]string{"provider": provider, "model": "default", "result": "ok"}, 1)
}

// A user message's pictures reach the model in each provider's format: the
// fake echoes each one's type, size and digest, or its URL; a model
// without vision refuses them as a bad request.
func TestImages(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n fake pixels")
	req := llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "what is this?", Images: []llm.Image{
		{MIME: "image/png", Data: png}, {URL: "https://example.com/cat.jpg"},
	}}}}
	want := "echo: what is this? [image " + (fakellm.Image{MediaType: "image/png", Data: png}).String() + "] [image https://example.com/cat.jpg]"
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := startFake(t, fakellm.Config{})
			resp, err := llm.Complete(context.Background(), b.make(srv), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != want {
				t.Fatalf("answer %q, want %q", resp.Text, want)
			}
			got := srv.Requests()[0].Messages[0].Images
			if len(got) != 2 || string(got[0].Data) != string(png) || got[0].MediaType != "image/png" {
				t.Fatalf("the fake received %+v", got)
			}

			textOnly := startFake(t, fakellm.Config{TextOnly: true})
			_, err = llm.Complete(context.Background(), b.make(textOnly), req)
			if c := llm.ClassOf(err); c != llm.BadRequest {
				t.Fatalf("a text-only model answered %v (class %q), want a bad request", err, c)
			}
			if _, err := llm.Complete(context.Background(), b.make(textOnly), userReq("no pictures")); err != nil {
				t.Fatalf("a text-only model refused text: %v", err)
			}
		})
	}
}

// Blank text, which the Messages API refuses in any text block ("text
// content blocks must be non-empty" or "must contain non-whitespace
// text"), is never sent to Anthropic, as Hermes's adapter sends none: a
// blank user message is "(empty message)" (one with pictures is the
// pictures alone), a blank tool result "(no output)", a blank assistant
// text and a blank system prompt are left out. OpenAI takes them as they
// are. A context message of only a picture (whose pictures are not
// shown again), an empty tool output or a blank system note make them.
func TestBlankTextIsNeverSentToAnthropic(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\n fake pixels")
	req := llm.Request{System: " \n", Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "\t"},
		{Role: llm.RoleUser, Content: ""},
		{Role: llm.RoleAssistant, Content: " ", ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "shell", Arguments: `{"cmd":"true"}`}}},
		{Role: llm.RoleTool, ToolCallID: "call_1", Content: ""},
		{Role: llm.RoleAssistant, Content: "\n\n"},
		{Role: llm.RoleUser, Content: "  ", Images: []llm.Image{{MIME: "image/png", Data: png}}},
		{Role: llm.RoleUser, Content: " \n "},
	}}
	srv := startFake(t, fakellm.Config{})
	if _, err := llm.Complete(context.Background(), backends[1].make(srv), req); err != nil {
		t.Fatalf("Anthropic refused the request: %v", err)
	}
	var got []string
	for _, m := range srv.Requests()[0].Messages {
		got = append(got, fmt.Sprintf("%s %q %d", m.Role, m.Content, len(m.Images)))
	}
	want := []string{`user "(empty message)" 0`, `assistant "" 0`, `tool "(no output)" 0`,
		`user "(empty message)" 1`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the fake received\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := srv.Requests()[0].System; s != "" {
		t.Errorf("system prompt %q, want none", s)
	}
}

// Speech reaches the OpenAI-compatible transcription endpoint as a named
// file, streamed as it is read (no Content-Length: the body is not built
// whole first) and complete; the server's refusal is classified as a bad
// request, and an audio read that fails ends the upload with its error.
func TestTranscribe(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := llm.NewOpenAI(llm.OpenAIConfig{APIKey: "test", BaseURL: srv.URL() + "/v1"})
	ctx := context.Background()
	text, err := p.Transcribe(ctx, "", strings.NewReader("turn the lights off"), "voice.ogg", "audio/ogg")
	if err != nil || text != "turn the lights off" {
		t.Fatalf("transcript %q, %v", text, err)
	}
	got := srv.Transcriptions()
	if len(got) != 1 || got[0].Model != llm.DefaultTranscriptionModel || got[0].FileName != "voice.ogg" {
		t.Fatalf("the server received %+v", got)
	}
	// Longer than any buffer on the way, and not valid UTF-8.
	long := bytes.Repeat([]byte{0xff, 0x00, 0x7f, 0x80}, 300<<10)
	text, err = p.Transcribe(ctx, "", iotest.HalfReader(bytes.NewReader(long)), "long.ogg", "audio/ogg")
	if want := fmt.Sprintf("(unintelligible audio, %d bytes)", len(long)); err != nil || text != want {
		t.Fatalf("transcript %q, %v; want %q", text, err, want)
	}
	if got := srv.Transcriptions(); len(got) != 2 || !bytes.Equal(got[1].Audio, long) || !got[1].Streamed {
		t.Fatalf("the server received %d bytes (streamed %v), want the %d sent, streamed", len(got[len(got)-1].Audio), got[len(got)-1].Streamed, len(long))
	}
	if _, err := p.Transcribe(ctx, "whisper-large", strings.NewReader("x"), "fail.ogg", "audio/ogg"); llm.ClassOf(err) != llm.BadRequest {
		t.Fatalf("refused audio: %v", err)
	}
	broken := errors.New("the store lost a chunk")
	_, err = p.Transcribe(ctx, "", io.MultiReader(bytes.NewReader(long[:100<<10]), iotest.ErrReader(broken)), "broken.ogg", "audio/ogg")
	if !errors.Is(err, broken) {
		t.Fatalf("an audio read that failed: %v, want its error", err)
	}
	if n := len(srv.Transcriptions()); n != 3 {
		t.Fatalf("the server took %d transcriptions, want 3 (not the broken upload)", n)
	}
}

// lenReader is audio that says how many bytes it has left (as a
// strings.Reader does), n, which may be untrue.
type lenReader struct {
	io.Reader
	n int
}

func (l lenReader) Len() int { return l.n }

// TestTranscribeSendsTheLengthItKnows: audio that says how many bytes it
// has (Len, as a stored attachment's size) is uploaded with a
// Content-Length, since servers that take no chunked request body refuse
// one without (411) or read it as empty; audio of unknown size is
// streamed chunked. Audio that yields more or fewer bytes than it said
// ends the upload with an error, the server taking no file.
func TestTranscribeSendsTheLengthItKnows(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := llm.NewOpenAI(llm.OpenAIConfig{APIKey: "test", BaseURL: srv.URL() + "/v1"})
	ctx := context.Background()
	long := bytes.Repeat([]byte{0xff, 0x00, 0x7f, 0x80}, 300<<10)
	cases := []struct {
		name     string
		audio    func() io.Reader
		want     []byte // nil: the upload fails
		streamed bool
	}{
		{name: "strings.Reader", audio: func() io.Reader { return strings.NewReader("turn the lights off") }, want: []byte("turn the lights off")},
		{name: "sized, long", audio: func() io.Reader { return lenReader{iotest.HalfReader(bytes.NewReader(long)), len(long)} }, want: long},
		{name: "sized, empty", audio: func() io.Reader { return lenReader{strings.NewReader(""), 0} }, want: []byte{}},
		{name: "unknown size", audio: func() io.Reader { return iotest.HalfReader(bytes.NewReader(long)) }, want: long, streamed: true},
		{name: "shorter than it said", audio: func() io.Reader { return lenReader{bytes.NewReader(long[:1000]), 1001} }},
		{name: "longer than it said", audio: func() io.Reader { return lenReader{bytes.NewReader(long), len(long) - 1} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(srv.Transcriptions())
			_, err := p.Transcribe(ctx, "", tc.audio(), "voice.ogg", "audio/ogg")
			got := srv.Transcriptions()[before:]
			if tc.want == nil {
				if err == nil || len(got) != 0 {
					t.Fatalf("err %v, the server took %d files; want an error and none", err, len(got))
				}
				return
			}
			if err != nil || len(got) != 1 {
				t.Fatalf("err %v, the server took %d files", err, len(got))
			}
			if !bytes.Equal(got[0].Audio, tc.want) || got[0].Streamed != tc.streamed {
				t.Fatalf("the server received %d bytes (streamed %v), want %d (streamed %v)", len(got[0].Audio), got[0].Streamed, len(tc.want), tc.streamed)
			}
		})
	}
}

// TestStreamIdleTimeout: a streamed call that gets no chunk for
// StreamIdleTimeout ends with a retryable Server error wrapping
// ErrStreamIdle, well before CallTimeout: retried when nothing was
// delivered yet, ErrInterrupted after output. Keep-alive pings are no
// progress; a slow but steady stream and a slow delta callback are not
// stalls.
func TestStreamIdleTimeout(t *testing.T) {
	const idle = 500 * time.Millisecond
	tests := []struct {
		name     string
		fail     *fakellm.Failure
		text     string
		slowFn   time.Duration // time the delta callback takes
		wantErr  bool
		wantIntr bool // ErrInterrupted: output came before the stall
		requests int
	}{
		{name: "silent before the answer: retried", fail: &fakellm.Failure{Latency: time.Minute}, requests: 2},
		{name: "stalled mid-stream: not retried", fail: &fakellm.Failure{StallAfter: 1}, wantErr: true, wantIntr: true, requests: 1},
		{name: "keep-alive pings are no progress", fail: &fakellm.Failure{StallAfter: 1, StallPing: 20 * time.Millisecond},
			wantErr: true, wantIntr: true, requests: 1},
		{name: "slow but steady stream", text: " [[slow:50ms]]", requests: 1},
		{name: "slow delta callback", slowFn: 2 * idle, requests: 1},
	}
	for _, b := range backends {
		for _, tc := range tests {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				srv := startFake(t, fakellm.Config{})
				if tc.fail != nil {
					srv.FailNext(1, *tc.fail)
				}
				sl := &fakeSleep{}
				p := llm.WithRetry(b.make(srv), llm.RetryPolicy{
					CallTimeout: time.Minute, StreamIdleTimeout: idle, Sleep: sl.Sleep, Log: quiet})
				var deltas int
				resp, err := p.Stream(context.Background(), userReq("hello"+tc.text), func(llm.Delta) error {
					deltas++
					time.Sleep(tc.slowFn)
					return nil
				})
				if n := len(srv.Requests()); n != tc.requests {
					t.Errorf("%d requests, want %d", n, tc.requests)
				}
				if !tc.wantErr {
					if err != nil {
						t.Fatalf("err = %v", err)
					}
					if resp.Text != "echo: hello" {
						t.Fatalf("text %q", resp.Text)
					}
					return
				}
				if !errors.Is(err, llm.ErrStreamIdle) || llm.ClassOf(err) != llm.Server {
					t.Fatalf("err = %v, want a Server error wrapping ErrStreamIdle", err)
				}
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v: the call timeout fired, not the idle one", err)
				}
				if got := errors.Is(err, llm.ErrInterrupted); got != tc.wantIntr {
					t.Errorf("ErrInterrupted = %v, want %v (deltas %d)", got, tc.wantIntr, deltas)
				}
				if len(sl.waits) != 0 {
					t.Errorf("retried after output: waits %v", sl.waits)
				}
			})
		}
	}
}

// A request's reasoning effort reaches an OpenAI-compatible server as
// reasoning_effort, and OpenRouter as its reasoning object (disabled for
// "none"), as Hermes sends them; no effort sends neither.
func TestReasoningEffort(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	tests := []struct {
		name       string
		object     bool
		effort     string
		wantEffort string
		wantField  string
	}{
		{"no effort", false, "", "", ""},
		{"openai", false, "high", "high", "reasoning_effort"},
		{"openai none", false, "none", "none", "reasoning_effort"},
		{"openrouter", true, "xhigh", "xhigh", "reasoning"},
		{"openrouter none", true, "none", "none", "reasoning"},
		{"openrouter no effort", true, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL() + "/v1", Model: "gpt-test", ReasoningObject: tt.object})
			for _, stream := range []bool{false, true} {
				srv.Reset()
				req := userReq("think")
				req.ReasoningEffort = tt.effort
				var err error
				if stream {
					_, _, err = collect(context.Background(), p, req)
				} else {
					_, err = llm.Complete(context.Background(), p, req)
				}
				if err != nil {
					t.Fatal(err)
				}
				got := srv.Requests()[0]
				if got.ReasoningEffort != tt.wantEffort || got.ReasoningField != tt.wantField {
					t.Errorf("stream=%v: effort %q in %q, want %q in %q", stream, got.ReasoningEffort, got.ReasoningField, tt.wantEffort, tt.wantField)
				}
			}
		})
	}
}

// The thinking an OpenAI-compatible server sends (reasoning_content)
// comes back with the answer, streamed or whole, apart from its text.
func TestReasoningIsRead(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL() + "/v1", Model: "gpt-test"})
	for _, stream := range []bool{false, true} {
		srv.Enqueue(fakellm.Reply{Text: "42", Reasoning: "Six times seven.\nThat is 42."})
		var resp *llm.Response
		var err error
		if stream {
			resp, _, err = collect(context.Background(), p, userReq("the answer?"))
		} else {
			resp, err = llm.Complete(context.Background(), p, userReq("the answer?"))
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.Text != "42" || resp.Reasoning != "Six times seven.\nThat is 42." {
			t.Errorf("stream=%v: text %q, reasoning %q", stream, resp.Text, resp.Reasoning)
		}
	}
}

// With StreamReasoning, the thinking streams too, as Reasoning deltas
// before the text's, from an OpenAI-compatible server and from Anthropic;
// without it no delta carries reasoning.
func TestReasoningStreams(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	providers := []struct {
		name string
		p    llm.Provider
	}{
		{"openai", llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL() + "/v1", Model: "gpt-test"})},
		{"anthropic", llm.NewAnthropic(llm.AnthropicConfig{APIKey: "test", BaseURL: srv.URL(), Model: "claude-sonnet-4-5"})},
	}
	const thought = "Six times seven.\nThat is 42."
	for _, pr := range providers {
		for _, asked := range []bool{false, true} {
			srv.Enqueue(fakellm.Reply{Text: "The answer is 42.", Reasoning: thought})
			req := userReq("the answer?")
			req.ReasoningEffort, req.StreamReasoning = "high", asked
			resp, deltas, err := collect(context.Background(), pr.p, req)
			if err != nil {
				t.Fatal(err)
			}
			var reasoning, text strings.Builder
			for _, d := range deltas {
				if d.Reasoning != "" && text.Len() > 0 {
					t.Errorf("%s: reasoning delta %q after the text", pr.name, d.Reasoning)
				}
				reasoning.WriteString(d.Reasoning)
				text.WriteString(d.Text)
			}
			want := ""
			if asked {
				want = thought
			}
			if reasoning.String() != want || text.String() != "The answer is 42." || resp.Reasoning != thought {
				t.Errorf("%s asked=%v: streamed reasoning %q, text %q, response's reasoning %q", pr.name, asked, reasoning.String(), text.String(), resp.Reasoning)
			}
		}
	}
}

// A request's reasoning effort reaches Anthropic as extended thinking,
// mapped as Hermes maps it: a thinking budget for the older Claude
// models (and others behind an Anthropic endpoint), adaptive thinking
// with output_config.effort from Claude 4.6 on, none for Haiku; with
// thinking on, max_tokens leaves room above the budget and no
// temperature is sent. No effort sends no thinking.
func TestAnthropicThinking(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := llm.NewAnthropic(llm.AnthropicConfig{APIKey: "test", BaseURL: srv.URL(), Model: "claude-test"})
	temp := 0.5
	tests := []struct {
		model, effort string
		maxTokens     int
		want          *fakellm.ThinkingConfig
		wantEffort    string
		wantMax       int
		wantTemp      bool
	}{
		{"claude-sonnet-4-5", "", 0, nil, "", 4096, true},
		{"claude-sonnet-4-5", "none", 0, nil, "", 4096, true},
		{"claude-sonnet-4-5", "minimal", 0, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 4000}, "", 8096, false},
		{"claude-sonnet-4-5", "low", 0, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 4000}, "", 8096, false},
		{"claude-sonnet-4-5-20250929", "medium", 0, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 8000}, "", 12096, false},
		{"claude-opus-4-1", "high", 0, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 16000}, "", 20096, false},
		{"claude-3-7-sonnet-latest", "xhigh", 0, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 32000}, "", 36096, false},
		{"claude-sonnet-4-5", "high", 64000, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 16000}, "", 64000, false},
		{"claude-opus-4-6", "xhigh", 0, &fakellm.ThinkingConfig{Type: "adaptive", Display: "summarized"}, "max", 36096, false},
		{"claude-sonnet-4-6", "low", 0, &fakellm.ThinkingConfig{Type: "adaptive", Display: "summarized"}, "low", 8096, false},
		{"claude-opus-4-6", "none", 0, &fakellm.ThinkingConfig{Type: "disabled"}, "", 4096, true},
		{"claude-opus-4-7", "xhigh", 0, &fakellm.ThinkingConfig{Type: "adaptive", Display: "summarized"}, "xhigh", 36096, false},
		{"claude-opus-4-7", "minimal", 0, &fakellm.ThinkingConfig{Type: "adaptive", Display: "summarized"}, "low", 8096, false},
		{"claude-opus-4-7", "none", 0, &fakellm.ThinkingConfig{Type: "disabled"}, "", 4096, false},
		{"claude-opus-4-7", "", 0, nil, "", 4096, false},
		{"claude-haiku-4-5", "high", 0, nil, "", 4096, true},
		{"MiniMax-M2", "medium", 0, &fakellm.ThinkingConfig{Type: "enabled", BudgetTokens: 8000}, "", 12096, false},
		{"kimi-k2-thinking", "high", 0, &fakellm.ThinkingConfig{Type: "adaptive", Display: "summarized"}, "high", 20096, false},
		{"kimi-k2-thinking", "none", 0, nil, "", 4096, true},
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.effort, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				srv.Reset()
				req := userReq("think")
				req.Model, req.ReasoningEffort, req.MaxTokens, req.Temperature = tt.model, tt.effort, tt.maxTokens, &temp
				var err error
				if stream {
					_, _, err = collect(context.Background(), p, req)
				} else {
					_, err = llm.Complete(context.Background(), p, req)
				}
				if err != nil {
					t.Fatal(err)
				}
				got := srv.Requests()[0]
				if !reflect.DeepEqual(got.Thinking, tt.want) {
					t.Errorf("stream=%v: thinking %+v, want %+v", stream, got.Thinking, tt.want)
				}
				if got.ReasoningEffort != tt.wantEffort {
					t.Errorf("stream=%v: effort %q, want %q", stream, got.ReasoningEffort, tt.wantEffort)
				}
				if got.MaxTokens != tt.wantMax {
					t.Errorf("stream=%v: max_tokens %d, want %d", stream, got.MaxTokens, tt.wantMax)
				}
				if (got.Temperature != nil) != tt.wantTemp {
					t.Errorf("stream=%v: temperature %v, want one sent: %v", stream, got.Temperature, tt.wantTemp)
				}
			}
		})
	}
}

// Anthropic's thinking comes back as the answer's reasoning, and its
// signed blocks go back unchanged at the head of the assistant message
// whose tool calls' results follow, or the API refuses the next request.
// A tool-use message without its thinking (a resumed turn) makes that
// call go without thinking instead.
func TestAnthropicThinkingRoundTrip(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := llm.NewAnthropic(llm.AnthropicConfig{APIKey: "test", BaseURL: srv.URL(), Model: "claude-sonnet-4-5"})
	const thought = "The user wants the time.\nI should call the clock."
	for _, stream := range []bool{false, true} {
		for _, model := range []string{"claude-sonnet-4-5", "claude-opus-4-7"} {
			srv.Reset()
			srv.Enqueue(fakellm.Reply{Reasoning: thought, ToolCalls: []fakellm.ToolCall{{Name: "clock", Arguments: `{"tz":"UTC"}`}}},
				fakellm.Reply{Text: "It is noon.", Reasoning: "Now answer."})
			call := func(req llm.Request) (*llm.Response, error) {
				req.Model, req.ReasoningEffort = model, "high"
				req.Tools = []llm.ToolSpec{{Name: "clock", Parameters: json.RawMessage(`{"type":"object"}`)}}
				if stream {
					resp, _, err := collect(context.Background(), p, req)
					return resp, err
				}
				return llm.Complete(context.Background(), p, req)
			}
			req := userReq("what time is it?")
			first, err := call(req)
			if err != nil {
				t.Fatal(err)
			}
			wantThinking := []llm.Thinking{{Text: thought, Signature: fakellm.ThinkingSignature(thought)}}
			if first.Reasoning != thought || !reflect.DeepEqual(first.Thinking, wantThinking) || len(first.ToolCalls) != 1 {
				t.Fatalf("stream=%v %s: reasoning %q, thinking %+v, calls %+v", stream, model, first.Reasoning, first.Thinking, first.ToolCalls)
			}
			req.Messages = append(req.Messages,
				llm.Message{Role: llm.RoleAssistant, ToolCalls: first.ToolCalls, Thinking: first.Thinking},
				llm.Message{Role: llm.RoleTool, ToolCallID: first.ToolCalls[0].ID, Content: "12:00"})
			second, err := call(req)
			if err != nil {
				t.Fatalf("stream=%v %s: tool-use continuation: %v", stream, model, err)
			}
			if second.Text != "It is noon." || second.Reasoning != "Now answer." {
				t.Errorf("stream=%v %s: answer %q, reasoning %q", stream, model, second.Text, second.Reasoning)
			}
			got := srv.Requests()[1]
			if got.Thinking == nil || got.Thinking.Type == "disabled" {
				t.Errorf("stream=%v %s: continuation without thinking: %+v", stream, model, got.Thinking)
			}
			sent := got.Messages[1]
			if sent.Role != "assistant" || !reflect.DeepEqual(sent.Thinking, []fakellm.Thinking{{Text: thought, Signature: fakellm.ThinkingSignature(thought)}}) {
				t.Errorf("stream=%v %s: assistant message sent back as %+v", stream, model, sent)
			}

			// The same continuation with the thinking lost.
			srv.Reset()
			req.Messages[1].Thinking = nil
			if _, err := call(req); err != nil {
				t.Fatalf("stream=%v %s: continuation without its thinking: %v", stream, model, err)
			}
			if th := srv.Requests()[0].Thinking; th != nil && th.Type != "disabled" {
				t.Errorf("stream=%v %s: thinking %+v on a tool-use message without its thinking", stream, model, th)
			}

			// A changed block is refused, as Anthropic refuses it.
			srv.Reset()
			req.Messages[1].Thinking = []llm.Thinking{{Text: thought + " (edited)", Signature: fakellm.ThinkingSignature(thought)}}
			if _, err := call(req); llm.ClassOf(err) != llm.BadRequest {
				t.Errorf("stream=%v %s: edited thinking block: %v, want a bad request", stream, model, err)
			}
		}
	}
}

// Text goes to the OpenAI-compatible speech endpoint with the defaults
// (Hermes's OpenAI TTS model and voice, Opus) and comes back as Ogg/Opus;
// the server's failures are classified as the chat calls' are.
func TestSpeak(t *testing.T) {
	srv := startFake(t, fakellm.Config{})
	p := llm.NewOpenAI(llm.OpenAIConfig{APIKey: "test", BaseURL: srv.URL() + "/v1"})
	ctx := context.Background()
	audio, mt, err := p.Speak(ctx, "", "", "", "Hello there.")
	if err != nil {
		t.Fatal(err)
	}
	if mt != "audio/ogg" || !bytes.HasPrefix(audio, []byte("OggS")) || !bytes.Contains(audio, []byte("OpusHead")) {
		t.Fatalf("speech %q, %d bytes starting %q", mt, len(audio), audio[:min(len(audio), 40)])
	}
	got := srv.Speeches()
	if len(got) != 1 || got[0] != (fakellm.Speech{Model: llm.DefaultSpeechModel, Voice: llm.DefaultSpeechVoice, Format: "opus", Input: "Hello there."}) {
		t.Fatalf("the server received %+v", got)
	}
	if audio, mt, err := p.Speak(ctx, "tts-1", "nova", "mp3", "Hi"); err != nil || mt != "audio/mpeg" || audio[0] != 0xFF {
		t.Fatalf("mp3 speech %q, %v", mt, err)
	}
	for _, tt := range []struct {
		f    fakellm.Failure
		want llm.Class
	}{
		{fakellm.Failure{Status: 429}, llm.RateLimited},
		{fakellm.Failure{Status: 500}, llm.Server},
	} {
		srv.FailSpeech(1, tt.f)
		if _, _, err := p.Speak(ctx, "", "", "", "Hi"); llm.ClassOf(err) != tt.want {
			t.Errorf("status %d: %v (class %q), want %q", tt.f.Status, err, llm.ClassOf(err), tt.want)
		}
	}
	if _, _, err := p.Speak(ctx, "", "", "", strings.Repeat("a", llm.MaxSpeechInput+1)); llm.ClassOf(err) != llm.BadRequest {
		t.Errorf("input over the limit: %v", err)
	}
}

// An answer cut at the output limit says so (OpenAI's finish_reason
// "length", Anthropic's stop_reason "max_tokens"), streamed or not, with
// its text or its cut tool call: the agent loop must not take it as
// complete.
func TestStopAtOutputLimit(t *testing.T) {
	tools := []llm.ToolSpec{{Name: "note", Description: "Note it", Parameters: json.RawMessage(`{"type":"object"}`)}}
	for _, b := range backends {
		for _, streaming := range []bool{true, false} {
			t.Run(b.name+map[bool]string{true: "/stream", false: "/whole"}[streaming], func(t *testing.T) {
				srv := startFake(t, fakellm.Config{})
				p := b.make(srv)
				ctx := context.Background()
				srv.Enqueue(fakellm.Reply{Text: "The first half of", Truncated: true},
					fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "note", Arguments: `{"text": "cut sh`}}, Truncated: true})
				req := userReq("write a long answer")
				req.Tools = tools
				call := func() *llm.Response {
					t.Helper()
					var resp *llm.Response
					var err error
					if streaming {
						resp, _, err = collect(ctx, p, req)
					} else {
						resp, err = llm.Complete(ctx, p, req)
					}
					if err != nil {
						t.Fatal(err)
					}
					return resp
				}
				if resp := call(); resp.StopReason != llm.StopMaxTokens || resp.Text != "The first half of" {
					t.Errorf("cut text: stop %q, text %q", resp.StopReason, resp.Text)
				}
				resp := call()
				if resp.StopReason != llm.StopMaxTokens || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "note" {
					t.Errorf("cut tool call: stop %q, calls %+v", resp.StopReason, resp.ToolCalls)
				}
			})
		}
	}
}
