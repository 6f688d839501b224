package homeassistant

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant/hafake"
)

// change is a change of entity from state was to state now.
func change(entity, was, now string, attrs map[string]any) hafake.Change {
	var old *hafake.State
	if was != "" {
		old = &hafake.State{State: was}
	}
	var cur *hafake.State
	if now != "" {
		cur = &hafake.State{State: now, Attributes: attrs}
	}
	return hafake.Change{EntityID: entity, Old: old, New: cur}
}

// sentinel numbers the sentinel entities of a test.
type sentinel struct{ n int }

// sync waits until the gateway's connection n is subscribed and Home
// Assistant has answered its get_states (so the catch-up's events are
// on their way), then
// changes a watched sensor live and returns the events published before
// that change's: the catch-up's (and any live event before it), in
// order.
func (g *gw) sync(t *testing.T, s *sentinel, n int) []*eventsv1.MessageReceived {
	t.Helper()
	platformtest.WaitFor(t, fmt.Sprintf("subscription #%d", n), func() bool { return g.f.Connections() >= n && g.f.Subscribed() == 1 })
	// A gateway that does not ask for the states (one without a
	// catch-up) fails on the events below, not here.
	for end := time.Now().Add(2 * time.Second); g.f.StatesServed() < n && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	s.n++
	// A new entity each time: no cooldown holds it back.
	mark := g.f.Change(change(fmt.Sprintf("sensor.sentinel_%d", s.n), "", "on", nil))
	var got []*eventsv1.MessageReceived
	for {
		ev := platformtest.NextEvent(t, g.evs)
		if ev.GetEventId() == mark.EventID {
			return got
		}
		got = append(got, ev)
	}
}

// disconnect closes the gateway's connection and keeps Home Assistant
// unreachable until the returned function is called.
func (g *gw) disconnect(t *testing.T) (reconnect func()) {
	t.Helper()
	g.f.SetDown(true)
	g.f.Drop()
	platformtest.WaitFor(t, "the connection to drop", func() bool { return g.f.Subscribed() == 0 })
	return func() { g.f.SetDown(false) }
}

type wantEvent struct {
	sent hafake.Changed
	text string
}

func checkEvents(t *testing.T, got []*eventsv1.MessageReceived, want []wantEvent) {
	t.Helper()
	if len(got) != len(want) {
		var texts []string
		for _, ev := range got {
			texts = append(texts, ev.GetText())
		}
		t.Fatalf("%d events %q, want %d", len(got), texts, len(want))
	}
	for i, w := range want {
		ev := got[i]
		if ev.GetEventId() != w.sent.EventID || ev.GetText() != w.text || !ev.GetSentAt().AsTime().Equal(w.sent.Fired) ||
			ev.GetSource().GetChatId() != ChatID || !ev.GetTransportAuthenticated() {
			t.Errorf("event %d: %s %q sent %v, want %s %q sent %v", i, ev.GetEventId(), ev.GetText(), ev.GetSentAt().AsTime(),
				w.sent.EventID, w.text, w.sent.Fired)
		}
	}
}

// seed gives Home Assistant its entities before the gateway first
// connects (their states are the gateway's starting point, not changes).
func seed(f *hafake.Fake) {
	for _, ch := range []hafake.Change{
		change("binary_sensor.front_door", "", "off", map[string]any{"friendly_name": "Front Door"}),
		change("climate.hall", "", "off", map[string]any{"friendly_name": "Hall", "current_temperature": 19.5, "temperature": 21}),
		change("light.kitchen", "", "off", nil),
		change("light.hall", "", "on", nil),
		change("sensor.uptime", "", "1", nil),
		change("switch.heater", "", "off", nil),
		change("vacuum.roborock", "", "docked", nil),
		change("sensor.gone", "", "5", nil),
	} {
		f.Record(ch)
	}
}

