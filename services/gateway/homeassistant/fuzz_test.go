package homeassistant

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// FuzzFrame feeds the websocket message parser, the state_changed
// parser, the filters and the description arbitrary messages: they never
// panic, and an event they make is Hermes's (its channel and sender,
// trusted as the transport's), for a watched entity, named by the
// change's context and entity, and one the kit can publish. The
// committed corpus (testdata/fuzz/FuzzFrame) holds Home Assistant's
// messages of each kind.
func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"auth_required","ha_version":"2025.1.0"}`,
		`{"type":"auth_ok","ha_version":"2025.1.0"}`,
		`{"type":"auth_invalid","message":"Invalid access token or password"}`,
		`{"id":1,"type":"result","success":true,"result":null}`,
		`{"id":1,"type":"result","success":false,"error":{"code":"unauthorized","message":"Unauthorized"}}`,
		`{"id":1,"type":"pong"}`,
		`{"id":1,"type":"event","event":` + string(event("binary_sensor.front_door", st("off", nil), st("on", map[string]any{"friendly_name": "Front Door"}))) + `}`,
		`{"id":1,"type":"event","event":` + string(event("climate.hall", st("off", nil), st("heat", map[string]any{"current_temperature": 21.5, "temperature": 23}))) + `}`,
		`{"id":1,"type":"event","event":` + string(event("sensor.t", st("1", nil), st("2", map[string]any{"unit_of_measurement": "°C"}))) + `}`,
		`{"id":1,"type":"event","event":` + string(event("light.k", st("on", nil), st("on", map[string]any{"brightness": 3}))) + `}`,
		`{"id":1,"type":"event","event":` + string(event("light.k", st("on", nil), nil)) + `}`,
		`{"id":1,"type":"event","event":{"event_type":"call_service","data":{"domain":"light"},"context":{"id":"c"}}}`,
		`{"id":1,"type":"event","event":{"event_type":"state_changed","data":{"entity_id":"x","new_state":{"state":null}},"context":{"id":"c"},"time_fired":"bad"}}`,
	} {
		f.Add([]byte(s))
	}
	cfg := DefaultConfig()
	cfg.Token, cfg.WatchAll, cfg.IgnoreEntities = "t", true, []string{"sensor.uptime"}
	r := newRules(cfg)
	f.Fuzz(func(t *testing.T, raw []byte) {
		fr, err := parseFrame(raw)
		if err != nil || fr.Type != "event" {
			return
		}
		sc, ok, err := parseStateChanged(fr.Event)
		if err != nil || !ok {
			return
		}
		if r.filter(sc.EntityID) != skipNone {
			if sc.EntityID != "sensor.uptime" {
				t.Fatalf("watch_all skipped %q", sc.EntityID)
			}
			return
		}
		m, why := normalize(sc, "ha.local:8123")
		if why != skipNone {
			if m != nil {
				t.Fatalf("skipped (%s) with an event", why)
			}
			return
		}
		src := m.GetSource()
		if src.GetChatId() != ChatID || src.GetUserId() != UserID || src.GetChatType() != "channel" || !m.GetTransportAuthenticated() {
			t.Fatalf("event %v: not Hermes's source", m)
		}
		if !strings.HasPrefix(m.GetEventId(), sc.ContextID+":"+sc.EntityID) || !strings.HasPrefix(m.GetText(), "[Home Assistant] ") {
			t.Fatalf("event %v for change %+v", m, sc)
		}
		if utf8.Valid(raw) {
			if err := platform.CheckEvent(m, "homeassistant", "ha.local:8123", 1<<20); err != nil && !strings.Contains(err.Error(), "event id") {
				t.Fatalf("event %v not publishable: %v", m, err)
			}
		}
	})
}

// FuzzStates feeds the get_states answer's parser and the catch-up's
// comparison arbitrary results: they never panic; every state read has
// an entity id; a state compared with itself is unchanged, and a change
// from a state read before to it that the description takes is named by
// the state's context, entity and last_changed. The committed corpus
// (testdata/fuzz/FuzzStates) holds Home Assistant's answers.
func FuzzStates(f *testing.F) {
	states := func(items ...string) string { return "[" + strings.Join(items, ",") + "]" }
	door := `{"entity_id":"binary_sensor.front_door","state":"on","attributes":{"friendly_name":"Front Door","device_class":"door"},` +
		`"last_changed":"2025-01-02T03:04:05.123456+00:00","last_reported":"2025-01-02T03:04:05.123456+00:00",` +
		`"last_updated":"2025-01-02T03:04:05.123456+00:00","context":{"id":"01JCTX0001","parent_id":null,"user_id":null}}`
	climate := `{"entity_id":"climate.hall","state":"heat","attributes":{"current_temperature":21.5,"temperature":23},` +
		`"last_changed":"2025-01-02T03:04:05+00:00","last_updated":"2025-01-02T03:04:06+00:00","context":{"id":"01JCTX0002"}}`
	for _, s := range []string{
		states(),
		states(door),
		states(door, climate),
		states(`{"entity_id":"sensor.t","state":null}`, `{"state":"on"}`, `"x"`, `null`, `{}`),
		states(`{"entity_id":"light.k","state":"on","last_changed":5,"context":"c"}`),
		`{"id":2}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, bad, err := parseStates(raw)
		if err != nil {
			return
		}
		if bad < 0 {
			t.Fatalf("bad %d", bad)
		}
		for _, cs := range got {
			if cs.EntityID == "" || cs.entityState == nil {
				t.Fatalf("state %+v without an entity id", cs)
			}
			if !seenOf(cs.entityState).equal(seenOf(cs.entityState)) {
				t.Fatalf("state %+v differs from itself", cs)
			}
			sc := &stateChange{EntityID: cs.EntityID, Old: &entityState{State: json.RawMessage(`"before"`)}, New: cs.entityState,
				ContextID: cs.ContextID, TimeFired: cs.LastChanged}
			m, why := normalize(sc, "ha.local:8123")
			if why == skipNone && m.GetEventId() != cs.ContextID+":"+cs.EntityID+":"+cs.LastChanged && cs.LastChanged != "" {
				t.Fatalf("event id %q for %+v", m.GetEventId(), cs)
			}
		}
	})
}

