package delivery_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/reasoning"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

// finals counts the turn's messages marked as its end.
func (g *gateway) finals(turn string) int {
	n := 0
	for _, c := range g.sends() {
		if c.Req.GetTurnId() == turn && c.Req.GetFinal() {
			n++
		}
	}
	return n
}

// turnSends counts the turn's posted sends by text.
func (g *gateway) turnSends(turn string) map[string]int {
	out := map[string]int{}
	for _, c := range g.sends() {
		if c.Req.GetTurnId() == turn && c.Op == deliveryv1.SendOp_SEND_OP_SEND {
			out[c.Req.GetText()]++
		}
	}
	return out
}

const (
	segFirst  = "Let me check the clock for you."
	segAnswer = "It is noon, twelve o'clock sharp."
)

// A turn that says something, calls a tool, then answers shows, on a
// platform that streams by editing, the text before the tool in its own
// message, left as it was streamed without the cursor, and the answer
// streamed into a new message below it, which the final settles (Hermes's
// segment break at a tool boundary). The break before the later call's
// text is TextDelta.restart. A first call that streamed nothing leaves
// no message of its own. However the stream was paced (the answer's
// message started before the final or not), nothing is sent twice.
func TestStreamSegmentsAtAToolCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	restart := &repliesv1.TextDelta{Text: "\n\n", Restart: true}
	tests := []struct {
		name   string
		events []any
		want   []string
	}{
		{"text, tool, answer", []any{
			&repliesv1.TextDelta{Text: segFirst}, restart, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
		}, []string{segFirst, segAnswer}},
		{"text in pieces, the answer's first piece short", []any{
			&repliesv1.TextDelta{Text: "Let me check "}, &repliesv1.TextDelta{Text: "the clock for you."}, restart,
			&repliesv1.TextDelta{Text: "It is noon"}, &repliesv1.TextDelta{Text: ", twelve o'clock sharp."}, final(segAnswer),
		}, []string{segFirst, segAnswer}},
		{"a short first text, never streamed", []any{
			&repliesv1.TextDelta{Text: "Checking."}, restart, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
		}, []string{"Checking.", segAnswer}},
		{"the answer not streamed before the final", []any{
			&repliesv1.TextDelta{Text: segFirst}, restart, final("Noon."),
		}, []string{segFirst, "Noon."}},
		{"an empty first segment", []any{
			restart, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
		}, []string{segAnswer}},
		{"two tool calls", []any{
			&repliesv1.TextDelta{Text: segFirst}, restart, &repliesv1.TextDelta{Text: "Now the calendar, one moment."}, restart,
			&repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
		}, []string{segFirst, "Now the calendar, one moment.", segAnswer}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn, session := fmt.Sprint("t", i), fmt.Sprint("s", i)
			for j, body := range tt.events {
				e.publishStream(t, turn, int64(j+1), session, body)
				e.consumed(t, session)
				e.clock.Advance(time.Second)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, session)
			time.Sleep(100 * time.Millisecond)
			if got := e.gw.shown("stream", "chat-"+session); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("the chat shows %q, want %q", got, tt.want)
			}
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
			for text, n := range e.gw.turnSends(turn) {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
		})
	}
}

// Where images go natively, a closed segment's images follow its text,
// as the final's do, and its text shows without their syntax.
func TestStreamSegmentKeepsItsImages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	cfg.Platforms["stream"] = delivery.Platform{Streaming: delivery.StreamEdit, Images: delivery.ImagesNative}
	e.start(t, cfg, "a")
	for i, body := range []any{
		&repliesv1.TextDelta{Text: "Here is the chart: ![Sales](https://cdn.example.test/sales.png)"},
		&repliesv1.TextDelta{Text: "\n\n", Restart: true},
		&repliesv1.TextDelta{Text: segAnswer},
		final(segAnswer),
	} {
		e.publishStream(t, "t1", int64(i+1), "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	want := []string{"Here is the chart:", "", segAnswer} // the picture between
	if got := e.gw.shown("stream", "chat-s1"); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("the chat shows %q, want %q", got, want)
	}
	var urls []string
	for _, c := range e.gw.sends() {
		for _, a := range c.Req.GetAttachments() {
			urls = append(urls, a.GetUrl())
		}
	}
	if fmt.Sprint(urls) != "[https://cdn.example.test/sales.png]" {
		t.Errorf("pictures sent %q, want the chart once", urls)
	}
}

// A progress message ends where the answer's text starts a message below
// it: the next call's lines go in a message below that text, as Hermes's
// gateway opens a new progress bubble after a new content bubble, not
// into the message above it.
func TestToolProgressFollowsTheStreamSegments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	e.start(t, cfg, "a")
	const between = "Now the calendar, one moment."
	restart := &repliesv1.TextDelta{Text: "\n\n", Restart: true}
	for i, body := range []any{
		&repliesv1.TextDelta{Text: segFirst}, started("clock", "now"), restart, &repliesv1.TextDelta{Text: between},
		started("calendar", "today"), restart, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
	} {
		e.publishStream(t, "t1", int64(i+1), "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	want := []string{segFirst, "⚙️ clock: \"now\"", between, "⚙️ calendar: \"today\"", segAnswer}
	if got := e.gw.shown("stream", "chat-s1"); strings.Join(got, "\n---\n") != strings.Join(want, "\n---\n") {
		t.Errorf("chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(want, "\n---\n"))
	}
}

// The break before a later call's text handed over again (its ack was
// lost) closes no segment a second time and starts no message: the
// segment it closed keeps its text, the answer streams once.
func TestRedeliveredRestartPostsNoSegmentTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	stream := func(seq int64, body any) {
		e.publishStream(t, "t1", seq, "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
	stream(1, &repliesv1.TextDelta{Text: segFirst})
	stream(2, &repliesv1.TextDelta{Text: "\n\n", Restart: true})
	stream(3, &repliesv1.TextDelta{Text: segAnswer[:12]})
	before := len(e.gw.sends())
	again := event("t1", 2, "s1", &repliesv1.TextDelta{Text: "\n\n", Restart: true})
	again.Target.Platform = "stream"
	if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject("s1"), "reply:t1:2:again", again); err != nil {
		t.Fatal(err)
	}
	e.consumed(t, "s1")
	if got := e.gw.sends(); len(got) != before {
		t.Fatalf("the redelivered restart made %d more operations (%v %q)", len(got)-before, got[len(got)-1].Op, got[len(got)-1].Req.GetText())
	}
	stream(4, &repliesv1.TextDelta{Text: segAnswer[12:]})
	stream(5, final(segAnswer))
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	if got, want := e.gw.shown("stream", "chat-s1"), []string{segFirst, segAnswer}; fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Errorf("the chat shows %q, want %q", got, want)
	}
}

