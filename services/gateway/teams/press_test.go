package teams

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// pressConn is a replica's connection to the runner as tests see it:
// each publish of a press the bus says it has already is signalled on
// dups (the invoke's handler holds the press by then), and with
// failFirst the first publish of a press is stored and reported failed,
// as a publish whose acknowledgement was lost.
type pressConn struct {
	platform.Conn
	failFirst bool
	once      sync.Once
	dups      chan struct{}
}

func (c *pressConn) HoldPress(id string) (*platform.PressHold, error) {
	return c.Conn.(platform.PressHolder).HoldPress(id)
}

func (c *pressConn) Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	acc, err := c.Conn.Deliver(ctx, ev)
	if ev.GetButtonPress() == nil || err != nil {
		return acc, err
	}
	if acc.Duplicate {
		c.dups <- struct{}{}
		return acc, nil
	}
	fail := false
	c.once.Do(func() { fail = c.failFirst })
	if fail {
		return platform.Accepted{}, errors.New("publish inbound event: nats: timeout")
	}
	return acc, nil
}

// pressPlatform is the Teams platform whose connection goes through a
// pressConn.
type pressPlatform struct {
	*Platform
	conn *pressConn
}

func (p *pressPlatform) Connect(ctx context.Context, conn platform.Conn) error {
	p.conn.Conn = conn
	return p.Platform.Connect(ctx, p.conn)
}

// replica is one gateway replica on a shared bus.
type replica struct {
	p    *Platform
	conn *pressConn
	url  string
	// stop ends the replica's Run and waits for it to return.
	stop func()
}

// startReplica runs a gateway replica named instance on b until the test
// ends.
func startReplica(t *testing.T, f *teamsfake.Fake, cfg Config, b *bus.Bus, instance string, failFirst bool) *replica {
	t.Helper()
	p, err := NewPlatform(cfg, b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := &pressConn{failFirst: failFirst, dups: make(chan struct{}, 8)}
	svc, err := platform.NewService(&pressPlatform{Platform: p, conn: conn}, b, slog.New(slog.DiscardHandler),
		platform.Options{Instance: instance, Backoff: platform.Schedule(10 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run %s: %v", instance, err)
			}
		})
	}
	t.Cleanup(stop)
	platformtest.WaitFor(t, "replica "+instance+" ready", func() bool { return svc.Ready(context.Background()) == nil && p.Addr() != "" })
	return &replica{p: p, conn: conn, url: "http://" + p.Addr() + cfg.Path, stop: stop}
}

// invokeAnswered is what an invoke was answered, and when.
type invokeAnswered struct {
	code int
	body string
	err  error
	took time.Duration
}

// postInvoke posts act and sends its answer on the channel returned.
func postInvoke(ctx context.Context, f *teamsfake.Fake, url string, act map[string]any) chan invokeAnswered {
	out := make(chan invokeAnswered, 1)
	go func() {
		at := time.Now()
		code, body, err := f.PostAnswer(ctx, url, act)
		out <- invokeAnswered{code, body, err, time.Since(at)}
	}()
	return out
}

// answerValue is the text of an invoke's answer (its action response).
func answerValue(t *testing.T, a invokeAnswered) string {
	t.Helper()
	if a.err != nil || a.code != http.StatusOK {
		t.Fatalf("invoke answered %d %q (%v)", a.code, a.body, a.err)
	}
	var v struct {
		StatusCode  int
		Type, Value string
	}
	if err := json.Unmarshal([]byte(a.body), &v); err != nil || v.StatusCode != 200 || v.Type != "application/vnd.microsoft.activity.message" {
		t.Fatalf("invoke answered %s (%v)", a.body, err)
	}
	return v.Value
}

