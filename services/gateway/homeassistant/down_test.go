package homeassistant

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// Home Assistant down when the gateway starts: the connection is tried
// again on the backoff schedule, the gateway unready meanwhile; once it
// is up the gateway subscribes and a watched change gets through.
func TestDownAtStart(t *testing.T) {
	t.Parallel()
	down := platformtest.NewOutage(t)
	g := start(t, func(c *Config) { c.URL = "http://" + down.Addr() }, false)
	platformtest.WaitFor(t, "a failed connection", func() bool {
		_, reason := g.s.Runner().State()
		return reason != ""
	})
	if err := g.s.Ready(g.ctx); err == nil {
		t.Fatal("ready while Home Assistant is down")
	}
	down.End(t, strings.TrimPrefix(g.f.URL, "http://"))
	platformtest.WaitFor(t, "the gateway to subscribe", func() bool {
		st, _ := g.s.Runner().State()
		return st == platform.StateConnected && g.f.Subscribed() == 1
	})
	g.f.Change(door("on", "off"))
	if ev := platformtest.NextEvent(t, g.evs); !strings.Contains(ev.GetText(), "Front Door") {
		t.Fatalf("event %q, want the door's change", ev.GetText())
	}
}
