package router

import (
	"fmt"
	"time"
)

// Reset modes.
const (
	ResetNone  = "none"
	ResetIdle  = "idle"
	ResetDaily = "daily"
	ResetBoth  = "both"
)

// ResetPolicy says when a session starts over by itself.
type ResetPolicy struct {
	Mode        string `koanf:"mode"`
	IdleMinutes int    `koanf:"idle_minutes"`
	AtHour      int    `koanf:"at_hour"`
	Timezone    string `koanf:"timezone"`
	// loc is Timezone, loaded once with the config (ResetConfig.load),
	// not for each message due reads; nil is UTC.
	loc *time.Location
}

// ResetOverride changes the policy for a platform or a chat type. Fields
// left out (empty, zero minutes, no hour) inherit from the level above;
// at_hour is a pointer so that an override can say midnight (0).
type ResetOverride struct {
	Mode        string `koanf:"mode"`
	IdleMinutes int    `koanf:"idle_minutes"`
	AtHour      *int   `koanf:"at_hour"`
	Timezone    string `koanf:"timezone"`
}

// ResetConfig is the default policy with per-platform and per-chat-type
// overrides (platform wins over chat type).
type ResetConfig struct {
	Mode        string                   `koanf:"mode"`
	IdleMinutes int                      `koanf:"idle_minutes"`
	AtHour      int                      `koanf:"at_hour"`
	Timezone    string                   `koanf:"timezone"`
	Platforms   map[string]ResetOverride `koanf:"platforms"`
	ChatTypes   map[string]ResetOverride `koanf:"chat_types"`
	// zones are the time zones the policies name, by name (load).
	zones map[string]*time.Location
}

// load loads the time zones the policies name, once, when the router is
// built: policy hands them to the policies it resolves for each message.
// A zone that does not load is an error at start-up.
func (c *ResetConfig) load() error {
	c.zones = map[string]*time.Location{}
	names := map[string]string{"session_reset": c.Timezone}
	for k, o := range c.Platforms {
		names["session_reset.platforms."+k] = o.Timezone
	}
	for k, o := range c.ChatTypes {
		names["session_reset.chat_types."+k] = o.Timezone
	}
	for key, name := range names {
		if _, ok := c.zones[name]; ok || name == "" {
			continue
		}
		loc, err := time.LoadLocation(name)
		if err != nil {
			return fmt.Errorf("%s.timezone: %w", key, err)
		}
		c.zones[name] = loc
	}
	return nil
}

func (c ResetConfig) validate() error {
	pols := map[string]ResetPolicy{"session_reset": {Mode: c.Mode, IdleMinutes: c.IdleMinutes, AtHour: c.AtHour, Timezone: c.Timezone}}
	for k, o := range c.Platforms {
		pols["session_reset.platforms."+k] = o.policy()
	}
	for k, o := range c.ChatTypes {
		pols["session_reset.chat_types."+k] = o.policy()
	}
	for key, p := range pols {
		switch p.Mode {
		case "", ResetNone, ResetIdle, ResetDaily, ResetBoth:
		default:
			return fmt.Errorf("%s.mode: %q is not none, idle, daily or both", key, p.Mode)
		}
		if p.AtHour < 0 || p.AtHour > 23 {
			return fmt.Errorf("%s.at_hour: %d is not 0 to 23", key, p.AtHour)
		}
		if p.IdleMinutes < 0 {
			return fmt.Errorf("%s.idle_minutes: %d is negative", key, p.IdleMinutes)
		}
		if p.Timezone != "" {
			if _, err := time.LoadLocation(p.Timezone); err != nil {
				return fmt.Errorf("%s.timezone: %w", key, err)
			}
		}
	}
	return nil
}

// policy is the override as a policy, for validation (no hour: 0).
func (o ResetOverride) policy() ResetPolicy {
	p := ResetPolicy{Mode: o.Mode, IdleMinutes: o.IdleMinutes, Timezone: o.Timezone}
	if o.AtHour != nil {
		p.AtHour = *o.AtHour
	}
	return p
}

