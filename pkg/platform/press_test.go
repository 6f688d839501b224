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

// A hold tells a replica that asks whether it holds the press when it
// began (RetryPressSince): that replica, handed the press later, counts
// the time Telegram takes the press's answer from then.
func TestRetryPressSince(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := time.Now()
	h, err := platform.HoldPress(b, "telegram", "q1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	held, since, err := platform.RetryPressSince(ctx, b, "telegram", "q1")
	// Counted back from the reply, the hold looks younger by the reply's
	// way, never older.
	after := time.Now()
	if err != nil || !held || since.Before(before) || since.After(after) {
		t.Fatalf("a held press: held %v since %v, %v; want held since its hold began (%v to %v)", held, since, err, before, after)
	}
	if held, since, err := platform.RetryPressSince(ctx, b, "telegram", "q2"); err != nil || held || !since.IsZero() {
		t.Fatalf("a press no one holds: held %v since %v, %v", held, since, err)
	}
}

// A hold let go after it told an asker the press is held goes on
// holding it (LetGo reports the retry); let go before any asks, it
// tells a later asker nothing, which then answers the press itself.
func TestPressHoldLetGo(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := platform.HoldPress(b, "telegram", "q1")
	if err != nil {
		t.Fatal(err)
	}
	if held, err := platform.RetryPress(ctx, b, "telegram", "q1"); err != nil || !held {
		t.Fatalf("a held press: held %v, %v", held, err)
	}
	if !h.LetGo() {
		t.Fatal("let go of a press another replica was told is held")
	}
	if h.LetGo() {
		t.Fatal("no retry since the last: the hold should let go")
	}
	if held, err := platform.RetryPress(ctx, b, "telegram", "q1"); err != nil || held {
		t.Fatalf("a press let go: held %v, %v", held, err)
	}
	var none *platform.PressHold
	if none.LetGo() {
		t.Fatal("a nil hold holds nothing")
	}
}

// A replica watching a press another holds hears the holder's word that
// it answered it, also when the hold ended at once after; a hold that
// ends without the word (its replica died) leaves the press to the
// watcher.
func TestPressWatch(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		answered bool
	}{{"holder answers", true}, {"holder dies", false}} {
		id := "q-" + tc.name
		h, err := platform.HoldPress(b, "telegram", id)
		if err != nil {
			t.Fatal(err)
		}
		w, err := platform.WatchPress(b, "telegram", id)
		if err != nil {
			t.Fatal(err)
		}
		if held, err := platform.RetryPress(ctx, b, "telegram", id); err != nil || !held {
			t.Fatalf("%s: held %v, %v", tc.name, held, err)
		}
		if tc.answered {
			h.Answered()
		} else {
			h.Close()
		}
		// The bound is never reached: the question finds the hold gone.
		if got := w.Wait(ctx, time.Hour, 10*time.Millisecond, 0); got != tc.answered {
			t.Errorf("%s: watch says answered %v, want %v", tc.name, got, tc.answered)
		}
		w.Close()
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

// A watch takes the press over only when its holder's absence lasts:
// a holder that briefly loses its connection to the bus (its hold gone
// from the server until it reconnects and subscribes again) and then
// says it answered the press is left the press, while a holder that
// is gone for good is found gone within the grace and a few asks, long
// before the watch's bound. Taken over on a single unanswered ask, the
// briefly absent holder's query was answered at once, without text, by
// the watcher.
func TestPressWatchHolderAbsence(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	const (
		every = 20 * time.Millisecond
		grace = 2 * time.Second
		// away is how long the briefly absent holder is gone: many asks,
		// well within the grace.
		away = 500 * time.Millisecond
	)
	for _, tc := range []struct {
		name string
		// back: the holder holds the press again after away, and says it
		// answered it.
		back bool
	}{{"holder briefly absent", true}, {"holder gone", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			id := "q-" + tc.name
			h, err := platform.HoldPress(b, "telegram", id)
			if err != nil {
				t.Fatal(err)
			}
			w, err := platform.WatchPress(b, "telegram", id)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if held, err := platform.RetryPress(ctx, b, "telegram", id); err != nil || !held {
				t.Fatalf("held %v, %v", held, err)
			}
			got := make(chan bool, 1)
			go func() { got <- w.Wait(ctx, time.Hour, every, grace) }()
			h.Close()
			if tc.back {
				time.Sleep(away)
				h2, err := platform.HoldPress(b, "telegram", id)
				if err != nil {
					t.Fatal(err)
				}
				h2.Answered()
			}
			select {
			case answered := <-got:
				if answered != tc.back {
					t.Errorf("watch says answered %v, want %v", answered, tc.back)
				}
			case <-ctx.Done():
				t.Fatal("the watch did not end before the test's bound")
			}
		})
	}
}

// A hold asks whether another replica holds its press (HeldElsewhere)
// without counting itself: no when it is the only one, yes when
// another holds it too; it holds the press on after the question (an
// answer reaches it, a later question finds it), and a closed hold
// asks nothing.
func TestPressHoldHeldElsewhere(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := platform.HoldPress(b, "teams", "e1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if held, err := h.HeldElsewhere(ctx, b, "teams", "e1"); err != nil || held {
		t.Fatalf("held alone: elsewhere %v, %v", held, err)
	}
	if held, err := platform.RetryPress(ctx, b, "teams", "e1"); err != nil || !held {
		t.Fatalf("after its question, the press: held %v, %v; want held", held, err)
	}
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "teams", Interaction: &eventsv1.Interaction{Id: "e1"}}, Text: "done"}
	if err := platform.PublishPressAnswer(b, req); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-h.Answer():
		if got.GetText() != "done" {
			t.Fatalf("answer %q", got.GetText())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the hold took no answer after its question")
	}

	other, err := platform.HoldPress(b, "teams", "e1")
	if err != nil {
		t.Fatal(err)
	}
	if held, err := h.HeldElsewhere(ctx, b, "teams", "e1"); err != nil || !held {
		t.Fatalf("held by another too: elsewhere %v, %v", held, err)
	}
	other.Close()
	if held, err := h.HeldElsewhere(ctx, b, "teams", "e1"); err != nil || held {
		t.Fatalf("the other's hold closed: elsewhere %v, %v", held, err)
	}

	h.Close()
	if _, err := h.HeldElsewhere(ctx, b, "teams", "e1"); err == nil {
		t.Fatal("a closed hold asked")
	}
	if held, err := platform.RetryPress(ctx, b, "teams", "e1"); err != nil || held {
		t.Fatalf("a closed hold's press: held %v, %v", held, err)
	}
}
