package teams

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// decide answers the press of interaction ia with word as the router
// does (answerPress): published to the press's holders, then kept where
// every replica reads it.
func decide(t *testing.T, f *teamsfake.Fake, b *bus.Bus, ia *eventsv1.Interaction, word string) {
	t.Helper()
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}, Text: word}
	if err := platform.PublishPressAnswer(b, req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := platform.KeepPressAnswer(ctx, b, req); err != nil {
		t.Fatal(err)
	}
}

// pressOnTheBus posts act to r, waits for its press on the bus (evs)
// and gives the invoke's request up: the replica holds the press on for
// a retry (keepForRetry). It returns the press's interaction.
func pressOnTheBus(t *testing.T, f *teamsfake.Fake, r *replica, evs <-chan *eventsv1.MessageReceived, act map[string]any) *eventsv1.Interaction {
	t.Helper()
	ctx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	first := postInvoke(ctx, f, r.url, act)
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" {
		t.Fatalf("press %v", ev)
	}
	giveUp()
	if got := <-first; got.err == nil {
		t.Fatalf("the first delivery was answered %d %s, want it given up", got.code, got.body)
	}
	return ia
}

// The Bot Framework's retry of an invoke whose replica died before the
// router decided its press (no replica holds the press any more) is
// answered with the router's word: when the word came before the retry
// (published to no holder, and kept), at once; when it comes while the
// retry waits, once it comes. The press's mark, written once it was on
// the bus, tells the retry the press was not decided yet. Before, the
// retry, finding no holder, took the press for one decided long ago and
// was answered "Answer received." at once, and the word was lost.
func TestInvokeRetriedAfterItsReplicaDied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// before: the router decides before the retry comes.
		before bool
	}{
		{name: "decided before the retry", before: true},
		{name: "decided while the retry waits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := teamsfake.New(t)
			b := pressBus(t)
			cfg := testConfig(f)
			const pressHold = maxPressHold
			cfg.PressHold = pressHold
			a := startReplica(t, f, cfg, b, "a", false)
			retry := startReplica(t, f, cfg, b, "b", false)
			evs := platformtest.InboundEvents(t, b)

			act := strangerPress(f)
			ia := pressOnTheBus(t, f, a, evs, act)
			// a dies with its hold, before the router decides: its
			// handling of the invoke, which had put the press on the
			// bus, has returned once it stopped.
			a.stop()
			if heldOnBus(t, b, ia.GetId()) {
				t.Fatal("the press is held after its replica stopped")
			}
			const word = "⚠️ Approval already resolved or expired."
			if tc.before {
				decide(t, f, b, ia, word)
			}
			second := postInvoke(context.Background(), f, retry.url, act)
			waitDuplicate(t, retry)
			if !tc.before {
				decide(t, f, b, ia, word)
			}
			checkRetryAnswered(t, b, <-second, word, pressHold)
		})
	}
}

// Two retries of an invoke whose press was decided long ago (its
// replica answered it and stopped), which come together to two other
// replicas, are each answered at once with the router's word, kept for
// them. Before, each found the other's hold, took the press for one not
// decided yet and waited out its hold for a word no one would send, or
// found no hold and was answered "Answer received."; neither got the
// word.
func TestInvokeRetriedTwiceLongAfterItsWord(t *testing.T) {
	t.Parallel()
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	a := startReplica(t, f, cfg, b, "a", false)
	r1 := startReplica(t, f, cfg, b, "b", false)
	r2 := startReplica(t, f, cfg, b, "c", false)
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	first := postInvoke(context.Background(), f, a.url, act)
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" {
		t.Fatalf("press %v", ev)
	}
	const word = "⚠️ Approval already resolved or expired."
	decide(t, f, b, ia, word)
	if got := <-first; answerValue(t, got) != word {
		t.Fatalf("the first delivery was answered %q, want %q", answerValue(t, got), word)
	}
	a.stop()

	one := postInvoke(context.Background(), f, r1.url, act)
	two := postInvoke(context.Background(), f, r2.url, act)
	waitDuplicate(t, r1)
	waitDuplicate(t, r2)
	for _, got := range []invokeAnswered{<-one, <-two} {
		checkRetryAnswered(t, b, got, word, pressHold)
	}
}
