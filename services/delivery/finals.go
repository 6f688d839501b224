package delivery

import (
	"context"
	"crypto/sha256"
	"time"

	"google.golang.org/protobuf/proto"

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
// A dropped final still ends the turn's typing indicator. Per-request
// platforms (the API) are not checked: their gateway takes a
// request's first final and ignores the rest, and their replies pay no
// round trip more.
func (s *Service) otherFinal(ctx context.Context, ev *repliesv1.ReplyEvent) (bool, error) {
	if ev.GetTurnId() == "" || s.cfg.platform(ev.GetTarget().GetPlatform()).PerRequest {
		return false, nil
	}
	shows := true
	if e := ev.GetError(); e != nil && e.GetMessage() == "" && e.GetCode() == "interrupted" {
		shows = false
	}
	f := outbox.Final{Seq: ev.GetSeq(), Digest: finalDigest(ev)}
	ok, err := s.store.ClaimFinal(ctx, ev.GetTurnId(), f, s.now(), shows)
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
	}
	return !ok, nil
}

// finalDigest is the digest of a final event's seq and body, the same
// for every copy of the event.
func finalDigest(ev *repliesv1.ReplyEvent) []byte {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&repliesv1.ReplyEvent{Seq: ev.GetSeq(), Body: ev.Body})
	sum := sha256.Sum256(b)
	return sum[:]
}
