package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/placeholder"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/reasoning"
	"github.com/switchboard-chat/switchboard/pkg/streamedit"
	"github.com/switchboard-chat/switchboard/pkg/toolline"
)

// turnState is what this replica remembers of a turn's reply while it is
// being streamed.
type turnState struct {
	stream *streamedit.Stream
	// raw is the streamed text as the agent wrote it: when the final's
	// images go natively, or the model's reasoning streams before it,
	// the stream shows it as the final will (streamedText, shown).
	raw strings.Builder
	// thought is the model's reasoning streamed so far (/reasoning
	// show), of the current model call alone (a restart empties it): the
	// stream shows its block before the text, as the final does the
	// last call's.
	thought strings.Builder
	// said: of a foreign turn, answer text streamed since the last
	// break (what the next break carries as its segment's text): the
	// block of the call is not posted alone at its tools' step
	// (closeBlock), since that break posts it with the text.
	said bool
	// reasoned: the stream showed a reasoning block, so it keeps
	// showing what the final will (shown) after a restart emptied it.
	reasoned bool
	// ids are the platform message ids of the current segment's
	// messages, by the stream's numbering.
	ids map[int]string
	// segment is the seq of the event that opened the current segment
	// (a later model call's first delta, after a tool call; 0 for the
	// first), offset the turn's message index of its first message. The
	// text of the segments before stays in their messages (Hermes's
	// segment break); the stream and the final are the current one's.
	segment int64
	offset  int
	// closing is the segment a break opened and the outbox rows that
	// leave the one before it showing its text, while they are not yet
	// stored: written together (outbox.Store.CloseStreamSegment) before
	// anything else of the turn, the break's event handed back until
	// they are.
	closing *segmentClose
	// final holds the final's outbox rows once planned: the stream plans
	// its final edits only once, so a retry after a failed enqueue must
	// queue these again (same keys) instead of asking it anew.
	final []*deliveryv1.SendRequested
	// unsure is a stream send or edit that got no answer (a timeout: the
	// gateway may carry it out after delivery gave up waiting). The final
	// asks for it again under the same key before it plans, so it writes
	// over that message instead of leaving it beside the answer, and no
	// late edit lands after the answer.
	unsure *unsureSend
	// foreign: another replica streamed the turn before this one owned
	// its partition; nothing more is streamed here, and the final writes
	// over the messages it recorded of the last segment.
	foreign bool
	// block is the reasoning a break of a foreign turn carried for a
	// segment that showed no answer text (segment_reasoning), for the
	// next call's reasoning restart to close that block's message with
	// (foreignBlock).
	block string
	// shownBlock is the block of a call that only reasoned, left alone
	// in its messages above the call's tools (closeBlock), which the
	// break after them may finish (wholeBlock).
	shownBlock *shownBlock
	// partition is the reply partition of the turn's events: this
	// replica forgets the stream when it lets go of it (lostPartition).
	partition int
	// seq is the seq of the last delta taken into the stream: a delta
	// the bus hands over again (its ack was lost or came after the ack
	// wait) has a seq no greater, and is not taken a second time.
	seq  int64
	done bool
	// quietEnd: the end that made the turn done showed nothing (an
	// interrupted error without text: a superseded attempt's, which
	// only took the cursor off its stream). A final that comes after
	// it, the answer of the attempt that took the turn over, is no
	// redelivered final: it writes over the stream's last segment.
	quietEnd bool
	touched  time.Time
}

// segmentClose is a break's record: the segment it opens (the break's
// seq) and the rows that close the segment before.
type segmentClose struct {
	segment int64
	rows    []*deliveryv1.SendRequested
}

// shownBlock is a reasoning block a replica left showing, alone, in the
// messages of a stream segment above a tools' step: the reasoning it
// shows, the segment, how many messages it took and their platform ids
// as known then (a message posted through the outbox is looked up by
// its send's key, segmentMessageKey).
type shownBlock struct {
	thought  string
	segment  int64
	messages int
	ids      map[int]string
}

// unsureSend is a stream send or edit that may or may not have been
// carried out.
type unsureSend struct {
	req   *deliveryv1.SendRequested
	act   streamedit.Action
	since time.Time
}

// settleFor is how long a final waits to learn whether an unanswered
// stream message was posted: longer than a gateway keeps a send in
// progress (its send timeout, 30 s by default, and a second), within the
// reply consumer's deliveries. After it the final goes ahead without it.
const settleFor = 45 * time.Second

type turns struct {
	mu sync.Mutex
	m  map[string]*turnState
}

func newTurns() *turns { return &turns{m: map[string]*turnState{}} }

func (t *turns) get(id string) *turnState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.m[id]
	if st != nil {
		st.touched = time.Now()
	}
	return st
}

func (t *turns) put(id string, st *turnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st.touched = time.Now()
	t.m[id] = st
}

// prune forgets turns last touched before streaming, and turns whose
// final was sent last touched before done: a sent final's marker only
// has to outlive the redelivery of that turn's events.
func (t *turns) prune(streaming, done time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, st := range t.m {
		if st.touched.Before(streaming) || st.done && st.touched.Before(done) {
			delete(t.m, id)
		}
	}
}

// lostPartition forgets the streams of reply partition p's turns, which
// this replica let go of: the replica that takes p over may take their
// breaks and open segments, and, should p come back here, their final
// goes by what is recorded, as on a replica that took them over. Turns
// whose final was sent stay known.
func (t *turns) lostPartition(p int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, st := range t.m {
		if st.partition == p && !st.done {
			delete(t.m, id)
		}
	}
}

// partitionKey carries the reply partition of the event being handled.
type partitionKey struct{}

// partitionOf is the reply partition of the event ctx handles.
func partitionOf(ctx context.Context) int {
	p, _ := ctx.Value(partitionKey{}).(int)
	return p
}

// len is how many turns are tracked.
func (t *turns) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// keyBase identifies an event in idempotency keys: "<turn_id>:<seq>", or
// the bus message id for events outside a turn (router notices).
func keyBase(ctx context.Context, ev *repliesv1.ReplyEvent) string {
	if ev.GetTurnId() != "" {
		return ev.GetTurnId() + ":" + strconv.FormatInt(ev.GetSeq(), 10)
	}
	if d, ok := bus.DeliveryFrom(ctx); ok && d.MsgID != "" {
		return d.MsgID
	}
	return fmt.Sprintf("event:%s:%d", ev.GetSessionKey(), ev.GetSeq())
}

