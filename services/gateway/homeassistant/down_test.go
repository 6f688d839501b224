package homeassistant

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// Home Assistant down when the gateway starts: the connection is tried
// again on the backoff schedule, the gateway unready meanwhile; once it
// is up the gateway subscribes and a watched change gets through.
func TestDownAtStart(t *testing.T) {
	t.Parallel()
	down := platformtest.NewOutage(t)
	g := start(t, func(c *Config) { c.URL = "http://" + down.Addr() }, false)
	down.ComeUp(t, g.s, "", strings.TrimPrefix(g.f.URL, "http://"))
	platformtest.WaitFor(t, "the gateway to subscribe", func() bool { return g.f.Subscribed() == 1 })
	g.f.Change(door("on", "off"))
	if ev := platformtest.NextEvent(t, g.evs); !strings.Contains(ev.GetText(), "Front Door") {
		t.Fatalf("event %q, want the door's change", ev.GetText())
	}
}
