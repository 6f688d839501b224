package store_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

func TestFinishIsOnceAndFenced(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS sessions (session_key text PRIMARY KEY,
		session_id text NOT NULL, platform text NOT NULL, generation bigint NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 3)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	turn := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 3, UserKey: "x:u"}
	st, err := s.BeginTurn(ctx, turn)
	if err != nil || st.Final != nil {
		t.Fatalf("begin: %v %v", st, err)
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM worker_turns`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("a turn that only began has a row: %d %v", rows, err)
	}
	if _, err := s.Append(ctx, turn, store.Durable, 0, store.Message{Role: "user", Content: "hello zanzibar"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, turn, store.Durable, 0, store.Message{Role: "user", Content: "again"}); err == nil {
		t.Error("a committed step was written twice")
	}
	first := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "one", Seq: 4}
	used := turn
	used.Usage = store.Usage{Input: 120, Output: 30, CacheRead: 7, CacheWrite: 2}
	got, err := s.Finish(ctx, used, nil, 1, &store.Message{Role: "assistant", Content: "one"}, first)
	decided := first
	decided.Usage = used.Usage // the final goes out with what its attempt used
	if err != nil || got != decided {
		t.Fatalf("finish: %v %v", got, err)
	}
	used.Usage = store.Usage{Input: 999, Output: 999}
	got, err = s.Finish(ctx, used, nil, 2, &store.Message{Role: "assistant", Content: "two"}, store.Final{Kind: store.FinalText, Text: "two", Seq: 9})
	if err != nil || got != decided {
		t.Fatalf("second finish replaced the first (or its usage): %v %v", got, err)
	}
	// The usage stored is the deciding attempt's.
	var u store.Usage
	if err := db.QueryRow(ctx, `SELECT input_tokens, output_tokens, cache_read_tokens, cache_write_tokens FROM worker_turns WHERE turn_id = 't1'`).
		Scan(&u.Input, &u.Output, &u.CacheRead, &u.CacheWrite); err != nil || u != (store.Usage{Input: 120, Output: 30, CacheRead: 7, CacheWrite: 2}) {
		t.Errorf("stored usage %+v (%v)", u, err)
	}
	st, err = s.BeginTurn(ctx, turn)
	if err != nil || st.Final == nil || st.Final.Seq != 4 || st.Final.Usage != decided.Usage {
		t.Fatalf("redelivered begin: %+v %v", st, err)
	}
	if len(st.History) != 2 || st.History[0].Content != "hello zanzibar" || st.History[1].Content != "one" || st.Prompt != nil {
		t.Fatalf("begin did not load the conversation: %+v", st)
	}
	if err := s.SavePrompt(ctx, turn, "sig", "prompt text"); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveSummary(ctx, turn, st.History[0].ID, "they said hello"); err != nil {
		t.Fatal(err)
	}
	st, err = s.BeginTurn(ctx, store.Turn{TurnID: "t2", SessionKey: "k", SessionID: "sid", Generation: 3})
	if err != nil || st.Final != nil || st.Summary != "they said hello" || len(st.History) != 1 ||
		st.Prompt == nil || st.Prompt.Text != "prompt text" {
		t.Fatalf("next turn's begin: %+v %v", st, err)
	}
	// A simple turn writes once: its input goes with its end.
	began := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	t4 := store.Turn{TurnID: "t4", SessionKey: "k", SessionID: "sid4", Generation: 3, StartedAt: began}
	in := []store.Message{{Step: 0, Role: "user", Content: "question"}}
	if _, err := s.Finish(ctx, t4, in, 1, &store.Message{Role: "assistant", Content: "answer"},
		store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "answer", Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if _, four, err := s.History(ctx, "sid4"); err != nil || len(four) != 2 || four[0].Content != "question" || four[1].Step != 1 || in[0].ID == 0 {
		t.Fatalf("one-write turn: %+v %v (input id %d)", four, err, in[0].ID)
	}
	var started time.Time
	if err := db.QueryRow(ctx, `SELECT started_at FROM worker_turns WHERE turn_id = 't4'`).Scan(&started); err != nil || !started.Equal(began) {
		t.Errorf("turn row started at %v (%v), want %v", started, err, began)
	}
	summary, msgs, err := s.History(ctx, "sid")
	if err != nil || len(msgs) != 1 || summary != "they said hello" {
		t.Fatalf("history %v %v", msgs, err)
	}
	hits, err := s.Search(ctx, "x:u", "other", "zanzibar", 5)
	if err != nil || len(hits) != 1 {
		t.Fatalf("search %v %v", hits, err)
	}
	if _, err := db.Exec(ctx, `UPDATE sessions SET generation = 4`); err != nil {
		t.Fatal(err)
	}
	if err := s.SavePrompt(ctx, turn, "sig", "p"); !errors.Is(err, store.ErrStaleGeneration) {
		t.Errorf("stale prompt save: %v", err)
	}
	for name, write := range map[string]func() error{
		"append": func() error {
			_, err := s.Append(ctx, turn, store.Deferred, 5, store.Message{Role: "user"})
			return err
		},
		"finish": func() error {
			_, err := s.Finish(ctx, store.Turn{TurnID: "t3", SessionKey: "k", SessionID: "sid", Generation: 3}, nil, 0, nil, first)
			return err
		},
		"gone": func() error { return s.CheckGeneration(ctx, store.Turn{SessionKey: "nope", Generation: 1}) },
	} {
		if err := write(); !errors.Is(err, store.ErrStaleGeneration) {
			t.Errorf("%s under a stale generation: %v", name, err)
		}
	}
	// Beginning only reads: a stale turn learns it at its first write.
	if st, err := s.BeginTurn(ctx, turn); err != nil || st.Final == nil {
		t.Errorf("begin under a stale generation: %+v %v", st, err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM worker_turns WHERE turn_id = 't3'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("a fenced finish left a turn row: %d %v", n, err)
	}
}

// The fence and a generation bump exclude each other until commit: a bump
// waits for a fenced write in flight, and a fenced write waits for a bump
// in flight and then judges by the bumped generation.
func TestFenceAndGenerationBumpWaitForEachOther(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('race', 'sid', 'x', 0)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	// waiting blocks until a session-generation advisory lock request of
	// the test's database is queued behind a holder.
	waiting := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE l.locktype = 'advisory' AND l.classid = 21314 AND NOT l.granted AND d.datname = current_database()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("nobody waits for the session's generation lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	fenced, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fenced.Exec(ctx, `SELECT switchboard_fence('race', 0)`); err != nil {
		t.Fatal(err)
	}
	bumped := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, `UPDATE sessions SET generation = 1 WHERE session_key = 'race'`)
		bumped <- err
	}()
	waiting()
	select {
	case err := <-bumped:
		t.Fatalf("the bump did not wait for the fenced write: %v", err)
	default:
	}
	if err := fenced.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bumped; err != nil {
		t.Fatal(err)
	}

	bump, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bump.Exec(ctx, `UPDATE sessions SET generation = 2 WHERE session_key = 'race'`); err != nil {
		t.Fatal(err)
	}
	checks := make(chan error, 2)
	for _, gen := range []int64{1, 2} {
		go func() { checks <- s.CheckGeneration(ctx, store.Turn{SessionKey: "race", Generation: gen}) }()
	}
	waiting()
	if err := bump.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var stale, current int
	for range 2 {
		switch err := <-checks; {
		case errors.Is(err, store.ErrStaleGeneration):
			stale++
		case err == nil:
			current++
		default:
			t.Fatal(err)
		}
	}
	if stale != 1 || current != 1 {
		t.Fatalf("after the bump: %d stale, %d current; want the old generation refused and the new one allowed", stale, current)
	}
}

// A turn's cut removes the conversation's messages from an id on with its
// first write, and never again: a redelivered attempt's writes, which
// find the turn's own rows or its final, remove nothing more.
func TestCutRemovesOnceWithTheFirstWrite(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 1)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	var ids []int64
	for i, text := range []string{"a", "b", "c", "d"} {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs, err := s.Append(ctx, store.Turn{TurnID: "old" + text, SessionKey: "k", SessionID: "sid", Generation: 1},
			store.Durable, 0, store.Message{Role: role, Content: text})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, msgs[0].ID)
	}
	contents := func() string {
		t.Helper()
		_, msgs, err := s.History(ctx, "sid")
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, m := range msgs {
			b.WriteString(m.Content)
		}
		return b.String()
	}

	// /retry of "c": the first write removes c and d and writes c again.
	retry := store.Turn{TurnID: "retry", SessionKey: "k", SessionID: "sid", Generation: 1, Cut: ids[2]}
	if _, err := s.Append(ctx, retry, store.Deferred, 0, store.Message{Role: "user", Content: "C"}); err != nil {
		t.Fatal(err)
	}
	if got := contents(); got != "abC" {
		t.Fatalf("after the first write: %q, want abC", got)
	}
	// Its later writes, in this attempt or the next, cut nothing.
	retry.Cut = ids[0]
	if _, err := s.Finish(ctx, retry, nil, 1, &store.Message{Role: "assistant", Content: "D"},
		store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "D", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if got := contents(); got != "abCD" {
		t.Fatalf("after the final: %q, want abCD", got)
	}

	// /undo writes no message: its final's write removes, once.
	undo := store.Turn{TurnID: "undo", SessionKey: "k", SessionID: "sid", Generation: 1, Cut: ids[0]}
	final := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "undone", Seq: 1}
	if _, err := s.Finish(ctx, undo, nil, 0, nil, final); err != nil {
		t.Fatal(err)
	}
	if got := contents(); got != "" {
		t.Fatalf("after /undo: %q, want nothing", got)
	}
	if _, err := s.Append(ctx, store.Turn{TurnID: "new", SessionKey: "k", SessionID: "sid", Generation: 1},
		store.Durable, 0, store.Message{Role: "user", Content: "e"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, undo, nil, 0, nil, final); err != nil {
		t.Fatal(err)
	}
	if got := contents(); got != "e" {
		t.Fatalf("a redelivered /undo removed again: %q, want e", got)
	}
}

// A user's notes stay within their limit, counted in characters, even when
// two turns add at once; another user's notes neither count nor show.
func TestMemoriesStayWithinTheirLimit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	s := store.New(db)
	if _, err := s.AddMemory(ctx, "telegram:alice", strings.Repeat("é", 8), 10); err != nil {
		t.Fatal(err)
	}
	_, err := s.AddMemory(ctx, "telegram:alice", "abc", 10)
	if !errors.Is(err, store.ErrMemoryFull) || !strings.Contains(err.Error(), "8/10 characters; this one (3)") {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := s.AddMemory(ctx, "telegram:bob", strings.Repeat("b", 10), 10); err != nil {
		t.Fatalf("bob's room taken by alice's notes: %v", err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := s.AddMemory(ctx, "telegram:carol", "12345", 10)
			errs <- err
		}()
	}
	added := 0
	for range 8 {
		switch err := <-errs; {
		case err == nil:
			added++
		case !errors.Is(err, store.ErrMemoryFull):
			t.Fatal(err)
		}
	}
	if added != 2 {
		t.Errorf("%d concurrent adds of 5 characters fit a limit of 10", added)
	}
	alice, err := s.Memories(ctx, "telegram:alice", 100)
	if err != nil || len(alice) != 1 {
		t.Fatalf("alice's notes %v %v", alice, err)
	}
	if deleted, err := s.DeleteMemory(ctx, "telegram:bob", alice[0].ID); err != nil || deleted {
		t.Errorf("bob removed alice's note: %v %v", deleted, err)
	}
}

// A tool-use step's signed thinking is stored with it, as the model
// returned it (redacted blocks too), and read back by BeginTurn and
// History, so a resumed turn can send it back unchanged; any other
// message stores none (the column stays NULL).
func TestThinkingOfAToolUseStepIsStored(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 1)`); err != nil {
		t.Fatal(err)
	}
	s := store.New(db)
	turn := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 1}
	signed := []llm.Thinking{{Text: "Look at the clock.", Signature: "sig-1"}, {Redacted: "ZW5jcnlwdGVk"}}
	call := []store.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}
	if _, err := s.Append(ctx, turn, store.Durable, 0,
		store.Message{Role: "user", Content: "time?"},
		store.Message{Role: "assistant", ToolCalls: call, Thinking: signed},
		store.Message{Role: "tool", ToolCallID: "c1", ToolName: "clock", Content: "12:00"},
		store.Message{Role: "assistant", ToolCalls: []store.ToolCall{{ID: "c2", Name: "clock", Arguments: `{}`}}},
	); err != nil {
		t.Fatal(err)
	}
	// The final answer's thinking is not sent back: not stored either.
	if _, err := s.Finish(ctx, turn, nil, 4, &store.Message{Role: "assistant", Content: "noon", Thinking: signed},
		store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "noon", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	want := [][]llm.Thinking{nil, signed, nil, nil, nil}
	check := func(how string, msgs []store.Message) {
		t.Helper()
		if len(msgs) != len(want) {
			t.Fatalf("%s: %d messages, want %d", how, len(msgs), len(want))
		}
		for i, m := range msgs {
			if !reflect.DeepEqual(m.Thinking, want[i]) {
				t.Errorf("%s: step %d (%s) thinking %+v, want %+v", how, m.Step, m.Role, m.Thinking, want[i])
			}
		}
	}
	_, msgs, err := s.History(ctx, "sid")
	if err != nil {
		t.Fatal(err)
	}
	check("History", msgs)
	st, err := s.BeginTurn(ctx, store.Turn{TurnID: "t2", SessionKey: "k", SessionID: "sid", Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	check("BeginTurn", st.History)
	var stored int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE thinking IS NOT NULL`).Scan(&stored); err != nil || stored != 1 {
		t.Errorf("%d messages store thinking (%v), want 1", stored, err)
	}
}

// The judge's consecutive denials per conversation: each DENY of another
// call adds one, the same call counted again (a resumed turn asks the
// judge anew) does not, a reset deletes the row, and conversations are
// counted apart.
func TestJudgeDenials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := store.New(pgtest.New(t))
	type step struct {
		op         string // deny, reset
		sid        string
		turn, call string
		want       int // the tally after the step
	}
	for i, st := range []step{
		{"deny", "c1", "t1", "call_0", 1},
		{"deny", "c1", "t1", "call_0", 1}, // resumed: the same call
		{"deny", "c1", "t1", "call_1", 2},
		{"deny", "c1", "t2", "call_1", 3}, // another turn's call of the same id
		{"deny", "c2", "t9", "call_0", 1},
		{"deny", "c1", "t2", "call_1", 3},
		{"reset", "c1", "", "", 0},
		{"reset", "c1", "", "", 0},
		{"deny", "c1", "t2", "call_1", 1}, // after a reset the same call counts again
		{"deny", "c2", "t9", "call_1", 2},
	} {
		switch st.op {
		case "deny":
			n, err := s.RecordJudgeDenial(ctx, st.sid, st.turn, st.call)
			if err != nil || n != st.want {
				t.Fatalf("step %d: RecordJudgeDenial = %d, %v; want %d", i, n, err, st.want)
			}
		case "reset":
			if err := s.ResetJudgeDenials(ctx, st.sid); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if n, err := s.JudgeDenials(ctx, st.sid); err != nil || n != st.want {
			t.Fatalf("step %d: JudgeDenials(%s) = %d, %v; want %d", i, st.sid, n, err, st.want)
		}
	}
}

// A turn that took the session's /reload-skills note and ends without
// a model reading it gives it back with its final (Final.ReturnNote),
// once: a redelivered Finish of the decided turn gives nothing back
// (the next turn took the note meanwhile), a newer note set meanwhile
// stays (Hermes keeps the last), a note never reaches another
// conversation, and a turn the session moved on from writes nothing.
func TestFinishGivesTheSkillsNoteBackOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	s := store.New(db)
	type note struct {
		text, session *string
	}
	str := func(s string) *string { return &s }
	for i, tc := range []struct {
		name         string
		sessionID    string // the session's conversation when the turn ends
		generation   int64  // the session's generation when the turn ends
		before       note   // the session's note when the turn ends
		bumpInFlight bool   // a generation bump holds the row as the turn ends
		want         note
		returned     bool
		stale        bool
	}{
		{name: "pending again", sessionID: "sid", generation: 3, want: note{str("n"), str("sid")}, returned: true},
		{name: "a newer note waits", sessionID: "sid", generation: 3, before: note{str("newer"), str("sid")},
			want: note{str("newer"), str("sid")}},
		{name: "an earlier conversation's note is replaced", sessionID: "sid", generation: 3, before: note{str("old"), str("sid0")},
			want: note{str("n"), str("sid")}, returned: true},
		{name: "another conversation", sessionID: "sid2", generation: 3},
		{name: "a stale turn", sessionID: "sid", generation: 4, stale: true},
		{name: "a bump in flight", sessionID: "sid", generation: 3, bumpInFlight: true, stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprint("note-", i)
			if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation, skills_note, skills_note_session)
				VALUES ($1, $2, 'x', $3, $4, $5)`, key, tc.sessionID, tc.generation, tc.before.text, tc.before.session); err != nil {
				t.Fatal(err)
			}
			turn := store.Turn{TurnID: "t-" + key, SessionKey: key, SessionID: "sid", Generation: 3, UserKey: "x:u"}
			final := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: "Nothing to retry.", Seq: 1, ReturnNote: "n"}
			finish := func() (store.Final, error) {
				return s.Finish(ctx, turn, []store.Message{{Role: "user", Content: "/retry"}}, 1, nil, final)
			}
			var got store.Final
			var err error
			if tc.bumpInFlight {
				bump, berr := db.Begin(ctx)
				if berr != nil {
					t.Fatal(berr)
				}
				if _, berr := bump.Exec(ctx, `UPDATE sessions SET generation = 4 WHERE session_key = $1`, key); berr != nil {
					t.Fatal(berr)
				}
				done := make(chan error, 1)
				go func() { _, err := finish(); done <- err }()
				waitLocked(t, db, key)
				if berr := bump.Commit(ctx); berr != nil {
					t.Fatal(berr)
				}
				err = <-done
			} else {
				got, err = finish()
			}
			if tc.stale {
				if !errors.Is(err, store.ErrStaleGeneration) {
					t.Fatalf("finish of a stale turn: %v, want ErrStaleGeneration", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got.NoteReturned != tc.returned {
				t.Errorf("NoteReturned %v, want %v", got.NoteReturned, tc.returned)
			}
			var text, session *string
			if err := db.QueryRow(ctx, `SELECT skills_note, skills_note_session FROM sessions WHERE session_key = $1`, key).Scan(&text, &session); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(note{text, session}, tc.want) {
				t.Fatalf("note %v/%v after the turn, want %v/%v", deref(text), deref(session), deref(tc.want.text), deref(tc.want.session))
			}
			if tc.stale {
				return
			}
			// The next turn takes what waits; a second Finish of the
			// decided turn (an attempt that raced the first; its inputs
			// were written) gives nothing back.
			if _, err := db.Exec(ctx, `UPDATE sessions SET skills_note = NULL, skills_note_session = NULL WHERE session_key = $1`, key); err != nil {
				t.Fatal(err)
			}
			if again, err := s.Finish(ctx, turn, nil, 1, nil, final); err != nil || again.NoteReturned || again.Text != final.Text {
				t.Fatalf("second finish: %+v %v", again, err)
			}
			if err := db.QueryRow(ctx, `SELECT skills_note FROM sessions WHERE session_key = $1`, key).Scan(&text); err != nil || text != nil {
				t.Fatalf("a redelivered finish gave the note back again: %v %v", deref(text), err)
			}
		})
	}
}