// Changes made while the gateway is disconnected (Home Assistant
// restarting) are published once it is subscribed again: one event per
// watched entity whose state differs from the one the gateway last read,
// from that state to the current one, with Home Assistant's last_changed
// as its time and id; none for an unchanged entity (attributes only, or
// back to the same state), an ignored or unwatched one, a removed one or
// a new one; and nothing again at the next reconnect.
func TestCatchUpAfterReconnect(t *testing.T) {
	t.Parallel()
	f := hafake.New(token)
	t.Cleanup(f.Close)
	seed(f)
	g := startOn(t, f, nil, true, nil, slog.New(slog.DiscardHandler))
	var s sentinel
	if got := g.sync(t, &s, 1); len(got) != 0 {
		t.Fatalf("first start published %d events; the states it finds are its starting point", len(got))
	}

	reconnect := g.disconnect(t)
	door := f.Change(change("binary_sensor.front_door", "off", "on", map[string]any{"friendly_name": "Front Door"}))
	climate := f.Change(change("climate.hall", "off", "heat", map[string]any{"friendly_name": "Hall", "current_temperature": 19.5, "temperature": 22}))
	f.Change(change("light.kitchen", "off", "off", map[string]any{"brightness": 20}))
	f.Change(change("light.hall", "on", "off", nil))
	f.Change(change("light.hall", "off", "on", nil))
	f.Change(change("sensor.uptime", "1", "2", nil))
	f.Change(change("switch.heater", "off", "on", nil))
	vacuum := f.Change(change("vacuum.roborock", "docked", "cleaning", nil))
	f.Change(change("sensor.gone", "5", "", nil))
	f.Change(change("sensor.new", "", "7", nil))
	reconnect()

	checkEvents(t, g.sync(t, &s, 2), []wantEvent{
		{door, "[Home Assistant] Front Door: triggered (was cleared)"},
		{climate, "[Home Assistant] Hall: HVAC mode changed from 'off' to 'heat' (current: 19.5, target: 22)"},
		{vacuum, "[Home Assistant] vacuum.roborock (vacuum.roborock): changed from 'docked' to 'cleaning'"},
	})

	// Live again, and a reconnect with nothing changed publishes nothing.
	live := f.Change(change("binary_sensor.front_door", "on", "off", map[string]any{"friendly_name": "Front Door"}))
	checkEvents(t, g.sync(t, &s, 2), []wantEvent{{live, "[Home Assistant] Front Door: cleared (was triggered)"}})
	g.disconnect(t)()
	if got := g.sync(t, &s, 3); len(got) != 0 {
		t.Fatalf("a reconnect without changes published %d events (%q …)", len(got), got[0].GetText())
	}
}

// A change made between the subscription and the get_states answer is
// in both, its live event before the answer or after it: it is
// published once, beside the change missed while disconnected.
func TestCatchUpAndLiveEventPublishOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after bool
	}{
		{"live event before the answer", false},
		{"live event after the answer", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := hafake.New(token)
			t.Cleanup(f.Close)
			seed(f)
			g := startOn(t, f, nil, true, nil, slog.New(slog.DiscardHandler))
			var s sentinel
			g.sync(t, &s, 1)

			reconnect := g.disconnect(t)
			door := f.Change(change("binary_sensor.front_door", "off", "on", map[string]any{"friendly_name": "Front Door"}))
			var light hafake.Changed
			var mu sync.Mutex
			f.BeforeStates(func() {
				mu.Lock()
				defer mu.Unlock()
				if tc.after {
					light = f.Record(change("light.kitchen", "off", "on", nil))
				} else {
					light = f.Change(change("light.kitchen", "off", "on", nil))
				}
			})
			if tc.after {
				f.AfterStates(func() {
					mu.Lock()
					defer mu.Unlock()
					f.Replay(light.EventID)
				})
			}
			reconnect()
			got := g.sync(t, &s, 2)
			mu.Lock()
			want := []wantEvent{{door, "[Home Assistant] Front Door: triggered (was cleared)"}, {light, "[Home Assistant] light.kitchen: turned on"}}
			mu.Unlock()
			slices.SortFunc(got, func(a, b *eventsv1.MessageReceived) int { return compareText(a.GetText(), b.GetText()) })
			checkEvents(t, got, want)
		})
	}
}