// A delivery replica that stops mid-turn leaves the segments it closed as
// they are: the replica that takes the turn over writes the final over
// the last segment's messages alone, posts no segment again (a restart
// handed over again included), and when the restart comes to it, starts
// the answer in a new message below the text before the tool, which it
// finishes with the text the break carries (all of it, buffered text
// too, without the cursor). An older worker's break carries none: that
// message keeps what it last showed, the cursor too.
func TestStreamSegmentsSurviveADeliveryRestart(t *testing.T) {
	t.Parallel()
	restart := &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segFirst + " More.")}
	oldRestart := &repliesv1.TextDelta{Text: "\n\n", Restart: true}
	brk := func(segment string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment)}
	}
	const segLater = "Now let me look at the calendar too."
	tests := []struct {
		name     string
		before   []any // streamed by replica a
		after    []any // by replica b, which took over
		again    []int // seqs handed to b again (a redelivery)
		want     []string
		deltaOps int // a's operations: wait for them before stopping it
	}{
		{"after the restart",
			[]any{&repliesv1.TextDelta{Text: segFirst}, restart, &repliesv1.TextDelta{Text: segAnswer[:26]}},
			[]any{&repliesv1.TextDelta{Text: segAnswer[26:]}, final(segAnswer)},
			[]int{2, 3},
			[]string{segFirst, segAnswer}, 3},
		{"after the restart, before the answer's message",
			[]any{&repliesv1.TextDelta{Text: segFirst}, restart},
			[]any{&repliesv1.TextDelta{Text: segAnswer}, final(segAnswer)},
			[]int{2},
			[]string{segFirst, segAnswer}, 2},
		{"before the restart",
			[]any{&repliesv1.TextDelta{Text: segFirst}, &repliesv1.TextDelta{Text: " More."}},
			[]any{restart, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer)},
			[]int{3},
			[]string{segFirst + " More.", segAnswer}, 1},
		{"before the restart, a short text never posted",
			[]any{&repliesv1.TextDelta{Text: "Checking."}},
			[]any{&repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String("Checking.")},
				&repliesv1.TextDelta{Text: segAnswer}, final(segAnswer)},
			[]int{2},
			[]string{"Checking.", segAnswer}, 0},
		{"a later segment after the takeover",
			[]any{&repliesv1.TextDelta{Text: segFirst}},
			[]any{brk(segFirst), &repliesv1.TextDelta{Text: segLater}, brk(segLater),
				&repliesv1.TextDelta{Text: segAnswer}, final(segAnswer)},
			[]int{4},
			[]string{segFirst, segLater, segAnswer}, 1},
		{"a later segment a never posted",
			[]any{&repliesv1.TextDelta{Text: segFirst}, brk(segFirst), &repliesv1.TextDelta{Text: "Now."}},
			[]any{brk("Now."), &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer)},
			[]int{4},
			[]string{segFirst, "Now.", segAnswer}, 2},
		{"before an older worker's restart",
			[]any{&repliesv1.TextDelta{Text: segFirst}},
			[]any{oldRestart, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer)},
			[]int{2},
			[]string{segFirst + " ▉", segAnswer}, 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := streamConfig()
			turn := fmt.Sprint("t", i)
			stream := e.streamer(t, turn)
			a := e.start(t, cfg, "a")
			for _, body := range tt.before {
				stream(body)
			}
			eventually(t, e.clock, 0, "a's stream", func() bool { return len(e.gw.sends()) >= tt.deltaOps })
			a.stop(t)
			e.start(t, cfg, "b")
			all := append(append([]any(nil), tt.before...), tt.after...)
			for _, body := range tt.after[:len(tt.after)-1] {
				stream(body)
			}
			// Events b has seen, or a had, handed over again.
			for _, s := range tt.again {
				ev := event(turn, int64(s), "s1", all[s-1])
				ev.Target.Platform = "stream"
				if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject("s1"), fmt.Sprintf("reply:%s:%d:again", turn, s), ev); err != nil {
					t.Fatal(err)
				}
			}
			e.consumed(t, "s1")
			stream(tt.after[len(tt.after)-1])
			e.consumed(t, "s1")
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			time.Sleep(100 * time.Millisecond)
			if got := e.gw.shown("stream", "chat-s1"); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("the chat shows %q, want %q", got, tt.want)
			}
			for text, n := range e.gw.turnSends(turn) {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
			for _, c := range e.gw.sends() {
				if strings.Contains(c.Req.GetText(), segAnswer) && c.Op == deliveryv1.SendOp_SEND_OP_EDIT && c.Req.GetMessageId() == "m1" {
					t.Errorf("the answer was written over the text before the tool")
				}
			}
		})
	}
}

