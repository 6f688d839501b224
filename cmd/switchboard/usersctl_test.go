package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// TestUsersForgetVerb drives `switchboard users forget` against a real
// admin API whose sweeper opens the real Redis on the first call: a dry
// run that changes nothing, a forget that leaves a busy session (exit
// status 3) and is audited, and one that finishes once the turn is over.
func TestUsersForgetVerb(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	pruner, rdb, prefix := testPruner(t, db)
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db, Forgetter: pruner})
	t.Setenv("USER", "tester")

	// An agent name of this test's own: the fences' advisory locks are
	// the whole database's.
	ns := fmt.Sprintf("agent:users%d:", time.Now().UnixNano()%1e9)
	dm, group, busy := ns+"telegram:dm:42", ns+"telegram:group:-100", ns+"telegram:group:-300:42"
	for key, src := range map[string]*eventsv1.SessionSource{
		dm:    {Platform: "telegram", ChatType: "dm", ChatId: "42", UserId: "42"},
		group: {Platform: "telegram", ChatType: "group", ChatId: "-100", UserId: "42"},
		busy:  {Platform: "telegram", ChatType: "group", ChatId: "-300", UserId: "42"},
	} {
		origin, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ctx, `INSERT INTO sessions (session_key, session_id, platform, chat_type, origin) VALUES ($1, 'c-' || $1, 'telegram', $2, $3)`,
			key, src.GetChatType(), origin); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO agent_memories (user_key, content) VALUES ('telegram:42', 'likes tea'), ('telegram:7', 'bob''s')`); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, prefix+"lock:"+busy, "worker", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		var n int
		if err := db.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runUsers(ctx, append(args, "--admin-addr", addr), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	for _, args := range [][]string{{"forget", "telegram"}, {"forget", "telegram", " "}, {"list"}, {"forget", "telegram", "42", "43"}, {"forget", "telegram", "42", "--platform", "slack"}} {
		if _, err := run(args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	out, err := run("forget", "telegram", "42", "--dry-run")
	if err != nil || !strings.Contains(out, "Would delete 1 sessions of telegram user 42.\n    "+dm+"\n") ||
		!strings.Contains(out, "Left 1 busy sessions") || !strings.Contains(out, "Kept 1 sessions others share") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if n := count(`SELECT count(*) FROM sessions`) + count(`SELECT count(*) FROM agent_memories`); n != 5 {
		t.Fatalf("the dry run deleted: %d rows left, want 5", n)
	}
	out, err = run("forget", "telegram", "42")
	if !errors.Is(err, exitBusy) || !strings.Contains(out, "Deleted 1 sessions") || !strings.Contains(out, "    "+busy+"\n") ||
		!strings.Contains(strings.Join(strings.Fields(out), " "), "agent_memories 1") {
		t.Fatalf("forget: %v\n%s", err, out)
	}
	if n := count(`SELECT count(*) FROM sessions WHERE session_key <> '` + dm + `'`); n != 2 {
		t.Errorf("%d sessions left besides the deleted one, want the shared and the busy ones", n)
	}
	if n := count(`SELECT count(*) FROM agent_memories WHERE user_key = 'telegram:7'`); n != 1 {
		t.Error("another user's memory was deleted")
	}
	if n := count(`SELECT count(*) FROM audit_log WHERE action = 'users.forget' AND target = 'telegram:42' AND actor = 'token:tester'`); n != 1 {
		t.Errorf("%d audit records, want 1 (the dry run is not audited)", n)
	}

	if err := rdb.Del(ctx, prefix+"lock:"+busy).Err(); err != nil {
		t.Fatal(err)
	}
	out, err = run("forget", "telegram", "42")
	if err != nil || !strings.Contains(out, "Deleted 1 sessions of telegram user 42.\n    "+busy+"\n") || strings.Contains(out, "busy") {
		t.Fatalf("again: %v\n%s", err, out)
	}
}

// TestUsersExportVerb drives `switchboard users export` against a real
// admin API: the JSON document to stdout, or to a new file readable by
// its owner only, never over an existing one; usage errors.
func TestUsersExportVerb(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db})
	if _, err := db.Exec(ctx, `INSERT INTO agent_memories (user_key, content) VALUES ('slack:U42', 'likes tea'), ('slack:U7', 'bob''s')`); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runUsers(ctx, append(args, "--admin-addr", addr), &out, &errOut)
		return out.String(), err
	}
	for _, args := range [][]string{{"export", "slack"}, {"export", "slack", "U42", "--dry-run"}, {"forget", "slack", "U42", "--out", "x.json"}} {
		if _, err := run(args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	out, err := run("export", "slack", "U42")
	var doc struct {
		UserID   string                     `json:"user_id"`
		Memories []struct{ Content string } `json:"memories"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || doc.UserID != "U42" || len(doc.Memories) != 1 || doc.Memories[0].Content != "likes tea" {
		t.Fatalf("to stdout: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "u42.json")
	if out, err := run("export", "slack", "U42", "--out", file); err != nil || out != "" {
		t.Fatalf("to a file: %v, printed %q", err, out)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the file: %v, %v", st, err)
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), `"likes tea"`) || strings.Contains(string(b), "bob") {
		t.Fatalf("the file holds:\n%s", b)
	}
	if _, err := run("export", "slack", "U42", "--out", file); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("over an existing file: %v", err)
	}
	if b2, _ := os.ReadFile(file); string(b2) != string(b) {
		t.Error("the existing file changed")
	}
}

