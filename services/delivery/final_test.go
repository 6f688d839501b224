package delivery_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

// refuseBlank is what every gateway does with a message that has no text
// and nothing attached.
func refuseBlank(req *deliveryv1.SendRequested, _ int) behaviour {
	if req.GetOp() == deliveryv1.SendOp_SEND_OP_SEND && strings.TrimSpace(req.GetText()) == "" && len(req.GetAttachments()) == 0 {
		return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "empty message"}}
	}
	return behaviour{}
}

func deadLetters(t *testing.T, e *env) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM delivery_outbox WHERE state IN ('failed', 'expired')`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A final answer with no text, or only whitespace (a model that said
// nothing), is answered as Hermes answers an empty response, "(No
// response generated)", as the turn's final message: the user sees that
// the turn ended, and the end reaches the gateway (the API request it
// completes, the processing reaction), where the blank text was refused
// and dead-lettered.
func TestBlankFinalSaysNoResponse(t *testing.T) {
	t.Parallel()
	for i, text := range []string{"", "  \n\t ", "\u00a0\n"} {
		t.Run(fmt.Sprintf("%q", text), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.gw.setBehaviour(refuseBlank)
			e.start(t, testConfig(), "a")
			turn := fmt.Sprint("t", i)
			e.publish(t, event(turn, 1, "s1", final(text)))
			eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
			e.consumed(t, "s1")
			sent := e.gw.sends()
			if len(sent) != 1 {
				t.Fatalf("sent %d messages, want 1", len(sent))
			}
			if r := sent[0].Req; r.GetText() != "(No response generated)" || !r.GetFinal() || r.GetErrorCode() != "" {
				t.Fatalf("sent %q final=%v error=%q, want Hermes's (No response generated) as the turn's final answer", r.GetText(), r.GetFinal(), r.GetErrorCode())
			}
			if n := deadLetters(t, e); n != 0 {
				t.Fatalf("%d dead letters", n)
			}
		})
	}
}

// A turn whose answer was its media (an external agent's picture) and
// whose final text is blank sends the picture alone, and its end.
func TestBlankFinalAfterMediaSendsNothingMore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(refuseBlank)
	e.start(t, testConfig(), "a")
	media := event("t1", 1, "s1", nil)
	media.Body = &repliesv1.ReplyEvent_Media{Media: &repliesv1.Media{Attachment: &eventsv1.Attachment{
		Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.test/chart.png"}}}}
	e.publish(t, media)
	e.publish(t, event("t1", 2, "s1", &repliesv1.Typing{Active: true}))
	e.publish(t, event("t1", 3, "s1", final(" ")))
	ended := func() bool {
		calls, _ := e.gw.snapshot()
		for _, c := range calls {
			if c.Op == deliveryv1.SendOp_SEND_OP_TYPING && c.Req.GetFinal() {
				return true
			}
		}
		return false
	}
	eventually(t, e.clock, 0, "the turn's end", ended)
	e.consumed(t, "s1")
	sent := e.gw.sends()
	if len(sent) != 1 || len(sent[0].Req.GetAttachments()) != 1 {
		t.Fatalf("sent %+v, want the picture alone", sent)
	}
	if n := deadLetters(t, e); n != 0 {
		t.Fatalf("%d dead letters", n)
	}
}

// An API request waits for its answer's final send. A turn whose answer
// was its media (which the API's answer has no place for) and whose
// final text is blank still ends it, with an empty final send, rather
// than leaving the request to its reply timeout (a 504 for an answered
// turn).
func TestAPIAnswerThatWasItsMediaEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	media := event("t1", 1, "s1", nil)
	media.Target.Platform = "api"
	media.Body = &repliesv1.ReplyEvent_Media{Media: &repliesv1.Media{Attachment: &eventsv1.Attachment{
		Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.test/chart.png"}}}}
	e.publish(t, media)
	end := event("t1", 2, "s1", final(" "))
	end.Target.Platform = "api"
	e.publish(t, end)
	eventually(t, e.clock, 0, "the answer's final send", func() bool {
		_, posted := e.gw.snapshot()
		return len(posted) > 0 && posted[len(posted)-1].Req.GetFinal()
	})
	e.consumed(t, "s1")
	_, posted := e.gw.snapshot()
	if len(posted) != 2 || len(posted[0].Req.GetAttachments()) != 1 || posted[1].Req.GetText() != "" || posted[1].Op != deliveryv1.SendOp_SEND_OP_SEND {
		t.Fatalf("sent %+v, want the picture, then an empty final send", posted)
	}
}

// A turn shows one final, whichever of its attempts' finals comes first,
// also on a replica that never saw the other: a last attempt's apology
// whose write failed goes out uncommitted at the seq counter's next,
// beside an earlier attempt's final committed at another seq (an older
// worker's, frozen past its lock), and a first attempt that streamed
// text and was taken over ends its stream with an interrupted error that
// shows nothing. Before, both finals were posted, and the empty error
// coming to another replica after the answer deleted the answer's
// message.
func TestTurnShowsOneFinal(t *testing.T) {
	t.Parallel()
	answer := final("the answer")
	streamed := &repliesv1.TextDelta{Text: "Let me look that up for you"} // long enough to show at once
	apology := &repliesv1.ReplyError{Code: "interrupted", Message: "The request was interrupted. Please send it again."}
	type published struct {
		seq  int64
		body any
	}
	for _, tc := range []struct {
		name     string
		platform string
		// first goes to replica a, then b takes over and gets second.
		first, second []published
		want          []string // texts posted, in order
	}{
		{"the answer first", "test", []published{{2, answer}}, []published{{3, apology}}, []string{"the answer"}},
		{"the apology first", "test", []published{{3, apology}}, []published{{2, answer}}, []string{"⚠️ " + apology.GetMessage()}},
		{"the answer first, over its stream", "stream",
			[]published{{1, streamed}, {2, answer}}, []published{{3, apology}}, []string{streamed.GetText() + " ▉", "the answer"}},
		{"the answer over its stream, then an end that shows nothing", "stream",
			[]published{{1, streamed}, {3, answer}}, []published{{2, &repliesv1.ReplyError{Code: "interrupted"}}}, []string{streamed.GetText() + " ▉", "the answer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := streamConfig()
			publish := func(ps []published) {
				for _, p := range ps {
					ev := event("t1", p.seq, "s1", p.body)
					ev.Target.Platform = tc.platform
					e.publish(t, ev)
				}
				e.consumed(t, "s1")
			}
			a := e.start(t, cfg, "a")
			publish(tc.first)
			eventually(t, e.clock, 0, "the first final", func() bool {
				sent := e.gw.sends()
				return len(sent) > 0 && sent[len(sent)-1].Req.GetText() == tc.want[len(tc.want)-1]
			})
			a.stop(t)
			e.start(t, cfg, "b")
			publish(tc.second)
			var got []string
			for _, c := range e.gw.sends() {
				switch c.Op {
				case deliveryv1.SendOp_SEND_OP_SEND, deliveryv1.SendOp_SEND_OP_EDIT:
					got = append(got, c.Req.GetText())
				default:
					got = append(got, c.Op.String())
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("the gateway took %q, want %q", got, tc.want)
			}
		})
	}
}

// A final dropped because its turn showed another still ends the turn's
// typing indicator: a later attempt's typing event that came after the
// answer (it started its loop before the earlier attempt, frozen past its
// lock, woke and published the answer) had the indicator start again,
// and the dropped apology that ended that attempt left it running until
// TypingMax (five minutes of "typing…" under the answer).
func TestADroppedFinalStopsTheTurnsTyping(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.TypingInterval = 50 * time.Millisecond
	cfg.TypingMax = time.Hour
	e.start(t, cfg, "a")
	e.publish(t, event("t1", 2, "s1", final("the answer")))
	eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
	e.publish(t, event("t1", 3, "s1", &repliesv1.Typing{Active: true}))
	eventually(t, e.clock, 0, "the later attempt's typing", func() bool { return e.typings() > 0 })
	e.publish(t, event("t1", 4, "s1", &repliesv1.ReplyError{Code: "interrupted", Message: "Please send it again."}))
	e.consumed(t, "s1")
	if got := e.gw.sends(); len(got) != 1 {
		t.Fatalf("the gateway took %d messages, want the answer alone", len(got))
	}
	// The end stops the indicator before the event is acknowledged: no
	// request starts after it.
	before := e.typings()
	time.Sleep(10 * cfg.TypingInterval)
	if after := e.typings(); after != before {
		t.Errorf("typing went on after the turn's dropped final: %d requests, then %d", before, after)
	}
}

// A final dropped because its turn showed another still ends the turn's
// tool progress as a shown final does: a later attempt's progress
// message, started after the answer, gets the lines it had not shown yet
// (its best-effort edits failed), and nothing else is sent: no second
// answer, the shown one left as it is. Before, the drop returned before
// the progress's last edit, and the message kept its last lines unshown.
func TestADroppedFinalEndsTheTurnsToolProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	cfg.ToolProgress = delivery.ToolProgressAll
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
		if strings.HasSuffix(req.GetIdempotencyKey(), ":tpe") {
			// The progress edits between lines: best effort, lost here.
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, Error: "rate limited"}}
		}
		return behaviour{}
	})
	e.start(t, cfg, "a")
	e.publishStream(t, "t1", 2, "s1", final("the answer"))
	eventually(t, e.clock, 0, "the answer", func() bool { return e.gw.postedTexts()["the answer"] == 1 })
	e.publishStream(t, "t1", 3, "s1", started("a", "one"))
	eventually(t, e.clock, 0, "the later attempt's progress message", func() bool { return rowState(t, e.db, "t1:3:tp:0") == "sent" })
	e.publishStream(t, "t1", 4, "s1", started("b", "two"))
	e.publishStream(t, "t1", 5, "s1", &repliesv1.ReplyError{Code: "interrupted", Message: "Please send it again."})
	e.consumed(t, "s1")
	want := []string{"the answer", "⚙️ a: \"one\"\n⚙️ b: \"two\""}
	eventually(t, e.clock, 0, "the progress message's last lines", func() bool {
		return strings.Join(e.gw.shown("stream", "chat-s1"), "\n---\n") == strings.Join(want, "\n---\n")
	})
	sends := 0
	for _, c := range e.gw.sends() {
		if c.Op == deliveryv1.SendOp_SEND_OP_SEND {
			sends++
		}
	}
	if sends != 2 {
		t.Errorf("the gateway took %d sends, want the answer and the progress message", sends)
	}
}

// The platform refuses for good the final edit of a streamed answer's
// message (the user deleted it: Telegram's "message to edit not found",
// Discord's Unknown Message; or it is too old to edit): the edit's text
// goes out as a new message, in the edit's place (before the answer's
// later pieces), as Hermes sends the whole response when its stream's
// final edit fails, where it was dead-lettered and the answer lost. The
// new message is posted once, even when its first send went unanswered
// and was tried again.
func TestARefusedFinalEditIsSentAsANewMessage(t *testing.T) {
	t.Parallel()
	counter := regexp.MustCompile(` \(\d+/\d+\)$`)
	cases := []struct {
		name    string
		refusal string
		final   string
		pieces  int
		// lost: the new message's first send is posted, but its answer
		// never comes back.
		lost bool
	}{
		{name: "telegram message deleted", refusal: "Bad Request: message to edit not found", final: "the whole answer", pieces: 1},
		{name: "discord unknown message, first answer lost", refusal: `404 Not Found, {"message": "Unknown Message", "code": 10008}`,
			final: "the whole answer", pieces: 1, lost: true},
		{name: "answer of two pieces", refusal: "Bad Request: message can't be edited",
			final: strings.Repeat("word ", 1000) + "\n\n" + strings.Repeat("more ", 400), pieces: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var mu sync.Mutex
			var refused []string
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
				switch {
				case req.GetOp() == deliveryv1.SendOp_SEND_OP_EDIT && req.GetMessageId() == "m1":
					mu.Lock()
					refused = append(refused, req.GetText())
					mu.Unlock()
					return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: tc.refusal}}
				case tc.lost && strings.HasSuffix(req.GetIdempotencyKey(), ":new") && try == 1:
					return behaviour{hang: true}
				}
				return behaviour{}
			})
			cfg := streamConfig()
			if tc.lost {
				cfg.SendTimeout, cfg.Lease = time.Second, 3*time.Second
			}
			e.start(t, cfg, "a")
			e.publishStream(t, "t1", 1, "s1", &repliesv1.TextDelta{Text: "the whole answer, streamed so far"})
			eventually(t, e.clock, 0, "the streamed message", func() bool { return len(e.gw.sends()) == 1 })
			e.publishStream(t, "t1", 2, "s1", final(tc.final))
			eventually(t, e.clock, 0, "the final edit's row settled", func() bool {
				st := rowState(t, e.db, "t1:2:0")
				return st == "sent" || st == "failed"
			})
			eventually(t, e.clock, 0, "the answer's end", func() bool { return e.gw.finals("t1") == 1 || deadLetters(t, e) > 0 })
			e.consumed(t, "s1")
			time.Sleep(300 * time.Millisecond) // nothing more comes

			mu.Lock()
			defer mu.Unlock()
			if len(refused) != 1 {
				t.Fatalf("the final edit was tried %d times, want once", len(refused))
			}
			sent := e.gw.sends()[1:]
			if len(sent) != tc.pieces {
				var keys []string
				for _, c := range sent {
					keys = append(keys, c.Op.String()+" "+c.Key)
				}
				t.Fatalf("%d messages after the streamed one, want %d: %q", len(sent), tc.pieces, keys)
			}
			first := sent[0]
			if first.Op != deliveryv1.SendOp_SEND_OP_SEND || first.Req.GetText() != refused[0] || first.Req.GetMessageId() != "" {
				t.Errorf("in the edit's place: %v of %q with %q, want a new message with the edit's text %q",
					first.Op, first.Req.GetMessageId(), first.Req.GetText(), refused[0])
			}
			var whole strings.Builder
			for i, s := range sent {
				if s.Op != deliveryv1.SendOp_SEND_OP_SEND || s.Req.GetFinal() != (i == len(sent)-1) {
					t.Errorf("message %d: %v final=%v", i, s.Op, s.Req.GetFinal())
				}
				// A piece of a split answer ends with its counter, " (i/N)".
				whole.WriteString(counter.ReplaceAllString(s.Req.GetText(), "") + " ")
			}
			if got := strings.Join(strings.Fields(whole.String()), " "); got != strings.Join(strings.Fields(tc.final), " ") {
				t.Errorf("the new messages show %q, want the answer", got)
			}
			if tc.lost {
				calls, _ := e.gw.snapshot()
				n := 0
				for _, c := range calls {
					if c.Key == first.Key {
						n++
					}
				}
				if n < 2 {
					t.Errorf("the new message was asked for %d times, want its unanswered send tried again", n)
				}
			}
			if n := deadLetters(t, e); n != 0 {
				t.Errorf("%d dead letters", n)
			}
			if st := rowState(t, e.db, "t1:2:0"); st != "sent" {
				t.Errorf("the final edit's row is %q, want sent (as its new message)", st)
			}
		})
	}
}

// The platform refuses for good the edit that closes a stream segment
// (the text before a tool call; the user deleted its message, or it is
// too old to edit): the segment's text goes out as a new message, in
// the edit's place (above the answer's message), as Hermes flushes a
// segment's text as a new message at a tool boundary when its edits
// failed, and as a refused final edit is sent, where it was
// dead-lettered and the user told the answer could not be delivered.
func TestARefusedSegmentCloseIsSentAsANewMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var refused []string
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetOp() == deliveryv1.SendOp_SEND_OP_EDIT && req.GetMessageId() == "m1" {
			mu.Lock()
			refused = append(refused, req.GetIdempotencyKey())
			mu.Unlock()
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT,
				Error: "Bad Request: message to edit not found"}}
		}
		return behaviour{}
	})
	e.start(t, streamConfig(), "a")
	for j, body := range []any{
		&repliesv1.TextDelta{Text: segFirst}, &repliesv1.TextDelta{Text: "\n\n", Restart: true},
		&repliesv1.TextDelta{Text: segAnswer}, final(segAnswer),
	} {
		e.publishStream(t, "t1", int64(j+1), "s1", body)
		e.consumed(t, "s1")
		e.clock.Advance(time.Second)
	}
	eventually(t, e.clock, 0, "the answer's end", func() bool { return e.gw.finals("t1") == 1 || deadLetters(t, e) > 0 })
	e.consumed(t, "s1")
	time.Sleep(300 * time.Millisecond) // nothing more comes

	mu.Lock()
	defer mu.Unlock()
	if len(refused) == 0 {
		t.Fatal("the segment's message was never edited: the test does not test the refusal")
	}
	var texts []string
	for _, c := range e.gw.sends() {
		if c.Op == deliveryv1.SendOp_SEND_OP_SEND {
			texts = append(texts, strings.TrimSuffix(c.Req.GetText(), " ▉"))
		}
	}
	if want := []string{segFirst, segFirst, segAnswer}; fmt.Sprintf("%q", texts) != fmt.Sprintf("%q", want) {
		t.Errorf("messages posted %q, want %q (the streamed segment, its text again in place of the refused close, the answer)", texts, want)
	}
	if n := deadLetters(t, e); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// The final edit of a message whose text goes on in follow-on messages
// (Google Chat, where the conversion makes it longer than the limit) is
// carried out on the message, but a follow-on is refused for good: the
// gateway answers that the edit was done in part (bus.EditPartDone).
// The message shows the answer up to there, so its whole text is not
// posted again as a new message (the answer twice in the chat): the
// edit is dead-lettered and the user told the rest could not be sent.
func TestAnEditRefusedInPartIsNotSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var refused []string
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetOp() == deliveryv1.SendOp_SEND_OP_EDIT && req.GetMessageId() == "m1" && req.GetIdempotencyKey() == "t1:2:0" {
			mu.Lock()
			refused = append(refused, req.GetText())
			mu.Unlock()
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT,
				Error: bus.EditPartDone + ": PERMANENT: the rest of the edit of m1: chat api HTTP 403: PERMISSION_DENIED"}}
		}
		return behaviour{}
	})
	e.start(t, streamConfig(), "a")
	e.publishStream(t, "t1", 1, "s1", &repliesv1.TextDelta{Text: "the whole answer, streamed so far"})
	eventually(t, e.clock, 0, "the streamed message", func() bool { return len(e.gw.sends()) == 1 })
	e.publishStream(t, "t1", 2, "s1", final("the whole answer"))
	eventually(t, e.clock, 0, "the user told", func() bool { return rowState(t, e.db, "t1:undelivered") == "sent" })
	e.consumed(t, "s1")
	time.Sleep(300 * time.Millisecond) // nothing more comes

	mu.Lock()
	defer mu.Unlock()
	if len(refused) != 1 {
		t.Fatalf("the final edit was tried %d times, want once", len(refused))
	}
	for _, c := range e.gw.sends()[1:] {
		if c.Op == deliveryv1.SendOp_SEND_OP_SEND && c.Key != "t1:undelivered" {
			t.Errorf("%s posted %q: the answer again", c.Key, c.Req.GetText())
		}
	}
	if st := rowState(t, e.db, "t1:2:0"); st != "failed" {
		t.Errorf("the final edit's row is %q, want failed", st)
	}
}

// A final rewrites an answer streamed over three messages, and the edit
// of the middle one is refused for good (the user deleted it): its text
// goes as a new message, below the third, so the later parts of the
// rewrite go as new messages too, after it, and the third message is
// deleted: the answer's parts show in order, where the chat showed the
// third part above the second.
func TestARefusedEditOfARewriteKeepsTheAnswersOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
		if req.GetMessageId() == "m2" && req.GetOp() != deliveryv1.SendOp_SEND_OP_TYPING {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT,
				Error: "Bad Request: message to edit not found"}}
		}
		return behaviour{}
	})
	e.start(t, streamConfig(), "a")
	e.publishStream(t, "t1", 1, "s1", &repliesv1.TextDelta{Text: strings.Repeat("word ", 1800)}) // three messages
	eventually(t, e.clock, time.Second, "the streamed messages", func() bool { return len(e.gw.sends()) == 3 })
	e.consumed(t, "s1")
	gone := e.gw.sends()[1].Req.GetText() // m2's, which the user deleted
	answer := strings.TrimSpace(strings.Repeat("Word ", 1800))
	e.publishStream(t, "t1", 2, "s1", final(answer))
	eventually(t, e.clock, 0, "the answer's end", func() bool { return e.gw.finals("t1") == 1 || deadLetters(t, e) > 0 })
	e.consumed(t, "s1")
	time.Sleep(300 * time.Millisecond) // nothing more comes

	var shown []string
	for _, text := range e.gw.shown("stream", "chat-s1") {
		if text != gone {
			shown = append(shown, text)
		}
	}
	want := chunk.Split(answer, "stream")
	if len(shown) != len(want) {
		t.Fatalf("the chat shows %d messages, want the answer's %d", len(shown), len(want))
	}
	for i := range want {
		if shown[i] != want[i] {
			t.Errorf("message %d shows …%q, want …%q", i, shown[i][max(len(shown[i])-8, 0):], want[i][len(want[i])-8:])
		}
	}
	if n := deadLetters(t, e); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// A turn's first attempt that streamed text and was taken over (its
// worker froze past its lock: the attempt that took over answers) ends
// its stream with an interrupted error that shows nothing, which comes
// before the answer of the attempt that took over; so does a turn run
// again in place after a dependency outage that then lost its lock. The
// answer still shows, over the streamed message, once: before, the end
// marked the turn's stream done, and the answer was taken for a
// redelivered final and sent nowhere, on the replica that streamed the
// text as on another.
func TestAnswerAfterAnEndThatShowsNothingIsShown(t *testing.T) {
	t.Parallel()
	streamed := &repliesv1.TextDelta{Text: "Let me look that up for you"} // long enough to show at once
	for _, tc := range []struct {
		name     string
		takeOver bool // another replica takes the end and the answer
	}{
		{"the replica that streamed", false},
		{"another replica", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := streamConfig()
			a := e.start(t, cfg, "a")
			e.publishStream(t, "t1", 1, "s1", streamed)
			eventually(t, e.clock, 0, "the streamed text", func() bool { return len(e.gw.sends()) > 0 })
			if tc.takeOver {
				e.consumed(t, "s1")
				a.stop(t)
				e.start(t, cfg, "b")
			}
			e.publishStream(t, "t1", 2, "s1", &repliesv1.ReplyError{Code: "interrupted"})
			e.publishStream(t, "t1", 3, "s1", final("the answer"))
			e.consumed(t, "s1")
			texts := func() []string {
				var got []string
				for _, c := range e.gw.sends() {
					if c.Op == deliveryv1.SendOp_SEND_OP_SEND || c.Op == deliveryv1.SendOp_SEND_OP_EDIT {
						got = append(got, c.Req.GetText())
					}
				}
				return got
			}
			eventually(t, e.clock, 0, "the answer", func() bool {
				got := texts()
				return len(got) > 0 && got[len(got)-1] == "the answer"
			})
			if got := texts(); strings.Count(strings.Join(got, "|"), "the answer") != 1 {
				t.Errorf("the gateway took %q, want the answer once", got)
			}
		})
	}
}
