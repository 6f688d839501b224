package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// TestPairingAndSessionsVerbs drives the CLI verbs against a real admin
// API on a real database.
func TestPairingAndSessionsVerbs(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	s, err := admin.New(admin.Config{Addr: "127.0.0.1:0"}, admin.Deps{DB: db, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()
	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "tok")
	t.Setenv("USER", "tester")

	code, err := pairing.NewStore(db).Issue(ctx, "telegram", "42", "Zed")
	if err != nil {
		t.Fatal(err)
	}
	run := func(f func(context.Context, []string, *bytes.Buffer) error, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := f(ctx, append(args, "--admin-addr", s.Addr()), &out); err != nil {
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
	if err := runPairing(ctx, []string{"list", "--admin-addr", s.Addr()}, &out); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("wrong token: %v", err)
	}
}
