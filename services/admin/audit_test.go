package admin

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The audit log over the API: newest first, page by page, narrowed by
// action (exact, or a prefix ending in "."), target, actor and time;
// the calls themselves, a revocation here, land in it.
func TestListAuditLog(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	old := time.Now().Add(-48 * time.Hour)
	if _, err := db.Exec(ctx, `INSERT INTO audit_log (at, actor, action, target, detail) VALUES
		($1, 'token:jane', 'session.reset', 'agent:main:telegram:dm:1', '{"generation": 2}'),
		(now(), 'token:jane', 'users.forget', 'telegram:42', '{"sessions": 1}'),
		(now(), 'token:bob', 'users.export', 'telegram:42', '{}'),
		(now(), 'token:bob', 'usersX', 'x', '{}')`, old); err != nil {
		t.Fatal(err)
	}
	c, authed := serve(t, ctx, Config{}, Deps{DB: db})
	if _, err := c.ListAuditLog(ctx, &adminv1.ListAuditLogRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}
	// A revocation of nothing is not audited; one that revokes is.
	if _, err := db.Exec(ctx, `INSERT INTO agent_tool_approvals (scope, subject, pattern) VALUES ('user', 'telegram:42', 'terminal')`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "user", Subject: "telegram:404"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevokeToolApprovals(authed, &adminv1.RevokeToolApprovalsRequest{Scope: "user", Subject: "telegram:42"}); err != nil {
		t.Fatal(err)
	}
	list := func(req *adminv1.ListAuditLogRequest) []string {
		t.Helper()
		var got []string
		for range 10 {
			resp, err := c.ListAuditLog(authed, req)
			if err != nil {
				t.Fatalf("%v: %v", req, err)
			}
			for _, e := range resp.GetEntries() {
				got = append(got, e.GetActor()+" "+e.GetAction()+" "+e.GetTarget())
			}
			if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
				return got
			}
		}
		t.Fatalf("%v: more than 10 pages", req)
		return nil
	}
	all := []string{"token:ops-jane tool_approvals.revoke user:telegram:42", "token:bob usersX x", "token:bob users.export telegram:42",
		"token:jane users.forget telegram:42", "token:jane session.reset agent:main:telegram:dm:1"}
	for _, tt := range []struct {
		name string
		req  *adminv1.ListAuditLogRequest
		want []string
	}{
		{"all, pages of two", &adminv1.ListAuditLogRequest{PageSize: 2}, all},
		{"an action", &adminv1.ListAuditLogRequest{Action: "users.forget"}, all[3:4]},
		{"an action's prefix", &adminv1.ListAuditLogRequest{Action: "users."}, all[2:4]},
		{"a prefix needs its dot", &adminv1.ListAuditLogRequest{Action: "users"}, nil},
		{"a target", &adminv1.ListAuditLogRequest{Target: "telegram:42"}, all[2:4]},
		{"an actor", &adminv1.ListAuditLogRequest{Actor: "token:bob"}, all[1:3]},
		{"since", &adminv1.ListAuditLogRequest{Since: timestamppb.New(old.Add(time.Hour))}, all[:4]},
	} {
		if got := list(tt.req); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	resp, err := c.ListAuditLog(authed, &adminv1.ListAuditLogRequest{Action: "session.reset"})
	if err != nil || len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetDetailJson() != `{"generation": 2}` || !resp.GetEntries()[0].GetAt().AsTime().Equal(old.Truncate(time.Microsecond)) {
		t.Errorf("an entry: %v, %v", resp, err)
	}
	for _, req := range []*adminv1.ListAuditLogRequest{{PageToken: "x"}, {PageToken: "-1"}, {Since: &timestamppb.Timestamp{Seconds: -1 << 40}}} {
		if _, err := c.ListAuditLog(authed, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}
