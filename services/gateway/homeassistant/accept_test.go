package homeassistant

import (
	"context"
	"encoding/json"
	"testing"
)

// TestAcceptSkipReason: a change of attributes only is skipped as
// "unchanged", even though its new state has the last_changed the gateway
// read (Home Assistant leaves last_changed as it was when only the
// attributes change); "seen" is for a change of state published already
// (by the catch-up).
func TestAcceptSkipReason(t *testing.T) {
	t.Parallel()
	st := func(state, lastChanged, ctx string) *entityState {
		return &entityState{State: json.RawMessage(`"` + state + `"`), LastChanged: lastChanged, ContextID: ctx}
	}
	tests := []struct {
		name string
		sc   *stateChange
		want skip
	}{
		{"attributes only", &stateChange{EntityID: "light.desk", Old: st("on", "L1", "c1"), New: st("on", "L1", "c2"), ContextID: "c2"}, skipUnchanged},
		{"published by the catch-up", &stateChange{EntityID: "light.desk", Old: st("off", "L0", "c0"), New: st("on", "L1", "c1"), ContextID: "c1"}, skipSeen},
		{"a new change", &stateChange{EntityID: "light.desk", Old: st("on", "L1", "c1"), New: st("off", "L2", "c3"), ContextID: "c3"}, skipNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPlatform(Config{Token: "t", URL: "http://ha.local:8123", WatchAll: true}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The state last read: light.desk turned on at L1.
			if err := p.states.remember(context.Background(), "light.desk", st("on", "L1", "c1")); err != nil {
				t.Fatal(err)
			}
			if _, why := p.accept(tt.sc); why != tt.want {
				t.Fatalf("accept: skipped as %q, want %q", why, tt.want)
			}
		})
	}
}