// FuzzFrameEntity feeds the reader of an oversized message's entity
// arbitrary messages, cut anywhere, deeply nested ones among them: it
// never panics, an entity it names is not empty, and the start of a
// message never names another entity than the whole message does.
func FuzzFrameEntity(f *testing.F) {
	f.Add([]byte(`{"id":1,"type":"event","event":`+string(event("media_player.den", st("idle", nil), st("playing", map[string]any{"playlist": "xyz"})))+`}`), uint16(90))
	f.Add([]byte(`{"id":1,"type":"event","event":{"event_type":"state_changed","data":{"entity_id":"light.k","old_state":null}}}`), uint16(80))
	f.Add([]byte(`{"type":"result","result":[{"entity_id":"light.k"}]}`), uint16(20))
	f.Add([]byte(`{"type":"event","event":{"x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40)+`,"data":{"entity_id":"light.k"}}}`), uint16(60))
	f.Add([]byte(`{"type":"event","event":{"x":[`+strings.Repeat("1,", 1100)+`1],"data":{"entity_id":"light.k"}}}`), uint16(3000))
	f.Add([]byte(strings.Repeat(`{"a":`, 5000)), uint16(100))
	f.Fuzz(func(t *testing.T, raw []byte, cut uint16) {
		whole, wholeOK := frameEntity(raw)
		if wholeOK && whole == "" {
			t.Fatal("an empty entity named")
		}
		n := int(cut) % (len(raw) + 1)
		if id, ok := frameEntity(raw[:n]); ok && (!wholeOK || id != whole) {
			t.Fatalf("the first %d bytes name %q, the whole message %q (%v)", n, id, whole, wholeOK)
		}
	})
}
