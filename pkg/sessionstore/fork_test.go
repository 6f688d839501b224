package sessionstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// forkSource is a conversation of the API key srcKey as the worker
// leaves it: turns t1 (a tool call) and t2, each with its worker_turns
// row, a summary of the first exchange and a stored system prompt.
type forkSource struct {
	db     *pgxpool.Pool
	s      *Store
	key    string
	id     string // its session id
	t1Last int64  // the id of t1's last message
}

var forkAPISource = &eventsv1.SessionSource{Platform: "api", ChatId: "conv", ChatType: "dm", UserId: "client"}

func newForkSource(t *testing.T) *forkSource {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	f := &forkSource{db: db, s: New(db), key: "agent:main:api:dm:conv"}
	sess, _, _, err := f.s.Arrive(ctx, f.key, "", forkAPISource, "e1")
	if err != nil {
		t.Fatal(err)
	}
	f.id = sess.ID
	base := time.Now().Add(-time.Hour)
	msgs := []struct {
		turn, role, content string
		step                int
	}{
		{"t1", "user", "alpha", 0},
		{"t1", "assistant", "", 1}, // a tool call
		{"t1", "tool", "tool result", 2},
		{"t1", "assistant", "echo: alpha", 3},
		{"t2", "user", "bravo", 0},
		{"t2", "assistant", "echo: bravo", 1},
	}
	var ids []int64
	for i, m := range msgs {
		var calls []byte
		if m.role == "assistant" && m.content == "" {
			calls = []byte(`[{"id":"c1","name":"clock","arguments":"{}"}]`)
		}
		var id int64
		if err := db.QueryRow(ctx, `INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step,
			role, content, tool_calls, tool_call_id, created_at) VALUES ($1, $2, 'api:client', $3, 1, $4, $5, $6, $7, $8, $9) RETURNING id`,
			f.key, f.id, m.turn, m.step, m.role, m.content, calls, map[bool]string{true: "c1"}[m.role == "tool"],
			base.Add(time.Duration(i)*time.Minute)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	f.t1Last = ids[3]
	// The worker cleared the tool result mid-turn: a copy reads it so too.
	if _, err := db.Exec(ctx, `UPDATE transcript_messages SET compacted = 'cleared result' WHERE id = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		turn    string
		decided time.Time
	}{{"t1", base.Add(3*time.Minute + time.Second)}, {"t2", base.Add(5*time.Minute + time.Second)}} {
		if _, err := db.Exec(ctx, `INSERT INTO worker_turns (turn_id, session_key, session_id, generation, status, final_kind, final_text, updated_at)
			VALUES ($1, $2, $3, 1, 'completed', 'final_text', 'x', $4)`, w.turn, f.key, f.id, w.decided); err != nil {
			t.Fatal(err)
		}
	}
	// A summary of t1's user message, and one of the first exchange that
	// a later turn wrote (t2's own messages are never summarized here).
	for _, upto := range []int64{ids[0], ids[3]} {
		if _, err := db.Exec(ctx, `INSERT INTO transcript_summaries (session_id, session_key, upto_id, summary, turn_id, generation)
			VALUES ($1, $2, $3, $4, 't2', 1)`, f.id, f.key, upto, "summary to "+map[bool]string{true: "alpha", false: "echo"}[upto == ids[0]]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO session_prompts (session_id, session_key, signature, prompt) VALUES ($1, $2, 'sig', 'the prompt')`,
		f.id, f.key); err != nil {
		t.Fatal(err)
	}
	return f
}

// copied is a conversation's transcript as the worker reads it: content
// (with what the model reads of a cleared tool result) by role, in
// order, and the turn ids.
type copied struct {
	contents, roles, turns []string
	ids                    []int64
	calls                  []string
}

func (f *forkSource) transcript(t *testing.T, sessionID string) copied {
	t.Helper()
	rows, err := f.db.Query(context.Background(), `SELECT id, turn_id, role, content || coalesce(' [compacted: ' || compacted || ']', ''), coalesce(tool_calls::text, '')
		FROM transcript_messages WHERE session_id = $1 ORDER BY id`, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	var c copied
	for rows.Next() {
		var id int64
		var turn, role, content, calls string
		if err := rows.Scan(&id, &turn, &role, &content, &calls); err != nil {
			t.Fatal(err)
		}
		c.ids, c.turns, c.roles, c.contents, c.calls = append(c.ids, id), append(c.turns, turn), append(c.roles, role),
			append(c.contents, content), append(c.calls, calls)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

type summary struct {
	upto int64
	text string
}

func (f *forkSource) summaries(t *testing.T, sessionID string) []summary {
	t.Helper()
	rows, err := f.db.Query(context.Background(), `SELECT upto_id, summary FROM transcript_summaries WHERE session_id = $1 ORDER BY upto_id`, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (summary, error) {
		var s summary
		err := r.Scan(&s.upto, &s.text)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *forkSource) prompt(t *testing.T, sessionID string) string {
	t.Helper()
	var p string
	err := f.db.QueryRow(context.Background(), `SELECT prompt FROM session_prompts WHERE session_id = $1`, sessionID).Scan(&p)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A session opened with a fork point starts as a copy of the conversation
// up to the turn named: its messages in order (tool calls included),
// the summaries of them pointing at the copies, the stored prompt; the
// source stays as it was.
func TestArriveForkCopiesUpToTheTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	before := f.transcript(t, f.id)
	key := "agent:main:api:dm:branch"
	src := &eventsv1.SessionSource{Platform: "api", ChatId: "branch", ChatType: "dm", UserId: "client"}
	fork := &eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t1"}
	sess, created, _, err := f.s.ArriveFork(ctx, key, "", src, "e2", fork)
	if err != nil || !created {
		t.Fatalf("arrive: created %v, %v", created, err)
	}
	got := f.transcript(t, sess.ID)
	if want := []string{"alpha", "", "tool result [compacted: cleared result]", "echo: alpha"}; !slices.Equal(got.contents, want) {
		t.Fatalf("copied %q, want %q", got.contents, want)
	}
	if want := []string{"user", "assistant", "tool", "assistant"}; !slices.Equal(got.roles, want) {
		t.Fatalf("copied roles %q, want %q", got.roles, want)
	}
	if got.calls[1] == "" || got.calls[1] != before.calls[1] {
		t.Fatalf("tool call copied as %q, want %q", got.calls[1], before.calls[1])
	}
	for _, turn := range got.turns {
		if turn != "t1@"+sess.ID {
			t.Fatalf("copied turn id %q, want t1@%s", turn, sess.ID)
		}
	}
	// Only the summaries of the copied messages, at the copies' ids.
	sums := f.summaries(t, sess.ID)
	if want := []summary{{got.ids[0], "summary to alpha"}, {got.ids[3], "summary to echo"}}; !slices.Equal(sums, want) {
		t.Fatalf("summaries %+v, want %+v", sums, want)
	}
	if p := f.prompt(t, sess.ID); p != "the prompt" {
		t.Fatalf("prompt %q", p)
	}
	if after := f.transcript(t, f.id); !slices.Equal(after.ids, before.ids) || !slices.Equal(after.turns, before.turns) {
		t.Fatalf("the source changed: %+v, was %+v", after, before)
	}

	// The message arriving again (a retry, a redelivery): the session
	// exists and nothing more is copied.
	again, created, _, err := f.s.ArriveFork(ctx, key, "", src, "e2", fork)
	if err != nil || created || again.ID != sess.ID {
		t.Fatalf("arrive again: %+v created %v, %v", again, created, err)
	}
	if n := len(f.transcript(t, sess.ID).ids); n != 4 {
		t.Fatalf("%d messages after the second arrival, want 4", n)
	}

	// The latest turn: everything. The later summary comes too.
	whole, _, _, err := f.s.ArriveFork(ctx, "agent:main:api:dm:whole", "", src, "e3", &eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.transcript(t, whole.ID); !slices.Equal(got.contents, before.contents) {
		t.Fatalf("fork from the latest turn copied %q, want %q", got.contents, before.contents)
	}
}

// What is not copied: a fork point of another platform's session, of
// another key than the turn's, of an unknown turn; an arrival without
// one; a session that exists.
func TestArriveForkCopiesNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	telegram := &eventsv1.SessionSource{Platform: "telegram", ChatId: "9", ChatType: "dm", UserId: "9"}
	if _, _, _, err := f.s.Arrive(ctx, "agent:main:telegram:dm:9", "", telegram, "t0"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		key  string
		src  *eventsv1.SessionSource
		fork *eventsv1.ForkFrom
	}{
		{"another platform", "agent:main:telegram:dm:10", &eventsv1.SessionSource{Platform: "telegram", ChatId: "10"},
			&eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t1"}},
		{"another key than the turn's", "agent:main:api:dm:b1", forkAPISource,
			&eventsv1.ForkFrom{SessionKey: "agent:main:api:dm:other", TurnId: "t1"}},
		{"unknown turn", "agent:main:api:dm:b2", forkAPISource, &eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t9"}},
		{"no fork point", "agent:main:api:dm:b3", forkAPISource, nil},
		{"an existing session", "agent:main:telegram:dm:9", telegram, &eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess, _, _, err := f.s.ArriveFork(ctx, tt.key, "", tt.src, "e-"+tt.name, tt.fork)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.transcript(t, sess.ID); len(got.ids) != 0 {
				t.Fatalf("copied %q", got.contents)
			}
			if sums, p := f.summaries(t, sess.ID), f.prompt(t, sess.ID); len(sums) != 0 || p != "" {
				t.Fatalf("copied summaries %+v, prompt %q", sums, p)
			}
		})
	}
}

// A turn whose messages were removed since (/undo, /retry) is forked
// from where it was: the messages written before it was decided.
func TestArriveForkFromARemovedTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	if _, err := f.db.Exec(ctx, `DELETE FROM transcript_messages WHERE turn_id = 't2'`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec(ctx, `DELETE FROM transcript_messages WHERE turn_id = 't1' AND step > 0`); err != nil {
		t.Fatal(err)
	}
	sess, _, _, err := f.s.ArriveFork(ctx, "agent:main:api:dm:b", "", forkAPISource, "e2", &eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.transcript(t, sess.ID); !slices.Equal(got.contents, []string{"alpha"}) {
		t.Fatalf("copied %q, want what was left before t2", got.contents)
	}
}

// Every path that creates a session copies, once, in its transaction:
// a free start copies only when it commits, and the queueing path
// (ArriveAndEnqueue) copies as Arrive does.
func TestForkOnEveryArrivalPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	fork := &eventsv1.ForkFrom{SessionKey: f.key, TurnId: "t1"}
	ev := func(id string) *eventsv1.MessageReceived {
		return &eventsv1.MessageReceived{EventId: id, Text: "again", ForkFrom: fork}
	}
	count := func(key string) int {
		var n int
		if err := f.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE session_key = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A free start that is dropped (a duplicate, a busy session) leaves
	// nothing; the one that starts copies.
	free := "agent:main:api:dm:free"
	f.s.BeginFree(ctx, free, "", forkAPISource, ev("f1"), "turn-f1").Drop(ctx)
	if n := count(free); n != 0 {
		t.Fatalf("a dropped free start left %d messages", n)
	}
	a, started, err := f.s.BeginFree(ctx, free, "", forkAPISource, ev("f1"), "turn-f1").Start(ctx,
		func(Arrival) bool { return true }, func(context.Context, Turn) error { return nil })
	if err != nil || !started || !a.Created {
		t.Fatalf("free start: %+v started %v, %v", a, started, err)
	}
	if n := count(free); n != 4 {
		t.Fatalf("free start copied %d messages, want 4", n)
	}

	queued := "agent:main:api:dm:queued"
	for range 2 {
		if _, _, err := f.s.ArriveAndEnqueue(ctx, queued, "", forkAPISource, 1, true, ev("q1"), 32); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(queued); n != 4 {
		t.Fatalf("the queueing path copied %d messages, want 4 once", n)
	}
}
