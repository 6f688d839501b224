package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant/hafake"
)

// TestHomeAssistantEndToEnd runs the whole system (`switchboard dev`)
// with the Home Assistant gateway pointed at a fake Home Assistant, over
// its WebSocket API and REST services, with no allowlist at all (Home
// Assistant's events are trusted as the transport's, as in Hermes): a
// watched state change reaches the agent and its answer is posted as a
// persistent notification of its own, as Hermes posts it; an ignored entity's and an unwatched
// domain's changes publish nothing; a token Home Assistant stops
// accepting makes the gateway unready with the reason.
func TestHomeAssistantEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const token = "ha-system-test"
	f := hafake.New(token)
	defer f.Close()
	d := startDev(t, "HASS_URL="+f.URL, "HASS_TOKEN="+token, "HASS_WATCH_DOMAINS=binary_sensor,light",
		"HASS_IGNORE_ENTITIES=light.noisy")
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	waitFor("the gateway's subscription", func() bool { return f.Subscribed() == 1 })

	f.Change(hafake.Change{EntityID: "light.noisy", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	f.Change(hafake.Change{EntityID: "switch.heater", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	f.Change(hafake.Change{EntityID: "binary_sensor.front_door", Old: &hafake.State{State: "off"},
		New: &hafake.State{State: "on", Attributes: map[string]any{"friendly_name": "Front Door", "device_class": "door"}}})
	const want = "echo: [Home Assistant] Front Door: triggered (was cleared)"
	waitFor("the answer as a notification", func() bool { return len(f.Calls()) > 0 })
	// A second watched change after the first, answered too: the
	// ignored and unwatched ones before it were not published.
	f.Change(hafake.Change{EntityID: "light.kitchen", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	waitFor("the second answer", func() bool { return len(f.Calls()) > 1 })
	time.Sleep(300 * time.Millisecond)
	calls := f.Calls()
	if len(calls) != 2 || calls[0].Message != want || calls[1].Message != "echo: [Home Assistant] light.kitchen: turned on" {
		t.Fatalf("notifications posted %+v, want the two watched changes' answers only", calls)
	}
	if calls[0].Title != "Hermes Agent" || calls[0].ID == calls[1].ID {
		t.Fatalf("notifications %+v: want Hermes's title, one notification per answer", calls)
	}
	if shown := f.Notifications(); len(shown) != 2 || shown[0].Message != want || shown[1].Message != calls[1].Message {
		t.Fatalf("Home Assistant shows %+v, want both answers, as Hermes posts them", shown)
	}

	// Every change is in Hermes's one session of the ha_events channel.
	var keys []string
	rows, err := d.db.Query(ctx, `SELECT DISTINCT session_key FROM sessions WHERE session_key LIKE '%:homeassistant:%'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if len(keys) != 1 || keys[0] != "agent:main:homeassistant:channel:ha_events:homeassistant" {
		t.Fatalf("session keys %q, want Hermes's one", keys)
	}

	// Home Assistant stops accepting the token: at the next connection
	// the gateway turns unready for good, saying why.
	f.SetToken("rotated")
	f.Drop()
	var body string
	waitFor("/readyz to say the token was refused", func() bool {
		resp, err := http.Get(d.endpoints["Readiness"])
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(body, "gateway-homeassistant") &&
			strings.Contains(body, "HASS_TOKEN")
	})
	t.Logf("/readyz: %s", strings.TrimSpace(body))
}