// A short first text (under the stream's first send, so never posted
// while it streamed) comes before the progress of the tool it preceded,
// as Hermes shows it: the text is posted before the progress message,
// not when its segment closes, below it. The break then takes its
// cursor off, and nothing is posted twice.
func TestShortTextComesBeforeTheToolProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	e.start(t, cfg, "a")
	restart := &repliesv1.TextDelta{Text: "\n\n", Restart: true}
	for i, body := range []any{
		&repliesv1.TextDelta{Text: "Checking."}, started("clock", "now"), restart,
		&repliesv1.TextDelta{Text: "Short."}, started("calendar", "today"), restart,
		&repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
	} {
		e.publishStream(t, "t1", int64(i+1), "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	time.Sleep(100 * time.Millisecond)
	want := []string{"Checking.", "⚙️ clock: \"now\"", "Short.", "⚙️ calendar: \"today\"", segAnswer}
	if got := e.gw.shown("stream", "chat-s1"); strings.Join(got, "\n---\n") != strings.Join(want, "\n---\n") {
		t.Errorf("chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(want, "\n---\n"))
	}
	for text, n := range e.gw.turnSends("t1") {
		if n > 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
}

// The same holds for an approval prompt: the short text said before the
// call shows above the prompt that asks for it.
func TestShortTextComesBeforeTheApprovalPrompt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	for i, body := range []any{
		&repliesv1.TextDelta{Text: "Deleting it."}, rmApproval,
		&repliesv1.TextDelta{Text: "\n\n", Restart: true}, &repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
	} {
		e.publishStream(t, "t1", int64(i+1), "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	time.Sleep(100 * time.Millisecond)
	want := []string{"Deleting it.", prompt("/"), segAnswer}
	if got := e.gw.shown("stream", "chat-s1"); strings.Join(got, "\n---\n") != strings.Join(want, "\n---\n") {
		t.Errorf("chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(want, "\n---\n"))
	}
}

// A replica that takes a turn over shows what an uninterrupted one does:
// the break after a segment that showed only reasoning (a call that
// reasoned and called a tool, saying nothing) closes nothing, there as
// here: the next call's reasoning and answer go on in that message,
// which the final settles, and no message is left showing the earlier
// call's reasoning block with the cursor.
func TestTakeoverAfterAReasoningOnlySegment(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		looked = "I should look at the calendar for today."
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	events := []any{
		&repliesv1.TextDelta{Text: asked},
		brk(asked, ""),
		&repliesv1.ReasoningDelta{Text: looked}, // a call that only reasons, then calls a tool
		brk("", looked),
		&repliesv1.ReasoningDelta{Text: said, Restart: true},
		&repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer)),
	}
	want := []string{asked, reasoning.WithAnswer(said, segAnswer)}
	for _, stopAfter := range []int{0, 3} {
		t.Run(fmt.Sprint("replica a stops after ", stopAfter), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := streamConfig()
			a := e.start(t, cfg, "a")
			for i, body := range events {
				if i == stopAfter && stopAfter > 0 {
					// a posted the text, closed it and posted the
					// reasoning's message.
					eventually(t, e.clock, 0, "a's stream", func() bool { return len(e.gw.sends()) >= 3 })
					a.stop(t)
					e.start(t, cfg, "b")
				}
				e.publishStream(t, "t1", int64(i+1), "s1", body)
				e.consumed(t, "s1")
				e.clock.Advance(time.Second)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
			e.consumed(t, "s1")
			time.Sleep(100 * time.Millisecond)
			if got := e.gw.shown("stream", "chat-s1"); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
				t.Errorf("the chat shows %q, want %q", got, want)
			}
		})
	}
}

// A replica that stops right after it recorded the segment a break opens
// (its handler never gets further: killed, or stuck) does not leave the
// messages of the segment it closed with the cursor: the closing rows
// are stored with the mark, so the replica that takes the turn over
// finds them queued (had neither been stored, the break handed over
// again closes the segment there). Nothing is posted twice.
func TestSegmentCloseSurvivesAStopAfterItsMark(t *testing.T) {
	t.Parallel()
	const chart = "Here is the chart of this quarter's sales: ![Sales](https://cdn.example.test/sales.png)"
	tests := []struct {
		name   string
		images string
		first  string
		want   []string
	}{
		{"a lone closing edit", "", segFirst, []string{segFirst, segAnswer}},
		{"a closing edit and its picture", delivery.ImagesNative, chart, []string{"Here is the chart of this quarter's sales:", "", segAnswer}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { // one at a time: the hook is the package's
			turn := fmt.Sprint("t-close-stop-", i)
			e := newEnv(t)
			cfg := streamConfig()
			cfg.Platforms["stream"] = delivery.Platform{Streaming: delivery.StreamEdit, Images: tt.images}
			held, release := make(chan struct{}, 1), make(chan struct{})
			restore := delivery.SetSegmentHook(func(replica, tn string) {
				if replica != "a" || tn != turn {
					return
				}
				select {
				case held <- struct{}{}:
				default:
				}
				<-release
			})
			t.Cleanup(restore)
			a := e.start(t, cfg, "a")
			t.Cleanup(func() { close(release) }) // before a's stop
			e.publishStream(t, turn, 1, "s1", &repliesv1.TextDelta{Text: tt.first})
			e.consumed(t, "s1")
			eventually(t, e.clock, 0, "a's first message", func() bool { return len(e.gw.sends()) >= 1 })
			e.clock.Advance(time.Second)
			e.publishStream(t, turn, 2, "s1", &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(tt.first)})
			select {
			case <-held:
			case <-time.After(20 * time.Second):
				t.Fatal("the break never recorded its segment")
			}
			a.kill()
			e.start(t, cfg, "b")
			e.publishStream(t, turn, 3, "s1", &repliesv1.TextDelta{Text: segAnswer})
			e.publishStream(t, turn, 4, "s1", final(segAnswer))
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			e.waitShown(t, "chat-s1", tt.want)
			for text, n := range e.gw.turnSends(turn) {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
		})
	}
}

// A replica that posted a stream message but stopped before it recorded
// it (the platform took the send, its answer never came back, and the
// replica stopped before the final asked again) leaves no
// second copy of it: the send of a segment's message has the same key
// on every replica, so the replica that takes the turn over, posting
// that segment's text, gets the stopped one's message back from the
// gateway and writes the text over it instead of posting it again.
func TestTakeoverPostsNoUnrecordedMessageTwice(t *testing.T) {
	t.Parallel()
	const more = " More to say about the clock."
	brk := &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segFirst)}
	tests := []struct {
		name   string
		before []any // streamed by a; the last one's send is never answered
		after  []any // by b
		hang   string
		want   []string
	}{
		{"the first message",
			[]any{&repliesv1.TextDelta{Text: segFirst}},
			[]any{&repliesv1.TextDelta{Text: more}, final(segFirst + more)},
			segFirst, []string{segFirst + more}},
		{"the answer's message after a tool call",
			[]any{&repliesv1.TextDelta{Text: segFirst}, brk, &repliesv1.TextDelta{Text: segAnswer}},
			[]any{final(segAnswer)},
			segAnswer, []string{segFirst, segAnswer}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := fmt.Sprint("t", i)
			e := newEnv(t)
			cfg := streamConfig()
			var mu sync.Mutex
			hung := false
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
				mu.Lock()
				defer mu.Unlock()
				if !hung && req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND && strings.HasPrefix(req.GetText(), tt.hang) {
					hung = true
					return behaviour{hang: true} // posted, never answered
				}
				return behaviour{}
			})
			a := e.start(t, cfg, "a")
			seq := int64(0)
			for _, body := range tt.before {
				seq++
				e.publishStream(t, turn, seq, "s1", body)
				// The unanswered send's event too: a gave up waiting
				// (its send timeout) and took the next.
				e.consumed(t, "s1")
				e.clock.Advance(time.Second)
			}
			a.kill()
			e.start(t, cfg, "b")
			for _, body := range tt.after {
				seq++
				e.publishStream(t, turn, seq, "s1", body)
				e.clock.Advance(time.Second)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			e.waitShown(t, "chat-s1", tt.want)
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
		})
	}
}

// During a rolling upgrade, a final that a replica from before segment
// message keys queued under <turn>:<seq>:<i> comes back to a newer one
// (the older replica stopped before its ack, or the worker published
// the final again): the newer one finds those rows and queues nothing,
// instead of posting the answer a second time under the segment's
// message key, which no gateway dedupes against the former one.
func TestFinalQueuedByAnOlderReplicaIsNotPostedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	e.start(t, cfg, "b")
	ev := event("t1", 3, "s1", final(segAnswer))
	ev.Target.Platform = "stream"
	// The older replica's row: the answer's one chunk under its former key.
	old := &deliveryv1.SendRequested{IdempotencyKey: "t1:3:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: ev.GetTarget(),
		TurnId: "t1", SessionKey: "s1", InputMessageIds: ev.GetInputMessageIds(), Text: segAnswer,
		Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, ChunkCount: 1, Final: true}
	if _, err := outbox.New(e.db).Enqueue(context.Background(), e.clock.Now(), cfg.TTL, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, e.clock, 0, "the older replica's answer sent", func() bool { return e.gw.finals("t1") > 0 })
	e.publish(t, ev) // the final's event, back
	e.consumed(t, "s1")
	time.Sleep(time.Second) // a second copy would be sent straight away, or by the outbox's poll
	if n := e.gw.turnSends("t1")[segAnswer]; n != 1 {
		t.Errorf("the answer was posted %d times, want 1", n)
	}
}

