package telegram

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// A replica that left a press's query to the replica holding it, and
// takes the query over once that holder died, answers it with the
// router's word when the router decided the press: the word went to
// the holder, which died with it unanswered, and was kept where every
// replica reads it. Before, the query taken over was answered without
// text, and the router's word (here, the approval's outcome) was lost.
func TestPressTakenOverWithTheRouterWord(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	// a, the holder, on a connection of its own, which its death closes.
	ba := bustest.NewWith(t, url, b.Topology())
	cfg := testConfig(f)
	cfg.LeaseTTL = time.Second
	// The longest there is: a, alive, would answer only when its hold
	// ends.
	cfg.PressHold = maxPressHold
	cfgA := cfg
	var kill chan struct{}
	cfgA.APIBaseURL, kill = killableAPI(t, f.URL)
	lost := make(chan struct{})
	sa, stopA := startWrapped(t, cfgA, ba, "a", func(c platform.Conn) platform.Conn {
		return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
	})
	waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })
	sb, _ := startService(t, cfg, b, "b")
	waitFor(t, "b standing by", 20*time.Second, func() bool { st, _ := sb.Runner().State(); return st == platform.StateStandby })

	card := sendApprovalCard(t, f, b)
	id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the press was not published")
	}
	// The lease moves; b, handed the press again and told it is a
	// duplicate, asks, and a says it holds it: b watches a.
	stopA()
	waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > id })
	if a := f.CallbackAnswers(); len(a) != 0 {
		t.Fatalf("answers %+v while a holds the press, want none yet", a)
	}
	// a dies with the router's word: it can answer nothing any more,
	// the word comes (to a, and kept, as the router keeps it), and a's
	// connection to the bus closes.
	close(kill)
	const word = "✅ Approved once"
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: &eventsv1.Interaction{Id: query, Component: true}}, Text: word}
	if err := platform.PublishPressAnswer(b, req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := platform.KeepPressAnswer(ctx, b, req); err != nil {
		t.Fatal(err)
	}
	ba.Conn().Close()
	waitFor(t, "the query answered", maxPressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
		t.Fatalf("answers %+v, want the query answered once with the router's word %q", a, word)
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
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	// a, the holder, on a connection of its own, which its death closes.
	ba := bustest.NewWith(t, url, b.Topology())
	cfg := testConfig(f)
	cfg.LeaseTTL = time.Second
	cfg.PressHold = maxPressHold
	cfgA := cfg
	var kill chan struct{}
	cfgA.APIBaseURL, kill = killableAPI(t, f.URL)
	lost := make(chan struct{})
	sa, stopA := startWrapped(t, cfgA, ba, "a", func(c platform.Conn) platform.Conn {
		return &cutOffConn{Conn: c, lost: lost, once: &sync.Once{}}
	})
	waitFor(t, "a connected", 20*time.Second, func() bool { st, _ := sa.Runner().State(); return st == platform.StateConnected })

	card := sendApprovalCard(t, f, b)
	id, query, err := f.Press("99", card.ID, alice, "ea:once:call_1")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the press was not published")
	}
	// a dies with the router's word, before any other replica is handed
	// the press: it can answer nothing any more, the word comes (to a,
	// and kept, as the router keeps it), and a's connection to the bus
	// closes, its hold with it.
	close(kill)
	const word = "✅ Approved once"
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: &eventsv1.Interaction{Id: query, Component: true}}, Text: word}
	if err := platform.PublishPressAnswer(b, req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := platform.KeepPressAnswer(ctx, b, req); err != nil {
		t.Fatal(err)
	}
	ba.Conn().Close()
	stopA()
	// b polls next, is handed the press again, told it is a duplicate,
	// and finds no replica holding it.
	startService(t, cfg, b, "b")
	waitFor(t, "b polling the press again", 20*time.Second, func() bool { return f.Confirmed() > id })
	waitFor(t, "the query answered", maxPressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
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
	const word = "✅ Approved once"
	req := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: "99",
		Interaction: &eventsv1.Interaction{Id: query, Component: true}}, Text: word}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := platform.KeepPressAnswer(ctx, b, req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the query answered", 2*maxPressHold, func() bool { return len(f.CallbackAnswers()) > 0 })
	if a := f.CallbackAnswers(); len(a) != 1 || a[0].QueryID != query || a[0].Text != word {
		t.Fatalf("answers %+v, want the query answered once with the router's kept word %q", a, word)
	}
}
