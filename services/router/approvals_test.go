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

// An /approvals whose transaction fails after its set (here Postgres
// refuses the record of its answer until the test lets it, as a
// connection lost before the commit would) is redelivered after another
// change of the mode (the admin API's, made here in the bucket): the
// redelivery finds its first attempt's change in the bucket's history,
// sets nothing again, so the other change stands, and answers as the
// first attempt would have, once.
func TestApprovalsRedeliveredAfterAFailedCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	kv, err := approvalmode.Open(ctx, e.bus.JetStream(), e.bus.Topology())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `
CREATE SEQUENCE approvals_answers;
CREATE TABLE approvals_gate (open boolean NOT NULL);
INSERT INTO approvals_gate VALUES (false);
CREATE FUNCTION refuse_approvals_answers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.answer LIKE 'Approval mode:%' THEN
		PERFORM nextval('approvals_answers');
		IF NOT (SELECT open FROM approvals_gate) THEN
			RAISE EXCEPTION 'connection lost before the commit (test)';
		END IF;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER refuse_approvals_answers BEFORE UPDATE ON command_effects
	FOR EACH ROW EXECUTE FUNCTION refuse_approvals_answers();`); err != nil {
		t.Fatal(err)
	}
	attempts := func() int {
		var n int
		var called bool
		if err := e.db.QueryRow(ctx, `SELECT last_value, is_called FROM approvals_answers`).Scan(&n, &called); err != nil {
			t.Fatal(err)
		}
		if !called {
			return 0
		}
		return n
	}

	e.publish(dm("alice", "/approvals off"))
	waitFor(t, "the first attempt to fail its commit", func() bool { return attempts() >= 1 })
	if st, err := approvalmode.Get(ctx, kv); err != nil || st == nil || st.Mode != approvalmode.Off {
		t.Fatalf("after the first attempt the mode is %+v (%v), want off", st, err)
	}
	// The admin API's change, between the attempts.
	if _, err := approvalmode.Set(ctx, kv, approvalmode.State{Mode: approvalmode.Manual, By: "admin:ops"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(ctx, `UPDATE approvals_gate SET open = true`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the answer", func() bool { return len(e.noticesTo("alice")) > 0 })
	if got := e.noticesTo("alice"); got[0] != "Approval mode: off (persistent gateway-wide setting)." {
		t.Errorf("answer %q, want the first attempt's", got[0])
	}
	// Answered by a later attempt than the first, which failed. (Not
	// "one counted after the gate opened": an attempt counts itself
	// before it reads the gate, so one counted just before may pass.)
	if n := attempts(); n < 2 {
		t.Fatalf("%d attempts: no redelivery answered", n)
	}
	waitFor(t, "inbound drained", e.inboundDrained)
	if got := e.noticesTo("alice"); len(got) != 1 {
		t.Errorf("alice got %d answers, want 1: %q", len(got), got)
	}
	if st, err := approvalmode.Get(ctx, kv); err != nil || st == nil || st.Mode != approvalmode.Manual || st.By != "admin:ops" {
		t.Errorf("stored mode %+v, %v: want the admin's change, kept", st, err)
	}
}
