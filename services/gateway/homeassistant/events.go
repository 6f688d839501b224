package homeassistant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// errMalformed marks a websocket message or event that is not what Home
// Assistant sends.
var errMalformed = errors.New("malformed home assistant message")

// frame is one message of Home Assistant's WebSocket API: auth_required,
// auth_ok, auth_invalid, a command's result or an event of a
// subscription.
type frame struct {
	ID      int64           `json:"id"`
	Type    string          `json:"type"`
	Success bool            `json:"success"`
	Message string          `json:"message"` // auth_invalid's reason
	Error   *resultError    `json:"error"`
	Event   json.RawMessage `json:"event"`
	Result  json.RawMessage `json:"result"`
}

// resultError is a failed command's error.
type resultError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// stateChange is a state_changed event, parsed.
type stateChange struct {
	EntityID string
	// Old and New are the states before and after; nil when the entity
	// was added (Old) or removed (New).
	Old, New *entityState
	// ContextID is the id of the context the change happened in (a
	// service call, an automation run): one context may change several
	// entities (a scene), and one entity more than once.
	ContextID string
	// TimeFired is the event's own time, as Home Assistant wrote it.
	TimeFired string
}

// entityState is a state object: its state and attributes as JSON
// values (Home Assistant's states are strings; attributes are any JSON),
// when the state last changed (last_changed, as Home Assistant wrote it:
// an attributes-only update leaves it) and the context it changed in.
type entityState struct {
	State       json.RawMessage
	Attributes  map[string]json.RawMessage
	LastChanged string
	ContextID   string
}

// parseFrame reads one websocket message. Home Assistant sends one JSON
// object per message unless a client asks for coalesced messages, which
// this one does not.
func parseFrame(raw []byte) (*frame, error) {
	var f frame
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if f.Type == "" {
		return nil, fmt.Errorf("%w: message without a type", errMalformed)
	}
	return &f, nil
}

// eventJSON is the part of an event the gateway reads.
type eventJSON struct {
	EventType string `json:"event_type"`
	Data      struct {
		EntityID string          `json:"entity_id"`
		OldState json.RawMessage `json:"old_state"`
		NewState json.RawMessage `json:"new_state"`
	} `json:"data"`
	TimeFired string `json:"time_fired"`
	Context   struct {
		ID string `json:"id"`
	} `json:"context"`
}

// parseStateChanged reads an event message's event. ok is false for an
// event that is not a state change (nothing to do); an error means a
// state change the gateway cannot read.
func parseStateChanged(raw json.RawMessage) (sc *stateChange, ok bool, err error) {
	var e eventJSON
	if err := json.Unmarshal(raw, &e); err != nil {
		return nil, false, fmt.Errorf("%w: event: %v", errMalformed, err)
	}
	if e.EventType != "state_changed" {
		return nil, false, nil
	}
	if e.Data.EntityID == "" {
		return nil, false, fmt.Errorf("%w: state_changed without an entity_id", errMalformed)
	}
	if e.Context.ID == "" {
		return nil, false, fmt.Errorf("%w: state_changed of %s without a context id", errMalformed, e.Data.EntityID)
	}
	sc = &stateChange{EntityID: e.Data.EntityID, ContextID: e.Context.ID, TimeFired: e.TimeFired}
	if sc.Old, err = parseState(e.Data.OldState); err != nil {
		return nil, false, fmt.Errorf("old_state: %w", err)
	}
	if sc.New, err = parseState(e.Data.NewState); err != nil {
		return nil, false, fmt.Errorf("new_state: %w", err)
	}
	return sc, true, nil
}

// parseState reads a state object; null, absent or {} is no state (as
// Hermes reads a falsy one).
func parseState(raw json.RawMessage) (*entityState, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: state is not an object: %v", errMalformed, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	s := &entityState{State: m["state"]}
	// Both are only compared and shown: a state without them (or with
	// them of another type) is read without them.
	_ = json.Unmarshal(m["last_changed"], &s.LastChanged)
	var ctx struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(m["context"], &ctx) == nil {
		s.ContextID = ctx.ID
	}
	if a, ok := m["attributes"]; ok && string(bytes.TrimSpace(a)) != "null" {
		if err := json.Unmarshal(a, &s.Attributes); err != nil {
			return nil, fmt.Errorf("%w: attributes are not an object: %v", errMalformed, err)
		}
	}
	return s, nil
}

// currentState is one entity of a get_states answer.
type currentState struct {
	EntityID string
	*entityState
}

// parseStates reads a get_states answer's result: an array of state
// objects. One without an entity id, or that is not a state object, is
// left out (and counted in bad); the array itself must be one.
func parseStates(raw json.RawMessage) (states []currentState, bad int, err error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, 0, fmt.Errorf("%w: get_states result: %v", errMalformed, err)
	}
	for _, it := range items {
		var id struct {
			EntityID string `json:"entity_id"`
		}
		if json.Unmarshal(it, &id) != nil || id.EntityID == "" {
			bad++
			continue
		}
		st, err := parseState(it)
		if err != nil || st == nil {
			bad++
			continue
		}
		states = append(states, currentState{EntityID: id.EntityID, entityState: st})
	}
	return states, bad, nil
}

