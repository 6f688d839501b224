package telegram

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// TestPauseStopsPolling: /platform pause telegram (the pauses bucket's
// entry) stops getUpdates on the active replica, which releases its
// lease, and the standby does not take over, nor does a replica started
// while paused; what arrives meanwhile waits at Telegram; every replica's
// presence says paused. Resume: one replica polls again and what waited
// is published.
func TestPauseStopsPolling(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	cfg.LeaseTTL = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, topo := b.JetStream(), b.Topology()

	active, _ := startService(t, cfg, b, "tg-a")
	waitFor(t, "the first replica to poll", 10*time.Second, func() bool { st, _ := active.Runner().State(); return st == platform.StateConnected })
	standby, _ := startService(t, cfg, b, "tg-b")
	waitFor(t, "the standby", 10*time.Second, func() bool { st, _ := standby.Runner().State(); return st == platform.StateStandby })

	presence, err := gatewaystatus.Presence(ctx, js, topo)
	if err != nil {
		t.Fatal(err)
	}
	states := func() map[string]string {
		t.Helper()
		rs, err := gatewaystatus.Replicas(ctx, presence)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rs {
			if r.Platform != "telegram" || r.Account == "" {
				t.Errorf("presence entry %+v", r)
			}
			out[r.Instance] = r.State
		}
		return out
	}
	waitFor(t, "presence: one connected, one standby", 5*time.Second, func() bool {
		s := states()
		return len(s) == 2 && s["tg-a"] == "connected" && s["tg-b"] == "standby"
	})

	pauses, err := gatewaystatus.Pauses(ctx, js, topo)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := gatewaystatus.SetPause(ctx, pauses, gatewaystatus.Pause{Platform: "telegram", Reason: "maintenance", By: "slack:U1"}); err != nil || !ok {
		t.Fatalf("pause: %v, %v", ok, err)
	}
	for _, s := range []*Service{active, standby} {
		waitFor(t, "both replicas paused", 10*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StatePaused })
		if err := s.Ready(ctx); err != nil {
			t.Errorf("a paused replica is unready: %v", err)
		}
	}
	late, _ := startService(t, cfg, b, "tg-c")
	waitFor(t, "the replica started while paused to stay paused", 10*time.Second, func() bool { st, _ := late.Runner().State(); return st == platform.StatePaused })

	time.Sleep(500 * time.Millisecond) // a poll in flight at the pause ends
	polls := f.Calls("getUpdates")
	ids := injectText(f, 3)
	time.Sleep(3 * cfg.LeaseTTL) // a standby would have taken the lease by now
	if n := f.Calls("getUpdates"); n != polls {
		t.Errorf("%d getUpdates while paused", n-polls)
	}
	for _, s := range []*Service{active, standby, late} {
		if st, reason := s.Runner().State(); st != platform.StatePaused || reason != "maintenance" {
			t.Errorf("state %s (%q) while paused, want paused (maintenance)", st, reason)
		}
	}
	if evs := inbound(t, b); len(evs) != 0 {
		t.Errorf("%d events published while paused", len(evs))
	}
	waitFor(t, "presence: every replica paused", 5*time.Second, func() bool {
		s := states()
		return len(s) == 3 && s["tg-a"] == "paused" && s["tg-b"] == "paused" && s["tg-c"] == "paused"
	})

	if ok, err := gatewaystatus.ClearPause(ctx, pauses, "telegram"); err != nil || !ok {
		t.Fatalf("resume: %v, %v", ok, err)
	}
	connected := func() int {
		n := 0
		for _, s := range []*Service{active, standby, late} {
			if st, _ := s.Runner().State(); st == platform.StateConnected {
				n++
			}
		}
		return n
	}
	waitFor(t, "one replica to poll again", 10*time.Second, func() bool { return connected() == 1 && f.Calls("getUpdates") > polls })
	waitFor(t, "what waited at Telegram on the bus", 10*time.Second, func() bool { return len(inbound(t, b)) >= len(ids) })
	checkExactlyOnce(t, inbound(t, b), ids)
	if n := connected(); n != 1 {
		t.Errorf("%d replicas connected after resume, want 1", n)
	}
	if f.Conflicts() > 0 {
		t.Errorf("%d getUpdates answered 409", f.Conflicts())
	}
}
