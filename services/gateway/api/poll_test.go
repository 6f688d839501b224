package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// A panic while the poller applies a stored answer (here a follower whose
// waiter is gone: passing a piece on dereferences it) is recovered,
// counted (gateway_api_poll) and ends the polling; on the poller's own
// goroutine it ended the process before.
func TestAnswerPollPanicRecovered(t *testing.T) {
	b := newBus(t)
	log := slog.New(slog.DiscardHandler)
	s := &Service{log: log, bus: b, answers: newAnswers(b, log, time.Minute)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := keyedID("caller", "session", "key-1")
	if _, _, err := s.answers.begin(ctx, id, "request"); err != nil {
		t.Fatal(err)
	}
	if err := s.answers.add(ctx, id, answerPiece{Key: "turn:0", Text: "the answer"}, true); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"component": pollComponent}
	before := telemetrytest.Value(t, "switchboard_panics_total", labels)
	f := newFollower(nil)
	f.live = 1
	done := make(chan struct{})
	go func() { s.pollAnswer(ctx, id, f); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the poller still polls")
	}
	if telemetrytest.Value(t, "switchboard_panics_total", labels) <= before {
		t.Error("the panic was not counted")
	}
}
