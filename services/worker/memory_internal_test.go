package worker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// The memory tool against Postgres: with memory.write_approval off it
// writes at once; with it on (the default, or the owner's /memory
// approval) adds and removes are held and the model is told so in
// Hermes's words; a tool call that runs again stages nothing new; list
// is never held; another owner's gate is its own.
func TestMemoryToolGate(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	gate := memorygate.New(db, false, 2200)
	tool := tools.Memory(memoryAdapter{s: store.New(db), limit: 2200, gate: gate})
	call := tools.Call{ID: "call-1", TurnID: "turn-1", SessionKey: "agent:main:telegram:dm:7", UserKey: "telegram:7"}
	run := func(c tools.Call, args string) string {
		t.Helper()
		out, err := tool.Run(ctx, c, json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		return out
	}
	count := func(owner string) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM agent_memories WHERE user_key = $1`, owner).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Gate off: written at once.
	if got := run(call, `{"action":"add","content":"likes tea"}`); !strings.HasPrefix(got, "saved note ") {
		t.Fatalf("add with the gate off: %q", got)
	}
	if count("telegram:7") != 1 {
		t.Fatal("the note was not written")
	}
	list, _ := gate.Pending(ctx, "telegram:7")
	if len(list) != 0 {
		t.Fatalf("staged with the gate off: %+v", list)
	}

	// Gate on for this owner.
	if err := gate.SetEnabled(ctx, "telegram:7", true, "test"); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Success   bool   `json:"success"`
		Staged    bool   `json:"staged"`
		PendingID string `json:"pending_id"`
		Message   string `json:"message"`
	}
	got := run(call, `{"action":"add","content":"walks at dawn"}`)
	if err := json.Unmarshal([]byte(got), &res); err != nil {
		t.Fatalf("held add: %q: %v", got, err)
	}
	if !res.Success || !res.Staged || !memorygate.ValidID(res.PendingID) ||
		res.Message != "Staged for approval (memory.write_approval is on). Not yet saved — review with /memory pending." {
		t.Fatalf("held add told the model %q", got)
	}
	if count("telegram:7") != 1 {
		t.Fatal("a held add was written")
	}
	// The same call again (its turn resumed elsewhere): the same entry.
	if again := run(call, `{"action":"add","content":"walks at dawn"}`); again != got {
		t.Fatalf("the call again: %q, want %q", again, got)
	}
	// A removal is held too; one of a note that is not there is not.
	listed := run(call, `{"action":"list"}`)
	if !strings.Contains(listed, "likes tea") {
		t.Fatalf("list with the gate on: %q", listed)
	}
	id := strings.SplitN(listed, ":", 2)[0]
	rm := call
	rm.ID = "call-2"
	if got := run(rm, `{"action":"remove","id":`+id+`}`); !strings.Contains(got, `"staged":true`) {
		t.Fatalf("held remove: %q", got)
	}
	if got := run(rm, `{"action":"remove","id":424242}`); got != "no note 424242" {
		t.Fatalf("remove of a missing note: %q", got)
	}
	if count("telegram:7") != 1 {
		t.Fatal("a held remove removed")
	}
	list, err := gate.Pending(ctx, "telegram:7")
	if err != nil || len(list) != 2 || list[0].Summary != "add to memory: walks at dawn" || list[1].Summary != "remove from memory: likes tea" {
		t.Fatalf("pending %+v (%v)", list, err)
	}

	// Another owner: the default (off) still.
	other := call
	other.UserKey, other.ID = "telegram:8", "call-3"
	if got := run(other, `{"action":"add","content":"hi"}`); !strings.HasPrefix(got, "saved note ") {
		t.Fatalf("another owner's add: %q", got)
	}

	// The default on (memory.write_approval true): held for an owner
	// who never chose.
	on := tools.Memory(memoryAdapter{s: store.New(db), limit: 2200, gate: memorygate.New(db, true, 2200)})
	third := call
	third.UserKey, third.ID = "telegram:9", "call-4"
	if got, err := on.Run(ctx, third, json.RawMessage(`{"action":"add","content":"x"}`)); err != nil || !strings.Contains(got, `"staged":true`) {
		t.Fatalf("add with the default on: %q %v", got, err)
	}
	if count("telegram:9") != 0 {
		t.Fatal("written with the default on")
	}
}