// handle renders one reply event of reply partition p. Messages the user
// must get go to the outbox (an error nak's the event and it comes back);
// progress (typing, stream edits, stream deltas) is best effort and never
// fails the event.
func (s *Service) handle(ctx context.Context, p int, ev *repliesv1.ReplyEvent) error {
	if ev.GetTarget().GetPlatform() == "" {
		return bus.Permanent(errors.New("reply event without a target platform"))
	}
	ctx = context.WithValue(ctx, partitionKey{}, p)
	s.firstEvent(p, ev)
	switch b := ev.GetBody().(type) {
	case *repliesv1.ReplyEvent_Typing:
		if s.cfg.platform(ev.GetTarget().GetPlatform()).NoTyping {
			return nil
		}
		if b.Typing.GetActive() {
			s.typing.start(ctx, ev)
		} else {
			s.typing.done(ev.GetTurnId())
		}
		return nil
	case *repliesv1.ReplyEvent_TextDelta:
		return s.delta(ctx, ev, b.TextDelta.GetText(), "", b.TextDelta.GetRestart())
	case *repliesv1.ReplyEvent_ReasoningDelta:
		return s.delta(ctx, ev, "", b.ReasoningDelta.GetText(), b.ReasoningDelta.GetRestart())
	case *repliesv1.ReplyEvent_ToolProgress:
		return s.toolProgress(ctx, ev, b.ToolProgress)
	case *repliesv1.ReplyEvent_FinalText:
		if other, err := s.otherFinal(ctx, ev); other || err != nil {
			return err
		}
		s.typing.done(ev.GetTurnId())
		if err := s.endTools(ctx, ev); err != nil {
			return err
		}
		text, format := b.FinalText.GetText(), b.FinalText.GetFormat()
		// The images the answer references go after its text as images
		// (Hermes's extract_images and send_multiple_images).
		images, text := s.answerImages(ev, text)
		if strings.TrimSpace(text) == "" && len(images) > 0 {
			// The answer was its images: the cursor comes off what was
			// streamed, and the last image ends the turn.
			if _, err := s.final(ctx, ev, "", format); err != nil {
				return err
			}
			return s.enqueue(ctx, s.imageRequests(ctx, ev, images, true)...)
		}
		if strings.TrimSpace(text) == "" {
			if s.media.sent(ev.GetTurnId()) {
				// The answer was its media: no text to add, but the
				// cursor comes off what was streamed and the turn is over.
				queued, err := s.final(ctx, ev, "", format)
				switch {
				case err != nil || queued:
				case s.cfg.platform(ev.GetTarget().GetPlatform()).PerRequest:
					// The request (the API's) waits for its answer's final
					// send, which the media, with no place in that answer,
					// was not: an empty one ends it.
					end := s.request(ev, keyBase(ctx, ev)+":0", deliveryv1.SendOp_SEND_OP_SEND)
					end.Final = true
					return s.enqueue(ctx, end)
				default:
					s.ended(ctx, ev)
				}
				return err
			}
			// Every gateway refuses a blank message: sent as is, it was
			// dead-lettered, the user saw nothing and the turn's end
			// (the final chunk the API request waits for, the processing
			// reaction) never reached the chat.
			text, format = placeholder.NoResponse, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN
		}
		if _, err := s.final(ctx, ev, text, format); err != nil {
			return err
		}
		return s.enqueue(ctx, s.imageRequests(ctx, ev, images, false)...)
	case *repliesv1.ReplyEvent_Error:
		if other, err := s.otherFinal(ctx, ev); other || err != nil {
			return err
		}
		s.typing.done(ev.GetTurnId())
		if err := s.endTools(ctx, ev); err != nil {
			return err
		}
		text := b.Error.GetMessage()
		if text == "" && b.Error.GetCode() != "interrupted" {
			text = "Sorry, something went wrong and I could not answer."
		}
		// Take the cursor off whatever was streamed, then explain.
		queued, err := s.final(ctx, ev, "", deliveryv1.TextFormat_TEXT_FORMAT_PLAIN)
		if err != nil {
			return err
		}
		if text == "" {
			if !queued {
				s.ended(ctx, ev)
			}
			return nil
		}
		return s.enqueue(ctx, s.textRequests(ev, keyBase(ctx, ev)+":e", "⚠️ "+text, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, true)...)
	case *repliesv1.ReplyEvent_Notice:
		if id := b.Notice.GetReplacesMessageId(); id != "" && b.Notice.GetText() != "" {
			// The answer to a button's press (an approval prompt's, a
			// picker's): it replaces the message's text, and the edit
			// takes the buttons off, or shows the notice's (a picker's
			// next page).
			req := s.request(ev, keyBase(ctx, ev)+":r", deliveryv1.SendOp_SEND_OP_EDIT)
			req.Text, req.Format, req.MessageId, req.Final = b.Notice.GetText(), noticeFormat(b.Notice), id, answers(b.Notice)
			req.Picker = b.Notice.GetPicker()
			return s.enqueue(ctx, req)
		}
		if p := b.Notice.GetPicker(); p != nil && b.Notice.GetText() != "" {
			// A gateway that renders buttons puts them under the end.
			reqs := s.textRequests(ev, keyBase(ctx, ev), b.Notice.GetText(), noticeFormat(b.Notice), answers(b.Notice))
			reqs[len(reqs)-1].Picker = p
			return s.enqueue(ctx, reqs...)
		}
		return s.enqueueText(ctx, ev, keyBase(ctx, ev), b.Notice.GetText(), noticeFormat(b.Notice), answers(b.Notice))
	case *repliesv1.ReplyEvent_Media:
		req := s.request(ev, keyBase(ctx, ev)+":0", deliveryv1.SendOp_SEND_OP_SEND)
		req.Attachments = append(req.Attachments, b.Media.GetAttachment())
		if err := s.enqueue(ctx, req); err != nil {
			return err
		}
		s.media.add(ev.GetTurnId())
		return nil
	default:
		return bus.Permanent(fmt.Errorf("reply event %s:%d has no body", ev.GetTurnId(), ev.GetSeq()))
	}
}

// mediaTurns remembers the turns that sent media (an external agent's
// images), so that their blank final text is taken as "nothing to add"
// rather than answered with placeholder.NoResponse. Memory only: after a
// restart between a turn's media and its final, the final says
// placeholder.NoResponse.
type mediaTurns struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newMediaTurns() *mediaTurns { return &mediaTurns{m: map[string]time.Time{}} }

func (t *mediaTurns) add(turn string) {
	if turn == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[turn] = time.Now()
}

func (t *mediaTurns) sent(turn string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.m[turn]
	return ok
}

// prune forgets turns that sent media before cutoff.
func (t *mediaTurns) prune(cutoff time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, at := range t.m {
		if at.Before(cutoff) {
			delete(t.m, id)
		}
	}
}

// answers reports whether a notice is the whole answer to the message it
// replies to (a command's reply, a refusal), so its last chunk is final
// and the API gateway completes the waiting request with it. A busy
// acknowledgement, a reset notice or the home channel notice comes
// before a turn's answer.
func answers(n *repliesv1.Notice) bool {
	switch n.GetKind() {
	case "busy", "reset", "home":
		return false
	}
	return true
}

// request is a SendRequested for ev with its common fields.
func (s *Service) request(ev *repliesv1.ReplyEvent, key string, op deliveryv1.SendOp) *deliveryv1.SendRequested {
	r := &deliveryv1.SendRequested{
		IdempotencyKey:  key,
		Op:              op,
		Target:          ev.GetTarget(),
		TurnId:          ev.GetTurnId(),
		SessionKey:      ev.GetSessionKey(),
		InputMessageIds: ev.GetInputMessageIds(),
		// Gateways mark the others with processing reactions.
		NoReactionMessageIds: ev.GetNoReactionMessageIds(),
	}
	if isFinal(ev) && ev.GetTurnRequestedAt() != nil {
		r.HopTimes = &deliveryv1.HopTimes{TurnRequestedAt: ev.GetTurnRequestedAt(), ReplyCreatedAt: ev.GetCreatedAt()}
	}
	r.Usage = ev.GetFinalText().GetUsage()
	if e, ok := ev.GetBody().(*repliesv1.ReplyEvent_Error); ok {
		// Every message of a failed turn says so, the edit that takes the
		// cursor off its streamed text too: gateways mark the user's
		// message with the outcome.
		r.ErrorCode = e.Error.GetCode()
		if r.ErrorCode == "" {
			r.ErrorCode = "internal"
		}
	}
	return r
}

// ended tells the gateway, best effort, that the turn of ev ended without
// a message to send (an interrupted turn that had said nothing), so that
// it takes its processing reaction off the user's messages.
func (s *Service) ended(ctx context.Context, ev *repliesv1.ReplyEvent) {
	if ev.GetTurnId() == "" || s.cfg.platform(ev.GetTarget().GetPlatform()).NoTyping {
		return // no typing request marked them either
	}
	req := s.request(ev, keyBase(ctx, ev)+":ended", deliveryv1.SendOp_SEND_OP_TYPING)
	req.Final = true
	_, _ = s.progress(ctx, req)
}

// isFinal reports whether ev is the turn's final reply.
func isFinal(ev *repliesv1.ReplyEvent) bool {
	switch ev.GetBody().(type) {
	case *repliesv1.ReplyEvent_FinalText, *repliesv1.ReplyEvent_Error:
		return true
	}
	return false
}

// dispatched stamps the moment req leaves for the gateway on its hop
// times, when it has them.
func dispatched(req *deliveryv1.SendRequested, now time.Time) {
	if h := req.GetHopTimes(); h != nil {
		h.DispatchedAt = timestamppb.New(now)
	}
}

func (s *Service) enqueue(ctx context.Context, reqs ...*deliveryv1.SendRequested) error {
	if len(reqs) == 0 {
		return nil
	}
	if len(reqs) == 1 {
		if done, err := s.sendThrough(ctx, reqs[0]); done || err != nil {
			return err
		}
	}
	if _, err := s.store.Enqueue(ctx, s.now(), s.cfg.TTL, reqs...); err != nil {
		return fmt.Errorf("enqueue reply: %w", err)
	}
	s.kick()
	return nil
}

