package toolapproval_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/toolapproval"
)

const (
	dmKey    = "agent:main:telegram:dm:42"
	groupKey = "agent:main:discord:group:g1"
	otherKey = "agent:main:slack:dm:U7"
)

// seed writes the approvals of a few chats as the worker grants them,
// with the sessions, history and transcripts that place their
// conversations.
func seed(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO sessions (session_key, session_id, platform) VALUES
			('` + dmKey + `', 'conv-a', 'telegram'), ('` + otherKey + `', 'conv-b', 'slack'), ('` + groupKey + `', 'conv-g', 'discord')`,
		`INSERT INTO session_history (session_key, session_id, end_reason) VALUES ('` + dmKey + `', 'conv-old', 'new')`,
		`INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role) VALUES
			('` + dmKey + `', 'conv-a', 't1', 1, 0, 'user'), ('` + dmKey + `', 'conv-old', 't0', 0, 0, 'user'),
			('` + otherKey + `', 'conv-b', 't2', 1, 0, 'user')`,
		`INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES
			('user', 'telegram:42', 'terminal'), ('user', 'telegram:42', 'write_file'),
			('user', 'session:` + groupKey + `', 'terminal'),
			('session', 'conv-a', 'terminal'), ('session', 'conv-old', 'send_message:telegram:9'),
			('session', 'conv-b', 'terminal'), ('session', 'conv-gone', 'terminal')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
}

// row is an approval without its time, as the tests compare them.
func row(a toolapproval.Approval) string {
	return fmt.Sprintf("%s %s %s %s", a.Scope, a.Subject, a.Pattern, a.SessionKey)
}

func rows(list []toolapproval.Approval) []string {
	out := []string{}
	for _, a := range list {
		out = append(out, row(a))
	}
	return out
}

func TestList(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	seed(t, db)
	s := toolapproval.NewStore(db)
	all := []string{
		"session conv-a terminal " + dmKey,
		"session conv-b terminal " + otherKey,
		"session conv-gone terminal ",
		"session conv-old send_message:telegram:9 " + dmKey,
		"user session:" + groupKey + " terminal ",
		"user telegram:42 terminal ",
		"user telegram:42 write_file ",
	}
	for _, tt := range []struct {
		name string
		f    toolapproval.Filter
		want []string
	}{
		{"all", toolapproval.Filter{}, all},
		{"scope user", toolapproval.Filter{Scope: toolapproval.User}, all[4:]},
		{"scope session", toolapproval.Filter{Scope: toolapproval.Session}, all[:4]},
		{"subject", toolapproval.Filter{Subject: "telegram:42"}, all[5:]},
		{"pattern", toolapproval.Filter{Pattern: "terminal"}, []string{all[0], all[1], all[2], all[4], all[5]}},
		// A key's current conversation and the one it left, not another
		// key's nor its user's approvals (telegram:42 is the user, not
		// the chat).
		{"dm session key", toolapproval.Filter{SessionKey: dmKey}, []string{all[0], all[3]}},
		// A group's own user key.
		{"group session key", toolapproval.Filter{SessionKey: groupKey}, []string{all[4]}},
		{"session key and pattern", toolapproval.Filter{SessionKey: dmKey, Pattern: "terminal"}, all[:1]},
		// With the user its turns run as, the user's too.
		{"dm session key and its owner", toolapproval.Filter{SessionKey: dmKey, Owner: "telegram:42"}, []string{all[0], all[3], all[5], all[6]}},
		{"none", toolapproval.Filter{Subject: "telegram:43"}, []string{}},
	} {
		got, err := s.List(context.Background(), tt.f, toolapproval.Position{}, 100)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !slices.Equal(rows(got), tt.want) {
			t.Errorf("%s: got %q\nwant %q", tt.name, rows(got), tt.want)
		}
	}

	// Pages of two go through all of them once, in order.
	var paged []string
	var after toolapproval.Position
	for range len(all) {
		page, err := s.List(context.Background(), toolapproval.Filter{}, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, rows(page)...)
		last := page[len(page)-1]
		after = toolapproval.Position{Scope: last.Scope, Subject: last.Subject, Pattern: last.Pattern}
	}
	if !slices.Equal(paged, all) {
		t.Errorf("paged: got %q\nwant %q", paged, all)
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	seed(t, db)
	s := toolapproval.NewStore(db)
	ctx := context.Background()
	for _, tt := range []struct {
		name                    string
		scope, subject, pattern string
		want                    []string
		wantErr                 error
		left                    int // approvals left afterwards
	}{
		{"one pattern", toolapproval.User, "telegram:42", "write_file", []string{"user telegram:42 write_file "}, nil, 6},
		{"again: nothing", toolapproval.User, "telegram:42", "write_file", []string{}, nil, 6},
		// The same subject in the other scope is not touched.
		{"other scope", toolapproval.Session, "telegram:42", "", []string{}, nil, 6},
		{"a conversation's, with its key", toolapproval.Session, "conv-old", "", []string{"session conv-old send_message:telegram:9 " + dmKey}, nil, 5},
		{"bad scope", "global", "telegram:42", "", nil, toolapproval.ErrBadScope, 5},
		{"all of a subject", toolapproval.User, "telegram:42", "", []string{"user telegram:42 terminal "}, nil, 4},
	} {
		got, err := s.Revoke(ctx, tt.scope, tt.subject, tt.pattern)
		if !errors.Is(err, tt.wantErr) {
			t.Fatalf("%s: err %v, want %v", tt.name, err, tt.wantErr)
		}
		if err == nil && !slices.Equal(rows(got), tt.want) {
			t.Errorf("%s: revoked %q, want %q", tt.name, rows(got), tt.want)
		}
		left, err := s.List(ctx, toolapproval.Filter{}, toolapproval.Position{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != tt.left {
			t.Errorf("%s: %d left, want %d: %q", tt.name, len(left), tt.left, rows(left))
		}
	}
	if _, err := s.Revoke(ctx, toolapproval.User, "", ""); err == nil {
		t.Error("revoke without a subject: no error")
	}
}

func TestParseScope(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{{"", "", true}, {"user", "user", true}, {" Session ", "session", true}, {"always", "", false}, {"global", "", false}} {
		got, err := toolapproval.ParseScope(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseScope(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, toolapproval.ErrBadScope) {
			t.Errorf("ParseScope(%q): %v is not ErrBadScope", tt.in, err)
		}
	}
}
