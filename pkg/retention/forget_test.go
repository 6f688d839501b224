package retention_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/pkg/userdata"
)

// origin sets the session's origin, its last message's source, as the
// router stores it.
func origin(t *testing.T, db *pgxpool.Pool, key string, src *eventsv1.SessionSource) {
	t.Helper()
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(context.Background(), `UPDATE sessions SET origin = $2, chat_type = $3 WHERE session_key = $1`,
		key, b, src.GetChatType()); err != nil {
		t.Fatal(err)
	}
}

// userRows counts what the user telegram:42 owns, and what others own
// that must stay.
var userRows = map[string]string{
	"memories":        `SELECT count(*) FROM agent_memories WHERE user_key = $1`,
	"memory writes":   `SELECT count(*) FROM memory_pending_writes WHERE user_key = $1`,
	"memory setting":  `SELECT count(*) FROM memory_write_approval WHERE user_key = $1`,
	"always":          `SELECT count(*) FROM agent_tool_approvals WHERE scope = 'user' AND subject = $1`,
	"cron jobs":       `SELECT count(*) FROM cron_jobs WHERE owner = $1`,
	"pairing":         `SELECT count(*) FROM pairing_approved WHERE platform || ':' || user_id = $1`,
	"pairing codes":   `SELECT count(*) FROM pairing_codes WHERE platform || ':' || user_id = $1`,
	"topic bindings":  `SELECT count(*) FROM telegram_topic_bindings WHERE 'telegram:' || user_id = $1`,
	"sessions (as a)": `SELECT count(*) FROM sessions WHERE session_key = $1`,
}

func ownedBy(t *testing.T, db *pgxpool.Pool, userKey string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, q := range userRows {
		var n int
		if err := db.QueryRow(context.Background(), q, userKey).Scan(&n); err != nil {
			t.Fatalf("count %s: %v", name, err)
		}
		if n > 0 {
			out[name] = n
		}
	}
	return out
}