// inboundCount is how many messages the bus's inbound stream holds.
func inboundCount(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// pressBus is a test's own bus, whose Teams buckets are deleted when
// the test ends (after its replicas stopped).
func pressBus(t *testing.T) *bus.Bus {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	t.Cleanup(func() {
		platformtest.DeleteBuckets(b)
		_ = b.JetStream().DeleteKeyValue(context.Background(), b.Topology().Stream(BucketRoutes))
	})
	return b
}

// strangerPress is a stranger's press of an approval card's "approve
// once" in a DM: a press the router refuses or answers.
func strangerPress(f *teamsfake.Fake) map[string]any {
	return f.Press(dmConv, "personal", "aad-stranger", "Mallory", "card-1", "hermes_approve", map[string]any{"hermes_action": "approve_once"})
}

// checkRetryAnswered fails the test unless the retry got the router's
// word before its own hold ended, and the bus has the press once.
func checkRetryAnswered(t *testing.T, b *bus.Bus, got invokeAnswered, word string, pressHold time.Duration) {
	t.Helper()
	if v := answerValue(t, got); v != word || got.took >= pressHold {
		t.Fatalf("the retry was answered %q after %v, want %q before its hold ends", v, got.took, word)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("the bus has %d messages, want the press once", n)
	}
}

// waitDuplicate waits until r was told a press is a duplicate.
func waitDuplicate(t *testing.T, r *replica) {
	t.Helper()
	select {
	case <-r.conn.dups:
	case <-time.After(15 * time.Second):
		t.Fatal("the retry was not told the press is a duplicate")
	}
}

// An invoke the Bot Framework retries (the same activity, on this
// replica or another) is told by the bus that its press is a duplicate;
// the retry is answered with the router's word when it comes, within
// its hold, whether the first delivery's handler still waits for it or
// is gone, and the press is published once. Answered at once with
// "Answer received." instead, the retry lost the router's word (a
// refusal, its word on the outcome): the press's interaction was the
// first delivery's alone.
func TestInvokeRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// elsewhere: the retry comes to another replica; gone: the first
		// delivery's request is given up before the retry; refuse: the
		// router's word is its refusal, through delivery to a replica
		// (the first's), not its answer.
		elsewhere, gone, refuse bool
	}{
		{name: "here while the first waits"},
		{name: "here after the first is gone", gone: true},
		{name: "elsewhere while the first waits", elsewhere: true, refuse: true},
		{name: "elsewhere after the first is gone", elsewhere: true, gone: true},
		{name: "elsewhere after the first is gone, refused", elsewhere: true, gone: true, refuse: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			invokeRetried(t, tc.elsewhere, tc.gone, tc.refuse)
		})
	}
}

func invokeRetried(t *testing.T, elsewhere, gone, refuse bool) {
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	// The longest there is, so that the router's word always comes
	// first, however busy the machine.
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	a := startReplica(t, f, cfg, b, "a", false)
	retry := a
	if elsewhere {
		retry = startReplica(t, f, cfg, b, "b", false)
	}
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	firstCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	first := postInvoke(firstCtx, f, a.url, act)
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" || !ia.GetComponent() {
		t.Fatalf("press %v", ev)
	}
	if gone {
		giveUp()
		if a := <-first; a.err == nil {
			t.Fatalf("the first delivery was answered %d %s, want it given up", a.code, a.body)
		}
	}
	second := postInvoke(context.Background(), f, retry.url, act)
	waitDuplicate(t, retry)

	word := "⚠️ Approval already resolved or expired."
	target := &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}
	if refuse {
		word = "⛔ Not authorized."
		if _, err := a.p.Send(context.Background(), &deliveryv1.SendRequested{Target: target, Text: word}); err != nil {
			t.Fatal(err)
		}
	} else if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: target, Text: word}); err != nil {
		t.Fatal(err)
	}
	got := <-second
	if v := answerValue(t, got); v != word || got.took >= pressHold {
		t.Fatalf("the retry was answered %q after %v, want %q before its hold ends", v, got.took, word)
	}
	if !gone {
		if got := <-first; answerValue(t, got) != word {
			t.Fatalf("the first delivery was answered %q, want %q", answerValue(t, got), word)
		}
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("the bus has %d messages, want the press once", n)
	}
}

// A press whose publish failed after the bus stored it (its
// acknowledgement lost: the invoke is answered 500 and the Bot
// Framework retries it) is decided by the router all the same, maybe
// before the retry comes: its replica keeps holding the press for the
// retry, which, told the press is a duplicate, is answered with the
// router's word, its answer or its refusal. With the hold ended by the
// failed publish, the word had no one to go to, and the retry was
// answered "Answer received." when its own hold ended.
func TestInvokeStoredByAFailedPublish(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		refuse bool
	}{
		{name: "answered"},
		{name: "refused", refuse: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			invokeStoredByAFailedPublish(t, tc.refuse)
		})
	}
}