// During a rolling upgrade, a replica from before segment message keys
// that took a turn over queued the rows closing a segment at a break
// (here the text of a segment no message showed, posted under
// <turn>:<seq>:g:0) and stopped before it recorded the segment, which
// it did after them. The newer replica the break comes back to finds
// those rows and opens the segment alone, instead of posting the text
// again under the segment's message key, which no gateway dedupes
// against the former one.
func TestClosingRowsQueuedByAnOlderReplicaAreNotPostedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	ctx := context.Background()
	store := outbox.New(e.db)
	// A replica that took the turn over opened segment 2 at its break
	// and streamed none of it.
	if err := store.OpenStreamSegment(ctx, "t1", 2); err != nil {
		t.Fatal(err)
	}
	const later = "Now let me look at the calendar too."
	brk := event("t1", 4, "s1", &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(later)})
	brk.Target.Platform = "stream"
	// The older replica's closing row for break 4, under its former key.
	old := &deliveryv1.SendRequested{IdempotencyKey: "t1:4:g:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: brk.GetTarget(),
		TurnId: "t1", SessionKey: "s1", InputMessageIds: brk.GetInputMessageIds(), Text: later,
		Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, ChunkCount: 1}
	if _, err := store.Enqueue(ctx, e.clock.Now(), cfg.TTL, old); err != nil {
		t.Fatal(err)
	}
	e.start(t, cfg, "b")
	eventually(t, e.clock, 0, "the older replica's closing row sent", func() bool { return e.gw.turnSends("t1")[later] > 0 })
	e.publish(t, brk) // the break, back
	e.consumed(t, "s1")
	e.publishStream(t, "t1", 5, "s1", &repliesv1.TextDelta{Text: segAnswer})
	e.publishStream(t, "t1", 6, "s1", final(segAnswer))
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	e.waitShown(t, "chat-s1", []string{later, segAnswer})
	for text, n := range e.gw.turnSends("t1") {
		if n > 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
}

// During a rolling upgrade, a replica from before segment message keys
// that streamed a turn's first text (short, under the stream's first
// send, so no message of the turn was recorded) queued at the break the
// send that posts it, under <turn>:<seq>:g:0, and stopped before it
// recorded the segment. The newer replica the break comes back to finds
// nothing of the turn recorded and would take the break's text as its
// own (takeSegment), posting it again under the segment's message key,
// which no gateway dedupes against the former one; it finds the row and
// opens the segment alone.
func TestFirstTextQueuedByAnOlderReplicaAtItsBreakIsNotPostedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	ctx := context.Background()
	brk := event("t1", 2, "s1", &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segFirst)})
	brk.Target.Platform = "stream"
	// The older replica's closing row for break 2, under its former key.
	old := &deliveryv1.SendRequested{IdempotencyKey: "t1:2:g:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: brk.GetTarget(),
		TurnId: "t1", SessionKey: "s1", InputMessageIds: brk.GetInputMessageIds(), Text: segFirst,
		Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, ChunkCount: 1}
	if _, err := outbox.New(e.db).Enqueue(ctx, e.clock.Now(), cfg.TTL, old); err != nil {
		t.Fatal(err)
	}
	e.start(t, cfg, "b")
	eventually(t, e.clock, 0, "the older replica's closing row sent", func() bool { return e.gw.turnSends("t1")[segFirst] > 0 })
	e.publish(t, brk) // the break, back
	e.consumed(t, "s1")
	e.publishStream(t, "t1", 3, "s1", &repliesv1.TextDelta{Text: segAnswer})
	e.publishStream(t, "t1", 4, "s1", final(segAnswer))
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
	e.consumed(t, "s1")
	e.waitShown(t, "chat-s1", []string{segFirst, segAnswer})
	for text, n := range e.gw.turnSends("t1") {
		if n > 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
	if n := e.gw.finals("t1"); n != 1 {
		t.Errorf("%d messages marked the turn's end, want 1", n)
	}
}

// With /reasoning show, a call that only reasoned before its tool call
// (no answer text, so no break) had its block posted at once, and the
// next call's reasoning and answer went on in that message, above the
// call's progress lines. As without /reasoning show (and as in Hermes,
// where a call that said nothing posts nothing before its tools), the
// answer lands below the progress lines: the next call's reasoning
// restart closes that message, which keeps its own call's block without
// the cursor, and the answer streams into a new one.
func TestShowReasoningAnswerComesBelowTheToolProgress(t *testing.T) {
	t.Parallel()
	const (
		looked = "I should look at the calendar for today."
		said   = "The calendar says the meeting is at noon."
	)
	for _, brk := range []bool{false, true} {
		t.Run(fmt.Sprint("a break before the next call: ", brk), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := streamConfig()
			cfg.ToolProgress = delivery.ToolProgressAll
			e.start(t, cfg, "a")
			events := []any{&repliesv1.ReasoningDelta{Text: looked}, started("calendar", "today")}
			if brk {
				events = append(events, blockBreak(looked)) // a newer worker's
			}
			events = append(events, &repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
				final(reasoning.WithAnswer(said, segAnswer)))
			for i, body := range events {
				e.publishStream(t, "t1", int64(i+1), "s1", body)
				e.consumed(t, "s1")
				e.clock.Advance(time.Second)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals("t1") > 0 })
			e.consumed(t, "s1")
			want := []string{reasoning.Block(looked), "⚙️ calendar: \"today\"", reasoning.WithAnswer(said, segAnswer)}
			e.waitShown(t, "chat-s1", want)
			for text, n := range e.gw.turnSends("t1") {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
		})
	}
}

// blockBreak is the break a worker publishes before the call after one
// that only reasoned when no earlier call said anything: no text, the
// block of the call it follows (an older worker publishes none).
func blockBreak(thought string) *repliesv1.TextDelta {
	return &repliesv1.TextDelta{Restart: true, SegmentText: proto.String(""), SegmentReasoning: thought}
}