// enqueueText chunks text for the platform into outbox rows.
func (s *Service) enqueueText(ctx context.Context, ev *repliesv1.ReplyEvent, base, text string, format deliveryv1.TextFormat, final bool) error {
	if text == "" {
		return nil
	}
	return s.enqueue(ctx, s.textRequests(ev, base, text, format, final)...)
}

// textRequests splits text into the platform's chunks, one send each.
func (s *Service) textRequests(ev *repliesv1.ReplyEvent, base, text string, format deliveryv1.TextFormat, final bool) []*deliveryv1.SendRequested {
	parts := chunk.Split(text, ev.GetTarget().GetPlatform())
	reqs := make([]*deliveryv1.SendRequested, len(parts))
	for i, p := range parts {
		r := s.request(ev, fmt.Sprintf("%s:%d", base, i), deliveryv1.SendOp_SEND_OP_SEND)
		r.Text, r.Format = p, format
		r.ChunkIndex, r.ChunkCount = int32(i), int32(len(parts))
		r.Final = final && i == len(parts)-1
		reqs[i] = r
	}
	return reqs
}

// delta streams a piece of the answer (text) or of the model's reasoning
// before it (thought, with /reasoning show): by editing a message on
// platforms that can edit, as a stream delta on platforms that stream
// natively (text only: reasoning never goes into an API stream's
// content), not at all elsewhere (they get the final text). restart
// marks a later model call's first delta (a turn that called tools).
// Where the answer streams by editing, the break before a later call's
// text (a TextDelta restart, before its reasoning too) after answer text
// closes the segment, as Hermes's gateway does at a tool boundary: its
// messages keep the text streamed so far (without the cursor) and the
// call's reasoning and text stream into a new message; a reasoning
// restart drops the reasoning streamed before (the block shows the
// current call's, as the final shows the last call's). Streaming is best
// effort: the error is a break's record that could not be stored (the
// event comes back), nothing else.
func (s *Service) delta(ctx context.Context, ev *repliesv1.ReplyEvent, text, thought string, restart bool) error {
	platform := ev.GetTarget().GetPlatform()
	switch s.cfg.platform(platform).Streaming {
	case StreamNative:
		if text == "" {
			return nil
		}
		req := s.request(ev, keyBase(ctx, ev)+":d", deliveryv1.SendOp_SEND_OP_STREAM_DELTA)
		req.Text = text
		// The break before a later model call's text: the API's final
		// continues what streams after it.
		req.StreamRestart = ev.GetTextDelta().GetRestart()
		_, _ = s.progress(ctx, req)
	case StreamEdit:
		reasoningDelta := ev.GetReasoningDelta() != nil
		st := s.turns.get(ev.GetTurnId())
		if st == nil {
			brk := restart && !reasoningDelta
			var seg outbox.StreamSegment
			var queued bool
			var err error
			if brk {
				// A replica from before segment message keys and
				// before the break's record was one transaction
				// queued the rows that post the text before the break
				// under <turn>:<seq>:g:<n>, then the segment: one
				// that stopped in between leaves nothing of the turn
				// recorded, and the text taken here would be posted
				// a second time, under the segment's message key.
				// Asked in the same round trip (foreignBreak).
				seg, queued, err = s.store.LastStreamSegmentAndKey(ctx, ev.GetTurnId(), keyBase(ctx, ev)+":g:0")
			} else {
				seg, err = s.store.LastStreamSegment(ctx, ev.GetTurnId())
			}
			if err != nil {
				s.log.WarnContext(ctx, "read stream messages failed", "turn_id", ev.GetTurnId(), "err", err)
				return nil // best effort: the next delta looks again
			}
			st = &turnState{ids: map[int]string{}, foreign: seg.Recorded, stream: s.newStream(platform), partition: partitionOf(ctx)}
			switch {
			case !seg.Recorded && brk && queued:
				// Posted: the segment opens alone, and the text after
				// the break streams into new messages below it.
				st.segment, st.closing = ev.GetSeq(), &segmentClose{segment: ev.GetSeq()}
			case !seg.Recorded && brk:
				// A break, and no replica posted a message of the
				// turn: the text before it (under the first send)
				// was only on a replica that stopped. The break
				// carries it: it closes the segment here, as there.
				s.takeSegment(st, ev.GetTextDelta())
			}
			s.turns.put(ev.GetTurnId(), st)
		}
		if st.done {
			return nil // the final answer was already sent (it wins)
		}
		// A break whose record could not be stored (its event came
		// back, or, handed back too often, was dropped) is stored
		// before anything else of the turn.
		if err := s.closeSegment(ctx, ev, st); err != nil {
			return err
		}
		if st.foreign {
			// Another replica's stream: the final goes over it, and
			// the break before a later call's text closes its segment
			// here too (foreignBreak). The current call's reasoning is
			// kept, for a segment no message shows (closeBlock).
			if restart {
				st.thought.Reset()
				st.said = st.said && reasoningDelta
			}
			st.thought.WriteString(thought)
			st.said = st.said || strings.TrimSpace(text) != ""
			if restart && !reasoningDelta && ev.GetSeq() > 0 {
				if err := s.wholeBlock(ctx, ev, st); err != nil {
					return err
				}
				return s.foreignBreak(ctx, ev, st)
			}
			if restart && reasoningDelta && ev.GetSeq() > 0 {
				return s.foreignBlock(ctx, ev, st)
			}
			return nil
		}
		if ev.GetSeq() > 0 && ev.GetSeq() <= st.seq {
			// Redelivered: its text is in the stream already, and it
			// makes no update (a clock that moved since would make one
			// early, with the text twice).
			return nil
		}
		if restart && !reasoningDelta {
			if err := s.wholeBlock(ctx, ev, st); err != nil {
				return err
			}
		}
		if restart && (!reasoningDelta && strings.TrimSpace(st.raw.String()) != "" || reasoningDelta && s.reasoningAboveTools(ev, st)) {
			// The break before a later call's text (and its reasoning,
			// when the chat shows it) after answer text: the segment
			// closes. Not at a reasoning restart alone: that may be a
			// cut answer's continuation, whose text the final carries
			// joined; unless the segment showed only the reasoning of
			// a call that then called tools, whose progress lines are
			// below it (reasoningAboveTools).
			if err := s.split(ctx, ev, st); err != nil {
				return err
			}
		}
		st.seq = max(st.seq, ev.GetSeq())
		if (restart || st.segment > 0) && strings.TrimSpace(st.raw.String()) == "" {
			// The break before a later call's text: a segment starts
			// with its text, as the final (the last call's) does.
			text = strings.TrimLeft(text, " \t\r\n")
		}
		// While a stream update is unanswered the text is only buffered:
		// the final settles that update first.
		var acts []streamedit.Action
		st.raw.WriteString(text)
		if restart && reasoningDelta {
			st.thought.Reset()
		}
		st.thought.WriteString(thought)
		st.reasoned = st.reasoned || st.thought.Len() > 0
		if native := s.cfg.nativeImages(platform); native || st.reasoned {
			// The image syntax the final takes out (the images follow
			// it) does not show while the text streams, nor an image
			// being written at its end; the reasoning shows as the
			// block the final starts with: each update shows what the
			// final will.
			answer := st.raw.String()
			if native {
				answer = streamedText(answer)
			}
			acts = st.stream.Replace(shown(st.thought.String(), answer))
		} else {
			acts = st.stream.Append(text)
		}
		if st.unsure == nil {
			s.perform(ctx, ev, st, acts, false)
		}
		s.flushTools(ctx, ev.GetTurnId())
	}
	return nil
}

// segmentHook, when set (tests only), runs once a break's new segment
// is recorded, before the turn's stream goes on.
var segmentHook atomic.Pointer[func(replica, turn string)]