func invokeStoredByAFailedPublish(t *testing.T, refuse bool) {
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	const pressHold = 2 * time.Second
	cfg.PressHold = pressHold
	a := startReplica(t, f, cfg, b, "a", true)
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	if got := <-postInvoke(context.Background(), f, a.url, act); got.err != nil || got.code != http.StatusInternalServerError {
		t.Fatalf("the failed publish's invoke was answered %d %q (%v), want 500", got.code, got.body, got.err)
	}
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" {
		t.Fatalf("press %v", ev)
	}
	// The router decides the stored press before the retry comes.
	word := "⚠️ Approval already resolved or expired."
	target := &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}
	if refuse {
		word = "⛔ Not authorized."
		if _, err := a.p.Send(context.Background(), &deliveryv1.SendRequested{Target: target, Text: word}); err != nil {
			t.Fatal(err)
		}
	} else if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: target, Text: word}); err != nil {
		t.Fatal(err)
	}
	got := <-postInvoke(context.Background(), f, a.url, act)
	checkRetryAnswered(t, b, got, word, pressHold)
}

// The router's word on a press whose invoke's request ended before it
// came (the Bot Framework gave up waiting, and retries) is kept for the
// retry: the replica holds the press on after the request ends, and the
// retry, told the press is a duplicate, is answered with that word at
// once. With the hold ended with the request, the word had no one to go
// to, and the retry was answered "Answer received." when its own hold
// ended.
func TestInvokeAnsweredAfterItsRequestEnded(t *testing.T) {
	t.Parallel()
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	const pressHold = 2 * time.Second
	cfg.PressHold = pressHold
	a := startReplica(t, f, cfg, b, "a", false)
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	firstCtx, giveUp := context.WithCancel(context.Background())
	first := postInvoke(firstCtx, f, a.url, act)
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" {
		t.Fatalf("press %v", ev)
	}
	giveUp()
	if got := <-first; got.err == nil {
		t.Fatalf("the first delivery was answered %d %s, want it given up", got.code, got.body)
	}
	const word = "⚠️ Approval already resolved or expired."
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{
		Target: &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}, Text: word}); err != nil {
		t.Fatal(err)
	}
	// The word is in before the retry comes (the router's answer is a
	// publish no one acknowledges): the replica has it, or its hold
	// ended and the word was lost.
	platformtest.WaitFor(t, "the router's word at the replica", func() bool {
		a.p.invokesMu.Lock()
		defer a.p.invokesMu.Unlock()
		inv := a.p.invokes[ia.GetId()]
		if inv == nil {
			return true // the hold ended: the word found no one
		}
		select {
		case <-inv.answered:
			return true
		default:
			return false
		}
	})
	got := <-postInvoke(context.Background(), f, a.url, act)
	checkRetryAnswered(t, b, got, word, pressHold)
}

// A retry on another replica, told the press is a duplicate, is
// answered with the router's word also when that word came before the
// retry, to the replica that holds the press on (its publish failed
// there, or its first request was given up): the retry asks the
// holders for the word they have. Without asking, the retry's own hold
// came too late for the word, and the retry was answered "Answer
// received." when that hold ended.
func TestInvokeRetriedElsewhereAfterTheWord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		failed bool
	}{
		{name: "the first request given up"},
		{name: "the first publish failed", failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			invokeRetriedElsewhereAfterTheWord(t, tc.failed)
		})
	}
}

func invokeRetriedElsewhereAfterTheWord(t *testing.T, failed bool) {
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	const pressHold = 2 * time.Second
	cfg.PressHold = pressHold
	a := startReplica(t, f, cfg, b, "a", failed)
	other := startReplica(t, f, cfg, b, "b", false)
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	firstCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	first := postInvoke(firstCtx, f, a.url, act)
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" {
		t.Fatalf("press %v", ev)
	}
	if failed {
		if got := <-first; got.err != nil || got.code != http.StatusInternalServerError {
			t.Fatalf("the failed publish's invoke was answered %d %q (%v), want 500", got.code, got.body, got.err)
		}
	} else {
		giveUp()
		if got := <-first; got.err == nil {
			t.Fatalf("the first delivery was answered %d %s, want it given up", got.code, got.body)
		}
	}
	const word = "⚠️ Approval already resolved or expired."
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{
		Target: &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}, Text: word}); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitFor(t, "the router's word at the first replica", func() bool {
		a.p.invokesMu.Lock()
		defer a.p.invokesMu.Unlock()
		inv := a.p.invokes[ia.GetId()]
		if inv == nil {
			t.Fatal("the first replica holds the press no more")
		}
		select {
		case <-inv.answered:
			return true
		default:
			return false
		}
	})
	got := <-postInvoke(context.Background(), f, other.url, act)
	checkRetryAnswered(t, b, got, word, pressHold)
}

