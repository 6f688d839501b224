package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// post sends a chat completion without failing the test (it may run in
// a goroutine); a transport error comes back as code 0.
func post(s *Service, body string, headers map[string]string) httpResult {
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return httpResult{body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return httpResult{resp.StatusCode, resp.Header, data}
}

// answerOf returns the completion's id and text.
func answerOf(t *testing.T, r httpResult) (string, string) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var c completion
	if err := json.Unmarshal(r.body, &c); err != nil || len(c.Choices) == 0 {
		t.Fatalf("not a completion: %s", r.body)
	}
	return c.ID, c.Choices[0].Message.Content
}

// streamed reads an SSE completion: the content and the number of
// content chunks.
func streamed(t *testing.T, r httpResult) (string, int) {
	t.Helper()
	if r.code != http.StatusOK {
		t.Fatalf("status %d: %s", r.code, r.body)
	}
	var text strings.Builder
	chunks := 0
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			text.WriteString(c.Choices[0].Delta.Content)
			chunks++
		}
	}
	return text.String(), chunks
}

func inboundCount(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	ctx := context.Background()
	st, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func followers(s *Service) int {
	s.following.mu.Lock()
	defer s.following.mu.Unlock()
	n := 0
	for _, l := range s.following.m {
		n += len(l)
	}
	return n
}

func testKeyedID(session, key string) string {
	sum := sha256.Sum256([]byte(testKey))
	return keyedID("key-"+hex.EncodeToString(sum[:4]), session, key)
}

// TestKeyedRetryOnAnotherReplica: the replica holding a request with an
// Idempotency-Key stops before the answer; the client retries on another
// replica with the same key. The message is published once, and the
// retry gets its answer — then again, at once, after it completed.
func TestKeyedRetryOnAnotherReplica(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	// The first replica gives up on its waiting request as it stops.
	first, stopFirst := runService(t, b, func(c *Config) { c.ShutdownGrace = 0 })
	second := startService(t, b, nil)
	r := startResponder(t, b)
	release := r.hold()
	body := `{"messages":[{"role":"user","content":"hello"}]}`
	headers := map[string]string{HeaderIdempotencyKey: "k-1", HeaderSession: "conv-1"}

	interrupted := make(chan httpResult, 1)
	go func() { interrupted <- post(first, body, headers) }()
	platformtest.WaitFor(t, "the message to reach the responder", func() bool { return len(r.chatIDs()) == 1 })
	stopFirst()
	if res := <-interrupted; res.code == http.StatusOK {
		t.Fatalf("the stopped replica answered: %s", res.body)
	}

	retried := make(chan httpResult, 1)
	go func() { retried <- post(second, body, headers) }()
	platformtest.WaitFor(t, "the retry to follow the answer", func() bool { return followers(second) == 1 })
	release()
	id, text := answerOf(t, <-retried)
	if text != "echo: hello (turn 1)" {
		t.Fatalf("retry answered %q", text)
	}
	if want := "chatcmpl-" + strings.TrimPrefix(testKeyedID("conv-1", "k-1"), keyedPrefix); id != want {
		t.Fatalf("completion id %q, want %q", id, want)
	}

	// After completion: the same answer without a new message.
	again, text2 := answerOf(t, post(second, body, headers))
	if again != id || text2 != text {
		t.Fatalf("retry after completion: %q %q, want %q %q", again, text2, id, text)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("inbound stream holds %d events, want 1", n)
	}
	if got := r.chatIDs(); len(got) != 1 {
		t.Fatalf("responder answered %d events, want 1", len(got))
	}
}

// TestKeyedStreaming: the attempt that published the message streams
// its deltas; a retry after completion streams the stored answer.
func TestKeyedStreaming(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	first := startService(t, b, nil)
	second := startService(t, b, nil)
	startResponder(t, b)
	body := `{"stream":true,"messages":[{"role":"user","content":"stream me"}]}`
	headers := map[string]string{HeaderIdempotencyKey: "k-stream"}

	text, chunks := streamed(t, post(first, body, headers))
	if text != "echo: stream me (turn 1)" || chunks < 3 {
		t.Fatalf("first attempt streamed %q in %d chunks", text, chunks)
	}
	text, chunks = streamed(t, post(second, body, headers))
	if text != "echo: stream me (turn 1)" || chunks != 1 {
		t.Fatalf("retry streamed %q in %d chunks, want the answer in one", text, chunks)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("inbound stream holds %d events, want 1", n)
	}
}

func TestKeyedRequestErrors(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.IdempotencyTTL = time.Second })
	startResponder(t, b)
	hello := `{"messages":[{"role":"user","content":"hello"}]}`

	t.Run("key too long", func(t *testing.T) {
		r := post(s, hello, map[string]string{HeaderIdempotencyKey: strings.Repeat("k", maxIdempotencyKey+1)})
		if r.code != http.StatusBadRequest || errorCode(t, r) != "invalid_idempotency_key" {
			t.Fatalf("%d %s", r.code, r.body)
		}
	})
	t.Run("key reused for another request", func(t *testing.T) {
		headers := map[string]string{HeaderIdempotencyKey: "k-reused"}
		answerOf(t, post(s, hello, headers))
		before := inboundCount(t, b)
		r := post(s, `{"messages":[{"role":"user","content":"something else"}]}`, headers)
		if r.code != http.StatusUnprocessableEntity || errorCode(t, r) != "idempotency_key_reused" {
			t.Fatalf("%d %s", r.code, r.body)
		}
		if n := inboundCount(t, b); n != before {
			t.Fatalf("a refused request was published (%d → %d events)", before, n)
		}
	})
	t.Run("answer expired", func(t *testing.T) {
		headers := map[string]string{HeaderIdempotencyKey: "k-expiring", HeaderSession: "conv-exp"}
		answerOf(t, post(s, hello, headers))
		id := testKeyedID("conv-exp", "k-expiring")
		platformtest.WaitFor(t, "the stored answer to expire", func() bool {
			_, ok, err := s.answers.get(context.Background(), id)
			return err == nil && !ok
		})
		before := inboundCount(t, b)
		for i := range 2 {
			r := post(s, hello, headers)
			if r.code != http.StatusConflict || errorCode(t, r) != "idempotency_key_expired" {
				t.Fatalf("retry %d after expiry: %d %s", i, r.code, r.body)
			}
		}
		if n := inboundCount(t, b); n != before {
			t.Fatalf("an expired key was published again (%d → %d events)", before, n)
		}
	})
}

