package homeassistant

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant/hafake"
)

const token = "ha-long-lived-token"

// testConfig is a config pointed at f, watching the domains the tests
// change, without a cooldown.
func testConfig(f *hafake.Fake) Config {
	cfg := DefaultConfig()
	cfg.URL, cfg.Token, cfg.CooldownSeconds = f.URL, token, 0
	cfg.WatchDomains = []string{"climate", "sensor", "binary_sensor", "light", "alarm_control_panel"}
	cfg.WatchEntities = []string{"vacuum.roborock"}
	cfg.IgnoreEntities = []string{"sensor.uptime"}
	return cfg
}

// The kit's contract suite against the fake Home Assistant, over its
// WebSocket API and REST services.
func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		f := hafake.New(token)
		t.Cleanup(f.Close)
		p, err := NewPlatform(testConfig(f), env.Log, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p, &contractFake{f: f}
	}})
}

type contractFake struct{ f *hafake.Fake }

func (c *contractFake) Kinds() []string {
	return []string{"binary_sensor", "climate", "sensor", "light", "alarm", "watched entity"}
}

func (c *contractFake) Deliver(t *testing.T, _ context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	var ch hafake.Change
	var text string
	switch kind {
	case "binary_sensor":
		ch = hafake.Change{EntityID: "binary_sensor.front_door", Old: &hafake.State{State: "off"},
			New: &hafake.State{State: "on", Attributes: map[string]any{"friendly_name": "Front Door", "device_class": "door"}}}
		text = "[Home Assistant] Front Door: triggered (was cleared)"
	case "climate":
		ch = hafake.Change{EntityID: "climate.living_room", Old: &hafake.State{State: "off"},
			New: &hafake.State{State: "heat", Attributes: map[string]any{"friendly_name": "Living Room", "current_temperature": 21.5, "temperature": 23}}}
		text = "[Home Assistant] Living Room: HVAC mode changed from 'off' to 'heat' (current: 21.5, target: 23)"
	case "sensor":
		ch = hafake.Change{EntityID: "sensor.outside_temperature", Old: &hafake.State{State: "21"},
			New: &hafake.State{State: "22", Attributes: map[string]any{"friendly_name": "Outside", "unit_of_measurement": "°C"}}}
		text = "[Home Assistant] Outside: changed from 21°C to 22°C"
	case "light":
		ch = hafake.Change{EntityID: "light.kitchen", Old: &hafake.State{State: "on"}, New: &hafake.State{State: "off"}}
		text = "[Home Assistant] light.kitchen: turned off"
	case "alarm":
		ch = hafake.Change{EntityID: "alarm_control_panel.home", Old: &hafake.State{State: "armed_away"},
			New: &hafake.State{State: "triggered", Attributes: map[string]any{"friendly_name": "Home Alarm"}}}
		text = "[Home Assistant] Home Alarm: alarm state changed from 'armed_away' to 'triggered'"
	case "watched entity":
		ch = hafake.Change{EntityID: "vacuum.roborock", Old: &hafake.State{State: "docked"},
			New: &hafake.State{State: "cleaning", Attributes: map[string]any{"friendly_name": "Roborock"}}}
		text = "[Home Assistant] Roborock (vacuum.roborock): changed from 'docked' to 'cleaning'"
	default:
		t.Fatalf("unknown kind %s", kind)
	}
	sent := c.f.Change(ch)
	u, _ := url.Parse(c.f.URL)
	return &eventsv1.MessageReceived{
		EventId: sent.EventID, MessageId: sent.EventID, Text: text, Mentioned: true, TransportAuthenticated: true,
		SentAt: timestamppb.New(sent.Fired),
		Source: &eventsv1.SessionSource{Platform: "homeassistant", Account: u.Host, ChatId: "ha_events", ChatName: "Home Assistant Events",
			ChatType: "channel", UserId: "homeassistant", UserName: "Home Assistant"},
	}
}

func (c *contractFake) Redeliver(_ *testing.T, _ context.Context, eventID string) {
	c.f.Replay(eventID)
}

func (c *contractFake) DeliverOversized(*testing.T, context.Context) {
	c.f.Change(hafake.Change{EntityID: "light.huge", Old: &hafake.State{State: "off"},
		New: &hafake.State{State: "on", Attributes: map[string]any{"friendly_name": "Huge", "blob": strings.Repeat("x", maxEventBytes)}}})
}

func (c *contractFake) DeliverMalformed(*testing.T, context.Context) {
	c.f.InjectRaw(`{"id":{{id}},"type":"event","event":{"event_type":"state_changed","data":{"entity_id":"light.x","old_state":null,"new_state":"on"},"time_fired":"2025-01-01T00:00:00+00:00","context":{"id":"01JBAD"}}}`)
}

func (c *contractFake) Drop(*testing.T) { c.f.Drop() }

func (c *contractFake) Connections() int { return c.f.Connections() }

func (c *contractFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "homeassistant", Account: ev.GetSource().GetAccount(), ChatId: ev.GetSource().GetChatId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (c *contractFake) Sent(*testing.T, context.Context, *deliveryv1.Target) []string {
	var out []string
	for _, n := range c.f.Notifications() {
		out = append(out, n.Message)
	}
	return out
}
