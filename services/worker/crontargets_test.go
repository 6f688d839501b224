package worker_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// cronRun makes a job delivering to deliver, made in Telegram chat 99,
// and returns the session key of one of its runs and the run's source.
func cronRun(t *testing.T, h *harness, deliver string) (string, *eventsv1.SessionSource) {
	t.Helper()
	j, err := cron.New(h.db, time.UTC, nil).Create(context.Background(), cron.NewJob{Owner: "telegram:99", Name: "Digest",
		Prompt: "digest", Schedule: "every 1h", Deliver: deliver, Origin: cron.Origin{Platform: "telegram", Account: "bot1", ChatID: "99"}})
	if err != nil {
		t.Fatal(err)
	}
	runID := cron.RunID(j.ID, time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC), false)
	// The job's last run, as the scheduler records a run it fired.
	if _, err := h.db.Exec(context.Background(), `UPDATE cron_jobs SET last_run_id = $2, last_status = 'ok' WHERE id = $1`, j.ID, runID); err != nil {
		t.Fatal(err)
	}
	key := "agent:main:cron:dm:" + runID
	h.setGeneration(key, 1)
	return key, &eventsv1.SessionSource{Platform: "cron", Account: "default", ChatId: runID, ChatName: "Digest",
		ChatType: "dm", UserId: j.ID, UserName: "Digest"}
}

// finalsOf are the final reply events published for session key, by
// "<platform>:<account>:<chat>:<thread>" of their target.
func finalsOf(h *harness, key string) map[string][]*repliesv1.ReplyEvent {
	out := map[string][]*repliesv1.ReplyEvent{}
	for _, ev := range streamMsgs[repliesv1.ReplyEvent](h.t, h.bus, bus.StreamReplies, "") {
		if ev.GetSessionKey() != key || ev.GetFinalText() == nil && ev.GetError() == nil {
			continue
		}
		t := ev.GetTarget()
		k := fmt.Sprintf("%s:%s:%s:%s", t.GetPlatform(), t.GetAccount(), t.GetChatId(), t.GetThreadId())
		out[k] = append(out[k], ev)
	}
	return out
}

func keysOf(m map[string][]*repliesv1.ReplyEvent) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A cron run of a job with several deliver targets answers in each, once
// (Hermes's _resolve_delivery_targets and _deliver_result): the first
// (the run's reply route) as any run, each other one in a copy under a
// turn id of its own, so that delivery keys its messages apart. A target
// that does not resolve (slack: no home channel) is skipped; a chat named
// twice ("origin" and "telegram", the origin's platform) answers once.
// The skipped target is recorded on the job as the run's delivery
// failure, as Hermes's _deliver_result records each target it could not
// deliver to (last_delivery_error), not only logged.
func TestCronRunAnswersEveryDeliverTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key, src := cronRun(t, h, "telegram:111, discord:222,origin,slack,telegram")
	h.startWorker("w1", nil)
	req := h.requestTurn(key, "digest", turnOpts{answerOnly: true, origin: src,
		route: &eventsv1.ReplyRoute{Platform: "telegram", ChatId: "111"}})
	h.waitCompleted(req.TurnId)
	finals := finalsOf(h, key)
	want := []string{"discord::222:", "telegram::111:", "telegram:bot1:99:"}
	if got := keysOf(finals); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("finals went to %v, want %v", got, want)
	}
	first := finals["telegram::111:"][0]
	turns := map[string]bool{}
	for k, evs := range finals {
		if len(evs) != 1 {
			t.Errorf("%d finals to %s, want 1", len(evs), k)
			continue
		}
		ev := evs[0]
		if ev.GetFinalText().GetText() != first.GetFinalText().GetText() || ev.GetSeq() != first.GetSeq() {
			t.Errorf("final to %s is %q at seq %d, want the first target's %q at %d", k, ev.GetFinalText().GetText(), ev.GetSeq(),
				first.GetFinalText().GetText(), first.GetSeq())
		}
		turns[ev.GetTurnId()] = true
	}
	if first.GetTurnId() != req.GetTurnId() || len(turns) != 3 {
		t.Errorf("turn ids %v: want the turn's own for the first target and one of its own for each other", turns)
	}
	run, _ := cron.RunOfSession(key)
	id, _, _, _ := cron.ParseRunID(run)
	j, err := cron.New(h.db, time.UTC, nil).Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(j.LastDeliveryError, "not delivered to slack: ") || !strings.Contains(j.LastDeliveryError, "no home channel") ||
		j.LastStatus != cron.StatusDeliveryFailed {
		t.Errorf("job's last status %q, delivery error %q: want %s and the skipped slack target named", j.LastStatus, j.LastDeliveryError,
			cron.StatusDeliveryFailed)
	}
}

// A cron run whose earlier attempt published the first target's final
// and died before the others' still answers in the others, and not twice
// in the first: the next attempt republishes the final under the same
// ids, which the bus (and, past its window, delivery's idempotency keys,
// made of the copy's turn id and seq) takes once.
func TestCronRunStoppedAfterItsFirstTargetAnswersTheOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	key, src := cronRun(t, h, "telegram:111,discord:222")
	turnID := fmt.Sprintf("turn-%s-%d", key, h.seq.Load()+1) // requestTurn's next
	f := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "All green.", Seq: 1}
	if _, err := store.New(h.db).Finish(ctx, store.Turn{TurnID: turnID, SessionKey: key, SessionID: "sid-" + key, Generation: 1,
		UserKey: "session:" + key}, nil, 0, nil, f); err != nil {
		t.Fatal(err)
	}
	dead := &repliesv1.ReplyEvent{TurnId: turnID, SessionKey: key, Generation: 1, Seq: 1,
		Target: &deliveryv1.Target{Platform: "telegram", ChatId: "111"},
		Body:   &repliesv1.ReplyEvent_FinalText{FinalText: &repliesv1.FinalText{Text: "All green."}}}
	if _, err := h.bus.Publish(ctx, h.bus.Topology().ReplySubject(key), fmt.Sprintf("reply:%s:1", turnID), dead); err != nil {
		t.Fatal(err)
	}
	h.startWorker("w1", nil)
	req := h.requestTurn(key, "digest", turnOpts{answerOnly: true, origin: src,
		route: &eventsv1.ReplyRoute{Platform: "telegram", ChatId: "111"}})
	if req.GetTurnId() != turnID {
		t.Fatalf("turn %s, want %s", req.GetTurnId(), turnID)
	}
	h.waitCompleted(turnID)
	finals := finalsOf(h, key)
	if got, want := keysOf(finals), []string{"discord::222:", "telegram::111:"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("finals went to %v, want %v", got, want)
	}
	for k, evs := range finals {
		if len(evs) != 1 {
			t.Errorf("%d finals to %s, want 1", len(evs), k)
		}
	}
	// Every target resolved: no delivery failure.
	run, _ := cron.RunOfSession(key)
	id, _, _, _ := cron.ParseRunID(run)
	if j, err := cron.New(h.db, time.UTC, nil).Get(ctx, id); err != nil || j.LastDeliveryError != "" || j.LastStatus != "ok" {
		t.Errorf("job's last status %q, delivery error %q (%v): want ok, none", j.LastStatus, j.LastDeliveryError, err)
	}
}