// closeBlock closes the turn's current segment at ev, a tool's step
// whose progress message or approval prompt starts below it (Hermes
// finishes its stream before an approval prompt, so what follows the
// approval is below the prompt), when that segment shows only
// a reasoning block (/reasoning show: a model call that reasoned and
// called tools without saying anything, so the worker sends no break
// before the next call, or one whose segment_text is empty): the block
// stays in its message without the cursor, and the next call's
// reasoning and answer stream into a new message below the progress
// lines, as the answer of a turn that does not show reasoning does (in
// Hermes a call that said nothing posts nothing before its tools'
// lines), instead of going on in the message above them. It closes here
// rather than at the next call's reasoning restart so that the segment's
// record (opened at ev, stored with the edit that takes the cursor off:
// closeSegment) tells a replica that takes the turn over before that
// restart where the answer goes: that replica knows neither the block's
// text nor that the progress lines are below it. The error is a record
// that could not be stored: the step comes back.
func (s *Service) closeBlock(ctx context.Context, ev *repliesv1.ReplyEvent) error {
	st := s.turns.get(ev.GetTurnId())
	if st != nil && st.done {
		return nil
	}
	if st != nil {
		// A break's record still unstored first: the mark below and
		// the split go by the last segment.
		if err := s.closeSegment(ctx, ev, st); err != nil {
			return err
		}
	}
	// Not when the segment has answer text (the call said something
	// too): the break after the tools' step carries that text and the
	// block, and posts both (foreignBreak).
	if st != nil && st.foreign && !st.said && strings.TrimSpace(st.thought.String()) != "" {
		return s.foreignReasoning(ctx, ev, st)
	}
	if st == nil || st.foreign {
		// Not this replica's stream: another replica's, which this
		// one cannot close (it knows neither the block nor its
		// text), or none.
		return s.markTools(ctx, ev)
	}
	if !st.reasoned || len(st.ids) == 0 || strings.TrimSpace(st.raw.String()) != "" {
		return nil
	}
	b := &shownBlock{thought: st.thought.String(), segment: st.segment, ids: maps.Clone(st.ids)}
	offset := st.offset
	err := s.split(ctx, ev, st)
	if st.segment == ev.GetSeq() {
		// Split (its rows stored or not): the block's messages are the
		// ones the segment before took.
		b.messages = st.offset - offset
		st.shownBlock = b
	}
	return err
}

