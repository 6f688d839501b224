package router

import (
	"testing"
	"time"
)

func TestResetPolicy(t *testing.T) {
	cfg := ResetConfig{Mode: ResetNone, IdleMinutes: 60, AtHour: 4, Timezone: "UTC",
		Platforms: map[string]ResetPolicy{"slack": {Mode: ResetDaily, Timezone: "Europe/Berlin"}, "discord": {Mode: ResetBoth, IdleMinutes: 10}},
		ChatTypes: map[string]ResetPolicy{"group": {Mode: ResetIdle}, "dm": {IdleMinutes: 30}},
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, platform, chatType string
		last                     time.Time
		wantReason               string
		wantDue                  bool
	}{
		{"default none never resets", "telegram", "channel", now.Add(-72 * time.Hour), "", false},
		{"chat type idle due", "telegram", "group", now.Add(-61 * time.Minute), "idle", true},
		{"chat type idle not yet", "telegram", "group", now.Add(-59 * time.Minute), "", false},
		{"dm override only changes minutes (mode stays none)", "telegram", "dm", now.Add(-31 * time.Minute), "", false},
		{"platform daily: last before today's 04:00 Berlin", "slack", "dm", time.Date(2026, 3, 10, 2, 59, 0, 0, time.UTC), "daily", true},
		{"platform daily: last after today's 04:00 Berlin", "slack", "dm", time.Date(2026, 3, 10, 3, 1, 0, 0, time.UTC), "", false},
		{"platform wins over chat type", "slack", "group", now.Add(-2 * time.Hour), "", false},
		{"both: idle with platform minutes", "discord", "group", now.Add(-11 * time.Minute), "idle", true},
		{"both: daily", "discord", "dm", time.Date(2026, 3, 10, 3, 55, 0, 0, time.UTC).Add(-0), "idle", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, due := cfg.policy(tt.platform, tt.chatType).due(tt.last, now)
			if reason != tt.wantReason || due != tt.wantDue {
				t.Fatalf("got %q %v, want %q %v", reason, due, tt.wantReason, tt.wantDue)
			}
		})
	}
	// Before today's boundary, the boundary is yesterday's.
	p := ResetPolicy{Mode: ResetDaily, AtHour: 23}
	if _, due := p.due(time.Date(2026, 3, 9, 23, 30, 0, 0, time.UTC), now); due {
		t.Fatal("daily reset before its hour came")
	}
	if _, due := p.due(time.Date(2026, 3, 9, 22, 30, 0, 0, time.UTC), now); !due {
		t.Fatal("daily reset missed yesterday's boundary")
	}
	bad := ResetConfig{Mode: "weekly"}
	if bad.validate() == nil {
		t.Fatal("accepted mode weekly")
	}
}
