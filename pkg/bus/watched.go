package bus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// A watched request (RequestWatched) asks its server, with
// HeaderWatchServer on the request, to say at once who serves it: the
// server replies first with a message of no body whose HeaderServedBy
// names its replica (AckServedBy), then with its answer. Meanwhile the
// requester asks the replica's liveness subject, every so often, and a
// replica that is gone (NATS answers no responders at once, as it does
// once a kill -9 closed its connection, and still after GoneGrace, which
// a replica that is only reconnecting is not) ends the request with
// ErrServerGone, instead of the request waiting out its whole bound for
// an answer that will never come. A server of an older release sends no
// such message: the request then waits as any.
const (
	// HeaderWatchServer, on a request, asks the server to name itself
	// first (AckServedBy). A requester that does not send it takes the
	// first reply as the answer, which the naming message is not.
	HeaderWatchServer = "Switchboard-Watch-Server"
	// HeaderServedBy, on a reply of no body, names the replica serving
	// the request (its instance).
	HeaderServedBy = "Switchboard-Served-By"
	// HeaderTimeout, on a watched request whose context has a deadline,
	// is the time left until it (milliseconds, as sent): its requester
	// waits no longer, so its server has no use for an answer later
	// (RequestTimeout).
	HeaderTimeout = "Switchboard-Timeout-Ms"
	// HeaderDeadline, sent with HeaderTimeout, is the same deadline as a
	// time, by the requester's clock (Unix milliseconds). A request may
	// reach its server well after it was sent (published while its
	// requester's connection was down, it goes out once that is back), so
	// late that its requester gave up on it already, which HeaderTimeout,
	// counted from when the server got it, cannot tell (RequestWait).
	HeaderDeadline = "Switchboard-Deadline-Ms"
)

// ErrServerGone: the replica that took a watched request is gone before
// it answered, or was silent (within GoneGrace) when the request's
// context ended; the request may be sent again.
var ErrServerGone = errors.New("the replica serving the request is gone")

// ErrNotAnswered: the context of a watched request ended while the
// replica that took it was still there, its answer not come: the server
// had the request and was working on it (a download that took longer
// than its requester waits). It wraps the context's error too.
var ErrNotAnswered = errors.New("the replica serving the request did not answer in time")