// EventID is the change's id for the kit's dedupe: the context id, the
// entity and the event's time. The context id alone is not unique (a
// scene changes several entities in one context); with the entity and
// time it names one change, and the same change sent again (the fake's
// redelivery; Home Assistant itself sends nothing twice) has the same.
func (sc *stateChange) EventID() string {
	id := sc.ContextID + ":" + sc.EntityID
	if sc.TimeFired != "" {
		id += ":" + sc.TimeFired
	}
	return id
}

// Fired is the event's time, or zero when it has none or cannot be read.
func (sc *stateChange) Fired() time.Time {
	t, err := time.Parse(time.RFC3339Nano, sc.TimeFired)
	if err != nil {
		return time.Time{}
	}
	return t
}

// pyStr renders a JSON value as Python's str() shows the value json.loads
// made of it, which is how Hermes's adapter puts states and attributes in
// its text: a string bare, null as None, true as True, a float as its
// repr (21.0, 1e-05). Objects and arrays are shown as compact JSON.
func pyStr(raw json.RawMessage) string {
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		return ""
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	case 'n':
		return "None"
	case 't':
		return "True"
	case 'f':
		return "False"
	case '{', '[':
		var b bytes.Buffer
		if json.Compact(&b, v) == nil {
			return b.String()
		}
	default:
		return pyNumber(string(v))
	}
	return string(v)
}

// pyNumber renders a JSON number as Python does: an integer as written,
// a float (a '.' or an exponent) as its shortest repr, fixed between
// 1e-4 and 1e16 and with at least one decimal, else scientific.
func pyNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		return lit
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return lit
	}
	if a := abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// oversizedEntity reads only the event type and entity id of an event
// too large to publish: ok is false when it is not a state change with
// an entity id, which the caller rejects as before. The states are
// skipped by the decoder without being kept.
func oversizedEntity(raw json.RawMessage) (entityID string, ok bool) {
	var e struct {
		EventType string `json:"event_type"`
		Data      struct {
			EntityID string `json:"entity_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.EventType != "state_changed" || e.Data.EntityID == "" {
		return "", false
	}
	return e.Data.EntityID, true
}

// Bounds on what frameEntity reads: Home Assistant names the entity
// within its message's first few tokens, three containers deep
// (event.data.entity_id), in its own key order and in Go's sorted one.
// A message nested deeper, or with more tokens before the entity, is
// not one of its state changes; reading it further would cost time
// (a megabyte of "[" is as many containers) for nothing.
const (
	maxEntityDepth  = 16
	maxEntityTokens = 1024
)

// frameEntity reads the entity id of a state_changed event message from
// its first bytes, the rest being too large to keep: the string at
// event.data.entity_id, unless the message says before it that it is
// not an event (type) or not a state change (event.event_type). Home
// Assistant writes the type, the event type and the entity id before
// the states. ok is false when the prefix names no entity, or nests
// deeper than maxEntityDepth or reads more than maxEntityTokens tokens
// before it does.
func frameEntity(prefix []byte) (entityID string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	// keys holds, per open container, the key of the value being read
	// ("[]" in an array); wantKey is whether an object expects a key.
	var keys []string
	var wantKey []bool
	for range maxEntityTokens {
		tok, err := dec.Token()
		if err != nil {
			return "", false // the prefix ended, or is not JSON
		}
		top := len(keys) - 1
		if top >= 0 && wantKey[top] {
			k, isKey := tok.(string)
			if !isKey { // '}' ends the object
				keys, wantKey = keys[:top], wantKey[:top]
				valueRead(wantKey, keys)
				continue
			}
			keys[top], wantKey[top] = k, false
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				keys, wantKey = append(keys, ""), append(wantKey, true)
			case '[':
				keys, wantKey = append(keys, "[]"), append(wantKey, false)
			default: // ']'
				keys, wantKey = keys[:top], wantKey[:top]
				valueRead(wantKey, keys)
			}
			if len(keys) > maxEntityDepth {
				return "", false
			}
			continue
		case string:
			switch {
			case slices.Equal(keys, []string{"type"}):
				if v != "event" {
					return "", false
				}
			case slices.Equal(keys, []string{"event", "event_type"}):
				if v != "state_changed" {
					return "", false
				}
			case slices.Equal(keys, []string{"event", "data", "entity_id"}):
				return v, v != ""
			}
		}
		valueRead(wantKey, keys)
	}
	return "", false
}

// valueRead marks a value of the innermost container read: an object
// then expects its next key.
func valueRead(wantKey []bool, keys []string) {
	if top := len(wantKey) - 1; top >= 0 && keys[top] != "[]" {
		wantKey[top] = true
	}
}