// With /reasoning show, a replica that takes a turn over after a call
// that only reasoned and called tools (the previous one stopped after
// its block and the tools' progress lines, before the next call's
// reasoning restart) shows what an uninterrupted one does: the answer
// below the progress lines, the earlier call's block left in its
// message without the cursor. The replica that posts the progress
// message below such a block closes the block's segment there, and the
// segment's mark tells the replica that takes over where the answer
// goes. When the previous one stopped before the tools' step, the one
// that posts their progress lines opens a segment at the next call's
// reasoning restart: the answer goes below them too, and the block's
// message is finished with the reasoning a break carried (a worker
// publishes one, with no text, after a first call that only reasoned),
// or, with no break (an older worker's turn where no earlier call said
// anything), keeps what it last showed.
func TestTakeoverBeforeAReasoningRestart(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		looked = "I should look at the calendar for today."
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	progress := "⚙️ calendar: \"today\""
	tests := []struct {
		name   string
		before []any  // streamed by replica a, which then stops
		after  []any  // by replica b
		posted string // what a posted last: waited for before it stops
		want   []string
	}{
		{"the first call only reasoned",
			[]any{&repliesv1.ReasoningDelta{Text: looked}, started("calendar", "today")},
			[]any{&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
				final(reasoning.WithAnswer(said, segAnswer))},
			progress, []string{reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"a later call only reasoned",
			[]any{&repliesv1.TextDelta{Text: asked}, brk(asked, ""), &repliesv1.ReasoningDelta{Text: looked}, started("calendar", "today")},
			[]any{brk("", looked), &repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
				final(reasoning.WithAnswer(said, segAnswer))},
			progress, []string{asked, reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"before the tools' step, the first call only reasoned",
			[]any{&repliesv1.ReasoningDelta{Text: looked}},
			[]any{started("calendar", "today"), blockBreak(looked), &repliesv1.ReasoningDelta{Text: said, Restart: true},
				&repliesv1.TextDelta{Text: segAnswer}, final(reasoning.WithAnswer(said, segAnswer))},
			reasoning.Block(looked), []string{reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"before the tools' step, the first call only reasoned, an older worker",
			[]any{&repliesv1.ReasoningDelta{Text: looked}},
			[]any{started("calendar", "today"), &repliesv1.ReasoningDelta{Text: said, Restart: true},
				&repliesv1.TextDelta{Text: segAnswer}, final(reasoning.WithAnswer(said, segAnswer))},
			reasoning.Block(looked), []string{reasoning.Block(looked) + " ▉", progress, reasoning.WithAnswer(said, segAnswer)}},
		{"before the tools' step, a later call only reasoned",
			[]any{&repliesv1.TextDelta{Text: asked}, brk(asked, ""), &repliesv1.ReasoningDelta{Text: looked}},
			[]any{started("calendar", "today"), brk("", looked), &repliesv1.ReasoningDelta{Text: said, Restart: true},
				&repliesv1.TextDelta{Text: segAnswer}, final(reasoning.WithAnswer(said, segAnswer))},
			reasoning.Block(looked), []string{asked, reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := fmt.Sprint("t", i)
			e := newEnv(t)
			cfg := streamConfig()
			cfg.ToolProgress = delivery.ToolProgressAll
			stream := e.streamer(t, turn)
			a := e.start(t, cfg, "a")
			for _, body := range tt.before {
				stream(body)
			}
			eventually(t, e.clock, 0, "a's last message", func() bool {
				for text := range e.gw.turnSends(turn) {
					if strings.HasPrefix(text, tt.posted) {
						return true
					}
				}
				return false
			})
			a.stop(t)
			e.start(t, cfg, "b")
			for _, body := range tt.after {
				stream(body)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			e.waitShown(t, "chat-s1", tt.want)
			for text, n := range e.gw.turnSends(turn) {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
		})
	}
}

// waitShown waits up to 5 s for the stream chat to show want, message by
// message (the last edits may land after the final's), and fails the
// test with what it shows otherwise.
func (e *env) waitShown(t *testing.T, chat string, want []string) {
	t.Helper()
	var got []string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got = e.gw.shown("stream", chat); slices.Equal(got, want) {
			return
		}
	}
	t.Errorf("the chat shows:\n%s\nwant:\n%s", strings.Join(got, "\n---\n"), strings.Join(want, "\n---\n"))
}

// With /reasoning show, a call that only reasoned and then asked for
// approval of a dangerous tool leaves its block above the prompt, and
// the answer after the approval goes below the prompt, as it does below
// progress lines: Hermes finishes the stream before an approval prompt
// (its native-stream boundary close), so what the agent says after the
// approval opens a message below the prompt instead of going on in the
// message above it. With progress lines off the prompt is the only
// message below the block; a replica that took the turn over before the
// prompt puts the answer below it too.
func TestShowReasoningAnswerComesBelowTheApprovalPrompt(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		looked = "I should delete the temporary file first."
		said   = "The file is gone, and the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	ran := &repliesv1.ToolProgress{ToolCallId: "c-rm", ToolName: "rm", Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED, Preview: "/tmp/x"}
	done := &repliesv1.ToolProgress{ToolCallId: "c-rm", ToolName: "rm", Phase: repliesv1.ToolPhase_TOOL_PHASE_FINISHED}
	answer := []any{&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer))}
	tests := []struct {
		name     string
		progress string
		before   []any // streamed by replica a
		after    []any // by replica b, which took over (none: a streams all)
		posted   string
		want     []string
	}{
		{"progress off", delivery.ToolProgressOff,
			[]any{&repliesv1.ReasoningDelta{Text: looked}, rmApproval, ran, done}, nil, "",
			[]string{reasoning.Block(looked), prompt("/"), reasoning.WithAnswer(said, segAnswer)}},
		{"progress off, a later call", delivery.ToolProgressOff,
			[]any{&repliesv1.TextDelta{Text: asked}, brk(asked, ""), &repliesv1.ReasoningDelta{Text: looked}, rmApproval, ran, done,
				brk("", looked)}, nil, "",
			[]string{asked, reasoning.Block(looked), prompt("/"), reasoning.WithAnswer(said, segAnswer)}},
		{"progress lines after the approval", delivery.ToolProgressAll,
			[]any{&repliesv1.ReasoningDelta{Text: looked}, rmApproval, ran, done}, nil, "",
			[]string{reasoning.Block(looked), prompt("/"), "⚙️ rm: \"/tmp/x\"", reasoning.WithAnswer(said, segAnswer)}},
		{"a takeover before the prompt", delivery.ToolProgressOff,
			[]any{&repliesv1.TextDelta{Text: asked}, brk(asked, ""), &repliesv1.ReasoningDelta{Text: looked}},
			[]any{rmApproval, ran, done, brk("", looked)}, reasoning.Block(looked),
			[]string{asked, reasoning.Block(looked), prompt("/"), reasoning.WithAnswer(said, segAnswer)}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := fmt.Sprint("t", i)
			e := newEnv(t)
			cfg := streamConfig()
			cfg.ToolProgress = tt.progress
			stream := e.streamer(t, turn)
			a := e.start(t, cfg, "a")
			for _, body := range tt.before {
				stream(body)
			}
			if tt.after != nil {
				eventually(t, e.clock, 0, "a's last message", func() bool {
					for text := range e.gw.turnSends(turn) {
						if strings.HasPrefix(text, tt.posted) {
							return true
						}
					}
					return false
				})
				a.stop(t)
				e.start(t, cfg, "b")
			}
			for _, body := range append(append([]any(nil), tt.after...), answer...) {
				stream(body)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			e.waitShown(t, "chat-s1", tt.want)
			for text, n := range e.gw.turnSends(turn) {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
		})
	}
}

// With /reasoning show, two replicas in a row that stop mid-turn around
// the tools' step and the empty break after it (the break of a call that
// only reasoned) leave the answer below the progress lines, as one
// replica does: the first stops before the tools' step, the second
// posts the progress message below the block and stops before or after
// the break, and the third, which knows neither the progress message
// nor the break's block, takes the rest. The block's message is finished
// with the reasoning the break carries, or, with no break (no earlier
// call said anything), keeps what it last showed.
func TestTwoTakeoversAroundAnEmptyBreak(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		looked = "I should look at the calendar for today."
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	progress := "⚙️ calendar: \"today\""
	answer := []any{&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer))}
	tests := []struct {
		name string
		a, b []any // streamed by replica a, then by b; c takes the rest
		c    []any
		want []string
	}{
		{"the second stops after the break",
			[]any{&repliesv1.TextDelta{Text: asked}, brk(asked, ""), &repliesv1.ReasoningDelta{Text: looked}},
			[]any{started("calendar", "today"), brk("", looked)}, nil,
			[]string{asked, reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"the second stops before the break",
			[]any{&repliesv1.TextDelta{Text: asked}, brk(asked, ""), &repliesv1.ReasoningDelta{Text: looked}},
			[]any{started("calendar", "today")}, []any{brk("", looked)},
			[]string{asked, reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"no break: the first call only reasoned",
			[]any{&repliesv1.ReasoningDelta{Text: looked}},
			[]any{started("calendar", "today")}, nil,
			[]string{reasoning.Block(looked) + " ▉", progress, reasoning.WithAnswer(said, segAnswer)}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := fmt.Sprint("t", i)
			e := newEnv(t)
			cfg := streamConfig()
			cfg.ToolProgress = delivery.ToolProgressAll
			stream := e.streamer(t, turn)
			shows := e.showing(turn)
			a := e.start(t, cfg, "a")
			for _, body := range tt.a {
				stream(body)
			}
			eventually(t, e.clock, 0, "a's block", shows(reasoning.Block(looked)))
			a.stop(t)
			b := e.start(t, cfg, "b")
			for _, body := range tt.b {
				stream(body)
			}
			eventually(t, e.clock, 0, "b's progress message", shows(progress))
			b.stop(t)
			e.start(t, cfg, "c")
			for _, body := range append(append([]any(nil), tt.c...), answer...) {
				stream(body)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			e.waitShown(t, "chat-s1", tt.want)
			for text, n := range e.gw.turnSends(turn) {
				if n > 1 {
					t.Errorf("%q posted %d times", text, n)
				}
			}
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
		})
	}
}

// With /reasoning show, a replica that saw a turn from its first event
// and then lost the turn's partition mid-turn, while another replica
// streamed a call that only reasoned, and got the partition back before
// the tools' step, marks the progress message it posts below that
// stream: what it knew from the start ended with the partition. A third
// replica that takes the rest puts the answer below the progress lines,
// not in the block's message above them.
func TestReplicaThatRegainsAPartitionMarksTheToolsBelowTheStream(t *testing.T) {
	t.Parallel()
	const (
		looked = "I should look at the calendar for today."
		said   = "The calendar says the meeting is at noon."
		turn   = "t1"
	)
	progress := "⚙️ calendar: \"today\""
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	stream := e.streamer(t, turn)
	shows := e.showing(turn)
	a := e.start(t, cfg, "a")
	eventually(t, e.clock, 0, "a owning every partition", owns(a, e.bus.Topology().PartitionCount()))
	stream(&repliesv1.Typing{Active: true}) // the turn's first event, on a
	b := e.moveToNewReplica(t, cfg, a, "b", "s1")
	stream(&repliesv1.ReasoningDelta{Text: looked})
	eventually(t, e.clock, 0, "b's block", shows(reasoning.Block(looked)))
	e.moveBack(t, b, a)
	stream(started("calendar", "today"))
	eventually(t, e.clock, 0, "a's progress message", shows(progress))
	a.stop(t)
	e.start(t, cfg, "c")
	for _, body := range []any{
		&repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(""), SegmentReasoning: looked},
		&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer)),
	} {
		stream(body)
	}
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
	e.consumed(t, "s1")
	e.waitShown(t, "chat-s1", []string{reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)})
	for text, n := range e.gw.turnSends(turn) {
		if n > 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
}

