package bus_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// A replica serving a watched request whose NATS connection drops (its
// server restarted, its cluster node left) gets no responders on its
// liveness subject until it has reconnected, as a killed one does: the
// request waits that out (bus.GoneGrace) and takes the answer the
// replica sends once back, rather than have another replica do the work
// again. One whose liveness subject stays without responders is gone.
func TestWatchedRequestWaitsOutAReconnect(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		away time.Duration // how long the replica's liveness subject has no responders; 0: for good
	}{
		{"reconnects", 2 * time.Second},
		{"gone", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := bustest.EmbeddedURL(t)
			b := bustest.New(t, url)
			srv := bustest.NewWith(t, url, b.Topology()).Conn()
			subject, aliveSubject := nats.NewInbox(), nats.NewInbox()
			respond := func(m *nats.Msg) { _ = m.Respond(nil) }
			alive, err := srv.Subscribe(aliveSubject, respond)
			if err != nil {
				t.Fatal(err)
			}
			_, err = srv.Subscribe(subject, func(m *nats.Msg) {
				if err := bus.AckServedBy(m, "r1"); err != nil {
					t.Error(err)
				}
				go func() {
					time.Sleep(every)
					_ = alive.Unsubscribe() // the connection dropped
					if tc.away == 0 {
						return
					}
					time.Sleep(tc.away)
					if _, err := srv.Subscribe(aliveSubject, respond); err != nil { // reconnected
						t.Error(err)
					}
					time.Sleep(every)
					if err := bus.Reply(context.Background(), m, &turnsv1.TurnRequested{TurnId: "answer"}); err != nil {
						t.Error(err)
					}
				}()
			})
			if err == nil {
				err = srv.Flush() // both subscriptions are the server's
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			began := time.Now()
			resp := &turnsv1.TurnRequested{}
			err = b.RequestWatched(ctx, subject, &turnsv1.TurnRequested{TurnId: "ask"}, resp, func(string) string { return aliveSubject }, every)
			took := time.Since(began)
			switch {
			case tc.away > 0 && (err != nil || resp.GetTurnId() != "answer"):
				t.Fatalf("%v after %v, answer %q: want the answer of the replica once back", err, took, resp.GetTurnId())
			case tc.away == 0 && !errors.Is(err, bus.ErrServerGone):
				t.Fatalf("%v after %v, want the replica found gone", err, took)
			case tc.away == 0 && (took < bus.GoneGrace || took > bus.GoneGrace+5*every):
				t.Fatalf("found gone after %v, want after about %v", took, bus.GoneGrace)
			}
		})
	}
}

