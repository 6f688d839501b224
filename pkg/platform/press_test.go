package platform_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// A replica handed a press again asks whether another holds it: a hold
// says so and is told (Retried), the question is not taken for the
// router's answer, and a press no replica holds (never held, or its hold
// closed) is the asker's.
func TestRetryPress(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if held, err := platform.RetryPress(ctx, b, "telegram", "q1"); err != nil || held {
		t.Fatalf("a press no one holds: held %v, %v", held, err)
	}
	h, err := platform.HoldPress(b, "telegram", "q1")
	if err != nil {
		t.Fatal(err)
	}
	if held, err := platform.RetryPress(ctx, b, "telegram", "q1"); err != nil || !held {
		t.Fatalf("a held press: held %v, %v", held, err)
	}
	select {
	case <-h.Retried():
	case <-time.After(5 * time.Second):
		t.Fatal("the hold was not told of the retry")
	}
	select {
	case req := <-h.Answer():
		t.Fatalf("the retry was taken for an answer: %v", req)
	default:
	}
	if held, err := platform.RetryPress(ctx, b, "telegram", "q2"); err != nil || held {
		t.Fatalf("another press: held %v, %v", held, err)
	}
	h.Close()
	if held, err := platform.RetryPress(ctx, b, "telegram", "q1"); err != nil || held {
		t.Fatalf("a press whose hold closed: held %v, %v", held, err)
	}
}

// A replica handed a press again asks the holders for the router's
// answer: none is had before the router answers (nor by the asker's own
// hold), the question is not taken for an answer, and once a hold has
// the answer the asker gets it.
func TestAskPress(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ask := func() *deliveryv1.SendRequested {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		req, err := platform.AskPress(ctx, b, "teams", "p1")
		if err != nil {
			t.Fatal(err)
		}
		return req
	}
	if req := ask(); req != nil {
		t.Fatalf("a press no one holds: %v", req)
	}
	holder, err := platform.HoldPress(b, "teams", "p1")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	asker, err := platform.HoldPress(b, "teams", "p1")
	if err != nil {
		t.Fatal(err)
	}
	defer asker.Close()
	if req := ask(); req != nil {
		t.Fatalf("a press not answered yet: %v", req)
	}
	for _, h := range []*platform.PressHold{holder, asker} {
		select {
		case req := <-h.Answer():
			t.Fatalf("the question was taken for an answer: %v", req)
		default:
		}
	}
	answer := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "teams", Interaction: &eventsv1.Interaction{Id: "p1", Component: true}}, Text: "✅ Approved once"}
	if err := platform.PublishPressAnswer(b, answer); err != nil {
		t.Fatal(err)
	}
	select {
	case <-holder.Answer():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not get the answer")
	}
	asker.Close()
	if req := ask(); req.GetText() != answer.GetText() {
		t.Fatalf("asked after the answer: %v, want %q", req, answer.GetText())
	}
}