// With /reasoning show, a replica that takes a turn over at any step
// from the block of a call that only reasoned and called tools to the
// final (before the tools' step, before the empty break after it,
// before the next call's reasoning restart, before its text, before the
// final) leaves the chat as one replica does: the block, the progress
// lines below it, the answer below them. A takeover before the block
// (b from the call's first event) shows the block too: b posts the
// reasoning it got before the tools' progress lines, though it streams
// nothing of a turn it took over.
func TestTakeoverAtEveryStepAfterAReasoningBlock(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		looked = "I should look at the calendar for today."
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	progress := "⚙️ calendar: \"today\""
	call := []any{&repliesv1.ReasoningDelta{Text: looked}, started("calendar", "today"), brk("", looked),
		&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer))}
	turns := []struct {
		name   string
		before []any // streamed by a before the call
		want   []string
	}{
		{"the first call only reasoned", nil,
			[]string{reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"a later call only reasoned", []any{&repliesv1.TextDelta{Text: asked}, brk(asked, "")},
			[]string{asked, reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
	}
	for ti, tt := range turns {
		events := append(append([]any(nil), tt.before...), call...)
		for k := len(tt.before); k < len(events); k++ {
			t.Run(fmt.Sprintf("%s, b from event %d", tt.name, k+1), func(t *testing.T) {
				t.Parallel()
				turn := fmt.Sprintf("t%d-%d", ti, k)
				e := newEnv(t)
				cfg := streamConfig()
				cfg.ToolProgress = delivery.ToolProgressAll
				stream := e.streamer(t, turn)
				a := e.start(t, cfg, "a")
				for _, body := range events[:k] {
					stream(body)
				}
				if k > len(tt.before) {
					eventually(t, e.clock, 0, "a's block", func() bool {
						for text := range e.gw.turnSends(turn) {
							if strings.HasPrefix(text, reasoning.Block(looked)) {
								return true
							}
						}
						return false
					})
				}
				a.stop(t)
				e.start(t, cfg, "b")
				for _, body := range events[k:] {
					stream(body)
				}
				eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
				e.consumed(t, "s1")
				e.waitShown(t, "chat-s1", tt.want)
				for text, n := range e.gw.turnSends(turn) {
					if n > 1 {
						t.Errorf("%q posted %d times", text, n)
					}
				}
				if n := e.gw.finals(turn); n != 1 {
					t.Errorf("%d messages marked the turn's end, want 1", n)
				}
			})
		}
	}
}

// owns reports whether in owns n reply partitions.
func owns(in *instance, n int) func() bool { return func() bool { return in.svc.Partitions() == n } }

// moveToNewReplica moves the reply partition of session from a, which
// owns every partition and keeps running, to a replica it starts: the
// partition's lease is held elsewhere, so a's renewal fails and a lets
// go of it, and the new replica takes it once it is free.
func (e *env) moveToNewReplica(t *testing.T, cfg delivery.Config, a *instance, name, session string) *instance {
	t.Helper()
	top := e.bus.Topology()
	parts := top.PartitionCount()
	lease := redisx.NewLocker(e.rdb, e.rpref+"delivery:").Key(fmt.Sprintf("replies-partition:%d", top.Partition(session)))
	ctx := context.Background()
	if err := e.rdb.Set(ctx, lease, "another-holder", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, e.clock, 0, "a letting go of the partition", owns(a, parts-1))
	b := e.start(t, cfg, name)
	eventually(t, e.clock, 0, "a handing the new replica its share but the held partition", func() bool {
		return a.svc.Partitions() == parts/2 && b.svc.Partitions() == parts/2-1
	})
	if err := e.rdb.Del(ctx, lease).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, e.clock, 0, "the new replica taking the partition", owns(b, parts/2))
	return b
}

// moveBack stops b, and a, still running, owns every partition again.
func (e *env) moveBack(t *testing.T, b, a *instance) {
	t.Helper()
	b.stop(t)
	eventually(t, e.clock, 0, "a owning every partition again", owns(a, e.bus.Topology().PartitionCount()))
}

// A replica that streamed a turn's answer, lost the turn's partition
// while another replica took the break before a later call's text (it
// finished the first segment's message and opened a segment), and got
// the partition back, writes the final below that segment's start, as
// a replica that takes the turn over does: what it knew of the stream
// ended with the partition. It wrote the answer over the first
// segment's message, and the text before the tool was lost.
func TestReplicaThatRegainsAPartitionForgetsItsStream(t *testing.T) {
	t.Parallel()
	const turn = "t1"
	e := newEnv(t)
	cfg := streamConfig()
	stream := e.streamer(t, turn)
	a := e.start(t, cfg, "a")
	eventually(t, e.clock, 0, "a owning every partition", owns(a, e.bus.Topology().PartitionCount()))
	stream(&repliesv1.TextDelta{Text: segFirst})
	eventually(t, e.clock, 0, "a's message", func() bool { return len(e.gw.turnSends(turn)) > 0 })
	b := e.moveToNewReplica(t, cfg, a, "b", "s1")
	stream(&repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segFirst)})
	stream(&repliesv1.TextDelta{Text: segAnswer})
	e.moveBack(t, b, a)
	stream(final(segAnswer))
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
	e.consumed(t, "s1")
	e.waitShown(t, "chat-s1", []string{segFirst, segAnswer})
	for text, n := range e.gw.turnSends(turn) {
		if n > 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
}