// foreignReasoning takes ev, a tool's step whose progress message or
// approval prompt starts below the current segment of a turn another
// replica streamed, when this replica got the reasoning of the call
// that called the tool (it took the turn over after the segment opened,
// before the call's first delta). When no message shows that segment
// (no replica streamed any of it), the call's block is posted as its
// message, and the segment closes here, as closeBlock's split closes it
// on the replica that streams: the block above the progress lines, the
// answer below them. Otherwise the tools' message is marked below the
// segment's (markTools). The error is a segment that could not be read
// or stored: the step comes back.
func (s *Service) foreignReasoning(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	seg, err := s.store.LastStreamSegment(ctx, ev.GetTurnId())
	if err != nil {
		return fmt.Errorf("read the stream segment a reasoning block goes in: %w", err)
	}
	if len(seg.IDs) > 0 || seg.Segment >= ev.GetSeq() {
		return s.markTools(ctx, ev)
	}
	rows := s.rewrite(ev, keyBase(ctx, ev)+":g", seg.Segment, nil, reasoning.Block(st.thought.String()), deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
	for _, r := range rows {
		r.Final = false
	}
	st.shownBlock = &shownBlock{thought: st.thought.String(), segment: seg.Segment, messages: len(rows)}
	st.thought.Reset()
	st.closing = &segmentClose{segment: ev.GetSeq(), rows: rows}
	return s.closeSegment(ctx, ev, st)
}

// wholeBlock takes the break (ev) after the tools of a call that only
// reasoned, when this replica left that call's block showing alone above
// them (closeBlock, foreignReasoning): the break carries the call's
// whole reasoning (segment_reasoning), which the block lacks the start
// of when this replica took the turn over in the middle of the call
// (the replica before it got the first deltas and stopped before it
// showed them, and no replica can read them back). The block's messages
// are finished with the whole of it, by edits queued after the rows
// that posted them. A message whose send is still queued hands the
// break back to come again (the error), a few times (lastBlockTry);
// one that was never posted (a dead row), or not by then, keeps what
// it showed, as does the block of an older worker's break (no
// segment_reasoning).
func (s *Service) wholeBlock(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	b := st.shownBlock
	d := ev.GetTextDelta()
	if b == nil || d.SegmentText == nil || strings.TrimSpace(d.GetSegmentText()) != "" {
		return nil // a call that said something has its block closed with its text
	}
	whole := reasoning.Block(d.GetSegmentReasoning())
	if whole == "" || whole == reasoning.Block(b.thought) {
		st.shownBlock = nil
		return nil
	}
	ids := make([]string, b.messages)
	for i := range ids {
		if ids[i] = b.ids[i]; ids[i] != "" {
			continue
		}
		key := segmentMessageKey(ev.GetTurnId(), b.segment, i)
		row, err := s.store.GetByKey(ctx, key)
		switch {
		case err != nil && !errors.Is(err, outbox.ErrNotFound):
			return fmt.Errorf("look up the message of a reasoning block: %w", err)
		case err == nil && row.State == outbox.Sent && row.PlatformMessageID != "":
			ids[i] = row.PlatformMessageID
		case err == nil && (row.State == outbox.Queued || row.State == outbox.Sending) && !lastBlockTry(ctx):
			return fmt.Errorf("reasoning block message %s not sent yet", key)
		default:
			st.shownBlock = nil
			return nil // never posted: nothing to finish
		}
	}
	// The block's messages are above the tools' messages, and a chat
	// cannot put a message between two it shows: a whole block longer
	// than them is cut at its end to fit (fitBlock).
	whole = fitBlock(d.GetSegmentReasoning(), len(ids), ev.GetTarget().GetPlatform())
	rows := s.rewrite(ev, keyBase(ctx, ev)+":b", b.segment, ids, whole, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
	for _, r := range rows {
		r.Final = false
	}
	if err := s.enqueue(ctx, rows...); err != nil {
		return err
	}
	st.shownBlock = nil
	return nil
}

// blockCut ends a reasoning block cut to fit its messages (fitBlock).
const blockCut = "\n_... (cut to fit)_"

// fitBlock is the reasoning block of thought (reasoning.Block) in at
// most n messages of platform: whole when it fits, else with as much of
// the thought's start as fits and blockCut after it. The start, as
// reasoning.Block keeps a long thought's first lines: a takeover's
// block is finished because it lacked its start, and its messages,
// above the tools' messages, cannot grow (a message posted for the
// rest would show below them, out of place).
func fitBlock(thought string, n int, platform string) string {
	whole := reasoning.Block(thought)
	limit := chunk.Limits(platform)
	fits := func(text string) bool { return len(chunk.SplitLimit(text, limit)) <= n }
	if n < 1 || fits(whole) {
		return whole
	}
	// The cut is in the lines a block shows (reasoning.MaxLines), and
	// its note goes after them: given to reasoning.Block as one more
	// line, the note of a cut in those lines was taken for a line of
	// the thought, dropped and counted ("(1 more lines)").
	lines := strings.SplitN(strings.TrimSpace(thought), "\n", reasoning.MaxLines+1)
	runes := []rune(strings.Join(lines[:min(len(lines), reasoning.MaxLines)], "\n"))
	cut := func(start string) string {
		start = strings.TrimRightFunc(start, unicode.IsSpace)
		if start == "" {
			return reasoning.Block(blockCut)
		}
		return strings.TrimSuffix(reasoning.Block(start), "\n```") + blockCut + "\n```"
	}
	lo, hi := 0, len(runes) // the longest start that fits: lo fits, hi+1 does not
	for lo < hi {
		if mid := (lo + hi + 1) / 2; fits(cut(string(runes[:mid]))) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	start := string(runes[:lo])
	if lo < len(runes) && !unicode.IsSpace(runes[lo]) {
		// At a word's end rather than in a word, when there is one.
		if i := strings.LastIndexFunc(start, unicode.IsSpace); i > 0 {
			start = start[:i]
		}
	}
	return cut(start)
}

// wholeBlockTries bounds the deliveries of a break that wait for a
// reasoning block's message to be sent (wholeBlock): about a second
// of the reply consumer's backoff. The partition's turns wait behind
// the break (strict order), and a chat rate-limited for minutes would
// hold them that long, then have the break dead-lettered; the block
// only lacks its start.
const wholeBlockTries = 3

// lastBlockTry reports whether ctx's event may not be handed back again
// to wait for a reasoning block's message (wholeBlockTries).
func lastBlockTry(ctx context.Context) bool {
	d, ok := bus.DeliveryFrom(ctx)
	return ok && d.Spent() >= wholeBlockTries
}

// firstEvent remembers a turn whose first event (seq 1) reached this
// replica from reply partition p, on a platform that streams by editing
// (toolLines.fromStart), until the turn's answer or error forgets its
// tools (endTools), this replica lets go of p (lostPartition) or
// housekeeping forgets it. Events that end a turn mark nothing.
func (s *Service) firstEvent(p int, ev *repliesv1.ReplyEvent) {
	if ev.GetSeq() != 1 || ev.GetTurnId() == "" || s.cfg.platform(ev.GetTarget().GetPlatform()).Streaming != StreamEdit {
		return
	}
	switch ev.GetBody().(type) {
	case *repliesv1.ReplyEvent_Typing, *repliesv1.ReplyEvent_TextDelta, *repliesv1.ReplyEvent_ReasoningDelta,
		*repliesv1.ReplyEvent_ToolProgress:
		s.tools.seenFrom(ev.GetTurnId(), p)
	}
}

// markTools records, for a turn whose stream this replica did not
// stream (it took the turn over, or nothing of the turn reached it
// yet), that the message of ev's tool calls about to be posted (a
// progress message, an approval prompt) is below the messages of the
// stream's last recorded segment (outbox.Store.MarkStreamTools), before
// it is posted. A replica that takes the turn over from this one knows
// nothing of that message: the mark tells it, at the empty break after
// the call or the next call's reasoning restart, to put the answer below
// it (foreignBlock). One read per new message of the tools, and a write
// when the stream has messages, unless this replica saw the turn from
// its first event and holds no stream of it (toolLines.fromStart): then
// nothing streamed above, and the common turn pays no round trip; the
// error is a mark that could not be stored: the step comes back.
func (s *Service) markTools(ctx context.Context, ev *repliesv1.ReplyEvent) error {
	if ev.GetTurnId() == "" || s.cfg.platform(ev.GetTarget().GetPlatform()).Streaming != StreamEdit {
		return nil
	}
	if s.turns.get(ev.GetTurnId()) == nil {
		if s.tools.fromStart(ev.GetTurnId()) {
			// Nothing of the turn streamed before ev: no message
			// above, and no read (the common turn, which went to a
			// tool before saying anything).
			return nil
		}
	}
	seg, err := s.store.LastStreamSegment(ctx, ev.GetTurnId())
	if err != nil {
		return fmt.Errorf("read the stream segment a tools' message goes below: %w", err)
	}
	if len(seg.IDs) == 0 {
		return nil // no message above: the answer goes below anyway
	}
	return s.store.MarkStreamTools(ctx, ev.GetTurnId(), seg.Segment, len(seg.IDs))
}

// reasoningAboveTools reports whether the turn's current segment shows
// only a reasoning block in a message that the progress message of the
// tools of its call follows, as when closeBlock could not close it (a
// stream update was unanswered then). The next call's reasoning restart
// then closes the segment (see closeBlock).
func (s *Service) reasoningAboveTools(ev *repliesv1.ReplyEvent, st *turnState) bool {
	if !st.reasoned || len(st.ids) == 0 || strings.TrimSpace(st.raw.String()) != "" {
		return false
	}
	// An open progress message or an approval prompt was started after
	// the stream's last new message (which ends the one before and
	// clears the other: endToolMessage), so below it.
	return s.toolsBelow(ev.GetTurnId())
}

// toolsBelow reports whether this replica posted, since the turn's
// stream last started a message, a message of its tool calls (a
// progress message, an approval prompt) below the stream's messages.
func (s *Service) toolsBelow(turn string) bool {
	tl := s.tools.peek(turn)
	return tl != nil && (tl.key != "" || tl.prompted)
}

// newStream is a stream of platform's messages.
func (s *Service) newStream(platform string) *streamedit.Stream {
	return streamedit.New(streamedit.Config{Limit: chunk.Limits(platform), CanEdit: true, Now: s.now})
}

// split closes the turn's current segment at ev, a later model call's
// first delta: its messages are left showing all its text (what was
// buffered too) without the cursor, its images (native images) follow
// it, and the text after ev streams into new messages. The new segment
// (keyed by ev's seq: a replica that takes the turn over writes the
// final over it alone) and the closing rows are stored together
// (closeSegment): a replica that stops in between leaves both or
// neither, and the break, handed over again, closes the segment on the
// replica that takes it (foreignBreak). When they cannot be stored, the
// error hands the break back with the stream already split: the break
// (or the next event, the final) stores them first. When a stream
// update is unanswered and the gateway cannot say yet whether it was
// carried out, the segment stays open (the final writes over it, as
// without segments).
func (s *Service) split(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	if err := s.settle(ctx, ev, st); err != nil {
		chatLog(s.log, ev.GetTarget()).WarnContext(ctx, "stream update unconfirmed; the segment stays open", "turn_id", ev.GetTurnId(), "err", err)
		return nil
	}
	platform := ev.GetTarget().GetPlatform()
	answer := st.raw.String()
	var images []answerImage
	if s.cfg.nativeImages(platform) {
		images, answer = extractImages(answer)
	}
	text := answer
	thought := st.thought.String()
	if d := ev.GetTextDelta(); d.GetRestart() && d.SegmentText != nil {
		// A break carries the call's whole reasoning: this replica
		// may have got only its end (it took the turn over in the
		// middle of the call).
		thought = d.GetSegmentReasoning()
	}
	if st.reasoned || strings.TrimSpace(thought) != "" {
		text = shown(thought, answer)
	}
	acts := st.stream.Final(text)
	used := 0 // messages the segment took: the next starts after them
	for m := range st.ids {
		used = max(used, m+1)
	}
	for _, a := range acts {
		used = max(used, a.Message+1)
	}
	base := keyBase(ctx, ev)
	rows := append(s.streamActions(ev, base+":g", st, acts, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, false),
		s.imageRequests(ctx, ev, images, false)...)
	st.closing = &segmentClose{segment: ev.GetSeq(), rows: rows}
	st.stream, st.ids, st.segment, st.offset = s.newStream(platform), map[int]string{}, ev.GetSeq(), st.offset+used
	st.raw, st.thought = strings.Builder{}, strings.Builder{}
	st.seq = max(st.seq, ev.GetSeq()) // split: handed back, it is not split again
	return s.closeSegment(ctx, ev, st)
}

// foreignBreak takes the break before a later call's text (ev) for a
// turn another replica streamed: a segment starts there too (the same
// one, by its seq, if that replica took the break), so that the final
// leaves the messages before it as they are. When this replica is the
// first to take the break (the one that streamed the segment stopped
// before it), it finishes that segment's messages as that replica's
// split would have, under the same keys: the segment's text the break
// carries (TextDelta.segment_text: all of it, what was only buffered
// too), without the cursor, its images after it; a segment no message
// shows (a takeover's, which it streams none of) it posts. A break after a
// segment without answer text opens nothing, as split does not. An
// older worker's break carries no text: a segment opens at every break
// and the messages keep what they last showed. The segment and the
// closing rows are stored together (closeSegment); a break whose
// segment cannot be read or stored comes back.
func (s *Service) foreignBreak(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	d := ev.GetTextDelta()
	if d.SegmentText != nil && strings.TrimSpace(d.GetSegmentText()) == "" {
		// The segment showed no answer text (a call that only
		// reasoned, or said nothing): the replica that streamed it
		// closes nothing there (split), and the next call's text goes
		// on in its messages, which the final settles; a segment
		// opened here would leave them showing the earlier block.
		// Unless its tools' progress lines (or approval prompt) are
		// below it: the segment closes here, with this block, and the
		// answer goes below them (foreignBlock). Closed here, not at
		// the next call's reasoning restart, so that a replica that
		// takes the turn over in between, which knows neither the
		// block nor the break, finds the segment recorded.
		st.block = d.GetSegmentReasoning()
		return s.foreignBlock(ctx, ev, st)
	}
	var closing []*deliveryv1.SendRequested
	if d.SegmentText != nil {
		// Read before this break's segment is opened: the last one
		// recorded is the segment it closes, unless it is this one
		// (stored already, with its closing rows, by this replica or
		// the stopped one). A replica from before segment message keys
		// and before the break's record was one transaction queued
		// its closing rows first, under <turn>:<seq>:g:<n>, then the
		// segment: one that stopped in between leaves the rows
		// without the mark, and rows queued here again would post
		// the parts they send a second time, under the segment's
		// message keys, which no gateway dedupes against those. With
		// the break's first row stored, the segment opens alone.
		seg, queued, err := s.store.LastStreamSegmentAndKey(ctx, ev.GetTurnId(), keyBase(ctx, ev)+":g:0")
		if err != nil {
			return fmt.Errorf("read the stream segment a break closes: %w", err)
		}
		if seg.Segment < ev.GetSeq() && !queued {
			// A segment without messages (opened at a break by a
			// replica that took the turn over, which streams none of
			// it, or by one that stopped before its first send) is
			// posted here: no replica showed its text.
			closing = s.closedSegment(ctx, ev, seg, d)
		}
	}
	st.closing = &segmentClose{segment: ev.GetSeq(), rows: closing}
	return s.closeSegment(ctx, ev, st)
}

// foreignBlock takes the empty break after a model call that only
// reasoned and called tools, or the reasoning restart of the next call
// (ev), for a turn another replica streamed, when the message of the
// tools called since (a progress message, an approval prompt) is below
// the last recorded segment's messages: this replica posted it (the
// replica that streamed stopped before the tools' first step, so it did
// not close the segment there: closeBlock), or a replica before it did
// and marked it (markTools), and no break opened a segment since, so
// that segment's messages show no answer text, only the block of that
// call. A segment opens at ev, so that the answer goes in a new message
// below the tools' message, as on the replica that stopped; the block's
// message is finished with the reasoning the break carried for it
// (st.block), without the cursor, or, with no break before the call (no
// earlier call of the turn said anything), keeps what it last showed,
// the cursor too, as after an older worker's break. The segment and the
// closing rows are stored together (closeSegment); an event whose
// segment cannot be read or stored comes back.
func (s *Service) foreignBlock(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	seg, marked, err := s.store.LastStreamSegmentBelow(ctx, ev.GetTurnId())
	if err != nil {
		return fmt.Errorf("read the stream segment a reasoning restart closes: %w", err)
	}
	if !marked && !s.toolsBelow(ev.GetTurnId()) {
		// No progress or prompt below, by this replica or one before
		// it (markTools): the answer goes on in the block's message.
		return nil
	}
	if len(seg.IDs) == 0 || seg.Segment >= ev.GetSeq() {
		return nil // closed already, or nothing shows the block
	}
	thought := st.block
	st.block = ""
	var closing []*deliveryv1.SendRequested
	if strings.TrimSpace(thought) != "" {
		closing = s.rewrite(ev, keyBase(ctx, ev)+":g", seg.Segment, seg.IDs, reasoning.Block(thought), deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
		for _, r := range closing {
			r.Final = false
		}
	}
	st.closing = &segmentClose{segment: ev.GetSeq(), rows: closing}
	return s.closeSegment(ctx, ev, st)
}

// takeSegment starts the stream of a turn no replica posted a message of
// with the first segment's text and reasoning the break d carries (none
// from an older worker), so that the break posts them, as the replica
// that buffered them would have (split). A segment after the first
// would have been recorded: its break posted the text before it.
func (s *Service) takeSegment(st *turnState, d *repliesv1.TextDelta) {
	st.raw.WriteString(d.GetSegmentText())
	st.thought.WriteString(d.GetSegmentReasoning())
	st.reasoned = st.thought.Len() > 0
}

// closedSegment are the rows that leave the messages of seg, another
// replica's, showing the segment's text d carries (and its reasoning's
// block), as split shows it: edits of its messages, sends of the parts
// left over (all of them when it has none), deletes of the surplus, its
// images (where they go natively) after it; none the turn's end.
func (s *Service) closedSegment(ctx context.Context, ev *repliesv1.ReplyEvent, seg outbox.StreamSegment, d *repliesv1.TextDelta) []*deliveryv1.SendRequested {
	answer := d.GetSegmentText()
	if strings.TrimSpace(answer) == "" {
		return nil // no answer text: the break closes nothing (split)
	}
	if seg.Segment > 0 {
		answer = strings.TrimLeft(answer, " \t\r\n") // as a segment's first delta is (delta)
	}
	var images []answerImage
	if s.cfg.nativeImages(ev.GetTarget().GetPlatform()) {
		images, answer = extractImages(answer)
	}
	text := shown(d.GetSegmentReasoning(), answer)
	reqs := s.rewrite(ev, keyBase(ctx, ev)+":g", seg.Segment, seg.IDs, text, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN)
	for _, r := range reqs {
		r.Final = false
	}
	return append(reqs, s.imageRequests(ctx, ev, images, false)...)
}

// closeSegment stores a break's record, once: the segment it opens and
// the rows that close the one before, in one transaction
// (outbox.Store.CloseStreamSegment), so the closing edits are as durable
// as the mark a replica that takes the turn over goes by. Not stored,
// it waits for the break handed back, the next event or the final,
// each of which stores it before its own work.
func (s *Service) closeSegment(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	c := st.closing
	if c == nil {
		return nil
	}
	if len(c.rows) == 1 {
		// A lone closing edit goes at once, as a lone row does
		// (enqueue), so the next segment's first message does not wait
		// for the send loop. Stopped before the mark is stored, the
		// break handed over again closes the segment under the same
		// key, which the row recorded here (or the gateway) answers.
		if _, err := s.sendThrough(ctx, c.rows[0]); err != nil {
			return err
		}
	}
	if err := s.store.CloseStreamSegment(ctx, s.now(), s.cfg.TTL, ev.GetTurnId(), c.segment, c.rows...); err != nil {
		s.log.WarnContext(ctx, "store the closed stream segment failed", "turn_id", ev.GetTurnId(), "segment", c.segment, "err", err)
		return err
	}
	st.closing = nil
	if h := segmentHook.Load(); h != nil {
		(*h)(s.owner, ev.GetTurnId())
	}
	if len(c.rows) > 0 {
		s.kick()
	}
	return nil
}

// shown is what a streaming message shows of the reasoning and the
// answer so far: the answer after the reasoning's block, as the final
// text (reasoning.WithAnswer) will, the block alone while the model
// still thinks. The final edit writes the final text over it.
func shown(thought, answer string) string {
	if strings.TrimSpace(answer) == "" {
		return reasoning.Block(thought)
	}
	return reasoning.WithAnswer(thought, answer)
}

// toolPhases name the steps of a tool call as a gateway gets them.
var toolPhases = map[repliesv1.ToolPhase]string{
	repliesv1.ToolPhase_TOOL_PHASE_STARTED:           "started",
	repliesv1.ToolPhase_TOOL_PHASE_FINISHED:          "finished",
	repliesv1.ToolPhase_TOOL_PHASE_FAILED:            "failed",
	repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL: "awaiting_approval",
}

// toolProgress passes a step of a tool call to a platform that streams
// natively (the API gateway's runs show it), best effort; chat platforms
// get the approval prompt and progress lines (toolStep).
func (s *Service) toolProgress(ctx context.Context, ev *repliesv1.ReplyEvent, tp *repliesv1.ToolProgress) error {
	phase, ok := toolPhases[tp.GetPhase()]
	if !ok {
		return nil
	}
	if s.cfg.platform(ev.GetTarget().GetPlatform()).Streaming != StreamNative {
		return s.toolStep(ctx, ev, tp)
	}
	req := s.request(ev, keyBase(ctx, ev)+":t", deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS)
	req.ToolStep = &deliveryv1.ToolStep{ToolCallId: tp.GetToolCallId(), ToolName: tp.GetToolName(), Phase: phase, Detail: tp.GetDetail()}
	if tp.GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_STARTED {
		// What the API gateway labels the call with, as chats' progress
		// lines do (toolline), and its arguments for function_call items.
		req.ToolStep.Detail, req.ToolStep.Emoji, req.ToolStep.Arguments = toolline.Preview(tp), tp.GetEmoji(), tp.GetArguments()
	}
	_, _ = s.progress(ctx, req)
	return nil
}

// perform carries out streaming progress actions in order, reporting each
// to the stream, and stops at the first that fails or is not due under
// the shared rate limit (patient: not due within the send timeout).
func (s *Service) perform(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState, acts []streamedit.Action, patient bool) {
	for i, a := range acts {
		if !s.rateRoom(ctx, ev, patient) {
			return // not now: the stream plans again on the next delta
		}
		op := deliveryv1.SendOp_SEND_OP_EDIT
		if a.Kind == streamedit.Send {
			op = deliveryv1.SendOp_SEND_OP_SEND
		}
		key := fmt.Sprintf("%s:s%d", keyBase(ctx, ev), i)
		if op == deliveryv1.SendOp_SEND_OP_SEND {
			key = segmentMessageKey(ev.GetTurnId(), st.segment, a.Message)
		}
		req := s.request(ev, key, op)
		if op == deliveryv1.SendOp_SEND_OP_SEND {
			// A new message keeps the chat's order: not before the
			// queued or sending rows of earlier answers (paced or
			// retried chunks). The stream plans again on the next delta.
			if clear, err := s.store.Clear(ctx, outbox.ChatKey(ev.GetTarget()), req.GetIdempotencyKey()); err != nil || !clear {
				return
			}
		}
		req.Text = a.Text
		req.MessageId = st.ids[a.Message]
		rec, err := s.progress(ctx, req)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil {
			// No answer: the gateway may carry it out yet. Nothing more
			// is streamed (a new send would be a second message, a new
			// edit may land before it); the final finds out under the
			// same key (settle) and goes on from it, so a late edit
			// cannot overwrite the answer.
			st.unsure = &unsureSend{req: req, act: a, since: s.now()}
			return
		}
		if err == nil && !rec.GetOk() {
			err = errors.New(rec.GetError())
			if rec.GetErrorClass() == deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
				err = fmt.Errorf("%s: %w", rec.GetError(), streamedit.ErrFlood)
			}
		}
		st.stream.OnResult(a, err)
		if err != nil {
			return
		}
		if a.Kind == streamedit.Send {
			st.ids[a.Message] = rec.GetPlatformMessageId()
			if err := s.store.SaveStreamMessage(ctx, ev.GetTurnId(), st.segment, st.offset+a.Message, rec.GetPlatformMessageId()); err != nil {
				s.log.WarnContext(ctx, "save stream message failed", "turn_id", ev.GetTurnId(), "err", err)
			}
			s.endToolMessage(ctx, ev)
		}
	}
}

// rateRoom takes a send from the shared rate limit buckets of ev's chat: now,
// or when patient, once they have room, waiting up to the send timeout.
// A limiter that fails lets the send go.
func (s *Service) rateRoom(ctx context.Context, ev *repliesv1.ReplyEvent, patient bool) bool {
	deadline := s.now().Add(s.cfg.SendTimeout)
	for {
		wait, err := s.limiter.Take(ctx, s.now(), s.buckets(ev.GetTarget())...)
		if err != nil || wait <= 0 {
			return true
		}
		if !patient || s.now().Add(wait).After(deadline) {
			return false
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// textFirst posts the text of the turn's current segment that no message
// shows yet (a short text, under the stream's first send) before
// something goes below it (a tool's progress line, an approval prompt):
// Hermes's break before a tool call posts the text said before it,
// whatever its length, and the progress follows. Here the break comes
// after the call, before the next call's text, and the segment's text
// was posted when it closed, below the call's progress. It goes as the
// stream's first message, cursor and all (the break takes the cursor
// off, as it does a longer text's), so a replica that takes the turn
// over knows it as the segment's (delivery_stream_messages); it waits
// for its turn under the shared rate limit, as the row below it would.
// Best effort, as streaming is: a stream that cannot post it now
// (stopped, unsure, a row of an earlier answer still queued) leaves it
// for the segment's close, as before.
func (s *Service) textFirst(ctx context.Context, ev *repliesv1.ReplyEvent) {
	st := s.turns.get(ev.GetTurnId())
	if st == nil || st.done || st.foreign || st.unsure != nil || len(st.ids) > 0 {
		return
	}
	if strings.TrimSpace(st.raw.String()) == "" {
		// Reasoning alone: no break closes it, the next call's
		// reasoning and answer go on in its message, which would put
		// the answer above the progress.
		return
	}
	if s.closeSegment(ctx, ev, st) != nil {
		return // the rows of the segment before go first
	}
	if acts := st.stream.Flush(s.now()); len(acts) > 0 {
		s.perform(ctx, ev, st, acts, true)
	}
}

// endToolMessage ends the turn's progress message when the answer's text
// starts a message below it (a segment after a tool call): the next
// calls' lines start a message below that text, as Hermes's gateway
// opens a new progress bubble after a new content bubble
// (on_new_message), instead of being added above it. Best effort: while
// its last edit cannot be queued, the lines go on in it.
func (s *Service) endToolMessage(ctx context.Context, ev *repliesv1.ReplyEvent) {
	tl := s.tools.peek(ev.GetTurnId())
	if tl == nil {
		return
	}
	tl.prompted = false // the prompt is above this message now
	if tl.key == "" {
		return
	}
	if err := s.lastEdit(ctx, ev, tl, ":tps"); err != nil {
		s.log.WarnContext(ctx, "queue the progress message's last edit failed", "turn_id", ev.GetTurnId(), "err", err)
		return
	}
	tl.key, tl.id, tl.shown, tl.lines = "", "", "", nil
}

// progress sends a best-effort operation straight to the gateway, without
// an outbox row.
func (s *Service) progress(ctx context.Context, req *deliveryv1.SendRequested) (*deliveryv1.SendReceipt, error) {
	return s.progressWith(ctx, req, nil)
}

// progressWith is progress with headers on the request.
func (s *Service) progressWith(ctx context.Context, req *deliveryv1.SendRequested, hdr nats.Header) (*deliveryv1.SendReceipt, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	var rec deliveryv1.SendReceipt
	_, err := s.bus.RequestHeaders(rctx, s.bus.Topology().SendSubject(req.GetTarget().GetPlatform()), hdr, req, &rec)
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case !rec.GetOk():
		result = "rejected"
	}
	progress.WithLabelValues(req.GetTarget().GetPlatform(), req.GetOp().String(), result).Inc()
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// final turns the final answer into outbox rows. When the answer was
// streamed into messages, the stream's final actions replace those of
// the last segment (the final answer always wins over progress edits;
// the segments before it keep their text); when another replica
// streamed it, the last segment's recorded messages are rewritten from
// the first. queued reports whether any message was (or had been)
// queued.
func (s *Service) final(ctx context.Context, ev *repliesv1.ReplyEvent, text string, format deliveryv1.TextFormat) (queued bool, err error) {
	base := keyBase(ctx, ev)
	quiet := showsNothing(ev)
	st := s.turns.get(ev.GetTurnId())
	if st != nil && st.done && st.quietEnd && !quiet {
		if strings.TrimSpace(text) == "" {
			// An answer that was its media: the cursor is off already.
			s.turns.put(ev.GetTurnId(), &turnState{done: true})
			return true, nil
		}
		// The stream ended without showing anything (quietEnd): this
		// answer writes over its last segment as recorded, below.
	} else if st != nil {
		// The closed segment's rows go before the answer's.
		if err := s.closeSegment(ctx, ev, st); err != nil {
			return false, err
		}
	}
	if st != nil && !st.done && st.final == nil {
		if err := s.settle(ctx, ev, st); err != nil {
			return false, err
		}
	}
	if ev.GetTurnId() != "" && st != nil && !st.done && len(st.ids) > 0 {
		if st.final == nil {
			st.final = s.streamActions(ev, base, st, st.stream.Final(text), format, true)
		}
		if err := s.enqueue(ctx, st.final...); err != nil {
			return false, err
		}
		queued = len(st.final) > 0
		st.done, st.final, st.quietEnd = true, nil, quiet
		st.raw, st.thought = strings.Builder{}, strings.Builder{} // the marker stays for doneKeep, its text is not needed
		return queued, nil
	}
	if st != nil && st.done && (!st.quietEnd || quiet) {
		// Already replaced (a redelivered final): the rows exist.
		return true, nil
	}
	if ev.GetTurnId() != "" && s.cfg.platform(ev.GetTarget().GetPlatform()).Streaming == StreamEdit {
		// The messages of the last segment: another replica's stream's
		// (those before it keep their text; a segment opened before
		// its first message has none, and the answer goes in new
		// messages), or none of this replica's own. New messages are
		// sent under the segment's message keys: one a replica posted
		// but did not record (stopped, or a send still unanswered
		// when the final gave up on it) is answered by the gateway
		// and written over, not posted twice.
		var seg outbox.StreamSegment
		if st != nil && !st.foreign && !st.done {
			seg.Segment = st.segment
		} else {
			var err error
			var stored bool
			if seg, stored, err = s.store.LastStreamSegmentAndKey(ctx, ev.GetTurnId(), base+":0"); err != nil {
				return false, err
			}
			if stored {
				// This final's rows are stored already: it came back (a
				// replica that stopped before its ack, the worker's
				// publish again) after a replica from before segment
				// message keys queued it under <turn>:<seq>:<i> (or
				// after this version queued its first edit). Queued
				// again under the segment's keys, a rolling upgrade
				// would post the answer twice.
				s.turns.put(ev.GetTurnId(), &turnState{done: true})
				return true, nil
			}
		}
		if text == "" && len(seg.IDs) == 0 {
			s.turns.put(ev.GetTurnId(), &turnState{done: true, quietEnd: quiet})
			return false, nil
		}
		if err := s.enqueue(ctx, s.rewrite(ev, base, seg.Segment, seg.IDs, text, format)...); err != nil {
			return false, err
		}
		// Streamed deltas that come late must not start a message after
		// the answer. Elsewhere nothing streams into a message, and a
		// redelivered final is sent once (its idempotency keys, or a
		// per-request gateway taking a repeat once): no marker, which at
		// hundreds of turns a second was most of this map.
		s.turns.put(ev.GetTurnId(), &turnState{done: true, quietEnd: quiet})
		return true, nil
	}
	if err := s.enqueueText(ctx, ev, base, text, format, true); err != nil {
		return false, err
	}
	return text != "", nil
}

// settle asks the gateway again, under the same idempotency key, for a
// stream send or edit that got no answer: the gateway answers with the
// first receipt if it carried it out, or does it now. Either way it is
// done before the final's messages go out, and the stream learns it: the
// final writes over that message. While the gateway
// cannot say (it is still sending, or does not answer), the final's
// event is handed back to come again, for settleFor at most.
func (s *Service) settle(ctx context.Context, ev *repliesv1.ReplyEvent, st *turnState) error {
	u := st.unsure
	if u == nil {
		return nil
	}
	rec, err := s.progress(ctx, u.req)
	if err == nil && rec.GetOk() {
		st.unsure = nil
		st.stream.OnResult(u.act, nil)
		if u.act.Kind == streamedit.Send {
			st.ids[u.act.Message] = rec.GetPlatformMessageId()
			if err := s.store.SaveStreamMessage(ctx, ev.GetTurnId(), st.segment, st.offset+u.act.Message, rec.GetPlatformMessageId()); err != nil {
				s.log.WarnContext(ctx, "save stream message failed", "turn_id", ev.GetTurnId(), "err", err)
			}
		}
		return nil
	}
	if err == nil && rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE &&
		rec.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
		st.unsure = nil // refused: it was not posted
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if s.now().Sub(u.since) >= settleFor {
		st.unsure = nil
		chatLog(s.log, ev.GetTarget()).WarnContext(ctx, "stream update still unconfirmed; sending the final without it",
			"turn_id", ev.GetTurnId(), "key", u.req.GetIdempotencyKey(), "err", err, "receipt_error", rec.GetError())
		return nil
	}
	if err == nil {
		err = errors.New(rec.GetError())
	}
	// The platform's text may name the chat: whoever logs the error
	// (the consumer, which hands the event back) takes it out.
	t := ev.GetTarget()
	return pseudonym.Naming(fmt.Errorf("settle stream message %s: %w", u.req.GetIdempotencyKey(), err), t.GetChatId(), t.GetThreadId())
}

// chatLog is log naming the chat (and thread) of t, for the records of
// its stream lines' failures: their errors are a platform's texts,
// which may name them, and a logger with pseudonyms takes the ids a
// record names out of its errors, as rowLog does for the outbox's sends.
func chatLog(log *slog.Logger, t *deliveryv1.Target) *slog.Logger {
	log = log.With("chat_id", t.GetChatId())
	if t.GetThreadId() != "" {
		log = log.With("thread_id", t.GetThreadId())
	}
	return log
}

// streamActions are the outbox rows of a stream's final actions: the
// turn's final message is the last when end (the answer), none when not
// (a segment that closes).
func (s *Service) streamActions(ev *repliesv1.ReplyEvent, base string, st *turnState, acts []streamedit.Action, format deliveryv1.TextFormat, end bool) []*deliveryv1.SendRequested {
	var reqs []*deliveryv1.SendRequested
	for _, a := range acts {
		op := map[streamedit.Kind]deliveryv1.SendOp{
			streamedit.Send:   deliveryv1.SendOp_SEND_OP_SEND,
			streamedit.Edit:   deliveryv1.SendOp_SEND_OP_EDIT,
			streamedit.Delete: deliveryv1.SendOp_SEND_OP_DELETE,
		}[a.Kind]
		id := st.ids[a.Message]
		if a.Kind != streamedit.Send && id == "" {
			continue // a message whose send was never confirmed
		}
		key := fmt.Sprintf("%s:%d", base, len(reqs))
		if a.Kind == streamedit.Send {
			key = segmentMessageKey(ev.GetTurnId(), st.segment, a.Message)
		}
		r := s.request(ev, key, op)
		r.Text, r.Format, r.MessageId = a.Text, format, id
		reqs = append(reqs, r)
	}
	number(reqs)
	if len(reqs) > 0 {
		reqs[len(reqs)-1].Final = end
	}
	return reqs
}

// rewrite writes text over the messages another replica streamed of the
// stream segment opened by seq segment: edit each with a part, send the
// parts left over (under the segment's message keys: a message that
// replica posted but did not record is not posted again), delete the
// surplus messages.
func (s *Service) rewrite(ev *repliesv1.ReplyEvent, base string, segment int64, ids []string, text string, format deliveryv1.TextFormat) []*deliveryv1.SendRequested {
	var parts []string
	if text != "" {
		parts = chunk.Split(text, ev.GetTarget().GetPlatform())
	}
	var reqs []*deliveryv1.SendRequested
	for i := 0; i < max(len(parts), len(ids)); i++ {
		op := deliveryv1.SendOp_SEND_OP_EDIT
		switch {
		case i >= len(ids):
			op = deliveryv1.SendOp_SEND_OP_SEND
		case i >= len(parts):
			op = deliveryv1.SendOp_SEND_OP_DELETE
		}
		key := fmt.Sprintf("%s:%d", base, i)
		if op == deliveryv1.SendOp_SEND_OP_SEND {
			key = segmentMessageKey(ev.GetTurnId(), segment, i)
		}
		r := s.request(ev, key, op)
		if i < len(ids) {
			r.MessageId = ids[i]
		}
		if i < len(parts) {
			r.Text, r.Format = parts[i], format
		}
		reqs = append(reqs, r)
	}
	return number(reqs)
}

// segmentMessageKey is the idempotency key of the send that posts
// message i of the stream segment opened by the reply event of seq
// segment (0: the first): the same on every replica and for every event
// that may post it (a stream update, a segment's close, the final), so
// a message posted but not recorded (delivery_stream_messages) is not
// posted again by the replica that takes the turn over; the gateway
// answers with its first receipt, and the send is followed by an edit
// (overDuplicate).
func segmentMessageKey(turn string, segment int64, i int) string {
	return fmt.Sprintf("%s:%d:m%d", turn, segment, i)
}

// isSegmentMessageKey reports whether key is a segmentMessageKey.
func isSegmentMessageKey(key string) bool {
	i := strings.LastIndexByte(key, ':')
	if i < 0 || i+2 > len(key) || key[i+1] != 'm' {
		return false
	}
	_, err := strconv.Atoi(key[i+2:])
	return err == nil
}

// number sets chunk positions and marks the last request final.
func number(reqs []*deliveryv1.SendRequested) []*deliveryv1.SendRequested {
	for i, r := range reqs {
		r.ChunkIndex, r.ChunkCount = int32(i), int32(len(reqs))
		r.Final = i == len(reqs)-1
	}
	return reqs
}

// noticeFormat is how a notice's text is written: plain unless the
// router said Markdown (its answers to commands).
func noticeFormat(n *repliesv1.Notice) deliveryv1.TextFormat {
	if n.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN {
		return n.GetFormat()
	}
	return deliveryv1.TextFormat_TEXT_FORMAT_PLAIN
}
