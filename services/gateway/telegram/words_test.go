package telegram

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// A replica that left a press's query to the replica holding it, and
// takes the query over once that holder died, answers it with the
// router's word when the router decided the press: the word went to
// the holder, which died with it unanswered, and was kept where every
// replica reads it. Before, the query taken over was answered without
// text, and the router's word (here, the approval's outcome) was lost.
// Its answer is tried again when it fails for a while (a 5xx): tried
// once, the failure left the query unanswered, with no replica left to
// answer it.
func TestPressTakenOverWithTheRouterWord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail bool // the takeover's first answer fails with a 502
	}{
		{"answered", false},
		{"answered after a failure", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			d := pressHeldByAMortalReplica(t, f, true)
			// The lease moves; b, handed the press again and told it is a
			// duplicate, asks, and a says it holds it: b watches a.
			d.stopA()
			waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > d.id })
			if a := f.CallbackAnswers(); len(a) != 0 {
				t.Fatalf("answers %+v while a holds the press, want none yet", a)
			}
			// a dies with the router's word: it can answer nothing any
			// more, the word comes (to a, and kept, as the router keeps
			// it), and a's connection to the bus closes.
			close(d.kill)
			if tc.fail {
				// a is dead: the next answer Telegram gets is b's.
				f.FailNext("answerCallbackQuery", telegramfake.APIError{Code: 502, Description: "Bad Gateway"})
			}
			word := routerWord(t, d.b, d.query, true)
			d.ba.Conn().Close()
			waitFor(t, "the query answered", maxPressHold+answerTimeout, func() bool { return len(f.CallbackAnswers()) > 0 })
			if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != d.query || a[0].Text != word {
				t.Fatalf("answers %+v, want the query answered once with the router's word %q", a, word)
			}
		})
	}
}

// A replica handed again a press whose holder died before it asked (a
// poller that crashed holding the query: its lease expires, the update
// it did not confirm comes to the next poller, and no replica holds the
// press any more) answers the query with the router's word when the
// router decided the press: the word went to the holder, which died
// with it, and was kept where every replica reads it. Before, only a
// replica that watched the holder die (watchHolder) read the word; one
// that found no holder when it asked answered the query without text,
// and the router's word was lost.
func TestPressOfAHolderDeadBeforeTheAskWithTheRouterWord(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	d := pressHeldByAMortalReplica(t, f, false)
	// a dies with the router's word, before any other replica is handed
	// the press: it can answer nothing any more, the word comes (to a,
	// and kept, as the router keeps it), and a's connection to the bus
	// closes, its hold with it.
	close(d.kill)
	word := routerWord(t, d.b, d.query, true)
	d.ba.Conn().Close()
	d.stopA()
	// b polls next, is handed the press again, told it is a duplicate,
	// and finds no replica holding it.
	startService(t, d.cfg, d.b, "b")
	waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > d.id })
	waitFor(t, "the query answered", maxPressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != d.query || a[0].Text != word {
		t.Fatalf("answers %+v, want the query answered once with the router's word %q", a, word)
	}
}

// A hold that runs out without the router's word (its core message was
// lost: the holder's connection to the bus was reconnecting as the
// router published it) answers the query with the word the router kept,
// as a replica taking the query over does. Before, the query was
// answered without text, and the router's word was lost.
func TestPressHoldEndedWithoutTheWordAnswersWithTheKeptOne(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	cfg.PressHold = 2 * time.Second
	s, _ := startService(t, cfg, b, "a")
	waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })

	card := sendApprovalCard(t, f, b)
	_, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	// The router's word, kept but never reaching the hold.
	word := routerWord(t, b, query, false)
	waitFor(t, "the query answered", 2*maxPressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
		t.Fatalf("answers %+v, want the query answered once with the router's kept word %q", a, word)
	}
}

// routerWord is the router's word on the press of callback query
// query in chat 99, kept for the gateway's replicas as the router keeps
// it, after its publish to the press's holders when publish is set.
func routerWord(t *testing.T, b *bus.Bus, query string, publish bool) string {
	t.Helper()
	const word = "✅ Approved once"
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: &eventsv1.Interaction{Id: query, Component: true}}, Text: word}
	if publish {
		if err := platform.PublishPressAnswer(b, req); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := platform.KeepPressAnswer(ctx, b, req); err != nil {
		t.Fatal(err)
	}
	return word
}