// A replica that posted a turn's progress message, lost the turn's
// partition while another replica streamed the text after the call, and
// got the partition back, posts the next call's progress lines in a new
// message below that text, as a replica that takes the turn over does:
// the progress message it knew of ended with the partition. It added
// them to its message above the other replica's text.
func TestReplicaThatRegainsAPartitionForgetsItsProgressMessage(t *testing.T) {
	t.Parallel()
	const turn = "t1"
	calendar, clock := "⚙️ calendar: \"today\"", "⚙️ clock: \"now\""
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	stream := e.streamer(t, turn)
	brk := func(segment string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment)}
	}
	a := e.start(t, cfg, "a")
	eventually(t, e.clock, 0, "a owning every partition", owns(a, e.bus.Topology().PartitionCount()))
	stream(started("calendar", "today"))
	eventually(t, e.clock, 0, "a's progress message", func() bool { return e.gw.turnSends(turn)[calendar] > 0 })
	b := e.moveToNewReplica(t, cfg, a, "b", "s1")
	stream(brk(""))
	stream(&repliesv1.TextDelta{Text: segFirst})
	eventually(t, e.clock, 0, "b's message", func() bool { return len(e.gw.turnSends(turn)) > 1 })
	e.moveBack(t, b, a)
	stream(started("clock", "now"))
	stream(brk(segFirst))
	stream(&repliesv1.TextDelta{Text: segAnswer})
	stream(final(segAnswer))
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
	e.consumed(t, "s1")
	e.waitShown(t, "chat-s1", []string{calendar, segFirst, clock, segAnswer})
	for text, n := range e.gw.turnSends(turn) {
		if n > 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
}

// streamer publishes a turn's stream events to session s1 one after
// another (seq 1, 2, ...), each consumed before the clock moves a second.
func (e *env) streamer(t *testing.T, turn string) func(body any) {
	seq := int64(0)
	return func(body any) {
		seq++
		e.publishStream(t, turn, seq, "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
}

// showing reports, for a text's start, whether a message of the turn
// sent so far begins with it.
func (e *env) showing(turn string) func(prefix string) func() bool {
	return func(prefix string) func() bool {
		return func() bool {
			for text := range e.gw.turnSends(turn) {
				if strings.HasPrefix(text, prefix) {
					return true
				}
			}
			return false
		}
	}
}

// A replica that took a turn over before a model call that reasoned and
// said something, then called tools, posts the call's block once: its
// text (with the block) is posted by the break after the tools' step,
// which carries it, so a block posted alone at the tools' step (kept
// for a call that only reasoned) showed it twice.
func TestTakeoverBeforeACallThatReasonedAndSaidShowsItsBlockOnce(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		looked = "I should look at the calendar for today."
		told   = "Looking at the calendar now."
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	turn := "t-said"
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	stream := e.streamer(t, turn)
	a := e.start(t, cfg, "a")
	stream(&repliesv1.TextDelta{Text: asked})
	stream(brk(asked, ""))
	eventually(t, e.clock, 0, "a's first segment", func() bool {
		for text := range e.gw.turnSends(turn) {
			if strings.HasPrefix(text, asked) {
				return true
			}
		}
		return false
	})
	a.stop(t)
	e.start(t, cfg, "b")
	for _, body := range []any{&repliesv1.ReasoningDelta{Text: looked}, &repliesv1.TextDelta{Text: told},
		started("calendar", "today"), brk(told, looked),
		&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer))} {
		stream(body)
	}
	eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
	e.consumed(t, "s1")
	var got []string
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got = e.gw.shown("stream", "chat-s1"); len(got) > 0 && got[len(got)-1] == reasoning.WithAnswer(said, segAnswer) {
			break
		}
	}
	blocks := 0
	for _, text := range got {
		if strings.HasPrefix(text, reasoning.Block(looked)) {
			blocks++
		}
	}
	if blocks != 1 || !slices.Contains(got, reasoning.WithAnswer(looked, told)) {
		t.Errorf("the chat shows:\n%s\nwant the block of the call that said %q once, with that text", strings.Join(got, "\n---\n"), told)
	}
}

