package router

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
)

// notes are owner's notes' texts, oldest first.
func notes(t *testing.T, e *env, owner string) []string {
	t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT content FROM agent_memories WHERE user_key = $1 ORDER BY id`, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// Hermes's /memory: the gate's state and the pending writes, approve
// and reject by id, approval on|off; in Hermes's words; each chat's
// owner sees its own; a redelivered approve applies nothing again; it
// waits for a running turn (busy_policy reject).
func TestMemoryCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	gate := memorygate.New(e.db, false, 2200)
	const alice = "telegram:alice"
	stage := func(w memorygate.Write) string {
		t.Helper()
		w.Owner = alice
		id, err := gate.Stage(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	old, err := memorygate.AddNote(ctx, e.db, alice, "old note", 0)
	if err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct{ text, want string }{
		{"/memory", "memory.write_approval = off\n\nNo pending memory writes."},
		{"/memory approval", "memory.write_approval = off\nSet with: /memory approval <on|off>"},
		{"/memory approval maybe", "Invalid value 'maybe'. Use: on or off."},
		{"/memory approval on", "memory.write_approval set to 'on'."},
		{"/memory mode", "memory.write_approval = on\nSet with: /memory approval <on|off>"},
		{"/memory frob", "Unknown /memory subcommand. Use: pending, approve <id>, reject <id>, approval <on|off>."},
		{"/memory approve", "Usage: /memory approve|reject <id>  (or 'all')"},
		{"/memory approve abc12345", "No pending memory writes."},
	} {
		if got := e.ask("alice", tt.text); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.text, got, tt.want)
		}
	}
	if on, err := gate.Enabled(ctx, alice); err != nil || !on {
		t.Fatalf("alice's gate %v (%v), want on", on, err)
	}
	if on, err := gate.Enabled(ctx, "telegram:bob"); err != nil || on {
		t.Fatalf("bob's gate %v (%v), want off", on, err)
	}

	add := stage(memorygate.Write{Action: memorygate.ActionAdd, Content: "likes tea", TurnID: "t1", CallID: "c1"})
	rm := stage(memorygate.Write{Action: memorygate.ActionRemove, Content: "old note", NoteID: old, TurnID: "t1", CallID: "c2"})
	want := fmt.Sprintf("Pending memory writes (2):\n  %s  add to memory: likes tea\n  %s  remove from memory: old note\n\nApply: /memory approve <id>   Reject: /memory reject <id>", add, rm)
	if got := e.ask("alice", "/memory pending"); got != want {
		t.Errorf("/memory pending: %q, want %q", got, want)
	}
	// On Telegram, buttons for each write and for all of them.
	ns := e.noticeEvents("alice")
	wantButtons := [][]string{
		{"✅ Approve " + add + "|/memory approve " + add + "|", "❌ Reject " + add + "|/memory reject " + add + "|"},
		{"✅ Approve " + rm + "|/memory approve " + rm + "|", "❌ Reject " + rm + "|/memory reject " + rm + "|"},
		{"✅ Approve all|/memory approve all|", "❌ Reject all|/memory reject all|"},
	}
	if got := choices(ns[len(ns)-1].GetPicker()); fmt.Sprint(got) != fmt.Sprint(wantButtons) {
		t.Errorf("/memory pending buttons %q, want %q", got, wantButtons)
	}
	if got := e.ask("alice", "/memory"); got != "memory.write_approval = on\n\n"+want {
		t.Errorf("/memory: %q", got)
	}
	if got := e.ask("bob", "/memory pending"); got != "No pending memory writes." {
		t.Errorf("bob's /memory pending: %q", got)
	}
	for _, tt := range []struct{ text, want string }{
		{"/memory approve zzzzzzzz", "No pending memory write with id 'zzzzzzzz'."},
		{"/memory approve " + add, "Approved 1 memory write(s)."},
		{"/memory approve " + add, "No pending memory write with id '" + add + "'."},
		{"/memory pending", "Pending memory writes (1):\n  " + rm + "  remove from memory: old note\n\nApply: /memory approve <id>   Reject: /memory reject <id>"},
	} {
		if got := e.ask("alice", tt.text); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.text, got, tt.want)
		}
	}
	if ns := e.noticeEvents("alice"); len(choices(ns[len(ns)-1].GetPicker())) != 1 {
		t.Errorf("one pending write: buttons %q, want its row alone", choices(ns[len(ns)-1].GetPicker()))
	}
	// A press of its Reject button is the typed command.
	before := len(e.noticesTo("alice"))
	e.publish(press("alice", "/memory reject "+rm, "card-1", ""))
	waitFor(t, "the press's answer", func() bool { return len(e.noticesTo("alice")) > before })
	if got := e.noticesTo("alice")[before]; got != "Rejected pending memory write '"+rm+"'." {
		t.Errorf("Reject press: %q", got)
	}
	for _, tt := range []struct{ text, want string }{
		{"/memory reject " + rm, "No pending memory write with id '" + rm + "'."},
		{"/memory pending", "No pending memory writes."},
	} {
		if got := e.ask("alice", tt.text); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.text, got, tt.want)
		}
	}
	if got := notes(t, e, alice); strings.Join(got, "|") != "old note|likes tea" {
		t.Errorf("notes %q, want the old note kept and the approved one added", got)
	}

	// approve all: one applies, one whose note is gone is closed.
	gone := stage(memorygate.Write{Action: memorygate.ActionRemove, Content: "ghost", NoteID: old + 1000})
	stage(memorygate.Write{Action: memorygate.ActionAdd, Content: "walks at dawn"})
	got := e.ask("alice", "/memory approve all")
	if wantAll := fmt.Sprintf("Approved 1 memory write(s).\nFailed:\n  %s: no note %d", gone, old+1000); got != wantAll {
		t.Errorf("/memory approve all: %q, want %q", got, wantAll)
	}
	if got := notes(t, e, alice); strings.Join(got, "|") != "old note|likes tea|walks at dawn" {
		t.Errorf("notes after approve all: %q", got)
	}
	stage(memorygate.Write{Action: memorygate.ActionAdd, Content: "a"})
	stage(memorygate.Write{Action: memorygate.ActionAdd, Content: "b"})
	if got := e.ask("alice", "/memory reject ALL"); got != "Rejected 2 pending memory write(s)." {
		t.Errorf("/memory reject all: %q", got)
	}

	// A redelivered approve (the router died before it recorded the
	// event as handled) answers again and applies nothing again.
	fourth := stage(memorygate.Write{Action: memorygate.ActionAdd, Content: "once only"})
	before = len(e.noticesTo("alice"))
	ev := dm("alice", "/memory approve "+fourth)
	e.publish(ev)
	waitFor(t, "the approval", func() bool { return len(e.noticesTo("alice")) > before })
	e.loseHandled(ev)
	e.publishID(ev, "redelivered-"+ev.EventId)
	waitFor(t, "the replayed answer", func() bool { return len(e.noticesTo("alice")) > before+1 })
	if got := e.noticesTo("alice")[before:]; len(got) != 2 || got[0] != "Approved 1 memory write(s)." || got[1] != got[0] {
		t.Errorf("answers %q, want the first one again", got)
	}
	n := 0
	for _, s := range notes(t, e, alice) {
		if s == "once only" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the approved note stored %d times", n)
	}

	// Mid-turn it waits, as Hermes's.
	release := make(chan struct{})
	w := e.startWorker(func(tr *turnsv1.TurnRequested) {
		if tr.Inputs[0].GetText() == "long task" {
			<-release
		}
	})
	e.publish(dm("alice", "long task"))
	turnOf(t, w, "long task")
	if got := e.ask("alice", "/memory pending"); got != "⏳ Agent is running — `/memory` can't run mid-turn. Wait for the current response or `/stop` first." {
		t.Errorf("/memory mid-turn: %q", got)
	}
	close(release)
}

// Two router replicas approving the same writes at once apply each
// exactly once: one wins each claim, the other is told it is no longer
// pending.
func TestMemoryApproveRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.startRouter(testConfig(), nil, nil)
	b := e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	const owner = "telegram:carol"
	gate := memorygate.New(e.db, true, 2200)
	var ids []string
	for i := range 5 {
		id, err := gate.Stage(ctx, memorygate.Write{Owner: owner, Action: memorygate.ActionAdd, Content: fmt.Sprintf("fact %d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var wg sync.WaitGroup
	answers := make([]string, 6)
	for i := range answers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := "all"
			if i >= 2 {
				target = ids[i-1]
			}
			text, err := s.memoryApprove(ctx, s.memory, owner, target, "test")
			if err != nil {
				t.Error(err)
			}
			answers[i] = text
		}()
	}
	wg.Wait()
	got := notes(t, e, owner)
	if len(got) != len(ids) {
		t.Fatalf("notes %q after racing approvals, want each of %d once; answers %q", got, len(ids), answers)
	}
	seen := map[string]bool{}
	for _, n := range got {
		if seen[n] {
			t.Fatalf("note %q applied twice; answers %q", n, answers)
		}
		seen[n] = true
	}
	applied := 0
	for _, ans := range answers {
		var k int
		if _, err := fmt.Sscanf(ans, "Approved %d memory write(s).", &k); err == nil {
			applied += k
		} else if !strings.HasPrefix(ans, "No pending memory write") {
			t.Errorf("answer %q", ans)
		}
	}
	if applied != len(ids) {
		t.Errorf("answers count %d writes applied, want %d: %q", applied, len(ids), answers)
	}
}

// In a group whose sessions are per user, a list of pending memory
// writes belongs to whoever listed them, as a /model picker does: its
// buttons carry the owner's tag, and a press approves or rejects the
// owner's writes, whoever presses (as Hermes's callback, which refuses
// only users the gateway does not authorize); an id never reaches the
// presser's own writes; an unknown tag, or a group button without data,
// is an expired list that changes nothing; a DM's buttons stay the
// typed command.
func TestMemoryButtonsInPerUserGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	ctx := context.Background()
	gate := memorygate.New(e.db, false, 2200)
	aliceKey := "agent:main:telegram:group:chat-grp:alice"
	alice, bob := "session:"+aliceKey, "session:agent:main:telegram:group:chat-grp:bob"
	stage := func(owner, content string) string {
		t.Helper()
		id, err := gate.Stage(ctx, memorygate.Write{Owner: owner, Action: memorygate.ActionAdd, Content: content})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1, a2 := stage(alice, "alice likes tea"), stage(alice, "alice likes jazz")
	b1 := stage(bob, "bob likes chess")
	b2 := stage("telegram:bob", "bob's own, in his DM")

	e.publish(groupMsg("alice", "/memory pending"))
	waitFor(t, "alice's list", func() bool { return len(e.noticeEvents("grp")) == 1 })
	tag := ownerTag(aliceKey)
	list := e.noticeEvents("grp")[0].GetPicker()
	rows := choices(list)
	if got, want := fmt.Sprint(rows[2]), fmt.Sprint([]string{"✅ Approve all|/memory approve all|a-all." + tag, "❌ Reject all|/memory reject all|r-all." + tag}); got != want {
		t.Fatalf("alice's list's last row %s, want %s", got, want)
	}
	for _, r := range list.GetRows() {
		for i, c := range r.GetChoices() {
			if p := platform.PickerPayload(c, i); p == "" || len(p) > 64 {
				t.Errorf("button %q carried as %q (%d bytes), want Telegram's 64 at most", c.GetLabel(), p, len(p))
			}
		}
	}
	if got, want := rows[0][0], "✅ Approve "+a1+"|/memory approve "+a1+"|a-"+a1+"."+tag; got != want {
		t.Fatalf("a write's button %q, want %q", got, want)
	}

	groupPress := func(user, text, data string) *eventsv1.MessageReceived {
		ev := press(user, text, "card-1", "")
		ev.Source.ChatType, ev.Source.ChatId = "group", "chat-grp"
		ev.ButtonPress.Data = data
		return ev
	}
	pending := func(owner string) string {
		t.Helper()
		list, err := gate.Pending(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, p := range list {
			ids = append(ids, p.ID)
		}
		return strings.Join(ids, ",")
	}
	for _, tt := range []struct {
		name, chat string
		ev         *eventsv1.MessageReceived
		want       string
		// pending: alice's, bob's in the group and bob's in his DM after.
		alice, bob, bobDM string
		// hold: alice's turn runs, her session's lock held ("lock")
		// or lost with Redis's data while its lease holds ("lease").
		hold string
	}{
		{"another member rejects a write of the owner's", "grp", groupPress("bob", "/memory", "r-"+a1+"."+tag),
			"Rejected pending memory write '" + a1 + "'.", a2, b1, b2, ""},
		{"another member's own id on the owner's list", "grp", groupPress("bob", "/memory", "a-"+b1+"."+tag),
			"No pending memory write with id '" + b1 + "'.", a2, b1, b2, ""},
		{"an expired list", "grp", groupPress("bob", "/memory", "a-all.0badf00d"), memoryListExpired, a2, b1, b2, ""},
		{"data without an owner", "grp", groupPress("bob", "/memory", "a-all"), memoryListExpired, a2, b1, b2, ""},
		{"a group list's button without data", "grp", groupPress("bob", "/memory approve all", ""), memoryListExpired, a2, b1, b2, ""},
		{"another member while the owner's turn runs", "grp", groupPress("bob", "/memory", "a-all."+tag),
			"⏳ Agent is running — `/memory` can't run mid-turn. Wait for the current response or `/stop` first.", a2, b1, b2, "lock"},
		{"another member while the owner's turn runs, Redis lost its lock", "grp", groupPress("bob", "/memory", "a-all."+tag),
			"⏳ Agent is running — `/memory` can't run mid-turn. Wait for the current response or `/stop` first.", a2, b1, b2, "lease"},
		{"the owner approves all", "grp", groupPress("alice", "/memory", "a-all."+tag), "Approved 1 memory write(s).", "", b1, b2, ""},
		{"a DM's button is the typed command", "bob", press("bob", "/memory approve "+b2, "card-2", ""), "Approved 1 memory write(s).", "", b1, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.hold == "lease" {
				if _, err := e.db.Exec(ctx, `INSERT INTO turn_leases (session_key, turn_id, generation, expires_at)
					SELECT session_key, 'running', generation, now() + interval '1 minute' FROM sessions WHERE session_key = $1`, aliceKey); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if _, err := e.db.Exec(ctx, `DELETE FROM turn_leases WHERE session_key = $1`, aliceKey); err != nil {
						t.Error(err)
					}
				}()
			}
			if tt.hold == "lock" {
				locker := redisx.NewLocker(e.rdb, e.prefix)
				if ok, err := locker.Acquire(ctx, aliceKey, "running", time.Minute); err != nil || !ok {
					t.Fatal("take alice's lock", ok, err)
				}
				defer func() {
					if err := locker.Release(ctx, aliceKey, "running"); err != nil {
						t.Error(err)
					}
				}()
			}
			before := len(e.noticesTo(tt.chat))
			e.publish(tt.ev)
			waitFor(t, "the press's answer", func() bool { return len(e.noticesTo(tt.chat)) > before })
			if got := e.noticesTo(tt.chat)[before]; got != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
			if got := pending(alice); got != tt.alice {
				t.Errorf("alice's pending %q, want %q", got, tt.alice)
			}
			if got := pending(bob); got != tt.bob {
				t.Errorf("bob's pending in the group %q, want %q", got, tt.bob)
			}
			if got := pending("telegram:bob"); got != tt.bobDM {
				t.Errorf("bob's pending in his DM %q, want %q", got, tt.bobDM)
			}
		})
	}
	if got := notes(t, e, alice); fmt.Sprint(got) != fmt.Sprint([]string{"alice likes jazz"}) {
		t.Errorf("alice's notes %q, want the write approved by her press alone", got)
	}
	if got := notes(t, e, bob); len(got) != 0 {
		t.Errorf("bob's group notes %q, want none: no press was his", got)
	}
}
