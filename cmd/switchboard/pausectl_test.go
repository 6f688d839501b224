package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/services/admin"
)

// TestPauseVerbs drives `switchboard pause` against a real admin API on
// a real database and NATS: what it prints, its exit statuses, and the
// entry it leaves for the routers.
func TestPauseVerbs(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := estop.Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: db, Pause: func(context.Context) (jetstream.KeyValue, error) { return kv, nil }})

	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := pauseCommand(ctx, append(args, "--admin-addr", addr), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	for _, tt := range []struct {
		args    []string
		want    []string // in stdout
		wantErr error
	}{
		{[]string{"status"}, []string{"Switchboard is not paused."}, nil},
		{[]string{"off"}, []string{"Switchboard is not paused."}, nil},
		{[]string{"deploy", "window"}, []string{"⏸️  Switchboard paused — reason: deploy window\n",
			"In-flight work keeps running. Run `switchboard pause off` to lift the pause."}, nil},
		{[]string{"status"}, []string{"⏸️  PAUSED (global emergency stop — reason: deploy window; `switchboard pause off` to lift)",
			"by admin:tester at "}, exitPaused},
		{[]string{"--ttl", "2h"}, []string{"⏸️  Still paused — reason: deploy window\n", "    Auto-resumes "}, nil},
		{[]string{"status"}, []string{"; auto-resumes "}, exitPaused},
		{[]string{"resume"}, []string{"▶️  Switchboard resumed — new work is accepted again."}, nil},
		{[]string{"status"}, []string{"Switchboard is not paused."}, nil},
		{[]string{"--ttl", "soon", "x"}, nil, errUsage},
		{[]string{"status", "--ttl", "1h"}, nil, errUsage},
	} {
		out, errOut, err := run(tt.args...)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%v: err %v, want %v (stderr %s)", tt.args, err, tt.wantErr, errOut)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v printed:\n%s\nwant it to contain %q", tt.args, out, w)
			}
		}
	}
	if st, err := estop.Get(ctx, kv); err != nil || st != nil {
		t.Errorf("after pause off: %+v, %v", st, err)
	}

	// The entry the routers read is /pause's, by the admin API.
	if _, _, err := run("--ttl", "90", "incident"); err != nil {
		t.Fatal(err)
	}
	st, err := estop.Get(ctx, kv)
	if err != nil || st == nil || st.Reason != "incident" || st.By != "admin:tester" {
		t.Fatalf("stored %+v, %v", st, err)
	}
	if left := time.Until(st.Until); left < 80*time.Second || left > 90*time.Second {
		t.Errorf("expires in %v, want 90s", left)
	}

	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "wrong")
	if _, _, err := run("status"); err == nil || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Errorf("wrong token: %v", err)
	}
}

func TestParseTTL(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90", 90 * time.Second, true},
		{"0", 0, true},
		{"45m", 45 * time.Minute, true},
		{"2h", 2 * time.Hour, true},
		{"1d", 24 * time.Hour, true},
		{"-5", 0, false},
		{"soon", 0, false},
		{"-1h", 0, false},
	} {
		got, err := parseTTL(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseTTL(%q) = %v, %v; want %v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

// startAdminAPI serves an admin API with deps (the token "tok") for a
// CLI test and returns its address; the CLI's environment carries the
// token and the operator tester.
func startAdminAPI(t *testing.T, ctx context.Context, cfg admin.Config, deps admin.Deps) string {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	deps.Token = "tok"
	s, err := admin.New(cfg, deps)
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
	t.Setenv("SWITCHBOARD_ADMIN_TOKEN", "tok")
	t.Setenv("USER", "tester")
	t.Setenv("SWITCHBOARD_OPERATOR", "") // the operator is $USER here
	return s.Addr()
}

// `switchboard pause`'s allowlist flags: --allow-user (repeatable) sets
// it, --allow-profile narrows it, a re-arm without them keeps it,
// --clear-allow removes it; status shows it; flags that contradict
// each other, or that do not go with off and status, are usage errors
// that change nothing.
func TestPauseAllowFlags(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := estop.Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	addr := startAdminAPI(t, ctx, admin.Config{}, admin.Deps{DB: pgtest.New(t),
		Pause: func(context.Context) (jetstream.KeyValue, error) { return kv, nil }})
	for _, tt := range []struct {
		args    []string
		want    []string // in stdout
		wantErr error
		// allow is the stored allowlist afterwards: users, then "|" and
		// profiles; "" for none.
		allow string
	}{
		{[]string{"--allow-user", "42", "--allow-user", " alice ", "incident"},
			[]string{"⏸️  Switchboard paused — reason: incident\n", "    Allowed through: user ids 42, alice.\n"}, nil, "42,alice|"},
		{[]string{"status"}, []string{"    allowed through: user ids 42, alice\n"}, exitPaused, "42,alice|"},
		{[]string{"still", "on"}, []string{"⏸️  Still paused — reason: still on\n", "Allowed through: user ids 42, alice."}, nil, "42,alice|"},
		{[]string{"--allow-user", "7", "--allow-profile", "coder"},
			[]string{"Allowed through: user ids 7 (only on routers of profiles coder)."}, nil, "7|coder"},
		{[]string{"status"}, []string{"allowed through: user ids 7 (only on routers of profiles coder)"}, exitPaused, "7|coder"},
		{[]string{"--allow-profile", "coder"}, nil, errUsage, "7|coder"},
		{[]string{"--clear-allow", "--allow-user", "8"}, nil, errUsage, "7|coder"},
		{[]string{"status", "--clear-allow"}, nil, errUsage, "7|coder"},
		{[]string{"off", "--allow-user", "8"}, nil, errUsage, "7|coder"},
		{[]string{"--clear-allow"}, []string{"⏸️  Still paused — reason: still on\n"}, nil, ""},
	} {
		var out, errOut bytes.Buffer
		err := pauseCommand(ctx, append(tt.args, "--admin-addr", addr), &out, &errOut)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%v: err %v, want %v (stderr %s)", tt.args, err, tt.wantErr, errOut.String())
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v printed:\n%s\nwant it to contain %q", tt.args, out.String(), w)
			}
		}
		if tt.allow == "" && strings.Contains(out.String(), "llowed through") {
			t.Errorf("%v printed an allowlist:\n%s", tt.args, out.String())
		}
		st, err := estop.Get(ctx, kv)
		if err != nil || st == nil {
			t.Fatalf("%v: stored %+v, %v", tt.args, st, err)
		}
		got := ""
		if st.Allow != nil {
			got = strings.Join(st.Allow.UserIDs, ",") + "|" + strings.Join(st.Allow.Profiles, ",")
		}
		if got != tt.allow {
			t.Errorf("%v: stored allowlist %q, want %q", tt.args, got, tt.allow)
		}
	}
}
