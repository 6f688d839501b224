package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// TestStalledStreamEndsOnTheIdleTimeout: with llm.stream_idle_timeout, a
// provider that goes silent is a provider error long before the call
// timeout (a minute here): silent before its answer, the call is retried
// and the turn answers; stalled after streaming text (keep-alive pings
// flowing), the turn fails with the provider message, not "took too long".
func TestStalledStreamEndsOnTheIdleTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		p := llm.WithRetry(llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1", Model: "fake-model"}),
			llm.RetryPolicy{MaxAttempts: 2, CallTimeout: time.Minute, StreamIdleTimeout: 300 * time.Millisecond,
				Sleep: func(context.Context, time.Duration) error { return nil }})
		d.LLM = worker.Backend{Provider: p, Kind: "openai", Model: "fake-model", BaseURL: h.fakeURL + "/v1", KeyHash: "none"}
	})
	cases := []struct {
		key, text string
		fail      fakellm.Failure
		status    turnsv1.TurnStatus
		code      string // the error reply's
		want      string // in the final text or error message
	}{
		{"idle-a", "quiet", fakellm.Failure{Latency: time.Minute}, turnsv1.TurnStatus_TURN_STATUS_COMPLETED, "", "echo: quiet"},
		{"idle-b", "stuck", fakellm.Failure{StallAfter: 1, StallPing: 20 * time.Millisecond}, turnsv1.TurnStatus_TURN_STATUS_FAILED,
			"provider", "having trouble"},
	}
	for _, tc := range cases {
		h.setGeneration(tc.key, 1)
		h.fake.FailNext(1, tc.fail)
		req := h.requestTurn(tc.key, tc.text, turnOpts{})
		c := h.waitCompleted(req.TurnId)
		if c.GetStatus() != tc.status {
			t.Errorf("%s: status %v, want %v", tc.key, c.GetStatus(), tc.status)
			continue
		}
		final := checkReplies(t, h.replies(req.TurnId))
		if tc.code == "" {
			if got := final.GetFinalText().GetText(); got != tc.want {
				t.Errorf("%s: final %q, want %q", tc.key, got, tc.want)
			}
			continue
		}
		if e := final.GetError(); e.GetCode() != tc.code || !strings.Contains(e.GetMessage(), tc.want) {
			t.Errorf("%s: error reply %q %q, want %q containing %q", tc.key, e.GetCode(), e.GetMessage(), tc.code, tc.want)
		}
	}
}