// Forgetting a user deletes their own sessions (their direct chat, the
// session a group gives them alone, a /background task of theirs) with
// every row of them, and what they own (memories, memory writes and
// setting, "always" approvals, cron jobs, pairing, topic bindings),
// in one transaction; it keeps the sessions others share where they
// spoke last, and other users' everything; a session a turn holds, a
// message waits in or a reply is still to be sent from is left and
// reported busy, and a second call deletes it once idle. A dry run
// reports the same and deletes nothing.
func TestForget(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s, hold := sweeper(t, db, retention.DefaultConfig(), 0)
	ctx := context.Background()

	alice := func(chatType, chat, thread string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "telegram", ChatType: chatType, ChatId: chat, ThreadId: thread, UserId: "42", UserName: "alice"}
	}
	var (
		dm          = ns + "telegram:dm:42"
		background  = ns + "background:telegram:dm:42:bg_1"
		groupOwn    = ns + "telegram:group:-100:42"
		groupShared = ns + "telegram:group:-200"
		topicShared = ns + "telegram:group:-100:17"
		groupBusy   = ns + "telegram:group:-300:42"
		groupQueued = ns + "telegram:group:-310:42"
		groupToSend = ns + "telegram:group:-320:42"
		bobDM       = ns + "telegram:dm:7"
		aliceSlack  = ns + "slack:dm:T1:D42"
	)
	for key, src := range map[string]*eventsv1.SessionSource{
		dm:          alice("dm", "42", ""),
		background:  alice("dm", "42", ""),
		groupOwn:    alice("group", "-100", ""),
		groupShared: alice("group", "-200", ""),
		topicShared: alice("group", "-100", "17"),
		groupBusy:   alice("group", "-300", ""),
		groupQueued: alice("group", "-310", ""),
		groupToSend: alice("group", "-320", ""),
		bobDM:       {Platform: "telegram", ChatType: "dm", ChatId: "7", UserId: "7"},
		// The same id on another platform is another person.
		aliceSlack: {Platform: "slack", ChatType: "dm", ScopeId: "T1", ChatId: "D42", UserId: "42"},
	} {
		seed(t, db, key, src.GetPlatform(), day)
		origin(t, db, key, src)
	}
	for _, q := range []string{
		`INSERT INTO agent_memories (user_key, content) VALUES ('telegram:42', 'likes tea'), ('telegram:42', 'lives in Oslo'),
			('session:` + groupOwn + `', 'her group notes'), ('session:` + groupShared + `', 'the group''s'), ('telegram:7', 'bob''s'), ('slack:42', 'slack alice''s')`,
		// Group sessions of hers retention pruned (no session row is
		// left), and someone else's.
		`INSERT INTO agent_memories (user_key, content) VALUES ('session:` + ns + `telegram:group:-400:42', 'pruned group notes'),
			('session:` + ns + `telegram:group:-500:9:42', 'pruned thread notes'), ('session:` + ns + `telegram:group:-400:421', 'someone else''s')`,
		`INSERT INTO cron_jobs (id, owner, name, prompt, schedule_kind, schedule_expr, schedule_display) VALUES
			('j3', 'session:` + ns + `telegram:group:-400:42', 'g', 'group job', 'interval', 'every 60m', 'every 60m')`,
		`INSERT INTO memory_pending_writes (user_key, id, action, content, summary) VALUES ('telegram:42', 'w1', 'add', 'x', 's'), ('telegram:7', 'w1', 'add', 'x', 's')`,
		`INSERT INTO memory_write_approval (user_key, enabled) VALUES ('telegram:42', true), ('telegram:7', true)`,
		`INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES ('user', 'telegram:42', 'terminal'), ('user', 'telegram:7', 'terminal'),
			('user', 'session:` + groupShared + `', 'terminal')`,
		`INSERT INTO cron_jobs (id, owner, name, prompt, schedule_kind, schedule_expr, schedule_display) VALUES
			('j1', 'telegram:42', 'tea', 'remind me', 'interval', 'every 60m', 'every 60m'), ('j2', 'telegram:7', 'x', 'y', 'interval', 'every 60m', 'every 60m')`,
		`INSERT INTO pairing_approved (platform, user_id, created_at) VALUES ('telegram', '42', now()), ('telegram', '7', now()), ('slack', '42', now())`,
		`INSERT INTO pairing_codes (platform, user_id, salt, code_hash, expires_at) VALUES ('telegram', '42', '\x00', '\x00', now() + interval '1 hour')`,
		// Proactive sends to her direct chat (no session), one sent and
		// one still to send, and one to Bob's.
		`INSERT INTO delivery_outbox (idempotency_key, state, platform, chat_key, payload, next_attempt_at, expires_at, created_at, updated_at) VALUES
			('cron-1', 'sent', 'telegram', 'telegram::42', '\x00', now(), now(), now(), now()),
			('cron-2', 'queued', 'telegram', 'telegram::42', '\x00', now(), now(), now(), now()),
			('cron-3', 'sent', 'telegram', 'telegram::7', '\x00', now(), now(), now(), now())`,
		`INSERT INTO telegram_topic_bindings (session_key, root_key, thread_id, session_id, user_id) VALUES ('` + dm + `:5', '` + dm + `', '5', 'tb-` + dm + `', '42')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	release := hold(groupBusy)
	// A message waits for a turn in one; a reply is still to be sent in
	// another.
	if _, err := db.Exec(ctx, `INSERT INTO session_queue (session_key, stream_seq, event_id, event) VALUES ($1, 1, 'e1', '\x00')`, groupQueued); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO delivery_outbox (idempotency_key, state, platform, chat_key, session_key, payload,
			next_attempt_at, expires_at, created_at, updated_at) VALUES ('q-' || $1, 'queued', 'telegram', $1, $1, '\x00', now(), now(), now(), now())`, groupToSend); err != nil {
		t.Fatal(err)
	}
	before := map[string]map[string]int{}
	for _, k := range []string{dm, background, groupOwn, groupShared, topicShared, groupBusy, groupQueued, groupToSend, bobDM, aliceSlack} {
		before[k] = counts(t, db, k)
	}
	beforeOwned := map[string]map[string]int{}
	for _, uk := range []string{"telegram:42", "telegram:7", "slack:42", "session:" + groupShared, "session:" + ns + "telegram:group:-400:421"} {
		beforeOwned[uk] = ownedBy(t, db, uk)
	}

	dry, err := s.Forget(ctx, userdata.User{Platform: "Telegram", ID: " 42 "}, true)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range before {
		if got := counts(t, db, k); !equalCounts(got, want) {
			t.Errorf("dry run changed %s: %v, was %v", k, got, want)
		}
	}
	got, err := s.Forget(ctx, userdata.User{Platform: "telegram", ID: "42"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []retention.Erasure{dry, got} {
		if want := []string{background, dm, groupOwn}; !slices.Equal(r.Sessions, want) {
			t.Errorf("sessions %q, want %q", r.Sessions, want)
		}
		if want := []string{groupBusy, groupQueued, groupToSend}; !slices.Equal(r.Busy, want) {
			t.Errorf("busy %q, want %q", r.Busy, want)
		}
		if want := []string{topicShared, groupShared}; !slices.Equal(r.Shared, want) {
			t.Errorf("shared %q, want %q", r.Shared, want)
		}
		for kind, want := range map[string]int64{
			// The sessions' sent rows (one each) and her chat's sent one.
			retention.KindOutbox:   3 + 1,
			retention.KindSessions: 3, retention.KindMessages: 6, retention.KindMemories: 3 + 2, retention.KindMemoryWrites: 1,
			retention.KindMemorySettings: 1, retention.KindCronJobs: 1 + 1, retention.KindPairing: 2, retention.KindTopicBindings: 1,
			// The sessions' own (one each) and the user's "always".
			retention.KindApprovals: 3 + 1,
		} {
			if r.Rows[kind] != want {
				t.Errorf("%s: %d rows, want %d (%v)", kind, r.Rows[kind], want, r.Rows)
			}
		}
	}
	for _, k := range []string{dm, background, groupOwn} {
		for table, n := range counts(t, db, k) {
			if n != 0 {
				t.Errorf("%s: %d rows left in %s", k, n, table)
			}
		}
	}
	for _, k := range []string{groupShared, topicShared, groupBusy, groupQueued, groupToSend, bobDM, aliceSlack} {
		if got := counts(t, db, k); !equalCounts(got, before[k]) {
			t.Errorf("%s changed: %v, was %v", k, got, before[k])
		}
	}
	var outbox []string
	rows, err := db.Query(ctx, `SELECT idempotency_key FROM delivery_outbox WHERE idempotency_key LIKE 'cron-%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		outbox = append(outbox, k)
	}
	if want := []string{"cron-2", "cron-3"}; !slices.Equal(outbox, want) {
		t.Errorf("proactive rows left: %q, want the one still to send and Bob's", outbox)
	}
	if left := ownedBy(t, db, "telegram:42"); len(left) != 0 {
		t.Errorf("left of telegram:42: %v", left)
	}
	if left := ownedBy(t, db, "session:"+groupOwn); len(left) != 0 {
		t.Errorf("left of her group session: %v", left)
	}
	for _, uk := range []string{"session:" + ns + "telegram:group:-400:42", "session:" + ns + "telegram:group:-500:9:42"} {
		if left := ownedBy(t, db, uk); len(left) != 0 {
			t.Errorf("left of her pruned session %s: %v", uk, left)
		}
	}
	for _, uk := range []string{"telegram:7", "slack:42", "session:" + groupShared, "session:" + ns + "telegram:group:-400:421"} {
		if got := ownedBy(t, db, uk); !equalCounts(got, beforeOwned[uk]) {
			t.Errorf("%s's changed: %v, was %v", uk, got, beforeOwned[uk])
		}
	}

	// Once the turn is over, forgetting again deletes its session; the
	// waiting message and the reply to send still hold theirs.
	release()
	again, err := s.Forget(ctx, userdata.User{Platform: "telegram", ID: "42"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.Sessions, []string{groupBusy}) || !slices.Equal(again.Busy, []string{groupQueued, groupToSend}) ||
		again.Rows[retention.KindMemories] != 0 {
		t.Errorf("again: %+v", again)
	}

	if _, err := s.Forget(ctx, userdata.User{Platform: "telegram"}, false); err == nil {
		t.Error("no user id: no error")
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
