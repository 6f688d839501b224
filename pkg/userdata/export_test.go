package userdata_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/encoding/protojson"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/userdata"
)

// session writes a session whose last message came from src, with its
// conversations (the last is current), each holding one exchange.
func session(t *testing.T, db *pgxpool.Pool, key string, src *eventsv1.SessionSource, conversations ...string) {
	t.Helper()
	ctx := context.Background()
	origin, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(src)
	if err != nil {
		t.Fatal(err)
	}
	current := conversations[len(conversations)-1]
	if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, chat_type, origin, title) VALUES ($1, $2, $3, $4, $5, 'Tea')`,
		key, current, src.GetPlatform(), src.GetChatType(), origin); err != nil {
		t.Fatal(err)
	}
	for i, c := range conversations {
		at := time.Date(2026, 12, 1+i, 9, 0, 0, 0, time.UTC)
		if _, err := db.Exec(ctx, `INSERT INTO session_history (session_key, session_id, started_at) VALUES ($1, $2, $3)`, key, c, at); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content, created_at)
			VALUES ($1, $2, 't-' || $2, 1, 0, 'user', 'question in ' || $2, $3), ($1, $2, 't-' || $2, 1, 1, 'assistant', 'answer in ' || $2, $3)`,
			key, c, at); err != nil {
			t.Fatal(err)
		}
	}
}

