package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// TestPairingAndSessionsVerbs drives the CLI verbs against a real admin
// API on a real database.
func TestPairingAndSessionsVerbs(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db})

	code, err := pairing.NewStore(db).Issue(ctx, "telegram", "42", "Zed")
	if err != nil {
		t.Fatal(err)
	}
	run := func(f func(context.Context, []string, *bytes.Buffer) error, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := f(ctx, append(args, "--admin-addr", addr), &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	pairingVerb := func(ctx context.Context, a []string, b *bytes.Buffer) error { return runPairing(ctx, a, b) }
	sessionsVerb := func(ctx context.Context, a []string, b *bytes.Buffer) error { return runSessions(ctx, a, b) }

	if out := run(pairingVerb, "list"); !strings.Contains(out, "42") || !strings.Contains(out, "pending") {
		t.Fatalf("list:\n%s", out)
	}
	if out := run(pairingVerb, "approve", "telegram", code); !strings.Contains(out, "approved telegram user 42") {
		t.Fatalf("approve: %s", out)
	}
	if out := run(pairingVerb, "revoke", "telegram", "42"); !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %s", out)
	}
	if out := run(sessionsVerb, "list"); !strings.HasPrefix(out, "KEY") {
		t.Fatalf("sessions: %s", out)
	}
	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "wrong")
	var out bytes.Buffer
	if err := runPairing(ctx, []string{"list", "--admin-addr", addr}, &out); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("wrong token: %v", err)
	}
}

// actorRecorder is an admin API that records the operator each call
// names (admin.ActorHeader) and answers Unimplemented.
type actorRecorder struct {
	adminv1.UnimplementedAdminServiceServer
	mu     sync.Mutex
	actors []string
}

func (r *actorRecorder) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.actors = append(r.actors, strings.Join(md.Get(admin.ActorHeader), ","))
}

func (r *actorRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.actors
	r.actors = nil
	return a
}

// Every admin command names the operator for the audit log the same
// way: --by, else $SWITCHBOARD_OPERATOR, else $USER. Inside a
// container (kubectl exec, docker compose exec) $USER is unset, and
// only `skills reload` took --by: the others' records said a bare
// "token".
func TestAdminCommandsNameTheOperator(t *testing.T) {
	ctx := context.Background()
	rec := &actorRecorder{}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			rec.record(ctx)
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			rec.record(ss.Context())
			return h(srv, ss)
		}))
	adminv1.RegisterAdminServiceServer(srv, rec)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	commands := []struct {
		name string
		run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
		args []string
	}{
		{"pairing", func(ctx context.Context, a []string, o, _ io.Writer) error { return runPairing(ctx, a, o) }, []string{"list"}},
		{"sessions", func(ctx context.Context, a []string, o, _ io.Writer) error { return runSessions(ctx, a, o) }, []string{"list"}},
		{"sessions export", func(ctx context.Context, a []string, o, _ io.Writer) error { return runSessions(ctx, a, o) }, []string{"export", "k"}},
		{"audit", runAudit, nil},
		{"deliveries", deliveriesCommand, []string{"retry", "12"}},
		{"users", runUsers, []string{"forget", "telegram", "42"}},
		{"pause", pauseCommand, []string{"status"}},
		{"approvals", approvalsCommand, []string{"manual"}},
		{"skills", runSkills, []string{"reload"}},
	}
	for _, tt := range []struct {
		name           string
		by             []string
		operator, user string
		want           string
	}{
		{"--by first", []string{"--by", "ann"}, "ops", "jane", "ann"},
		{"then SWITCHBOARD_OPERATOR", nil, "ops", "jane", "ops"},
		{"then USER", nil, "", "jane", "jane"},
		{"else none", nil, "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("SWITCHBOARD_OPERATOR", tt.operator)
			t.Setenv("USER", tt.user)
			for _, c := range commands {
				var out, errOut bytes.Buffer
				args := append(append(append([]string(nil), c.args...), "--admin-addr", lis.Addr().String()), tt.by...)
				err := c.run(ctx, args, &out, &errOut)
				got := rec.take()
				if len(got) != 1 || got[0] != tt.want {
					t.Errorf("%s %q: the API was called naming %q (%v, %s), want %q once", c.name, args, got, err, errOut.String(), tt.want)
				}
			}
		})
	}
}