// A press held on for its invoke's retry (keepForRetry) is let go when
// the replica stops: once Run has returned, no hold of the replica's is
// left on the bus (answering other replicas' questions, taking the
// press's refusal from delivery) and none of its goroutines waits for
// an answer. Held on instead, the press stayed held for retryHold after
// Run returned.
func TestInvokeHoldsEndWhenTheReplicaStops(t *testing.T) {
	t.Parallel()
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	a := startReplica(t, f, cfg, b, "a", true)
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	if got := <-postInvoke(context.Background(), f, a.url, act); got.err != nil || got.code != http.StatusInternalServerError {
		t.Fatalf("the failed publish's invoke was answered %d %q (%v), want 500", got.code, got.body, got.err)
	}
	id := platformtest.NextEvent(t, evs).GetInteraction().GetId()
	held := func() bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		held, err := platform.RetryPress(ctx, b, "teams", id)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}
	if id == "" || !held() {
		t.Fatalf("the press %q of a failed publish is not held for its retry", id)
	}

	a.stop()
	if held() {
		t.Fatal("the press is held after the replica's Run returned")
	}
	a.p.invokesMu.Lock()
	defer a.p.invokesMu.Unlock()
	if n := len(a.p.invokes); n != 0 {
		t.Fatalf("%d presses held after the replica's Run returned", n)
	}
}

// A retry of a press decided long ago, after every replica's hold of it
// ended (its replica stopped), is answered at once: with the router's
// word, which the router kept where every replica reads it; with
// "Answer received." when the bucket no longer has it (kept for
// bus.PressWordsAge) or cannot be read: the bus says the press is a
// duplicate and no replica holds it, so no word of the router's can
// come to the retry from a holder. Before, the retry's question for
// that word found its own hold on the press's subject, waited for a
// reply that could not come, and the retry waited out its hold; and
// before the word was kept, the retry never had it.
func TestInvokeRetriedAfterEveryHoldEnded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// gone: the first delivery's request is given up before the
		// router's word, which the replica's kept hold takes.
		gone bool
		// bucket: what the retry finds of the word: "kept", "expired"
		// (the bucket's MaxAge took it, and the press's mark), or
		// "unreadable" (the bucket is gone).
		bucket string
	}{
		{name: "the first answered with the word", bucket: "kept"},
		{name: "the first given up before the word", gone: true, bucket: "kept"},
		{name: "the word expired", bucket: "expired"},
		{name: "the word unreadable", gone: true, bucket: "unreadable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			invokeRetriedAfterEveryHoldEnded(t, tc.gone, tc.bucket)
		})
	}
}