// Export writes everything held of one user: their own sessions with
// every conversation and message, the keys (only) of shared sessions
// they wrote last in, and what they own; nothing of anyone else's, and
// never a pairing code's hash.
func TestExport(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	alice := &eventsv1.SessionSource{Platform: "telegram", ChatType: "dm", ChatId: "42", UserId: "42"}
	session(t, db, "agent:main:telegram:dm:42", alice, "c-old", "c-now")
	session(t, db, "agent:main:telegram:group:-100:42", &eventsv1.SessionSource{Platform: "telegram", ChatType: "group", ChatId: "-100", UserId: "42"}, "c-group")
	session(t, db, "agent:main:telegram:group:-200", &eventsv1.SessionSource{Platform: "telegram", ChatType: "group", ChatId: "-200", UserId: "42"}, "c-shared")
	session(t, db, "agent:main:telegram:dm:7", &eventsv1.SessionSource{Platform: "telegram", ChatType: "dm", ChatId: "7", UserId: "7"}, "c-bob")
	for _, q := range []string{
		`INSERT INTO agent_memories (user_key, content) VALUES ('telegram:42', 'likes tea'), ('session:agent:main:telegram:group:-100:42', 'group note'), ('telegram:7', 'bob''s secret')`,
		`INSERT INTO memory_pending_writes (user_key, id, action, content, summary) VALUES ('telegram:42', 'w1', 'add', 'lives in Oslo', 'add: lives in Oslo')`,
		`INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES ('user', 'telegram:42', 'terminal'), ('user', 'telegram:7', 'write_file')`,
		`INSERT INTO cron_jobs (id, owner, name, prompt, schedule_kind, schedule_expr, schedule_display) VALUES
			('j1', 'telegram:42', 'tea', 'remind me of tea', 'interval', 'every 60m', 'every 60m'), ('j2', 'telegram:7', 'x', 'bob''s job', 'interval', 'every 60m', 'every 60m')`,
		`INSERT INTO pairing_approved (platform, user_id, user_name, created_at) VALUES ('telegram', '42', 'alice', now())`,
		`INSERT INTO pairing_codes (platform, user_id, user_name, salt, code_hash, expires_at) VALUES ('telegram', '42', 'alice', '\x00', '\xdeadbeef', now())`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}

	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	doc, err := userdata.Export(ctx, db, userdata.User{Platform: "Telegram", ID: "42"}, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := doc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Platform   string `json:"platform"`
		UserID     string `json:"user_id"`
		ExportedAt string `json:"exported_at"`
		Sessions   []struct {
			Key           string `json:"session_key"`
			Conversations []struct {
				ID        string `json:"id"`
				Source    string `json:"source"`
				Title     string `json:"title"`
				StartedAt string `json:"started_at"`
				Messages  []struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"messages"`
			} `json:"conversations"`
		} `json:"sessions"`
		Shared   []string `json:"shared_sessions"`
		Memories []struct {
			Content string `json:"content"`
		} `json:"memories"`
		MemoryWrites []struct {
			Content, State string
		} `json:"memory_writes"`
		Approvals []struct{ Pattern string } `json:"tool_approvals"`
		CronJobs  []struct{ Prompt string }  `json:"cron_jobs"`
		Pairing   []struct {
			State string `json:"state"`
		} `json:"pairing"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got.Platform != "telegram" || got.UserID != "42" || got.ExportedAt != "2026-12-04T12:00:00Z" {
		t.Errorf("header: %s %s %s", got.Platform, got.UserID, got.ExportedAt)
	}
	var sessions []string
	for _, s := range got.Sessions {
		var convs []string
		for _, c := range s.Conversations {
			var msgs []string
			for _, m := range c.Messages {
				msgs = append(msgs, m.Role+": "+m.Content)
			}
			convs = append(convs, c.ID+" "+c.Source+" "+c.StartedAt+" ["+strings.Join(msgs, "; ")+"]")
		}
		sessions = append(sessions, s.Key+" => "+strings.Join(convs, " | "))
	}
	want := []string{
		"agent:main:telegram:dm:42 => c-old telegram 2026-12-01T09:00:00Z [user: question in c-old; assistant: answer in c-old] | " +
			"c-now telegram 2026-12-02T09:00:00Z [user: question in c-now; assistant: answer in c-now]",
		"agent:main:telegram:group:-100:42 => c-group telegram 2026-12-01T09:00:00Z [user: question in c-group; assistant: answer in c-group]",
	}
	if !slices.Equal(sessions, want) {
		t.Errorf("sessions:\n%s\nwant:\n%s", strings.Join(sessions, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Equal(got.Shared, []string{"agent:main:telegram:group:-200"}) {
		t.Errorf("shared: %q", got.Shared)
	}
	var memories []string
	for _, m := range got.Memories {
		memories = append(memories, m.Content)
	}
	if !slices.Equal(memories, []string{"likes tea", "group note"}) {
		t.Errorf("memories: %q", memories)
	}
	if len(got.MemoryWrites) != 1 || got.MemoryWrites[0].Content != "lives in Oslo" || got.MemoryWrites[0].State != "pending" {
		t.Errorf("memory writes: %+v", got.MemoryWrites)
	}
	if len(got.Approvals) != 1 || got.Approvals[0].Pattern != "terminal" || len(got.CronJobs) != 1 || got.CronJobs[0].Prompt != "remind me of tea" {
		t.Errorf("approvals %+v, cron jobs %+v", got.Approvals, got.CronJobs)
	}
	if len(got.Pairing) != 2 || got.Pairing[0].State != "approved" && got.Pairing[1].State != "approved" {
		t.Errorf("pairing: %+v", got.Pairing)
	}
	for _, leak := range []string{"bob", "c-shared", "c-bob", "deadbeef", "3q2+7w"} { // 3q2+7w: the hash in base64
		if strings.Contains(string(b), leak) {
			t.Errorf("the export holds %q:\n%s", leak, b)
		}
	}

	// Someone Switchboard knows nothing of: an empty document, not an
	// error; no user: an error.
	empty, err := userdata.Export(ctx, db, userdata.User{Platform: "discord", ID: "42"}, now)
	if err != nil || len(empty.Sessions) != 0 || len(empty.Memories) != 0 || len(empty.Pairing) != 0 {
		t.Errorf("a stranger: %+v, %v", empty, err)
	}
	if _, err := userdata.Export(ctx, db, userdata.User{Platform: "discord"}, now); err == nil {
		t.Error("no user id: no error")
	}
}

// A direct chat is the user's own only when every turn in it ran for
// them: a Slack group DM (chat type dm, several members) or an API
// session id two clients share is shared once someone else's turn is in
// it, however the last message came; a one-to-one chat is own, and its
// chat key is listed for its proactive sends.
func TestFindDirectChatsWithOthers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	alice := func(chat string) *eventsv1.SessionSource {
		return &eventsv1.SessionSource{Platform: "slack", Account: "T1", ChatType: "dm", ScopeId: "T1", ChatId: chat, UserId: "Ualice"}
	}
	session(t, db, "agent:main:slack:dm:T1:D1", alice("D1"), "c-im")
	session(t, db, "agent:main:slack:dm:T1:G1", alice("G1"), "c-mpim-old", "c-mpim")
	session(t, db, "agent:main:slack:dm:T1:G2", alice("G2"), "c-mpim2")
	for _, q := range []string{
		`UPDATE transcript_messages SET user_key = 'slack:Ualice'`,
		// Bob's turn in a conversation the group DM left.
		`INSERT INTO transcript_messages (session_key, session_id, user_key, turn_id, generation, step, role, content)
			VALUES ('agent:main:slack:dm:T1:G1', 'c-mpim-old', 'slack:Ubob', 't-bob', 1, 0, 'user', 'bob here')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	found, err := userdata.Find(ctx, db, userdata.User{Platform: "slack", ID: "Ualice"})
	if err != nil {
		t.Fatal(err)
	}
	// G2 has only Alice's turns so far: hers, as far as anything shows.
	if want := []string{"agent:main:slack:dm:T1:D1", "agent:main:slack:dm:T1:G2"}; !slices.Equal(found.Own, want) {
		t.Errorf("own %q, want %q", found.Own, want)
	}
	if want := []string{"agent:main:slack:dm:T1:G1"}; !slices.Equal(found.Shared, want) {
		t.Errorf("shared %q, want %q", found.Shared, want)
	}
	if want := []string{"slack:T1:D1", "slack:T1:G2"}; !slices.Equal(found.DirectChats, want) {
		t.Errorf("direct chats %q, want %q", found.DirectChats, want)
	}
	doc, err := userdata.Export(ctx, db, userdata.User{Platform: "slack", ID: "Ualice"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := doc.JSON()
	if err != nil || strings.Contains(string(b), "bob here") || strings.Contains(string(b), "c-mpim-old") {
		t.Errorf("the export holds the shared group DM (%v):\n%s", err, b)
	}
}
