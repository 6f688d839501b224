package homeassistant

import (
	"encoding/json"
	"strings"
	"testing"
)

// event is a state_changed event's JSON as Home Assistant sends it.
func event(entity string, old, new any) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"event_type": "state_changed", "time_fired": "2025-01-02T03:04:05.123456+00:00", "origin": "LOCAL",
		"context": map[string]any{"id": "01JCTX0000000000000000000A", "parent_id": nil, "user_id": nil},
		"data":    map[string]any{"entity_id": entity, "old_state": old, "new_state": new},
	})
	return b
}

func st(state any, attrs map[string]any) map[string]any {
	m := map[string]any{"attributes": attrs}
	if state != nil {
		m["state"] = state
	}
	return m
}

// Hermes's text for each domain, and the changes it does not describe.
func TestDescribe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		entity   string
		old, new any
		want     string
	}{
		{"climate", "climate.hall", st("off", nil), st("heat", map[string]any{"friendly_name": "Hall", "current_temperature": json.RawMessage(`21.0`), "temperature": 23}),
			"[Home Assistant] Hall: HVAC mode changed from 'off' to 'heat' (current: 21.0, target: 23)"},
		{"climate without temperatures", "climate.hall", st("off", nil), st("cool", map[string]any{"friendly_name": "Hall"}),
			"[Home Assistant] Hall: HVAC mode changed from 'off' to 'cool' (current: ?, target: ?)"},
		{"sensor with unit", "sensor.t", st("21.5", nil), st("22", map[string]any{"friendly_name": "T", "unit_of_measurement": "°C"}),
			"[Home Assistant] T: changed from 21.5°C to 22°C"},
		{"sensor without unit", "sensor.n", st("1", nil), st("2", nil), "[Home Assistant] sensor.n: changed from 1 to 2"},
		{"sensor null unit", "sensor.n", st("1", nil), st("2", map[string]any{"unit_of_measurement": nil}),
			"[Home Assistant] sensor.n: changed from 1None to 2None"},
		{"binary sensor cleared", "binary_sensor.d", st("on", nil), st("off", map[string]any{"friendly_name": "Door"}),
			"[Home Assistant] Door: cleared (was triggered)"},
		{"binary sensor unavailable", "binary_sensor.d", st("unavailable", nil), st("on", nil),
			"[Home Assistant] binary_sensor.d: triggered (was cleared)"},
		{"light on", "light.k", st("off", nil), st("on", nil), "[Home Assistant] light.k: turned on"},
		{"switch unavailable reads off", "switch.s", st("on", nil), st("unavailable", nil), "[Home Assistant] switch.s: turned off"},
		{"fan", "fan.f", st("off", nil), st("on", map[string]any{"friendly_name": "Fan"}), "[Home Assistant] Fan: turned on"},
		{"alarm", "alarm_control_panel.a", st("disarmed", nil), st("armed_home", nil),
			"[Home Assistant] alarm_control_panel.a: alarm state changed from 'disarmed' to 'armed_home'"},
		{"other domain", "lock.front", st("locked", nil), st("unlocked", map[string]any{"friendly_name": "Front"}),
			"[Home Assistant] Front (lock.front): changed from 'locked' to 'unlocked'"},
		{"new entity", "person.ann", nil, st("home", nil), "[Home Assistant] person.ann (person.ann): changed from 'unknown' to 'home'"},
		{"empty old state", "person.ann", map[string]any{}, st("home", nil), "[Home Assistant] person.ann (person.ann): changed from 'unknown' to 'home'"},
		{"no dot", "weird", st("a", nil), st("b", nil), "[Home Assistant] weird (weird): changed from 'a' to 'b'"},
		{"number friendly name", "lock.x", st("a", nil), st("b", map[string]any{"friendly_name": 7}), "[Home Assistant] 7 (lock.x): changed from 'a' to 'b'"},
		{"state missing", "lock.x", st("a", nil), st(nil, nil), "[Home Assistant] lock.x (lock.x): changed from 'a' to 'unknown'"},
		{"removed", "light.k", st("on", nil), nil, ""},
		{"attributes only", "light.k", st("on", nil), st("on", map[string]any{"brightness": 3}), ""},
		{"unknown to missing", "lock.x", nil, st(nil, nil), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, ok, err := parseStateChanged(event(tc.entity, tc.old, tc.new))
			if err != nil || !ok {
				t.Fatalf("parse: %v %v", ok, err)
			}
			if got := describe(sc); got != tc.want {
				t.Fatalf("describe:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestPyStr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`"x"`: "x", `null`: "None", `true`: "True", `false`: "False", `21`: "21", `21.0`: "21.0", `21.50`: "21.5",
		`1e2`: "100.0", `1e-05`: "1e-05", `0.0001`: "0.0001", `1e16`: "1e+16", `-0.0`: "-0.0", `[1, 2]`: "[1,2]", `{"a": 1}`: `{"a":1}`,
	} {
		if got := pyStr(json.RawMessage(in)); got != want {
			t.Errorf("pyStr(%s) = %q, want %q", in, got, want)
		}
	}
}

// Hermes's filters: ignore wins, listed domains or entities, else
// watch_all, else nothing.
func TestFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cfg    Config
		entity string
		want   skip
	}{
		{"nothing configured", Config{}, "light.k", skipNotWatched},
		{"watch all", Config{WatchAll: true}, "light.k", skipNone},
		{"ignored beats watch all", Config{WatchAll: true, IgnoreEntities: []string{"light.k"}}, "light.k", skipIgnored},
		{"domain", Config{WatchDomains: []string{"light"}}, "light.k", skipNone},
		{"other domain", Config{WatchDomains: []string{"light"}}, "switch.k", skipNotWatched},
		{"watch all does not widen a domain list", Config{WatchAll: true, WatchDomains: []string{"light"}}, "switch.k", skipNotWatched},
		{"entity", Config{WatchEntities: []string{"switch.k"}}, "switch.k", skipNone},
		{"entity or domain", Config{WatchDomains: []string{"light"}, WatchEntities: []string{"switch.k"}}, "switch.k", skipNone},
		{"ignored beats domain", Config{WatchDomains: []string{"sensor"}, IgnoreEntities: []string{"sensor.uptime"}}, "sensor.uptime", skipIgnored},
		{"no dot has no domain", Config{WatchDomains: []string{"weird"}}, "weird", skipNotWatched},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newRules(tc.cfg).filter(tc.entity); got != tc.want {
				t.Fatalf("filter(%s) = %q, want %q", tc.entity, got, tc.want)
			}
		})
	}
}

