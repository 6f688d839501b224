package router

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/scheduler"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

// TestCronRunRepublishedAfterRedisLoss: a cron run whose commit failed
// after its publish is published again by the scheduler's retry, a tick
// or more later: past the bus's dedupe window (30 s by default, here a
// message id of its own), and, if Redis restarted empty meanwhile,
// without the router's inbound dedupe record. Its session (one of its
// own, named by the run) records the run's event as its last started
// (sessions.last_started_event_id, in Postgres), so the copy starts no
// second turn, whether the run's turn has ended or still goes.
func TestCronRunRepublishedAfterRedisLoss(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		inFlight bool // the first run's turn still goes when the copy comes
	}{
		{"after the run ended", false},
		{"while the run goes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.startRouter(testConfig(), nil, nil)
			release := make(chan struct{})
			w := e.startWorker(func(*turnsv1.TurnRequested) {
				if tc.inFlight {
					<-release
				}
			})
			defer close(release)
			due := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
			run := cron.RunID("abcdef012345", due, false)
			// As the scheduler publishes a run (scheduler.run).
			ev := &eventsv1.MessageReceived{EventId: run, MessageId: run, Text: scheduler.Frame("report"),
				Source: &eventsv1.SessionSource{Platform: scheduler.Platform, Account: scheduler.Account, ChatId: run,
					ChatName: "report", ChatType: "dm", UserId: "abcdef012345", UserName: "report"},
				SentAt: timestamppb.New(due), ReceivedAt: timestamppb.New(due),
				Internal: true, TransportAuthenticated: true, AnswerOnly: true,
				ReplyRoute: &eventsv1.ReplyRoute{Platform: "telegram", Account: "bot1", ChatId: "chat-alice"}}
			e.publishID(ev, scheduler.Platform+":"+scheduler.Account+":"+run)
			waitFor(t, "the run's turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 1 })
			waitFor(t, "the run handled", e.inboundDrained)
			// Redis restarts empty: this test's keys only (others share the server).
			keys, err := e.rdb.Keys(ctx, e.prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) > 0 {
				if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
					t.Fatal(err)
				}
			}
			e.publishID(ev, scheduler.Platform+":"+scheduler.Account+":"+run+":after-the-window")
			waitFor(t, "the copy handled", e.inboundDrained)
			time.Sleep(500 * time.Millisecond)
			if turns, _ := w.snapshot(); len(turns) != 1 {
				t.Fatalf("%d turns for one run, want 1", len(turns))
			}
		})
	}
}
