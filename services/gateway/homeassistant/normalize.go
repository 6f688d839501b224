package homeassistant

import (
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Hermes's source of every Home Assistant message: one channel, one
// sender, so every change goes to the session
// agent:main:homeassistant:channel:ha_events:homeassistant.
const (
	ChatID   = "ha_events"
	chatName = "Home Assistant Events"
	chatType = "channel"
	UserID   = "homeassistant"
	userName = "Home Assistant"
)

// skip is why a state change was read without a message to publish (""
// for one that is published).
type skip string

const (
	skipNone       skip = ""
	skipIgnored    skip = "ignored"
	skipNotWatched skip = "not watched"
	skipUnchanged  skip = "unchanged"
	skipCooldown   skip = "cooldown"
	skipSeen       skip = "seen"
)

// rules are Hermes's filters.
type rules struct {
	domains, entities, ignore map[string]bool
	all                       bool
}

func newRules(cfg Config) rules {
	return rules{domains: platform.IDSet(cfg.WatchDomains), entities: platform.IDSet(cfg.WatchEntities),
		ignore: platform.IDSet(cfg.IgnoreEntities), all: cfg.WatchAll}
}

// watching reports whether any change can pass the filters.
func (r rules) watching() bool { return len(r.domains) > 0 || len(r.entities) > 0 || r.all }

// filter applies Hermes's filters to an entity: ignored first; then, when
// domains or entities are listed, the entity's domain or id must be;
// otherwise only watch_all lets it through (closed by default).
func (r rules) filter(entityID string) skip {
	if r.ignore[entityID] {
		return skipIgnored
	}
	if len(r.domains) > 0 || len(r.entities) > 0 {
		if r.domains[domainOf(entityID)] || r.entities[entityID] {
			return skipNone
		}
		return skipNotWatched
	}
	if r.all {
		return skipNone
	}
	return skipNotWatched
}

// domainOf is the part of an entity id before its first '.' ("" without
// one).
func domainOf(entityID string) string {
	d, _, ok := strings.Cut(entityID, ".")
	if !ok {
		return ""
	}
	return d
}

// describe is Hermes's text for a state change, or "" when there is
// none: the entity was removed, or its state stayed as it was (a change
// of attributes only).
func describe(sc *stateChange) string {
	if sc.New == nil {
		return ""
	}
	oldVal := "unknown"
	oldIsStr := true
	if sc.Old != nil && sc.Old.State != nil {
		oldVal, oldIsStr = pyStr(sc.Old.State), isJSONString(sc.Old.State)
	}
	newVal, newIsStr := "unknown", true
	if sc.New.State != nil {
		newVal, newIsStr = pyStr(sc.New.State), isJSONString(sc.New.State)
	}
	if oldVal == newVal && oldIsStr == newIsStr {
		return ""
	}
	attr := func(name, absent string) string {
		if v, ok := sc.New.Attributes[name]; ok {
			return pyStr(v)
		}
		return absent
	}
	name := attr("friendly_name", sc.EntityID)
	onOff := func(v string, on, off string) string {
		if v == "on" && newIsStr {
			return on
		}
		return off
	}
	const prefix = "[Home Assistant] "
	switch domainOf(sc.EntityID) {
	case "climate":
		return prefix + name + ": HVAC mode changed from '" + oldVal + "' to '" + newVal +
			"' (current: " + attr("current_temperature", "?") + ", target: " + attr("temperature", "?") + ")"
	case "sensor":
		unit := attr("unit_of_measurement", "")
		return prefix + name + ": changed from " + oldVal + unit + " to " + newVal + unit
	case "binary_sensor":
		was := "cleared"
		if oldVal == "on" && oldIsStr {
			was = "triggered"
		}
		return prefix + name + ": " + onOff(newVal, "triggered", "cleared") + " (was " + was + ")"
	case "light", "switch", "fan":
		return prefix + name + ": turned " + onOff(newVal, "on", "off")
	case "alarm_control_panel":
		return prefix + name + ": alarm state changed from '" + oldVal + "' to '" + newVal + "'"
	}
	return prefix + name + " (" + sc.EntityID + "): changed from '" + oldVal + "' to '" + newVal + "'"
}

func isJSONString(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s[0] == '"'
}

// normalize turns a state change that passed the filters into the
// message Hermes's adapter hands its gateway, or the reason it is not
// one. The cooldown is the caller's.
func normalize(sc *stateChange, account string) (*eventsv1.MessageReceived, skip) {
	text := describe(sc)
	if text == "" {
		return nil, skipUnchanged
	}
	id := sc.EventID()
	m := &eventsv1.MessageReceived{
		EventId: id, MessageId: id, Text: text, Mentioned: true,
		// The connection's token authenticated Home Assistant, and no
		// person sent this: Hermes admits these events without an
		// allowlist or pairing.
		TransportAuthenticated: true,
		Source: &eventsv1.SessionSource{
			Platform: "homeassistant", Account: account, ChatId: ChatID, ChatName: chatName, ChatType: chatType,
			UserId: UserID, UserName: userName,
		},
	}
	if t := sc.Fired(); !t.IsZero() {
		m.SentAt = timestamppb.New(t)
	}
	return m, skipNone
}
