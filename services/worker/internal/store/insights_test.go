package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// /insights (sessionstore.Insights) reads what the worker writes: turns,
// their usage and model, the transcript's messages and tool calls,
// written here through the worker's store, and the conversations the
// router's store starts. Only the window's conversations of the chat
// count.
func TestInsightsReadWhatTheWorkerWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	now := time.Now().UTC().Truncate(time.Second)
	clock := now
	sessions := sessionstore.New(db).WithClock(func() time.Time { return clock })
	turns := store.New(db)

	// turn runs one turn in key's current conversation, started at, with
	// the tools it calls (one assistant message calls them all).
	n := 0
	turn := func(key, model string, at time.Time, u store.Usage, tools ...string) {
		t.Helper()
		sess, err := sessions.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		n++
		tr := store.Turn{TurnID: fmt.Sprintf("turn-%d", n), SessionKey: key, SessionID: sess.ID, Generation: sess.Generation,
			UserKey: "telegram:" + key, StartedAt: at, Usage: u}
		if _, err := turns.BeginTurn(ctx, tr); err != nil {
			t.Fatal(err)
		}
		msgs := []store.Message{{Role: "user", Content: "question"}}
		if len(tools) > 0 {
			call := store.Message{Role: "assistant"}
			for i, name := range tools {
				call.ToolCalls = append(call.ToolCalls, store.ToolCall{ID: fmt.Sprint(i), Name: name, Arguments: "{}"})
			}
			msgs = append(msgs, call)
			for i, name := range tools {
				msgs = append(msgs, store.Message{Role: "tool", ToolCallID: fmt.Sprint(i), ToolName: name, Content: "result"})
			}
		}
		if _, err := turns.Append(ctx, tr, store.Durable, 0, msgs...); err != nil {
			t.Fatal(err)
		}
		if _, err := turns.Finish(ctx, tr, nil, len(msgs), &store.Message{Role: "assistant", Content: "answer"},
			store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "answer", Seq: 1, Model: model}); err != nil {
			t.Fatal(err)
		}
	}
	arrive := func(key string, at time.Time) {
		t.Helper()
		clock = at
		if _, _, _, err := sessions.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: key, ChatType: "dm", UserId: key}, ""); err != nil {
			t.Fatal(err)
		}
	}
	reset := func(key string, at time.Time) {
		t.Helper()
		clock = at
		if _, err := sessions.Reset(ctx, key, "new"); err != nil {
			t.Fatal(err)
		}
	}
	day := 24 * time.Hour
	const alice, bob = "agent:main:telegram:dm:alice", "agent:main:telegram:dm:bob"

	// Alice: a conversation 40 days ago (outside the window), one 10
	// days ago with two turns, and the current one, a day old.
	arrive(alice, now.Add(-40*day))
	turn(alice, "gpt-old", now.Add(-40*day), store.Usage{Input: 1000, Output: 1000}, "terminal")
	reset(alice, now.Add(-10*day))
	turn(alice, "openai/gpt-4o", now.Add(-10*day), store.Usage{Input: 100, Output: 20, CacheRead: 50}, "web_search", "read_file")
	turn(alice, "openai/gpt-4o", now.Add(-10*day+time.Hour), store.Usage{Input: 200, Output: 40}, "web_search")
	reset(alice, now.Add(-day))
	turn(alice, "claude-x", now.Add(-day), store.Usage{Input: 10, Output: 5, CacheWrite: 1})
	// A turn that ended without a final: the router books its usage on
	// the session row.
	if _, err := sessions.TurnDone(ctx, alice, &sessionstore.Usage{Input: 7, Output: 3}); err != nil {
		t.Fatal(err)
	}
	// Bob, in the window too.
	arrive(bob, now.Add(-2*day))
	turn(bob, "openai/gpt-4o", now.Add(-2*day), store.Usage{Input: 5000, Output: 5000}, "web_search")

	in, err := sessions.Insights(ctx, alice, now.Add(-30*day))
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Sessions) != 2 || !in.Sessions[0].StartedAt.Equal(now.Add(-10*day)) || !in.Sessions[1].StartedAt.Equal(now.Add(-day)) {
		t.Errorf("conversations %+v, want the two of the window, oldest first", in.Sessions)
	}
	for _, s := range in.Sessions {
		if s.LastTurnAt.IsZero() {
			t.Errorf("conversation %s has no last turn", s.ID)
		}
	}
	// Messages: 2 tools turn (user, assistant call, 2 results, answer),
	// 1 tool turn (4), no tool turn (2).
	if in.Messages != 11 || in.UserMessages != 3 {
		t.Errorf("messages %d, of the user %d; want 11, 3", in.Messages, in.UserMessages)
	}
	if want := []sessionstore.ToolCount{{Name: "web_search", Calls: 2}, {Name: "read_file", Calls: 1}}; !slices.Equal(in.Tools, want) {
		t.Errorf("tools %+v, want %+v", in.Tools, want)
	}
	slices.SortFunc(in.Models, func(a, b sessionstore.ModelUsage) int { return len(a.Model) - len(b.Model) })
	want := []sessionstore.ModelUsage{
		{Model: "claude-x", Sessions: 1, Usage: sessionstore.Usage{Input: 10, Output: 5, CacheWrite: 1}},
		{Model: "openai/gpt-4o", Sessions: 1, Usage: sessionstore.Usage{Input: 300, Output: 60, CacheRead: 50}},
	}
	if !slices.Equal(in.Models, want) {
		t.Errorf("models %+v, want %+v", in.Models, want)
	}
	if in.Unbooked != (sessionstore.Usage{Input: 7, Output: 3}) || in.CurrentModel != "" {
		t.Errorf("unbooked %+v (model %q), want 7/3 on the default", in.Unbooked, in.CurrentModel)
	}

	// Two days hold only the current conversation, with the usage booked
	// on the row; the last hour holds none, and none of that usage.
	in, err = sessions.Insights(ctx, alice, now.Add(-2*day))
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Sessions) != 1 || in.Unbooked != (sessionstore.Usage{Input: 7, Output: 3}) {
		t.Errorf("2 days: %+v", in)
	}
	in, err = sessions.Insights(ctx, alice, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Sessions) != 0 || in.Unbooked != (sessionstore.Usage{}) || in.Messages != 0 || len(in.Models) != 0 {
		t.Errorf("the last hour: %+v", in)
	}
}