func invokeRetriedAfterEveryHoldEnded(t *testing.T, gone bool, bucket string) {
	f := teamsfake.New(t)
	b := pressBus(t)
	cfg := testConfig(f)
	const pressHold = maxPressHold
	cfg.PressHold = pressHold
	a := startReplica(t, f, cfg, b, "a", false)
	other := startReplica(t, f, cfg, b, "b", false)
	evs := platformtest.InboundEvents(t, b)

	act := strangerPress(f)
	firstCtx, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	first := postInvoke(firstCtx, f, a.url, act)
	ev := platformtest.NextEvent(t, evs)
	ia := ev.GetInteraction()
	if ev.GetText() != "/approve" || ia.GetId() == "" {
		t.Fatalf("press %v", ev)
	}
	if gone {
		giveUp()
		if got := <-first; got.err == nil {
			t.Fatalf("the first delivery was answered %d %s, want it given up", got.code, got.body)
		}
	}
	const word = "⚠️ Approval already resolved or expired."
	decide(t, f, b, ia, word)
	if !gone {
		if got := <-first; answerValue(t, got) != word {
			t.Fatalf("the first delivery was answered %q, want %q", answerValue(t, got), word)
		}
	}
	// Long after: the first replica's hold, kept for a retry, ended
	// with it.
	a.stop()
	if heldOnBus(t, b, ia.GetId()) {
		t.Fatal("the press is held after its replica stopped")
	}
	want := invokeAnswer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := b.Topology().Stream(bus.BucketPressWords)
	switch bucket {
	case "kept":
		want = word
	case "expired":
		s, err := b.JetStream().Stream(ctx, "KV_"+name)
		if err == nil {
			err = s.Purge(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	case "unreadable":
		if err := b.JetStream().DeleteKeyValue(ctx, name); err != nil {
			t.Fatal(err)
		}
	}

	got := <-postInvoke(context.Background(), f, other.url, act)
	waitDuplicate(t, other)
	if v := answerValue(t, got); v != want || got.took >= pressHold {
		t.Fatalf("the retry was answered %q after %v, want %q before its hold ends", v, got.took, want)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("the bus has %d messages, want the press once", n)
	}
}

// The press of a choice the gateway does not know (an Action.Execute
// whose data names an action that is none of the approval's) is answered
// as Hermes answers it, after the presser's authorization, which the
// router decides: it is published as "/start" with its interaction
// marked (Interaction.unknown_choice) and held, and its invoke is
// answered with the router's word, its refusal of a stranger through
// delivery ("⛔ Not authorized.") or its answer to anyone else ("Unknown
// action."). Before, the gateway answered every such press "Unknown
// action." at once and published nothing, a stranger's too.
func TestInvokeOfAnUnknownChoice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// refuse: the router refuses the presser (a stranger), through
		// delivery; else it answers the press.
		refuse bool
		word   string
	}{
		{name: "a stranger's", refuse: true, word: "⛔ Not authorized."},
		{name: "an authorized sender's", word: "Unknown action."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := teamsfake.New(t)
			b := pressBus(t)
			cfg := testConfig(f)
			const pressHold = maxPressHold
			cfg.PressHold = pressHold
			a := startReplica(t, f, cfg, b, "a", false)
			evs := platformtest.InboundEvents(t, b)

			act := f.Press(dmConv, "personal", "aad-stranger", "Mallory", "card-1", "hermes_approve", map[string]any{"hermes_action": "approve_forever"})
			answered := postInvoke(context.Background(), f, a.url, act)
			ev := platformtest.NextEvent(t, evs)
			ia := ev.GetInteraction()
			if ev.GetText() != unknownChoice || ev.GetButtonPress().GetMessageId() != "card-1" || ia.GetId() == "" || !ia.GetComponent() || !ia.GetUnknownChoice() {
				t.Fatalf("press %v, want %q with its interaction marked unknown_choice", ev, unknownChoice)
			}
			target := &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}
			if tc.refuse {
				if _, err := a.p.Send(context.Background(), &deliveryv1.SendRequested{Target: target, Text: tc.word}); err != nil {
					t.Fatal(err)
				}
			} else if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{Target: target, Text: tc.word}); err != nil {
				t.Fatal(err)
			}
			if got := <-answered; answerValue(t, got) != tc.word {
				t.Fatalf("the invoke was answered %q, want %q", answerValue(t, got), tc.word)
			}
			if got := f.Activities(dmConv); len(got) != 0 {
				t.Fatalf("the conversation got %v, want nothing", got)
			}
		})
	}
}

