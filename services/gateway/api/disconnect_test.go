package api

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// A client that goes away mid-stream leaves nothing behind: its request
// stops waiting (no waiter, no answer subscription, no poll), and its
// turn, left to run in its shared or keyed conversation, answers once.
func TestStreamClientGoneLeavesNothing(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	release := r.hold()
	baseline := b.Conn().NumSubscriptions()
	for i, headers := range []map[string]string{
		{HeaderSession: "conv-gone"},
		{HeaderIdempotencyKey: "key-gone"},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+"/v1/chat/completions",
			strings.NewReader(`{"model":"switchboard","stream":true,"messages":[{"role":"user","content":"bye"}]}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// The role chunk: the request waits for its answer.
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("first line %q, %v", line, err)
		}
		platformtest.WaitFor(t, "the message", func() bool { return len(r.received()) == i+1 })
		cancel()
		resp.Body.Close()
	}
	platformtest.WaitFor(t, "the requests to stop waiting", func() bool {
		s.waiting.mu.Lock()
		waiting := len(s.waiting.m)
		s.waiting.mu.Unlock()
		s.following.mu.Lock()
		following := len(s.following.m)
		s.following.mu.Unlock()
		return waiting == 0 && following == 0 && b.Conn().NumSubscriptions() == baseline
	})
	release()
	// Each turn ran once and its answer went nowhere (the keyed one into
	// its stored answer, for a retry).
	platformtest.WaitFor(t, "the keyed request's stored answer", func() bool {
		rec, ok, err := s.answers.get(context.Background(), r.received()[1].GetMessageId())
		return err == nil && ok && rec.Final
	})
	if got := len(r.received()); got != 2 {
		t.Fatalf("%d messages, want the two requests' once each", got)
	}
}
