package router

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
)

// TestApprovalsCommand: anyone sees the mode (approvals.mode while no
// one has set one); where the platform lists admins only they change it,
// in Hermes's words, and a word that is no mode gets the usage; the
// change is stored for every replica, and a router that starts after it
// (another process, another default) shows it.
func TestApprovalsCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	cfg.ApprovalsMode = "manual"
	ctx, cancel := context.WithCancel(context.Background())
	first, err := New(cfg, Deps{Bus: e.bus, DB: e.db, Redis: e.rdb, RedisPrefix: e.prefix, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	changes := testutil.ToFloat64(approvalModeChanges.WithLabelValues("smart"))

	for _, tt := range []struct{ user, text, want string }{
		{"bob", "/approvals", "Approval mode: manual (persistent gateway-wide setting)."},
		{"bob", "/approvals off", "Only gateway admins can change the persistent approval mode."},
		{"bob", "/approvals nonsense", "Only gateway admins can change the persistent approval mode."},
		{"alice", "/approvals auto", "Usage: /approvals [manual|smart|off]"},
		{"alice", "/approvals", "Approval mode: manual (persistent gateway-wide setting)."},
		{"alice", "/approvals SMART", "Approval mode: smart (persistent gateway-wide setting)."},
		{"bob", "/approvals", "Approval mode: smart (persistent gateway-wide setting)."},
		{"bob", "/yolo", "/yolo is reserved for admins here. /help and /whoami are available."},
	} {
		if got := e.ask(tt.user, tt.text); got != tt.want {
			t.Errorf("%s %q: %q, want %q", tt.user, tt.text, got, tt.want)
		}
	}
	if n := testutil.ToFloat64(approvalModeChanges.WithLabelValues("smart")); n != changes+1 {
		t.Errorf("switchboard_router_approval_mode_changes_total{mode=smart} %v, was %v: want one more", n, changes)
	}
	kv, err := approvalmode.Open(context.Background(), e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := approvalmode.Get(context.Background(), kv); err != nil || st == nil || st.Mode != approvalmode.Smart || st.By != "telegram:alice" {
		t.Errorf("stored mode %+v, %v", st, err)
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first router: %v", err)
	}

	// Another replica, whose default is off, shows the mode set.
	cfg2 := testConfig()
	cfg2.ApprovalsMode = "off"
	e.startRouter(cfg2, e.secondBus(), nil)
	if got := e.ask("bob", "/approvals"); got != "Approval mode: smart (persistent gateway-wide setting)." {
		t.Errorf("/approvals on the second replica: %q", got)
	}
	// No admins listed on it: everyone may change it (Hermes's
	// unconfigured policy).
	if got := e.ask("bob", "/approvals off"); got != "Approval mode: off (persistent gateway-wide setting)." {
		t.Errorf("/approvals off without admins: %q", got)
	}
	if st, err := approvalmode.Get(context.Background(), kv); err != nil || st == nil || st.Mode != approvalmode.Off || st.By != "telegram:bob" {
		t.Errorf("stored mode %+v, %v", st, err)
	}
}

func TestApprovalsModeConfig(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ApprovalsMode = "auto"
	if err := cfg.Validate(); err == nil {
		t.Error("router config with approvals.mode auto is valid")
	}
}
