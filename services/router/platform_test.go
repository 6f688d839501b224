package router

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
)

// TestPlatformCommand: /platform list shows each platform's replicas
// from the presence bucket; pause and resume write the pauses bucket in
// Hermes's words, refuse the platform the command came from without
// --force; non-admins are refused where admins are listed. (A
// redelivered pause: TestCommandRedeliveredAfterACrashIsAppliedOnce.)
func TestPlatformCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Admins = map[string][]string{"telegram": {"alice"}}
	cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, "bob")
	e.startRouter(cfg, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, topo := e.bus.JetStream(), e.bus.Topology()
	presence, err := gatewaystatus.Presence(ctx, js, topo)
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-5 * time.Minute)
	for _, r := range []gatewaystatus.Replica{
		{Platform: "telegram", Account: "1", Instance: "tg-a", State: "connected", Since: since},
		{Platform: "telegram", Account: "1", Instance: "tg-b", State: "standby", Since: since},
		{Platform: "discord", Account: "2", Instance: "dc-a", State: "connecting", Reason: "dial tcp: connection refused", Attempts: 3, Since: since},
	} {
		if err := gatewaystatus.Put(ctx, presence, r); err != nil {
			t.Fatal(err)
		}
	}

	for _, tt := range []struct {
		user, text string
		want       []string
	}{
		{"bob", "/platform", []string{"/platform is reserved for admins here."}},
		{"alice", "/platform", []string{"**Gateway platforms**", "Connected: telegram", "discord — not connected (1 replica)",
			"  · dc-a — retrying (attempt 3): dial tcp: connection refused", "telegram (2 replicas)", "  · tg-a — connected 5m ago", "  · tg-b — standby"}},
		{"alice", "/platform reboot discord", []string{"Usage: /platform <list|pause|resume> [name]", "/platform list — show platform status"}},
		{"alice", "/platform pause", []string{"Usage: /platform pause <name>"}},
		{"alice", "/platform pause myspace", []string{"Unknown platform: myspace"}},
		{"alice", "/platform resume discord", []string{"discord is not paused — nothing to resume."}},
		{"alice", "/platform pause Discord", []string{"✓ discord paused. Resume with `/platform resume discord`."}},
		{"alice", "/platform pause discord", []string{"discord is already paused."}},
		// The age is whole seconds since the pause: 0s, or 1s on a slow run.
		{"alice", "/platform list", []string{"discord — PAUSED (paused via /platform pause, by telegram:alice ", "s ago). Resume with `/platform resume discord`."}},
		{"alice", "/platform pause telegram", []string{"This chat is on telegram: pausing it would leave no way to resume it from here.", "`/platform pause telegram --force`"}},
		{"alice", "/platform pause slack token rotation", []string{"✓ slack paused."}},
		{"alice", "/platform list", []string{"slack — PAUSED (token rotation, by telegram:alice", "  · no replica running"}},
		{"alice", "/platform resume discord", []string{"✓ discord resumed"}},
		{"alice", "/platform resume slack", []string{"✓ slack resumed"}},
		{"alice", "/platform", []string{"discord — not connected (1 replica)"}},
	} {
		got := e.ask(tt.user, tt.text)
		for _, want := range tt.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: %q, want it to contain %q", tt.text, got, want)
			}
		}
	}
	pauses, err := gatewaystatus.Pauses(ctx, js, topo)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := gatewaystatus.Paused(ctx, pauses); len(p) != 0 {
		t.Errorf("paused after resume: %+v", p)
	}

	// The platform the command came from, forced.
	if got := e.ask("alice", "/platform pause telegram --force"); got != "✓ telegram paused. Resume with `/platform resume telegram`." {
		t.Errorf("forced pause: %q", got)
	}
	p, err := gatewaystatus.Get(ctx, pauses, "telegram")
	if err != nil || p == nil || p.By != "telegram:alice" || p.Reason != platformPauseReason {
		t.Fatalf("telegram's pause: %+v, %v", p, err)
	}
}

func TestPlatformListText(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		replicas []gatewaystatus.Replica
		paused   []gatewaystatus.Pause
		want     string
	}{
		{"nothing", nil, nil, "**Gateway platforms**\nConnected: (none)\nFailed/paused: (none)"},
		{"connected", []gatewaystatus.Replica{{Platform: "slack", Instance: "s1", State: "connected", Since: now.Add(-3 * time.Hour)}},
			nil, "**Gateway platforms**\nConnected: slack\nslack (1 replica)\n  · s1 — connected 3h ago\nFailed/paused: (none)"},
		{"fatal and paused", []gatewaystatus.Replica{
			{Platform: "telegram", Instance: "t1", State: "fatal", Reason: "401 Unauthorized"},
			{Platform: "telegram", Instance: "t2", State: "connecting"},
			{Platform: "whatsapp", Instance: "w1", State: "paused"},
		}, []gatewaystatus.Pause{{Platform: "whatsapp", Reason: "maintenance", By: "slack:U1", At: now.Add(-90 * time.Second)}},
			"**Gateway platforms**\nConnected: (none)\ntelegram — not connected (2 replicas)\n  · t1 — failed, not retrying: 401 Unauthorized\n  · t2 — connecting\n" +
				"whatsapp — PAUSED (maintenance, by slack:U1 1m ago). Resume with `/platform resume whatsapp`.\n  · w1 — paused"},
	} {
		if got := platformListText(tt.replicas, tt.paused, now); got != tt.want {
			t.Errorf("%s:\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}
