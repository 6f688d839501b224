package router

import (
	"context"
	"strings"
	"testing"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /branch [title] (/fork): the chat continues in a copy of its
// conversation, with Hermes's answer; the original stays for /resume;
// the next turn runs in the branch; a chat without a message yet is
// told so; mid-turn it is refused, as Hermes refuses it.
func TestBranchCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.Inputs[0].GetText() == "long task" {
			<-release
		}
	})
	ctx := context.Background()
	store := sessionstore.New(e.db)
	key := "agent:main:telegram:dm:chat-alice"

	if got := e.ask("alice", "/branch"); got != "No conversation to branch — send a message first." {
		t.Errorf("/branch of a new chat: %q", got)
	}
	if got := e.ask("alice", "/title Plan"); !strings.Contains(got, "Title set: Plan") {
		t.Fatalf("/title: %q", got)
	}
	e.publish(dm("alice", "hello"))
	turnOf(t, w, "hello")
	orig, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// What the worker wrote for the turn.
	if _, err := e.db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content)
		VALUES ($1, $2, 'telegram:alice', 't1', $3, 0, 'user', 'hello'), ($1, $2, 'telegram:alice', 't1', $3, 1, 'assistant', 'hi there')`,
		key, orig.ID, orig.Generation); err != nil {
		t.Fatal(err)
	}

	got := e.ask("alice", "/branch")
	branched, _ := store.Get(ctx, key)
	want := "⑂ Branched to **Plan #2** (1 message copied)\nOriginal: `" + orig.ID + "`\nBranch: `" + branched.ID +
		"`\nUse `/resume` to switch back to the original."
	if got != want || branched.ID == orig.ID || branched.Generation <= orig.Generation {
		t.Fatalf("/branch: %q, session %s gen %d\nwant %q, a new session after %s gen %d", got, branched.ID, branched.Generation, want, orig.ID, orig.Generation)
	}
	var n int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE session_id = $1`, branched.ID).Scan(&n); err != nil || n != 2 {
		t.Fatalf("branch has %d messages (%v), want 2", n, err)
	}
	e.publish(dm("alice", "in the branch"))
	if tr := turnOf(t, w, "in the branch"); tr.GetSessionId() != branched.ID {
		t.Errorf("turn after /branch ran in %s, want the branch %s", tr.GetSessionId(), branched.ID)
	}
	for _, tt := range []struct{ text, want string }{
		{"/fork Side quest", "⑂ Branched to **Side quest** (1 message copied)"},
		{"/fork \u200b", "Title is empty after cleanup"},
		{"/sessions", "Plan #2"},
		{"/resume Plan", "↩️ Resumed Plan."},
	} {
		if got := e.ask("alice", tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want it to contain %q", tt.text, got, tt.want)
		}
	}
	if cur, _ := store.Get(ctx, key); cur.ID != orig.ID {
		t.Errorf("after /resume Plan: %s, want the original %s", cur.ID, orig.ID)
	}

	// Mid-turn: refused, the conversation unchanged.
	e.publish(dm("alice", "long task"))
	turnOf(t, w, "long task")
	before, _ := store.Get(ctx, key)
	if got := e.ask("alice", "/branch"); got != "⏳ Agent is running — `/branch` can't run mid-turn. Wait for the current response or `/stop` first." {
		t.Errorf("/branch mid-turn: %q", got)
	}
	close(release)
	if after, _ := store.Get(ctx, key); after.ID != before.ID {
		t.Errorf("/branch mid-turn switched to %s", after.ID)
	}
}