// A requester whose wait ends while the replica serving it has been
// silent (no responders on its liveness subject, not yet for GoneGrace)
// takes it as gone: a replica that died in the wait's last seconds is
// one, and the request is to be sent again, to another replica. Only a
// replica still answering there when the wait ends did not answer in
// time.
func TestWatchedRequestEndingInTheGraceFindsTheReplicaGone(t *testing.T) {
	t.Parallel()
	const every = 100 * time.Millisecond
	for _, tc := range []struct {
		name  string
		alive bool // the replica's liveness subject answers
		want  error
	}{
		{"replica there", true, bus.ErrNotAnswered},
		{"replica silent", false, bus.ErrServerGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := bustest.EmbeddedURL(t)
			b := bustest.New(t, url)
			srv := bustest.NewWith(t, url, b.Topology()).Conn()
			subject, aliveSubject := nats.NewInbox(), nats.NewInbox()
			_, err := srv.Subscribe(subject, func(m *nats.Msg) {
				if err := bus.AckServedBy(m, "r1"); err != nil {
					t.Error(err)
				}
			})
			if err == nil && tc.alive {
				_, err = srv.Subscribe(aliveSubject, func(m *nats.Msg) { _ = m.Respond(nil) })
			}
			if err == nil {
				err = srv.Flush()
			}
			if err != nil {
				t.Fatal(err)
			}
			// Ends well within GoneGrace, after several questions.
			ctx, cancel := context.WithTimeout(context.Background(), bus.GoneGrace/3)
			defer cancel()
			err = b.RequestWatched(ctx, subject, &turnsv1.TurnRequested{TurnId: "ask"}, &turnsv1.TurnRequested{}, func(string) string { return aliveSubject }, every)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
}

// RequestTimeout reads the requester's wait as sent; a value no duration
// holds (from a sender that is not a watched request's) says nothing,
// rather than wrap round to a wait already over, or one far off.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header string
		want   time.Duration
		ok     bool
	}{
		{"70000", 70 * time.Second, true},
		{"0", 0, true},
		{"-5", -5 * time.Millisecond, true}, // the requester gave up already
		{"", 0, false},
		{"soon", 0, false},
		{"9223372036854775807", 0, false},
		{"9223372036855", 0, false},
		{"-9223372036855", 0, false},
	} {
		m := nats.NewMsg("s")
		if tc.header != "" {
			m.Header.Set(bus.HeaderTimeout, tc.header)
		}
		if got, ok := bus.RequestTimeout(m); got != tc.want || ok != tc.ok {
			t.Errorf("RequestTimeout(%q) = %v, %v; want %v, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

// RequestWait is the wait as sent (HeaderTimeout), shortened when the
// deadline sent with it (HeaderDeadline) says the request came late, by
// more than DeadlineSkew; a deadline alone is read too.
func TestRequestWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ms := func(at time.Time) string { return strconv.FormatInt(at.UnixMilli(), 10) }
	for _, tc := range []struct {
		name              string
		timeout, deadline string
		want              time.Duration
		ok                bool
	}{
		{"neither", "", "", 0, false},
		{"a wait alone (an older requester)", "70000", "", 70 * time.Second, true},
		{"in time", "70000", ms(now.Add(70 * time.Second)), 70 * time.Second, true},
		{"late, by part of the wait", "70000", ms(now.Add(10 * time.Second)), 10*time.Second + bus.DeadlineSkew, true},
		{"over, within the clocks' skew", "70000", ms(now.Add(-bus.DeadlineSkew / 2)), bus.DeadlineSkew / 2, true},
		{"over", "70000", ms(now.Add(-3 * time.Second)), -3*time.Second + bus.DeadlineSkew, true},
		{"a deadline alone", "", ms(now.Add(10 * time.Second)), 10*time.Second + bus.DeadlineSkew, true},
		{"a deadline past any wait", "70000", "9223372036854775807", 70 * time.Second, true},
		{"a deadline no time holds", "70000", "soon", 70 * time.Second, true},
	} {
		m := nats.NewMsg("s")
		if tc.timeout != "" {
			m.Header.Set(bus.HeaderTimeout, tc.timeout)
		}
		if tc.deadline != "" {
			m.Header.Set(bus.HeaderDeadline, tc.deadline)
		}
		if got, ok := bus.RequestWait(m, now); got != tc.want || ok != tc.ok {
			t.Errorf("%s: RequestWait = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// A replica whose liveness subject answers no responders from the first
// question on is found gone on the first tick whose question goes out at
// or after GoneGrace from when the answer to that first silent question
// came back (bus.Silence): not one tick later at random, as counted to
// when the last answer is read. A first question that went out late (a
// busy machine) found the replica silent only from then on: the tick
// after.
func TestWatchedRequestFindsAGoneReplicaOnTheTickAfterGoneGrace(t *testing.T) {
	t.Parallel()
	const every = 500 * time.Millisecond
	if bus.GoneGrace%every != 0 {
		t.Fatalf("every (%v) must divide GoneGrace (%v): a tick lands on it", every, bus.GoneGrace)
	}
	for _, tc := range []struct {
		name string
		late time.Duration // how late the first question goes out after its tick
	}{
		{"prompt", 0},
		// GoneGrace is counted from the answer to the first question,
		// which went out a quarter of a tick late: the tick after a
		// prompt one's.
		{"first question late", every / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := bustest.EmbeddedURL(t)
			b := bustest.New(t, url)
			srv := bustest.NewWith(t, url, b.Topology()).Conn()
			subject, aliveSubject := nats.NewInbox(), nats.NewInbox() // nothing answers aliveSubject
			_, err := srv.Subscribe(subject, func(m *nats.Msg) {
				if err := bus.AckServedBy(m, "r1"); err != nil {
					t.Error(err)
				}
			})
			if err == nil {
				err = srv.Flush()
			}
			if err != nil {
				t.Fatal(err)
			}
			var at []time.Time // when each question went out; RequestWatched asks one at a time
			alive := func(string) string {
				if len(at) == 0 {
					time.Sleep(tc.late)
				}
				at = append(at, time.Now())
				return aliveSubject
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard only
			defer cancel()
			err = b.RequestWatched(ctx, subject, &turnsv1.TurnRequested{TurnId: "ask"}, &turnsv1.TurnRequested{}, alive, every)
			if !errors.Is(err, bus.ErrServerGone) {
				t.Fatalf("%v, want the replica found gone", err)
			}
			bustest.FoundGoneOnTime(t, at)
		})
	}
}

// Silence judges a replica from when the answer to its first silent
// question came back to when the last question was sent, not by when
// the last answer is read: a question of a round taken late (a slow
// round before it, questions to other replicas that timed out first) is
// no longer silence than its round says. Its first no responders never
// counts as gone, however long ago its round began, or a replica
// reconnecting would be taken over on the one answer the grace is there
// to wait out. Nor does a silence counted from a first question that
// reached the server late (held in its asker's connection): the replica
// was found silent only from the answer on.
func TestSilence(t *testing.T) {
	t.Parallel()
	// Rounds in the past, as a round taken late sees them.
	start := time.Now().Add(-10 * bus.GoneGrace)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	type answer struct {
		asked time.Duration // after start
		took  time.Duration // from the question to its answer
		err   error
		gone  bool
	}
	const rtt = 200 * time.Microsecond // a question's round trip on a quiet network
	for _, tc := range []struct {
		name    string
		answers []answer
	}{
		{"a first silent question asked long ago", []answer{{0, rtt, nats.ErrNoResponders, false}}},
		{"silent for less than the grace", []answer{
			{0, rtt, nats.ErrNoResponders, false},
			{bus.GoneGrace - 100*time.Millisecond, rtt, nats.ErrNoResponders, false},
		}},
		{"silent for the grace, by the rounds", []answer{
			{0, rtt, nats.ErrNoResponders, false},
			{time.Second, rtt, nats.ErrNoResponders, false},
			{bus.GoneGrace, rtt, nats.ErrNoResponders, true},
		}},
		{"a tick due at the grace, sent a little early", []answer{
			{0, rtt, nats.ErrNoResponders, false},
			{bus.GoneGrace - time.Microsecond, rtt, nats.ErrNoResponders, true},
		}},
		{"the last answer read late", []answer{
			{0, rtt, nats.ErrNoResponders, false},
			{bus.GoneGrace, 900 * time.Millisecond, nats.ErrNoResponders, true},
		}},
		{"a first question that reached the server late", []answer{
			{0, 900 * time.Millisecond, nats.ErrNoResponders, false},
			{time.Second, rtt, nats.ErrNoResponders, false},
			{bus.GoneGrace, rtt, nats.ErrNoResponders, false}, // silent for 2.1 s
			{bus.GoneGrace + 900*time.Millisecond, rtt, nats.ErrNoResponders, true},
		}},
		{"heard between", []answer{
			{0, rtt, nats.ErrNoResponders, false},
			{time.Second, rtt, nil, false},
			{2 * time.Second, rtt, nats.ErrNoResponders, false},
			{bus.GoneGrace, rtt, nats.ErrNoResponders, false},
		}},
		{"a question not answered in time counts as alive", []answer{
			{0, rtt, nats.ErrNoResponders, false},
			{time.Second, time.Second, nats.ErrTimeout, false},
			{bus.GoneGrace, rtt, nats.ErrNoResponders, false},
		}},
	} {
		var s bus.Silence
		for i, a := range tc.answers {
			if gone := s.Answer(at(a.asked), at(a.asked+a.took), a.err); gone != a.gone {
				t.Errorf("%s: answer %d (%v asked at %v, answered %v later): gone = %v, want %v",
					tc.name, i, a.err, a.asked, a.took, gone, a.gone)
			}
		}
	}
}