// Two deliveries of one invoke that race (the Bot Framework's retry
// comes to another replica while the first is still on its way to the
// bus): the retry's replica finds no other hold of the press when it
// comes to hold it, the first's replica holds and publishes it, and the
// retry's publish is then told it is a duplicate. The bus's dedupe
// decides which of them is the press (there is one on the bus), and the
// retry, whose press another replica holds and the router has still to
// decide, still gets the router's word. Before, the retry went by its
// question asked before its hold (no other holder then), took the press
// for one decided long ago and was answered at once without the word.
func TestInvokeRetriedWhileTheFirstComesToHold(t *testing.T) {
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
	body, err := json.Marshal(act)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseActivity(body)
	if err != nil {
		t.Fatal(err)
	}
	id := interactionID(cfg.ClientID, normalize(parsed, cfg.ClientID, cfg.RequireMention).ev.GetEventId())

	// The retry's replica holds the press first (handle: its hold is in
	// place before it publishes), then the first delivery's replica
	// holds it and publishes it.
	ctx := context.Background()
	inv, created := retry.p.holdInvoke(retry.conn, id)
	defer retry.p.releaseInvoke(inv)
	if inv.hold == nil || !created {
		t.Fatalf("the retry's hold: %v, created %v", inv.hold, created)
	}
	first := postInvoke(ctx, f, a.url, act)
	ev := platformtest.NextEvent(t, evs)
	if ia := ev.GetInteraction(); ev.GetText() != "/approve" || ia.GetId() != id {
		t.Fatalf("press %v, want its interaction %q", ev, id)
	}

	// The retry's publish, after: a duplicate, decided as handle does.
	acc, err := retry.conn.Deliver(ctx, ev)
	if err != nil || !acc.Duplicate {
		t.Fatalf("the retry's publish: %+v, %v; want a duplicate", acc, err)
	}
	<-retry.conn.dups
	alone := retry.p.answerAlone(ctx, inv, created)
	if !alone {
		retry.p.askElsewhere(inv)
	}
	answer := make(chan string, 1)
	go func() { answer <- retry.p.awaitAnswer(ctx, inv, alone) }()

	const word = "⚠️ Approval already resolved or expired."
	if err := platform.PublishPressAnswer(b, &deliveryv1.SendRequested{
		Target: &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ev.GetInteraction()}, Text: word}); err != nil {
		t.Fatal(err)
	}
	if got := <-answer; got != word {
		t.Fatalf("the retry was answered %q (alone %v), want the router's word %q", got, alone, word)
	}
	if got := <-first; answerValue(t, got) != word {
		t.Fatalf("the first delivery was answered %q, want %q", answerValue(t, got), word)
	}
	if n := inboundCount(t, b); n != 1 {
		t.Fatalf("the bus has %d messages, want the press once", n)
	}
}

// An Action.Submit (a message activity whose value is the card's data)
// naming a choice the gateway does not know is published as the invoke
// of one is, "/start" from the presser naming the card, and never as a
// message: its text, when the client sends one, is the card's, not the
// presser's words, and would start a turn. It carries no interaction: a
// message takes no answer, so the router authorizes its sender as for
// any Submit press and answers it with nothing (Hermes reads no Submit's
// data, and says nothing to one). Before, it was an ordinary message:
// skipped as empty, or a turn with its text.
func TestSubmitOfAnUnknownChoice(t *testing.T) {
	t.Parallel()
	f := teamsfake.New(t)
	cfg := testConfig(f)
	cfg.RequireMention = true
	h := start(t, f, cfg)
	for _, tc := range []struct {
		name, conv, convType, text string
	}{
		{"in a personal chat", dmConv, "personal", ""},
		{"in a channel, with the card's data as text", channelConv, "channel", "approve_forever"},
	} {
		submit := f.Submit(tc.conv, tc.convType, userID, userName, "card-7", map[string]any{"hermes_action": "approve_forever"})
		if tc.text != "" {
			submit["text"] = tc.text
		}
		if code := h.post(t, submit); code != http.StatusOK {
			t.Fatalf("%s: answered %d", tc.name, code)
		}
		// A message after it: what the Submit published comes first.
		if code := h.post(t, f.Message(dmConv, "personal", userID, userName, "after")); code != http.StatusOK {
			t.Fatalf("%s: message answered %d", tc.name, code)
		}
		ev := platformtest.NextEvent(t, h.evs)
		if ev.GetText() != unknownChoice || ev.GetButtonPress().GetMessageId() != "card-7" || ev.GetInteraction() != nil ||
			ev.GetSource().GetUserId() != userID || ev.GetSource().GetChatId() != tc.conv {
			t.Fatalf("%s: published %q (press %v, interaction %v), want %q naming the card, without an interaction",
				tc.name, ev.GetText(), ev.GetButtonPress(), ev.GetInteraction(), unknownChoice)
		}
		if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "after" {
			t.Fatalf("%s: then %q, want the message after it", tc.name, ev.GetText())
		}
		if got := f.Activities(tc.conv); len(got) != 0 {
			t.Fatalf("%s: the conversation got %v, want nothing", tc.name, got)
		}
	}
}