// RequestTimeout is how long m's requester waits for the answer from when
// m came (HeaderTimeout); ok is false when it did not say, or said what
// no duration holds (which would wrap round to some other wait).
func RequestTimeout(m *nats.Msg) (time.Duration, bool) {
	const most = math.MaxInt64 / int64(time.Millisecond)
	ms, err := strconv.ParseInt(m.Header.Get(HeaderTimeout), 10, 64)
	if err != nil || ms > most || ms < -most {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// DeadlineSkew is how far a server's clock may run ahead of its
// requester's without RequestWait cutting a wait short.
const DeadlineSkew = time.Second

// RequestWait is how long m's requester still waits for the answer, as
// of now (when m is taken): HeaderTimeout from when m came, or less when
// HeaderDeadline says m came late; zero or less when the wait is over.
// ok is false when m said neither.
//
// The deadline is read by this host's clock, which is not the
// requester's. It only ever shortens the wait, and is given DeadlineSkew
// more: a request in time is waited for as HeaderTimeout says, unless
// this clock runs ahead of the requester's by more than DeadlineSkew
// (then a wait is cut short by the difference; NTP keeps a cluster's
// clocks within milliseconds). A clock that runs behind takes a late
// request for one still waited for, and serves it within HeaderTimeout
// as a server of a requester that sends no deadline does. So a wait is
// found over when m came more than DeadlineSkew after its deadline, give
// or take the clocks' difference.
func RequestWait(m *nats.Msg, now time.Time) (time.Duration, bool) {
	wait, ok := RequestTimeout(m)
	ms, err := strconv.ParseInt(m.Header.Get(HeaderDeadline), 10, 64)
	if err != nil {
		return wait, ok
	}
	// Time.Sub saturates: no deadline, however far, wraps round.
	left := time.UnixMilli(ms).Add(DeadlineSkew).Sub(now)
	if !ok {
		return left, true
	}
	return min(wait, left), true
}

// GoneGrace is how long a replica's liveness subject must have answered
// no responders before the replica counts as gone. NATS answers so for a
// replica that runs but whose connection dropped (its server restarted,
// its cluster node left, the server closed it as a slow consumer) as for
// a killed one, until it has reconnected and its subscriptions are back;
// its work goes on meanwhile, and its answer comes once it is back. A
// reconnect takes up to Connect's ReconnectWait (1 s) and its jitter
// once a server is there to take it.
const GoneGrace = 3 * time.Second

// Silence follows a replica asked again and again whether it is there
// (its liveness subject): since when its questions have got no
// responders in a row. A no responders says the server found no one
// subscribed at some moment between when the question was sent and when
// its answer came back, which may be far apart: a question held in its
// asker's connection (a reconnect, a congested link, a stalled write)
// reaches the server late. So the silence runs from when the answer to
// the first silent question came back (the replica was silent no later)
// to when the last question was sent, as read just before it was (it
// was silent no earlier): never longer than the replica was found
// silent. Not to when the last answer came back, which would judge the
// replica one question later at random, and not from or to when a
// question was due (a tick's or a round's time), which a question that
// went out late would cut short: a round slowed by questions to other
// replicas that timed out, then a stale tick taken at once, could count
// a reconnecting replica's 3 s from questions sent half a second apart.
// The zero Silence has heard the replica, or not asked it yet.
type Silence struct{ since time.Time }

// Answer takes err, the answer to a question sent at asked that came
// back at answered, and reports whether the replica counts as gone: no
// responders for GoneGrace (less tickJitter), from the answer to the
// first silent question to the sending of this one. Any other answer,
// none in time included, counts as alive and ends the silence.
func (s *Silence) Answer(asked, answered time.Time, err error) (gone bool) {
	if !errors.Is(err, nats.ErrNoResponders) {
		s.since = time.Time{}
		return false
	}
	if s.since.IsZero() {
		s.since = answered
	}
	return asked.Sub(s.since) >= GoneGrace-tickJitter // before: maybe reconnecting
}

// tickJitter is how much less than GoneGrace a silence may be counted
// and still count as GoneGrace: questions asked every second go out on
// ticks give or take the moment the runtime took to deliver the tick
// and the asker to take it, and the first silent one's answer comes
// back its round trip after it went out (microseconds, more on a busy
// machine). Without it, the question GoneGrace after the first silent
// one may read 2.999 s, and the replica be judged one question later.
const tickJitter = 50 * time.Millisecond

// Silent reports whether the last question got no responders.
func (s *Silence) Silent() bool { return !s.since.IsZero() }

// noResponders is the status NATS replies with to a request nothing is
// subscribed to.
const noResponders = "503"

// AckServedBy names instance as the server of m, when its requester
// asked (HeaderWatchServer); else it sends nothing.
func AckServedBy(m *nats.Msg, instance string) error {
	if m.Reply == "" || m.Header.Get(HeaderWatchServer) == "" || instance == "" {
		return nil
	}
	ack := nats.NewMsg(m.Reply)
	ack.Header.Set(HeaderServedBy, instance)
	if err := m.RespondMsg(ack); err != nil {
		return fmt.Errorf("name the server of %s: %w", m.Subject, err)
	}
	return nil
}

// RequestWatched is Request, watching the replica that serves it: once
// it named itself (AckServedBy), its liveness subject alive(instance)
// is asked every every; no responders there, still after GoneGrace,
// ends the request with ErrServerGone. An unanswered question counts as
// alive. ctx's deadline is sent with the request (HeaderTimeout,
// HeaderDeadline), and a ctx that ends after the server named itself,
// still there, ends the request with ErrNotAnswered; one that ends while
// its liveness subject has no responders (not yet for GoneGrace), with
// ErrServerGone.
func (b *Bus) RequestWatched(ctx context.Context, subject string, req, resp proto.Message, alive func(instance string) string, every time.Duration) error {
	ctx, span := otel.Tracer(tracerName).Start(ctx, "request "+subject, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	msg, err := newMsg(ctx, subject, req)
	if err != nil {
		return err
	}
	msg.Header.Set(HeaderWatchServer, "1")
	if deadline, ok := ctx.Deadline(); ok {
		msg.Header.Set(HeaderTimeout, strconv.FormatInt(time.Until(deadline).Milliseconds(), 10))
		msg.Header.Set(HeaderDeadline, strconv.FormatInt(deadline.UnixMilli(), 10))
	}
	msg.Reply = b.nc.NewInbox()
	replies := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe(msg.Reply, replies)
	if err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := b.nc.PublishMsg(msg); err != nil {
		return fmt.Errorf("request %s: %w", subject, err)
	}
	fail := func(err error) error {
		telemetry.SpanMessageError(span, err, req)
		return fmt.Errorf("request %s: %w", subject, err)
	}
	var tick <-chan time.Time
	var server string
	// silence of the server's liveness subject, from the answer to its
	// first question in a row that got no responders.
	var silence Silence
	stopTick := func() {}
	defer func() { stopTick() }()
	// take takes a reply: done once it is the answer (or says none
	// serves the request).
	take := func(m *nats.Msg) (done bool, err error) {
		switch {
		case len(m.Data) == 0 && m.Header.Get("Status") == noResponders:
			return true, fail(nats.ErrNoResponders)
		case m.Header.Get(HeaderServedBy) != "":
			if server == "" {
				server = m.Header.Get(HeaderServedBy)
				t := time.NewTicker(every)
				tick, stopTick = t.C, t.Stop
			}
			return false, nil
		}
		if err := proto.Unmarshal(m.Data, resp); err != nil {
			return true, fmt.Errorf("%w: reply on %s: %v", ErrDecode, subject, err)
		}
		return true, nil
	}
	// gone ends the request with ErrServerGone, unless the server's
	// answer came meanwhile.
	gone := func() error {
		for {
			select {
			case m := <-replies:
				if done, err := take(m); done {
					return err
				}
			default:
				return fail(fmt.Errorf("%w (%s)", ErrServerGone, server))
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			switch {
			case server == "":
				return fail(ctx.Err())
			case silence.Silent():
				// Its liveness subject has no responders: most likely it
				// died in the wait's last seconds (a reconnecting one
				// has not answered in time either). The request is to be
				// sent again, to another replica, not given up as one a
				// live replica was still working on.
				return gone()
			}
			return fail(fmt.Errorf("%w (%s): %w", ErrNotAnswered, server, ctx.Err()))
		case m := <-replies:
			if done, err := take(m); done {
				return err
			}
		case <-tick:
			asked := time.Now() // when this question goes out (Silence)
			actx, cancel := context.WithTimeout(ctx, every)
			_, err := b.nc.RequestWithContext(actx, alive(server), nil)
			cancel()
			if ctx.Err() != nil {
				// Cut short by the request's own end (a tick as it came),
				// which says nothing of the server: it is as it was.
				continue
			}
			if silence.Answer(asked, time.Now(), err) {
				return gone()
			}
		}
	}
}
