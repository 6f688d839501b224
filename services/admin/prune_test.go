package admin

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/retention"
)

// recordingPruner answers with a fixed result and records the criteria.
type recordingPruner struct {
	got []retention.Criteria
	err error
}

func (p *recordingPruner) Prune(_ context.Context, c retention.Criteria) (retention.Result, error) {
	p.got = append(p.got, c)
	return retention.Result{Sessions: 3, Skipped: 1, Rows: map[string]int64{retention.KindSessions: 3}}, p.err
}

func TestPruneSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	client := func(p Pruner) adminv1.AdminServiceClient {
		deps := Deps{DB: db, Token: "t"}
		if p != nil {
			deps.Pruner = p
		}
		s, err := New(Config{Addr: "127.0.0.1:0"}, deps)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Listen(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done })
		conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return adminv1.NewAdminServiceClient(conn)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer t", ActorHeader, "ops-jane")
	audits := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'sessions.prune'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if _, err := client(nil).PruneSessions(authed, &adminv1.PruneSessionsRequest{OlderThanSeconds: 60}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("without a pruner: %v", err)
	}
	p := &recordingPruner{}
	c := client(p)
	cases := []struct {
		name   string
		req    *adminv1.PruneSessionsRequest
		code   codes.Code
		want   retention.Criteria
		audits int
	}{
		{name: "no age", req: &adminv1.PruneSessionsRequest{}, code: codes.InvalidArgument},
		{name: "negative age", req: &adminv1.PruneSessionsRequest{OlderThanSeconds: -5}, code: codes.InvalidArgument},
		// 18446744074 s is 2^64 ns and 0.29 s: taken as a duration, it
		// would prune every session idle for a third of a second.
		{name: "age beyond a duration", req: &adminv1.PruneSessionsRequest{OlderThanSeconds: 18446744074}, code: codes.InvalidArgument},
		{name: "age over 100 years", req: &adminv1.PruneSessionsRequest{OlderThanSeconds: 101 * 365 * 86400}, code: codes.InvalidArgument},
		{name: "dry run", req: &adminv1.PruneSessionsRequest{OlderThanSeconds: 86400, Platform: "Telegram", DryRun: true},
			want: retention.Criteria{OlderThan: 24 * time.Hour, Platform: "telegram", DryRun: true}},
		{name: "prune", req: &adminv1.PruneSessionsRequest{OlderThanSeconds: 7776000},
			want: retention.Criteria{OlderThan: 90 * 24 * time.Hour}, audits: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(p.got)
			resp, err := c.PruneSessions(authed, tc.req)
			if status.Code(err) != tc.code {
				t.Fatalf("%v, want %v", err, tc.code)
			}
			if tc.code != codes.OK {
				if len(p.got) != before {
					t.Fatal("pruner called")
				}
				return
			}
			if p.got[len(p.got)-1] != tc.want {
				t.Errorf("criteria %+v, want %+v", p.got[len(p.got)-1], tc.want)
			}
			if resp.GetSessions() != 3 || resp.GetSkipped() != 1 || resp.GetRows()[retention.KindSessions] != 3 || resp.GetDryRun() != tc.req.GetDryRun() {
				t.Errorf("response %v", resp)
			}
			if n := audits(); n != tc.audits {
				t.Errorf("%d audit rows, want %d", n, tc.audits)
			}
		})
	}
	p.err = errors.New("database gone")
	if _, err := c.PruneSessions(authed, &adminv1.PruneSessionsRequest{OlderThanSeconds: 60}); status.Code(err) != codes.Internal {
		t.Fatalf("failing prune: %v", err)
	}
}
