package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"time"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// finalsKeep is how long a turn's final stays recorded
// (outbox.Store.ClaimFinal): longer than the REPLIES stream keeps a
// turn's events (a day by default), and than a worker's attempts of one
// turn may run apart.
const finalsKeep = 48 * time.Hour

// otherFinal reports whether ev, a final reply event (a final text, an
// error), must be dropped because the turn showed another final. A turn
// has one final, but its attempts may publish two at different seqs: a
// last attempt's apology whose write failed goes out uncommitted, at the
// seq counter's next, beside an earlier attempt's final committed at
// another (an older worker's, frozen past its lock, or one a read that
// failed missed), and either may come first. The first to come is the
// turn's, and comes out as often as it comes back; the other is dropped.
// An error that shows nothing (an interrupted turn that said nothing:
// only the cursor comes off its stream) claims nothing, so that the
// attempt that took the turn over still answers, but it is dropped too
// once a final was shown (it would take that answer's messages away).
// A dropped final still ends the turn's typing indicator and its tool
// progress (endTools: the progress message's last edit, never a second
// answer nor an edit of the one shown); an error queueing that edit
// nak's the event, which comes back dropped again. Per-request
// platforms (the API) are not checked: their gateway takes a
// request's first final and ignores the rest, and their replies pay no
// round trip more.
func (s *Service) otherFinal(ctx context.Context, ev *repliesv1.ReplyEvent) (bool, error) {
	if ev.GetTurnId() == "" || s.cfg.platform(ev.GetTarget().GetPlatform()).PerRequest {
		return false, nil
	}
	f := outbox.Final{Seq: ev.GetSeq(), Digest: finalDigest(ev)}
	ok, err := s.store.ClaimFinal(ctx, ev.GetTurnId(), f, s.now(), !showsNothing(ev))
	if err != nil {
		return false, err
	}
	if !ok {
		finalsDropped.WithLabelValues(ev.GetTarget().GetPlatform()).Inc()
		chatLog(s.log, ev.GetTarget()).WarnContext(ctx, "turn showed another final; this one is dropped",
			"turn_id", ev.GetTurnId(), "seq", ev.GetSeq())
		// The turn is over all the same: a typing indicator that a later
		// attempt's typing event started after the final shown (or on a
		// replica that never saw it) stops here, not TypingMax later.
		s.typing.done(ev.GetTurnId())
		// A progress message a later attempt started after the final
		// shown (or on a replica that never saw it) gets its last lines
		// now, and the turn's progress is forgotten, not kept until
		// housekeeping prunes it.
		if err := s.endTools(ctx, ev); err != nil {
			return true, err
		}
	}
	return !ok, nil
}

// showsNothing reports whether the final event ev shows nothing: an
// interrupted error without text (a turn interrupted before it said
// anything, or a superseded attempt's end of its stream).
func showsNothing(ev *repliesv1.ReplyEvent) bool {
	e := ev.GetError()
	return e != nil && e.GetMessage() == "" && e.GetCode() == "interrupted"
}

// finalDigest is the digest of what a final event shows: its seq and
// its text, format, or error code and message, each length-prefixed.
// Every copy of the event has it, a later attempt's republished copy too
// (which carries no token usage, the runtime footer's source), and a
// replica of another release (fields are named here, not re-encoded with
// whatever unknown fields that release kept).
func finalDigest(ev *repliesv1.ReplyEvent) []byte {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(strconv.FormatInt(ev.GetSeq(), 10))
	switch b := ev.GetBody().(type) {
	case *repliesv1.ReplyEvent_FinalText:
		field("text")
		field(b.FinalText.GetFormat().String())
		field(b.FinalText.GetText())
	case *repliesv1.ReplyEvent_Error:
		field("error")
		field(b.Error.GetCode())
		field(b.Error.GetMessage())
	}
	return h.Sum(nil)
}
