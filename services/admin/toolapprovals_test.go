package admin

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The standing approvals over the API: listed page by page with their
// conversation's session key, filtered, revoked one or all of a subject
// (audited with the operator, logged); bad requests are refused with
// nothing changed, and every call needs the token.
func TestToolApprovalRPCs(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	for _, q := range []string{
		`INSERT INTO sessions (session_key, session_id, platform, chat_type, origin) VALUES ('agent:main:telegram:dm:42', 'conv-a', 'telegram', 'dm',
			'{"platform": "telegram", "chat_type": "dm", "chat_id": "42", "user_id": "42"}')`,
		`INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role)
			VALUES ('agent:main:telegram:dm:42', 'conv-a', 't1', 1, 0, 'user')`,
		`INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES
			('user', 'telegram:42', 'terminal'), ('user', 'telegram:42', 'write_file'), ('user', 'telegram:7', 'terminal'),
			('session', 'conv-a', 'terminal')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	c, authed := serve(t, ctx, Config{}, Deps{DB: db})

	_, errList := c.ListToolApprovals(ctx, &adminv1.ListToolApprovalsRequest{})
	_, errRevoke := c.RevokeToolApprovals(ctx, &adminv1.RevokeToolApprovalsRequest{Scope: "user", Subject: "telegram:42"})
	if status.Code(errList) != codes.Unauthenticated || status.Code(errRevoke) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, %v; want Unauthenticated", errList, errRevoke)
	}

	list := func(req *adminv1.ListToolApprovalsRequest) []string {
		t.Helper()
		var got []string
		for range 10 {
			resp, err := c.ListToolApprovals(authed, req)
			if err != nil {
				t.Fatalf("list %v: %v", req, err)
			}
			for _, a := range resp.GetApprovals() {
				if a.GetCreatedAt().AsTime().IsZero() {
					t.Errorf("%s %s %s: no time", a.GetScope(), a.GetSubject(), a.GetPattern())
				}
				got = append(got, a.GetScope()+" "+a.GetSubject()+" "+a.GetPattern()+" "+a.GetSessionKey())
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				return got
			}
		}
		t.Fatalf("list %v: more than 10 pages", req)
		return nil
	}
	all := []string{"session conv-a terminal agent:main:telegram:dm:42", "user telegram:42 terminal ",
		"user telegram:42 write_file ", "user telegram:7 terminal "}
	if got := list(&adminv1.ListToolApprovalsRequest{PageSize: 1}); !slices.Equal(got, all) {
		t.Errorf("pages of one: %q, want %q", got, all)
	}
	if got := list(&adminv1.ListToolApprovalsRequest{Scope: "User", Subject: "telegram:42"}); !slices.Equal(got, all[1:3]) {
		t.Errorf("a user's: %q, want %q", got, all[1:3])
	}
	// A direct chat's: its conversations' and its user's.
	if got := list(&adminv1.ListToolApprovalsRequest{SessionKey: "agent:main:telegram:dm:42"}); !slices.Equal(got, all[:3]) {
		t.Errorf("a session key's: %q, want %q", got, all[:3])
	}
	if got := list(&adminv1.ListToolApprovalsRequest{SessionKey: "agent:main:telegram:dm:404"}); len(got) != 0 {
		t.Errorf("a key no session holds: %q", got)
	}

	for _, tt := range []struct {
		name string
		call func() error
	}{
		{"list: bad scope", func() error {
			_, err := c.ListToolApprovals(authed, &adminv1.ListToolApprovalsRequest{Scope: "always"})
			return err
		}},
		{"list: bad page token", func() error {
			_, err := c.ListToolApprovals(authed, &adminv1.ListToolApprovalsRequest{PageToken: "!!"})
			return err
		}},
		{"revoke: no scope", func() error {
			_, err := c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Subject: "telegram:42"})
			return err
		}},
		{"revoke: bad scope", func() error {
			_, err := c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "global", Subject: "telegram:42"})
			return err
		}},
		{"revoke: no subject", func() error {
			_, err := c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "user", Subject: " "})
			return err
		}},
	} {
		if err := tt.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tt.name, err)
		}
	}
	if got := list(&adminv1.ListToolApprovalsRequest{}); !slices.Equal(got, all) {
		t.Fatalf("after refused calls: %q, want all of %q", got, all)
	}

	resp, err := c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "user", Subject: "telegram:42", Pattern: "write_file"})
	if err != nil || len(resp.GetRevoked()) != 1 || resp.GetRevoked()[0].GetPattern() != "write_file" {
		t.Fatalf("revoke one: %v, %v", resp, err)
	}
	resp, err = c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "session", Subject: "conv-a"})
	if err != nil || len(resp.GetRevoked()) != 1 || resp.GetRevoked()[0].GetSessionKey() != "agent:main:telegram:dm:42" {
		t.Fatalf("revoke a conversation's: %v, %v", resp, err)
	}
	resp, err = c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "session", Subject: "conv-a"})
	if err != nil || len(resp.GetRevoked()) != 0 {
		t.Fatalf("revoke again: %v, %v; want nothing revoked", resp, err)
	}
	if got, want := list(&adminv1.ListToolApprovalsRequest{}), []string{all[1], all[3]}; !slices.Equal(got, want) {
		t.Errorf("left: %q, want %q", got, want)
	}

	// Two revocations audited (not the one that found nothing), with
	// the operator and what went.
	rows, err := db.Query(ctx, `SELECT actor, target, detail->>'patterns' FROM audit_log WHERE action = 'tool_approvals.revoke' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var audited []string
	for rows.Next() {
		var actor, target, patterns string
		if err := rows.Scan(&actor, &target, &patterns); err != nil {
			t.Fatal(err)
		}
		audited = append(audited, actor+" "+target+" "+patterns)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{`token:ops-jane user:telegram:42 ["write_file"]`, `token:ops-jane session:conv-a ["terminal"]`}
	if !slices.Equal(audited, want) {
		t.Errorf("audited %q, want %q", audited, want)
	}
}