// With /reasoning show, a replica that takes a turn over in the middle
// of a model call's reasoning (the replica before it got the call's
// first deltas and posted nothing of them: its sends failed) shows the
// call's whole block above the tools' progress lines, not only the part
// it got: the break after the tools carries the whole reasoning
// (segment_reasoning), and the block posted at the tools' step is
// finished with it; a call that said something too has its block shown
// with its text, from the same break. Whether the turn said nothing
// before the call (the new replica streams the block itself) or
// something (it takes the turn as another replica's), the block is whole.
func TestTakeoverInTheMiddleOfAReasoningBlockShowsItWhole(t *testing.T) {
	t.Parallel()
	const (
		asked  = "Let me check the calendar for you."
		began  = "I should look"
		went   = " at the calendar for today, and then at the clock."
		looked = began + went
		told   = "Looking at the calendar now."
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	progress := "⚙️ calendar: \"today\""
	for i, tt := range []struct {
		name   string
		before []any
		told   string // what the call said after its reasoning
		want   []string
	}{
		{"the first call", nil, "", []string{reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"a later call", []any{&repliesv1.TextDelta{Text: asked}, brk(asked, "")}, "",
			[]string{asked, reasoning.Block(looked), progress, reasoning.WithAnswer(said, segAnswer)}},
		{"the first call, which said something", nil, told,
			[]string{reasoning.WithAnswer(looked, told), progress, reasoning.WithAnswer(said, segAnswer)}},
		// Another replica's turn: its text goes with the block the break
		// carries, below the progress lines (as in
		// TestTakeoverBeforeACallThatReasonedAndSaidShowsItsBlockOnce).
		{"a later call, which said something", []any{&repliesv1.TextDelta{Text: asked}, brk(asked, "")}, told,
			[]string{asked, progress, reasoning.WithAnswer(looked, told), reasoning.WithAnswer(said, segAnswer)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := fmt.Sprintf("t-mid-%d", i)
			e := newEnv(t)
			cfg := streamConfig()
			cfg.ToolProgress = delivery.ToolProgressAll
			var failing atomic.Bool
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if failing.Load() && req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "try again"}}
				}
				return behaviour{}
			})
			stream := e.streamer(t, turn)
			a := e.start(t, cfg, "a")
			for _, body := range tt.before {
				stream(body)
			}
			if len(tt.before) > 0 {
				eventually(t, e.clock, 0, "a's first segment", e.showing(turn)(asked))
			}
			failing.Store(true)
			stream(&repliesv1.ReasoningDelta{Text: began})
			a.stop(t)
			failing.Store(false)
			e.start(t, cfg, "b")
			call := []any{&repliesv1.ReasoningDelta{Text: went}}
			if tt.told != "" {
				call = append(call, &repliesv1.TextDelta{Text: tt.told})
			}
			for _, body := range append(call, started("calendar", "today"), brk(tt.told, looked),
				&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
				final(reasoning.WithAnswer(said, segAnswer))) {
				stream(body)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			e.waitShown(t, "chat-s1", tt.want)
			if n := e.gw.finals(turn); n != 1 {
				t.Errorf("%d messages marked the turn's end, want 1", n)
			}
		})
	}
}

// A takeover's block finished with the call's whole reasoning that
// needs more messages than the part it got stays in its messages above
// the tools' progress lines, cut at its end to fit: a chat cannot put a
// message between two it shows, and the whole block's extra message was
// posted below the progress lines, its end apart from its start.
func TestTakeoverWholeBlockLongerThanItsMessagesStaysAboveTheTools(t *testing.T) {
	t.Parallel()
	const asked = "Let me check the calendar for you."
	var (
		began  = strings.TrimSpace(strings.Repeat("first I should look at the calendar, ", 70))
		went   = " " + strings.TrimSpace(strings.Repeat("and then at the clock, ", 100))
		looked = began + went
		said   = "The calendar says the meeting is at noon."
	)
	if n := len(chunk.Split(reasoning.Block(went), "stream")); n != 1 {
		t.Fatalf("the part the takeover gets takes %d messages, want 1", n)
	}
	if n := len(chunk.Split(reasoning.Block(looked), "stream")); n < 2 {
		t.Fatalf("the whole block takes %d messages, want more than 1", n)
	}
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	progress := "⚙️ calendar: \"today\""
	for i, tt := range []struct {
		name   string
		before []any
		above  []string // what the chat shows above the block
	}{
		{"the first call", nil, nil},
		{"a later call", []any{&repliesv1.TextDelta{Text: asked}, brk(asked, "")}, []string{asked}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			turn := fmt.Sprintf("t-mid-long-%d", i)
			e := newEnv(t)
			cfg := streamConfig()
			cfg.ToolProgress = delivery.ToolProgressAll
			var failing atomic.Bool
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if failing.Load() && req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND {
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "try again"}}
				}
				return behaviour{}
			})
			stream := e.streamer(t, turn)
			a := e.start(t, cfg, "a")
			for _, body := range tt.before {
				stream(body)
			}
			if len(tt.before) > 0 {
				eventually(t, e.clock, 0, "a's first segment", e.showing(turn)(asked))
			}
			failing.Store(true)
			stream(&repliesv1.ReasoningDelta{Text: began})
			a.stop(t)
			failing.Store(false)
			e.start(t, cfg, "b")
			for _, body := range []any{&repliesv1.ReasoningDelta{Text: went}, started("calendar", "today"), brk("", looked),
				&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
				final(reasoning.WithAnswer(said, segAnswer))} {
				stream(body)
			}
			eventually(t, e.clock, 0, "the final", func() bool { return e.gw.finals(turn) > 0 })
			e.consumed(t, "s1")
			start := reasoning.Header + "\n```\n" + began[:200]
			var got []string
			ok := func() bool {
				got = e.gw.shown("stream", "chat-s1")
				n := len(tt.above)
				return len(got) == n+3 && slices.Equal(got[:n], tt.above) && strings.HasPrefix(got[n], start) &&
					strings.Contains(got[n], "(cut to fit)") && got[n+1] == progress && got[n+2] == reasoning.WithAnswer(said, segAnswer)
			}
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && !ok(); time.Sleep(50 * time.Millisecond) {
			}
			if !ok() {
				t.Errorf("the chat shows:\n%s\nwant %q, the whole block's start cut to fit one message, %q, then the answer",
					strings.Join(got, "\n---\n"), tt.above, progress)
			}
		})
	}
}

// A takeover's reasoning block whose message is still queued when the
// break after the tools comes (the chat rate-limited, a slow gateway)
// hands the break back a moment at most, then keeps the block as it
// showed: handed back until the message is sent, the break held every
// turn of its reply partition (strict order) and, after its attempts,
// was dead-lettered.
func TestATakeoverBlockStillQueuedDoesNotHoldItsPartition(t *testing.T) {
	t.Parallel()
	const (
		turn   = "t-mid-queued"
		asked  = "Let me check the calendar for you."
		began  = "I should look"
		went   = " at the calendar for today, and then at the clock."
		looked = began + went
		said   = "The calendar says the meeting is at noon."
	)
	brk := func(segment, thought string) *repliesv1.TextDelta {
		return &repliesv1.TextDelta{Text: "\n\n", Restart: true, SegmentText: proto.String(segment), SegmentReasoning: thought}
	}
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	var failing atomic.Bool
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
		switch {
		case req.GetOp() != deliveryv1.SendOp_SEND_OP_SEND:
		case failing.Load():
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "try again"}}
		case strings.Contains(req.GetText(), "then at the clock"):
			// The block's message: the chat is rate-limited for an hour.
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED,
				Error: "too many requests", RetryAfterMs: time.Hour.Milliseconds()}}
		}
		return behaviour{}
	})
	stream := e.streamer(t, turn)
	a := e.start(t, cfg, "a")
	stream(&repliesv1.TextDelta{Text: asked})
	stream(brk(asked, ""))
	eventually(t, e.clock, 0, "a's first segment", e.showing(turn)(asked))
	failing.Store(true)
	stream(&repliesv1.ReasoningDelta{Text: began})
	a.stop(t)
	failing.Store(false)
	e.start(t, cfg, "b")
	for _, body := range []any{&repliesv1.ReasoningDelta{Text: went}, started("calendar", "today"), brk("", looked),
		&repliesv1.ReasoningDelta{Text: said, Restart: true}, &repliesv1.TextDelta{Text: segAnswer},
		final(reasoning.WithAnswer(said, segAnswer))} {
		stream(body)
	}
	e.consumed(t, "s1")
}