// policy resolves the effective policy for a platform and chat type,
// with its time zone as load loaded it.
func (c ResetConfig) policy(platform, chatType string) ResetPolicy {
	p := ResetPolicy{Mode: c.Mode, IdleMinutes: c.IdleMinutes, AtHour: c.AtHour, Timezone: c.Timezone}
	over := func(o ResetOverride) {
		if o.Mode != "" {
			p.Mode = o.Mode
		}
		if o.IdleMinutes != 0 {
			p.IdleMinutes = o.IdleMinutes
		}
		if o.AtHour != nil {
			p.AtHour = *o.AtHour
		}
		if o.Timezone != "" {
			p.Timezone = o.Timezone
		}
	}
	if chatType == "" {
		chatType = "dm"
	}
	if o, ok := c.ChatTypes[chatType]; ok {
		over(o)
	}
	if o, ok := c.Platforms[platform]; ok {
		over(o)
	}
	if p.Mode == "" {
		p.Mode = ResetNone
	}
	p.loc = c.zones[p.Timezone]
	return p
}

// due reports whether a session last active at last must reset at now,
// and why ("idle" or "daily"). As in Hermes, idle is more than
// idle_minutes since the last activity (a message at exactly the limit
// continues the conversation), and the daily boundary is at_hour:00 on
// the wall clock of the policy's time zone: last and now are compared as
// that clock shows them, so on the day a DST change skips the hour the
// boundary is the jump (Go's time.Date would place a skipped hour west
// of UTC an hour early, at 01:00 EST for 02:00 in New York), and an
// hour the change repeats is crossed once (wallClock). The zone is the
// one loaded with the config (ResetConfig.load): due, read for every
// message, loads nothing.
func (p ResetPolicy) due(last, now time.Time) (string, bool) {
	if (p.Mode == ResetIdle || p.Mode == ResetBoth) && p.IdleMinutes > 0 &&
		now.Sub(last) > time.Duration(p.IdleMinutes)*time.Minute {
		return "idle", true
	}
	if p.Mode == ResetDaily || p.Mode == ResetBoth {
		loc := p.loc
		if loc == nil {
			loc = time.UTC
		}
		n, l := wallClock(now, loc), wallClock(last, loc)
		boundary := time.Date(n.Year(), n.Month(), n.Day(), p.AtHour, 0, 0, 0, time.UTC)
		if n.Before(boundary) {
			boundary = boundary.AddDate(0, 0, -1)
		}
		if l.Before(boundary) {
			return "daily", true
		}
	}
	return "", false
}

// wallClock is what a clock in loc shows at t, as a UTC time, for
// comparing wall clocks across a DST change. In the span a change back
// repeats it is the last time shown before the change, until the clock
// passes it again: an hour inside that span (03:00 in the Chatham
// Islands, whose clocks go from 03:45 back to 02:45; 02:00 at Troll,
// from 03:00 back to 01:00) was crossed before the change and is not
// crossed a second time, while an hour at the change (midnight in
// Santiago, from 24:00 back to 23:00) is crossed when the clock next
// shows it.
func wallClock(t time.Time, loc *time.Location) time.Time {
	t = t.In(loc)
	w := wall(t)
	if start, _ := t.ZoneBounds(); !start.IsZero() {
		if before := wall(start.Add(-time.Nanosecond).In(loc)); before.After(w) {
			return before
		}
	}
	return w
}

// wall is t's clock reading in its own location, as a UTC time.
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// resetNotice tells the user why their session started over and, as
// Hermes's notice does, how to get the ended conversation back (bare
// /resume lists the chat's conversations).
func resetNotice(reason string, p ResetPolicy) string {
	const back = "\nUse /resume to browse and restore a previous session."
	switch reason {
	case "idle":
		return fmt.Sprintf("◐ Session reset after %s of inactivity. Starting fresh.", humanMinutes(p.IdleMinutes)) + back
	case "daily":
		return fmt.Sprintf("◐ Daily session reset (%02d:00 %s). Starting fresh.", p.AtHour, tzName(p.Timezone)) + back
	}
	return "◐ Session reset. Starting fresh." + back
}

func tzName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

func humanMinutes(m int) string {
	switch {
	case m%1440 == 0:
		return plural(m/1440, "day")
	case m%60 == 0:
		return plural(m/60, "hour")
	}
	return plural(m, "minute")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}