// TestAnswerRecord: a piece is recorded once however often its send is
// retried, and nothing is added after the final piece.
func TestAnswerRecord(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s, err := New(func() Config { c := DefaultConfig(); c.Key = testKey; return c }(), Deps{Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := keyedID("who", "conv", "k")
	steps := []struct {
		piece answerPiece
		final bool
	}{
		{answerPiece{Key: "t:1:0", Text: "part one "}, false},
		{answerPiece{Key: "t:1:0", Text: "part one "}, false},
		{answerPiece{Key: "t:2:0", Text: "part two"}, true},
		{answerPiece{Key: "t:2:0", Text: "part two"}, true},
		{answerPiece{Key: "t:3:0", Text: "late"}, false},
	}
	for i, st := range steps {
		if err := s.answers.add(ctx, id, st.piece, st.final); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	rec, ok, err := s.answers.get(ctx, id)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	got := fmt.Sprintf("%+v", rec)
	want := fmt.Sprintf("%+v", answer{Pieces: []answerPiece{steps[0].piece, steps[2].piece}, Final: true})
	if got != want {
		t.Fatalf("record %s, want %s", got, want)
	}
}

func TestFollower(t *testing.T) {
	t.Parallel()
	two := answer{Pieces: []answerPiece{{Key: "a", Text: "one "}, {Key: "b", Text: "two"}}}
	final := two
	final.Final = true
	step := &deliveryv1.ToolStep{ToolCallId: "call_1", ToolName: "terminal", Phase: "started"}
	cases := []struct {
		name string
		do   func(f *follower)
		want []piece
	}{
		{"pieces once, in order", func(f *follower) {
			f.decide(false)
			f.apply(answer{Pieces: two.Pieces[:1]})
			f.apply(two)
			f.apply(two)
			f.apply(final)
		}, []piece{{text: "one "}, {text: "two"}, {final: true}}},
		{"a complete record at once", func(f *follower) { f.apply(final); f.decide(false) },
			[]piece{{text: "one "}, {text: "two", final: true}}},
		{"nothing after the final", func(f *follower) {
			f.apply(final)
			f.apply(answer{Pieces: append(final.Pieces, answerPiece{Key: "c", Text: "late"}), Final: true})
			f.decide(true)
			f.delta(piece{delta: "late delta"})
		}, []piece{{text: "one "}, {text: "two", final: true}}},
		{"deltas held until the attempt is known to be live", func(f *follower) {
			f.delta(piece{delta: "d1"})
			f.decide(true)
			f.delta(piece{delta: "d2"})
			f.apply(final)
		}, []piece{{delta: "d1"}, {delta: "d2"}, {text: "one "}, {text: "two", final: true}}},
		{"the answer before the decision keeps the stream", func(f *follower) {
			f.delta(piece{delta: "d1"})
			f.apply(final)
			f.delta(piece{delta: "late"})
			f.decide(true)
		}, []piece{{delta: "d1"}, {text: "one "}, {text: "two", final: true}}},
		{"nothing passed on before the decision", func(f *follower) {
			f.delta(piece{delta: "d1"})
			f.apply(final)
		}, nil},
		{"a retry shows no delta, only that the turn goes on", func(f *follower) {
			f.delta(piece{delta: "d1"})
			f.decide(false)
			f.delta(piece{delta: "d2"})
			f.apply(final)
		}, []piece{{alive: true}, {text: "one "}, {text: "two", final: true}}},
		{"tool steps reach a retry too", func(f *follower) {
			f.tool(piece{tool: step})
			f.delta(piece{delta: "d1"})
			f.decide(false)
			f.tool(piece{tool: step})
			f.apply(final)
			f.tool(piece{tool: step})
		}, []piece{{tool: step}, {tool: step}, {text: "one "}, {text: "two", final: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			wt := newWaiter()
			c.do(newFollower(wt))
			got := wt.take()
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("pieces %+v, want %+v", got, c.want)
			}
		})
	}
}

// A request waiting for its answer when the gateway is told to stop
// (SIGTERM, a rollout) still gets the answer within the shutdown grace:
// the message is on the bus and its turn runs anyway.
func TestShutdownFinishesWaitingRequests(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s, stop := runService(t, b, nil)
	r := startResponder(t, b)
	release := r.hold()
	got := make(chan httpResult, 1)
	go func() {
		got <- post(s, `{"model":"switchboard","messages":[{"role":"user","content":"finish me"}]}`, nil)
	}()
	platformtest.WaitFor(t, "the request's message", func() bool { return len(r.received()) == 1 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	time.Sleep(200 * time.Millisecond) // the stop is under way
	release()
	res := <-got
	if _, text := answerOf(t, res); text != "echo: finish me (turn 1)" {
		t.Fatalf("answer %q", text)
	}
	<-stopped
}
