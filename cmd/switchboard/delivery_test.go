package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// deliveriesAdmin serves the outbox adapter over gRPC behind a bearer
// token, as the admin service does.
type deliveriesAdmin struct {
	adminv1.UnimplementedAdminServiceServer
	a *outbox.Admin
}

func (s deliveriesAdmin) auth(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) != 1 || v[0] != "Bearer tok" {
		return status.Error(codes.Unauthenticated, "no")
	}
	return nil
}

func (s deliveriesAdmin) ListDeliveries(ctx context.Context, r *adminv1.ListDeliveriesRequest) (*adminv1.ListDeliveriesResponse, error) {
	if err := s.auth(ctx); err != nil {
		return nil, err
	}
	return s.a.ListDeliveries(ctx, r)
}

func (s deliveriesAdmin) RetryDeliveries(ctx context.Context, r *adminv1.RetryDeliveriesRequest) (*adminv1.RetryDeliveriesResponse, error) {
	if err := s.auth(ctx); err != nil {
		return nil, err
	}
	return s.a.RetryDeliveries(ctx, r)
}

func (s deliveriesAdmin) PurgeDeliveries(ctx context.Context, r *adminv1.PurgeDeliveriesRequest) (*adminv1.PurgeDeliveriesResponse, error) {
	if err := s.auth(ctx); err != nil {
		return nil, err
	}
	return s.a.PurgeDeliveries(ctx, r)
}

func TestDeliveriesCommand(t *testing.T) {
	ctx := context.Background()
	store := outbox.New(pgtest.New(t))
	now := time.Now()
	var ids []int64
	for _, k := range []string{"a", "b", "c"} {
		id, err := store.Enqueue(ctx, now, time.Hour, &deliveryv1.SendRequested{IdempotencyKey: k,
			Target: &deliveryv1.Target{Platform: "telegram", ChatId: "99"}, Text: "x"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id[0])
	}
	rows, err := store.Claim(ctx, now, time.Minute, "me", 10)
	if err != nil || len(rows) != 1 {
		t.Fatalf("claim %v %v", rows, err)
	}
	if err := store.Fail(ctx, rows[0].ID, "me", "Forbidden: bot was blocked", now); err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	adminv1.RegisterAdminServiceServer(srv, deliveriesAdmin{a: &outbox.Admin{Store: store}})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "tok")

	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := deliveriesCommand(ctx, append(args[:1:1], append([]string{"--admin-addr", lis.Addr().String()}, args[1:]...)...), &out, &errOut); err != nil {
			t.Fatalf("%v: %v (%s)", args, err, errOut.String())
		}
		return out.String()
	}
	out := run("list")
	if !strings.Contains(out, "failed") || !strings.Contains(out, "telegram:99") || !strings.Contains(out, "blocked") || strings.Count(out, "\n") != 2 {
		t.Fatalf("list:\n%s", out)
	}
	if out := run("list", "--state", "queued"); strings.Count(out, "\n") != 3 {
		t.Fatalf("list queued:\n%s", out)
	}
	// Flags may come after the ids, as with every admin verb.
	var out2, errOut2 bytes.Buffer
	if err := deliveriesCommand(ctx, []string{"retry", strconv.FormatInt(rows[0].ID, 10), "--admin-addr", lis.Addr().String()}, &out2, &errOut2); err != nil || out2.String() != "requeued 1\n" {
		t.Fatalf("retry <id> --admin-addr: %q %v (%s)", out2.String(), err, errOut2.String())
	}
	if out := run("retry", "--all"); out != "requeued 0\n" {
		t.Fatalf("retry --all: %q", out)
	}
	if out := run("purge", "--all"); out != "purged 0\n" {
		t.Fatalf("purge: %q", out)
	}
	var errOut bytes.Buffer
	if err := deliveriesCommand(ctx, []string{"retry"}, &bytes.Buffer{}, &errOut); err == nil {
		t.Fatal("retry without ids or --all accepted")
	}
	if err := deliveriesCommand(ctx, []string{"list", "12"}, &bytes.Buffer{}, &errOut); err == nil {
		t.Fatal("list with an id accepted")
	}
	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "wrong")
	if err := deliveriesCommand(ctx, []string{"list", "--admin-addr", lis.Addr().String()}, &bytes.Buffer{}, &errOut); status.Code(errorsCause(err)) != codes.Unauthenticated {
		t.Fatalf("wrong token: %v", err)
	}
	_ = ids
}

func errorsCause(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		next := u.Unwrap()
		if next == nil {
			return err
		}
		err = next
	}
}

// TestDeliveriesCommandNamesTheOperator: retry and purge change state, so
// the admin API audits them; like every other operator verb the command
// names the operator (--by, else $SWITCHBOARD_OPERATOR, else $USER) for that record, which `switchboard audit`
// then shows as token:<user> instead of a bare "token".
func TestDeliveriesCommandNamesTheOperator(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db, Deliveries: &outbox.Admin{Store: outbox.New(db)}})
	t.Setenv("USER", "jane")

	for _, verb := range []string{"retry", "purge"} {
		t.Run(verb, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := deliveriesCommand(ctx, []string{verb, "--all", "--admin-addr", addr}, &out, &errOut); err != nil {
				t.Fatalf("%v (%s)", err, errOut.String())
			}
			var actor string
			if err := db.QueryRow(ctx, `SELECT actor FROM audit_log WHERE action = $1`, "deliveries."+verb).Scan(&actor); err != nil {
				t.Fatal(err)
			}
			if actor != "token:jane" {
				t.Errorf("audited actor %q, want token:jane", actor)
			}
		})
	}
}
