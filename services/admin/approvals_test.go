package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The approval mode RPCs read and write the entry /approvals does, which
// a worker's watch (approvalmode.Watch, on another connection) follows:
// the configured default until someone sets one, any case read as
// /approvals reads it, an unknown mode refused with nothing changed, who
// set it recorded (a chat's change shown as such); every call needs the
// token; changes are audited and counted.
func TestApprovalModeRPCs(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	c, authed := serve(t, ctx, Config{ApprovalsMode: "smart"}, Deps{DB: db,
		Approvals: func(ctx context.Context) (jetstream.KeyValue, error) {
			return approvalmode.Open(ctx, b.JetStream(), b.Topology())
		}})
	// A worker's view, on a connection of its own, with its own default.
	worker := bustest.NewWith(t, url, b.Topology())
	wkv, err := approvalmode.Open(ctx, worker.JetStream(), worker.Topology())
	if err != nil {
		t.Fatal(err)
	}
	view, err := approvalmode.Watch(ctx, wkv, approvalmode.Smart, nil)
	if err != nil {
		t.Fatal(err)
	}

	_, errGet := c.GetApprovalMode(ctx, &adminv1.GetApprovalModeRequest{})
	_, errSet := c.SetApprovalMode(ctx, &adminv1.SetApprovalModeRequest{Mode: "off"})
	_, errReset := c.ResetApprovalMode(ctx, &adminv1.ResetApprovalModeRequest{})
	if status.Code(errGet) != codes.Unauthenticated || status.Code(errSet) != codes.Unauthenticated || status.Code(errReset) != codes.Unauthenticated {
		t.Fatalf("without the token: %v, %v, %v; want Unauthenticated", errGet, errSet, errReset)
	}
	got, err := c.GetApprovalMode(authed, &adminv1.GetApprovalModeRequest{})
	if m := got.GetApprovalMode(); err != nil || m.GetMode() != "smart" || !m.GetConfiguredDefault() || m.GetBy() != "" || m.GetSetAt() != nil {
		t.Fatalf("before any change: %v, %v; want the configured default, smart", got, err)
	}
	changes := map[string]float64{}
	for _, m := range approvalmode.Modes {
		changes[string(m)] = testutil.ToFloat64(approvalModeChanges.WithLabelValues(string(m)))
	}

	mode := "smart"
	for _, tt := range []struct {
		in   string
		want string // the mode set; "" refused
	}{
		{" MANUAL ", "manual"},
		{"off", "off"},
		{"Smart", "smart"},
		{"yolo", ""},
		{"", ""},
		{"manual please", ""},
		{"manual", "manual"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			set, err := c.SetApprovalMode(authed, &adminv1.SetApprovalModeRequest{Mode: tt.in})
			if tt.want == "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "want manual, smart or off") {
					t.Fatalf("set %q: %v, want InvalidArgument naming the modes", tt.in, err)
				}
			} else {
				m := set.GetApprovalMode()
				if err != nil || m.GetMode() != tt.want || m.GetConfiguredDefault() || m.GetBy() != "admin:ops-jane" || m.GetSetAt() == nil || set.GetPreviousMode() != mode {
					t.Fatalf("set %q: %v, %v; want %s by admin:ops-jane, previously %s", tt.in, set, err, tt.want, mode)
				}
				mode = tt.want
			}
			waitFor(t, "the worker to follow", func() bool { return string(view.Mode()) == mode })
			got, err := c.GetApprovalMode(authed, &adminv1.GetApprovalModeRequest{})
			if err != nil || got.GetApprovalMode().GetMode() != mode || got.GetApprovalMode().GetConfiguredDefault() {
				t.Errorf("get: %v, %v; want %s", got, err, mode)
			}
		})
	}

	// A change from a chat is shown as such.
	if _, err := approvalmode.Set(ctx, wkv, approvalmode.State{Mode: approvalmode.Off, By: "telegram:42"}); err != nil {
		t.Fatal(err)
	}
	got, err = c.GetApprovalMode(authed, &adminv1.GetApprovalModeRequest{})
	if m := got.GetApprovalMode(); err != nil || m.GetMode() != "off" || m.GetBy() != "telegram:42" || m.GetConfiguredDefault() {
		t.Errorf("after /approvals off: %v, %v", got, err)
	}

	for m, want := range map[string]float64{"manual": 2, "off": 1, "smart": 1} {
		if n := testutil.ToFloat64(approvalModeChanges.WithLabelValues(m)) - changes[m]; n != want {
			t.Errorf("changes to %s counted %v, want %v", m, n, want)
		}
	}
	var audited int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'approvals.set' AND actor = 'token:ops-jane'`).Scan(&audited); err != nil || audited != 4 {
		t.Errorf("audited %d changes (%v), want 4", audited, err)
	}
}

// Without a bucket the approval mode and skill reload RPCs answer
// Unimplemented; a configured default that names no mode stops New.
func TestControlsUnimplementedWithoutBucket(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s, err := New(Config{Addr: "127.0.0.1:0"}, Deps{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, errGet := s.GetApprovalMode(ctx, &adminv1.GetApprovalModeRequest{})
	_, errSet := s.SetApprovalMode(ctx, &adminv1.SetApprovalModeRequest{Mode: "off"})
	_, errReset := s.ResetApprovalMode(ctx, &adminv1.ResetApprovalModeRequest{})
	_, errReload := s.ReloadSkills(ctx, &adminv1.ReloadSkillsRequest{})
	for _, err := range []error{errGet, errSet, errReset, errReload} {
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%v, want Unimplemented", err)
		}
	}
	if _, err := New(Config{Addr: "127.0.0.1:0", ApprovalsMode: "sometimes"}, Deps{DB: db}); err == nil {
		t.Error("approvals mode sometimes accepted")
	}
}

// ResetApprovalMode returns the gateway to the configured default: the
// mode set is deleted (a worker's view goes back to its default), the
// answer is the default and what it replaced, audited and counted; with
// none set it changes, audits and counts nothing; a mode set between
// its read and its delete is the one it deletes and reports.
//
// Not parallel: TestApprovalModeRPCs counts the changes of its own calls.
func TestResetApprovalModeRPC(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	real, err := approvalmode.Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	kv := &interleaved{KeyValue: real}
	c, authed := serve(t, ctx, Config{ApprovalsMode: "off"}, Deps{DB: db,
		Approvals: func(context.Context) (jetstream.KeyValue, error) { return kv, nil }})
	worker := bustest.NewWith(t, url, b.Topology())
	wkv, err := approvalmode.Open(ctx, worker.JetStream(), worker.Topology())
	if err != nil {
		t.Fatal(err)
	}
	view, err := approvalmode.Watch(ctx, wkv, approvalmode.Off, nil)
	if err != nil {
		t.Fatal(err)
	}
	resets := testutil.ToFloat64(approvalModeChanges.WithLabelValues("off"))
	chatSmart := func() {
		if _, err := approvalmode.Set(ctx, real, approvalmode.State{Mode: approvalmode.Smart, By: "telegram:42"}); err != nil {
			t.Error(err)
		}
	}
	for _, tt := range []struct {
		name    string
		set     string // set through the API first; "" none
		between func()
		cleared bool
		prev    string
		stored  string // the mode stored afterwards; "" none
	}{
		{name: "none set", prev: "off"},
		{name: "after a set", set: "manual", cleared: true, prev: "manual"},
		{name: "none set again", prev: "off"},
		{name: "a chat's set between the read and the delete", set: "manual", between: chatSmart, cleared: true, prev: "smart"},
		// With none set the reset writes nothing: it answers from its
		// read, and the set after it stands.
		{name: "a chat's set between, none set before", between: chatSmart, prev: "off", stored: "smart"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.set != "" {
				if _, err := c.SetApprovalMode(authed, &adminv1.SetApprovalModeRequest{Mode: tt.set}); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the worker to follow the set", func() bool { return string(view.Mode()) == tt.set })
			}
			if tt.between != nil {
				kv.after.Store(&tt.between)
			}
			reset, err := c.ResetApprovalMode(authed, &adminv1.ResetApprovalModeRequest{})
			if m := reset.GetApprovalMode(); err != nil || m.GetMode() != "off" || !m.GetConfiguredDefault() || reset.GetCleared() != tt.cleared || reset.GetPreviousMode() != tt.prev {
				t.Fatalf("reset: %v, %v; want the default off, cleared %v, previously %s", reset, err, tt.cleared, tt.prev)
			}
			if kv.after.Load() != nil {
				t.Fatal("the change between was never made")
			}
			if st, err := approvalmode.Get(ctx, real); err != nil || (st == nil) != (tt.stored == "") || st != nil && string(st.Mode) != tt.stored {
				t.Errorf("stored %+v, %v; want %q", st, err, tt.stored)
			}
			if tt.stored == "" {
				waitFor(t, "the worker to follow the reset", func() bool { return view.Mode() == approvalmode.Off })
			}
		})
	}
	if n := testutil.ToFloat64(approvalModeChanges.WithLabelValues("off")) - resets; n != 2 {
		t.Errorf("resets counted %v, want 2", n)
	}
	var audited int
	var was string
	if err := db.QueryRow(ctx, `SELECT count(*), max(detail->>'was') FROM audit_log WHERE action = 'approvals.reset' AND actor = 'token:ops-jane'`).Scan(&audited, &was); err != nil || audited != 2 || was != "smart" {
		t.Errorf("audited %d resets, was up to %q (%v), want 2", audited, was, err)
	}
}