// `switchboard sessions export` against a real admin API: a
// conversation as Markdown to a new file, never over an existing one.
func TestSessionsExportVerb(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	const key = "agent:main:slack:dm:T1:D42"
	for _, q := range []string{
		`INSERT INTO sessions (session_key, session_id, platform, origin) VALUES ('` + key + `', 'c1', 'slack', '{"platform": "slack"}')`,
		`INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content) VALUES ('` + key + `', 'c1', 't1', 1, 0, 'user', 'hello there')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db})
	file := filepath.Join(t.TempDir(), "c1.md")
	var out bytes.Buffer
	if err := runSessions(ctx, []string{"export", key, "--format", "md", "--out", file, "--admin-addr", addr}, &out); err != nil || out.Len() != 0 {
		t.Fatalf("export: %v, printed %q", err, out.String())
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), "hello there") || !strings.HasPrefix(string(b), "#") {
		t.Fatalf("the file: %v\n%s", err, b)
	}
	if err := runSessions(ctx, []string{"export", key, "--out", file, "--admin-addr", addr}, &out); err == nil {
		t.Error("over an existing file: no error")
	}
	if err := runSessions(ctx, []string{"export", "agent:main:slack:dm:T1:D43", "--admin-addr", addr}, &out); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("an unknown key: %v", err)
	}
}

// An export that breaks midway leaves no file behind: it would hold part
// of someone's data.
func TestWriteExportRemovesAPartialFile(t *testing.T) {
	for _, tt := range []struct {
		name   string
		chunks []string
		end    error
		keep   bool
	}{
		{"whole", []string{"{", "}"}, io.EOF, true},
		{"broken midway", []string{"{\"memories\": ["}, errors.New("stream broke"), false},
		{"broken at once", nil, errors.New("unavailable"), false},
	} {
		file := filepath.Join(t.TempDir(), "out.json")
		i := 0
		err := writeExport(file, io.Discard, func() ([]byte, error) {
			if i < len(tt.chunks) {
				i++
				return []byte(tt.chunks[i-1]), nil
			}
			return nil, tt.end
		})
		_, statErr := os.Stat(file)
		if tt.keep {
			if b, rerr := os.ReadFile(file); err != nil || rerr != nil || string(b) != strings.Join(tt.chunks, "") {
				t.Errorf("%s: %v, the file holds %q (%v)", tt.name, err, b, rerr)
			}
			continue
		}
		if !errors.Is(err, tt.end) || !os.IsNotExist(statErr) {
			t.Errorf("%s: err %v, file %v; want the error and no file", tt.name, err, statErr)
		}
	}
}

// Each sessions verb takes its own flags: another verb's is a usage
// error, not a flag silently ignored.
func TestSessionsVerbFlags(t *testing.T) {
	for _, args := range [][]string{
		{"list", "--format", "md"}, {"prune", "--out", "x"}, {"list", "--redact"},
		{"export", "k", "--dry-run"}, {"export", "k", "--older-than", "9d"}, {"export", "k", "--platform", "slack"},
	} {
		if err := runSessions(context.Background(), append(args, "--admin-addr", "127.0.0.1:1"), io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}