// The event Hermes's adapter makes: its channel, sender and session,
// the event id from the context, the entity and the time.
func TestNormalize(t *testing.T) {
	t.Parallel()
	sc, _, err := parseStateChanged(event("light.k", st("off", nil), st("on", nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, why := normalize(sc, "ha.local:8123")
	if why != skipNone {
		t.Fatal(why)
	}
	src := m.GetSource()
	if m.GetEventId() != "01JCTX0000000000000000000A:light.k:2025-01-02T03:04:05.123456+00:00" || m.GetMessageId() != m.GetEventId() ||
		!m.GetTransportAuthenticated() || m.GetSentAt().AsTime().Nanosecond() != 123456000 ||
		src.GetPlatform() != "homeassistant" || src.GetAccount() != "ha.local:8123" || src.GetChatId() != "ha_events" ||
		src.GetChatName() != "Home Assistant Events" || src.GetChatType() != "channel" || src.GetUserId() != "homeassistant" || src.GetUserName() != "Home Assistant" {
		t.Fatalf("event %v", m)
	}
}

func TestParseStateChangedRefuses(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"not json":         `{`,
		"no entity":        `{"event_type":"state_changed","data":{},"context":{"id":"c"}}`,
		"no context":       `{"event_type":"state_changed","data":{"entity_id":"light.k"}}`,
		"state not object": `{"event_type":"state_changed","data":{"entity_id":"light.k","new_state":"on"},"context":{"id":"c"}}`,
		"attributes list":  `{"event_type":"state_changed","data":{"entity_id":"light.k","new_state":{"state":"on","attributes":[]}},"context":{"id":"c"}}`,
	} {
		if _, _, err := parseStateChanged(json.RawMessage(raw)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, ok, err := parseStateChanged(json.RawMessage(`{"event_type":"call_service","data":{}}`)); ok || err != nil {
		t.Errorf("another event type: %v %v", ok, err)
	}
}

// frameEntity names the entity of a state change from the first bytes
// of its message, as Home Assistant writes it (type, event type, entity
// id, then the states) and as Go writes a map (keys sorted), and reads
// no further than its bounds.
func TestFrameEntity(t *testing.T) {
	t.Parallel()
	huge := `{"state":"playing","attributes":{"playlist":"` + strings.Repeat("x", 4096)
	// Past the bounds on what is read before the entity: a message nested
	// 20 deep, or with 2,000 values, before it. Before the bounds, each
	// named the entity after it, and a megabyte of "[" took minutes.
	deep := strings.Repeat("[", 20) + strings.Repeat("]", 20)
	long := strings.Repeat("1,", 2000) + "1"
	for _, tc := range []struct {
		name, prefix string
		want         string
		ok           bool
	}{
		{"home assistant's order", `{"id":1,"type":"event","event":{"event_type":"state_changed","data":{"entity_id":"media_player.den","old_state":` + huge, "media_player.den", true},
		{"keys sorted", `{"event":{"context":{"id":"c","parent_id":null},"data":{"entity_id":"light.k","new_state":` + huge, "light.k", true},
		{"whole message", `{"id":1,"type":"event","event":` + string(event("light.k", st("on", nil), st("off", nil))) + `}`, "light.k", true},
		{"cut before the entity", `{"id":1,"type":"event","event":{"event_type":"state_changed","data":{"entity_`, "", false},
		{"cut inside the entity", `{"id":1,"type":"event","event":{"event_type":"state_changed","data":{"entity_id":"media_pl`, "", false},
		{"not an event", `{"id":2,"type":"result","event":{"data":{"entity_id":"light.k"}}`, "", false},
		{"another event type", `{"type":"event","event":{"event_type":"call_service","data":{"entity_id":"light.k"}}`, "", false},
		{"entity id elsewhere", `{"type":"event","event":{"event_type":"state_changed","data":{"new_state":{"entity_id":"light.k","attributes":` + huge, "", false},
		{"in an array", `{"type":"event","event":{"data":[{"entity_id":"light.k"}],"x":` + huge, "", false},
		{"empty entity id", `{"type":"event","event":{"data":{"entity_id":"","new_state":` + huge, "", false},
		{"not json", `<html>` + huge, "", false},
		{"nested deeper than home assistant writes", `{"type":"event","event":{"event_type":"state_changed","x":` + deep + `,"data":{"entity_id":"light.k"}}}`, "", false},
		{"too many tokens before the entity", `{"type":"event","event":{"event_type":"state_changed","x":[` + long + `],"data":{"entity_id":"light.k"}}}`, "", false},
		{"a megabyte of arrays", strings.Repeat("[", maxFrameBytes), "", false},
		{"strings deep in arrays", (strings.Repeat("[", maxFrameBytes/2) + strings.Repeat(`"x",`, maxFrameBytes/8))[:maxFrameBytes], "", false},
		{"a megabyte of objects", strings.Repeat(`{"a":`, maxFrameBytes/5), "", false},
		{"a megabyte of values", `{"type":"event","event":{"event_type":"state_changed","x":[` + strings.Repeat(`1,`, maxFrameBytes/2), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := frameEntity([]byte(tc.prefix))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("frameEntity = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