// waitLocked blocks until a transaction waits for the lock of key's
// session row.
func waitLocked(t *testing.T, db *pgxpool.Pool, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR NO KEY UPDATE%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody waits for session %s's row", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// The write that gives steering to the model removes its queued message
// (Turn.Steered) in the same transaction, and is refused as stale when
// the message is no longer queued for the turn: gone (another write, or
// another turn, took it), or locked by a transaction in flight (a turn
// start taking it as an input), which the write does not wait for.
func TestSteeredWritesTakeTheQueuedMessageOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, generation) VALUES ('k', 'sid', 'x', 1)`); err != nil {
		t.Fatal(err)
	}
	queue := func(ids ...string) {
		t.Helper()
		for i, id := range ids {
			if _, err := db.Exec(ctx, `INSERT INTO session_queue (session_key, stream_seq, event_id, event) VALUES ('k', $1, $2, '')`, i, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	queued := func() string {
		t.Helper()
		var ids []string
		if err := db.QueryRow(ctx, `SELECT coalesce(array_agg(event_id ORDER BY id), '{}') FROM session_queue`).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		return strings.Join(ids, ",")
	}
	s := store.New(db)
	turn := store.Turn{TurnID: "t1", SessionKey: "k", SessionID: "sid", Generation: 1, UserKey: "x:u"}
	steered := func(ids ...string) store.Turn {
		t2 := turn
		t2.Steered = ids
		return t2
	}
	queue("e1", "e2", "e3", "other")
	step := 0
	write := func(tt store.Turn, content string) error {
		_, err := s.Append(ctx, tt, store.Durable, step, store.Message{Role: "user", Content: content})
		if err == nil {
			step++
		}
		return err
	}
	if err := write(steered("e1", "e2"), "steer one and two"); err != nil {
		t.Fatal(err)
	}
	if got := queued(); got != "e3,other" {
		t.Fatalf("queued %q after the steered write", got)
	}
	if err := write(steered("e1"), "steer one again"); !errors.Is(err, store.ErrStaleGeneration) {
		t.Fatalf("a write of steering no longer queued: %v, want stale", err)
	}
	// e3 is being taken by another transaction: the write gives way.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `DELETE FROM session_queue WHERE event_id = 'e3'`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.Append(wctx, steered("e3"), store.Durable, step, store.Message{Role: "user", Content: "steer three"}); !errors.Is(err, store.ErrStaleGeneration) {
		t.Fatalf("a write of steering another transaction holds: %v, want stale at once", err)
	}
	_ = tx.Rollback(ctx)
	if err := write(steered("e3"), "steer three"); err != nil {
		t.Fatal(err)
	}
	_, msgs, err := s.History(ctx, "sid")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Content)
	}
	if strings.Join(got, "|") != "steer one and two|steer three" || queued() != "other" {
		t.Fatalf("transcript %q, queued %q", got, queued())
	}
}