func compareText(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A new gateway process (a restart, another replica taking over) reads
// the states its predecessor stored: it publishes what changed while no
// process was connected, and not what the predecessor published live.
func TestCatchUpAfterGatewayRestart(t *testing.T) {
	t.Parallel()
	f := hafake.New(token)
	t.Cleanup(f.Close)
	seed(f)
	log := slog.New(slog.DiscardHandler)
	g := startOn(t, f, nil, true, nil, log)
	var s sentinel
	g.sync(t, &s, 1)
	light := f.Change(change("light.kitchen", "off", "on", nil))
	checkEvents(t, g.sync(t, &s, 1), []wantEvent{{light, "[Home Assistant] light.kitchen: turned on"}})
	g.stop()

	door := f.Change(change("binary_sensor.front_door", "off", "on", map[string]any{"friendly_name": "Front Door"}))
	f.Change(change("switch.heater", "off", "on", nil))
	f.Change(change("climate.hall", "off", "off", map[string]any{"friendly_name": "Hall", "temperature": 25}))
	g.run(t, testConfig(f), true, nil, log)
	checkEvents(t, g.sync(t, &s, 2), []wantEvent{{door, "[Home Assistant] Front Door: triggered (was cleared)"}})
}

// The catch-up keeps the per-entity cooldown as a live change does: a
// change missed within the cooldown of the entity's last message is not
// published (and counts as read), one after it is, from the state last
// read.
func TestCatchUpCooldown(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := hafake.New(token)
	t.Cleanup(f.Close)
	seed(f)
	g := startOn(t, f, func(c *Config) { c.CooldownSeconds = 30 }, true, clock, slog.New(slog.DiscardHandler))
	var s sentinel
	g.sync(t, &s, 1)
	a := f.Change(change("binary_sensor.front_door", "off", "on", map[string]any{"friendly_name": "Front Door"}))
	checkEvents(t, g.sync(t, &s, 1), []wantEvent{{a, "[Home Assistant] Front Door: triggered (was cleared)"}})

	advance(10 * time.Second)
	reconnect := g.disconnect(t)
	f.Change(change("binary_sensor.front_door", "on", "off", map[string]any{"friendly_name": "Front Door"}))
	reconnect()
	if got := g.sync(t, &s, 2); len(got) != 0 {
		t.Fatalf("a change within the cooldown published: %q", got[0].GetText())
	}

	advance(31 * time.Second)
	reconnect = g.disconnect(t)
	b := f.Change(change("binary_sensor.front_door", "off", "on", map[string]any{"friendly_name": "Front Door"}))
	reconnect()
	checkEvents(t, g.sync(t, &s, 3), []wantEvent{{b, "[Home Assistant] Front Door: triggered (was cleared)"}})
}

// A get_states answer larger than the gateway reads closes that
// connection once; the next ones subscribe without asking for the
// states again (instead of reconnecting for ever), and live changes get
// through.
func TestCatchUpAnswerTooLarge(t *testing.T) {
	t.Parallel()
	f := hafake.New(token)
	t.Cleanup(f.Close)
	seed(f)
	f.Record(change("media_player.living_room", "", "playing", map[string]any{"playlist": strings.Repeat("x", 100<<10)}))
	b := bustest.New(t, bustest.EmbeddedURL(t))
	t.Cleanup(func() { platformtest.DeleteBuckets(b) })
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	s, err := New(testConfig(f), Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s.p.statesLimit = 64 << 10
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	platformtest.WaitFor(t, "the second connection to subscribe", func() bool { return f.Connections() >= 2 && f.Subscribed() == 1 })
	door := f.Change(change("binary_sensor.front_door", "off", "on", map[string]any{"friendly_name": "Front Door"}))
	if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != door.EventID {
		t.Fatalf("event %s %q, want the door's %s", ev.GetEventId(), ev.GetText(), door.EventID)
	}
	if n, served := f.Connections(), f.StatesServed(); n != 2 || served != 1 {
		t.Fatalf("%d connections, %d get_states answered; want 2 and 1 (no asking again)", n, served)
	}
}
