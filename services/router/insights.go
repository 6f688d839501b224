package router

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /insights window: 30 days unless told; maxInsightsDays bounds
// what a user may ask for (Hermes takes any number).
const (
	defaultInsightsDays = 30
	maxInsightsDays     = 365
)

// insightsUsage answers an argument /insights does not read.
var insightsUsage = fmt.Sprintf("Usage: /insights [days] — the last 1 to %d days (default %d).", maxInsightsDays, defaultInsightsDays)

// parseInsightsArgs reads /insights' argument as Hermes does ("7",
// "--days 7"); problem is the answer to anything else. Unlike Hermes,
// which ignores a word it does not know and falls back to 30 days, a
// word, a number out of range or --source (a filter by platform, which a
// report of one chat does not need) gets an answer saying why.
func parseInsightsArgs(args string) (days int, problem string) {
	days = defaultInsightsDays
	parts := strings.Fields(args)
	seen := false
	for i := 0; i < len(parts); i++ {
		p := parts[i]
		switch {
		case p == "--days" && i+1 < len(parts):
			i++
			p = parts[i]
		case p == "--source":
			return 0, "/insights covers this chat's conversations; --source is not needed here."
		}
		if seen {
			return 0, insightsUsage
		}
		seen = true
		n, err := strconv.Atoi(strings.TrimPrefix(p, "+"))
		if err != nil {
			if strings.TrimLeft(p, "+-0123456789") == "" && strings.ContainsAny(p, "0123456789") {
				// All digits, too many of them for an int.
				return 0, fmt.Sprintf("%s days is too long a window. %s", p, insightsUsage)
			}
			return 0, fmt.Sprintf("%q is not a number of days. %s", p, insightsUsage)
		}
		switch {
		case n < 1:
			return 0, fmt.Sprintf("The window must be at least 1 day. %s", insightsUsage)
		case n > maxInsightsDays:
			return 0, fmt.Sprintf("%d days is too long a window. %s", n, insightsUsage)
		}
		days = n
	}
	return days, ""
}

// insights answers /insights: Hermes's usage report, over this chat's
// conversations (the session key's) that started in the last days days.
//
// Hermes reports on every session of the agent, to anyone who may use
// the gateway: one person's agent, whose sessions are all theirs. Here
// many people share the agent, so the report covers only what the asker
// can already read: this chat's conversations, which /sessions lists and
// /resume opens. The sessions of other users and chats are not counted.
func (s *Service) insights(ctx context.Context, m *msgCtx, args string) (string, error) {
	days, problem := parseInsightsArgs(args)
	if problem != "" {
		return problem, nil
	}
	now := s.now()
	in, err := s.store.Insights(ctx, m.key, now.Add(-time.Duration(days)*24*time.Hour))
	if err != nil {
		return "", fmt.Errorf("insights: %w", err)
	}
	return formatInsights(in, days, s.cron.Location(), s.provider.Model), nil
}

// formatInsights writes the report as Hermes's format_gateway does,
// without its bold headings, without its
// cost line (Switchboard keeps no prices), platforms (one chat is one
// platform) and skills (there are none). Days and hours are read in loc
// (cron.timezone); defaultModel names the usage of turns that ended
// without a final when the conversation has no /model override.
func formatInsights(in sessionstore.Insights, days int, loc *time.Location, defaultModel string) string {
	if len(in.Sessions) == 0 {
		return fmt.Sprintf("No sessions found in this chat in the last %d days.", days)
	}
	// Usage by model, with the unbooked usage on the current model.
	models := slices.Clone(in.Models)
	if u := in.Unbooked; u != (sessionstore.Usage{}) {
		name := cmp.Or(in.CurrentModel, defaultModel)
		i := slices.IndexFunc(models, func(mu sessionstore.ModelUsage) bool { return mu.Model == name })
		if i < 0 {
			models = append(models, sessionstore.ModelUsage{Model: name, Sessions: 1})
			i = len(models) - 1
		}
		models[i].Input += u.Input
		models[i].Output += u.Output
		models[i].CacheRead += u.CacheRead
		models[i].CacheWrite += u.CacheWrite
	}
	total := func(u sessionstore.Usage) int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }
	var sum sessionstore.Usage
	for _, mu := range models {
		sum.Input += mu.Input
		sum.Output += mu.Output
		sum.CacheRead += mu.CacheRead
		sum.CacheWrite += mu.CacheWrite
	}
	var calls int64
	for _, t := range in.Tools {
		calls += t.Calls
	}

	var b strings.Builder
	fmt.Fprintf(&b, "📊 Insights — this chat, last %d days\n\n", days)
	fmt.Fprintf(&b, "Sessions: %d | Messages: %s | Tool calls: %s\n", len(in.Sessions), thousands(in.Messages), thousands(calls))
	fmt.Fprintf(&b, "Tokens: %s (in: %s / out: %s)\n", thousands(total(sum)), thousands(sum.Input), thousands(sum.Output))
	var active time.Duration
	timed := 0
	for _, is := range in.Sessions {
		if is.LastTurnAt.After(is.StartedAt) {
			active += is.LastTurnAt.Sub(is.StartedAt)
			timed++
		}
	}
	if active > 0 {
		fmt.Fprintf(&b, "Active time: ~%s | Avg session: ~%s\n", compactDuration(active), compactDuration(active/time.Duration(timed)))
	}
	b.WriteString("\n")

	if len(models) > 0 {
		slices.SortStableFunc(models, func(x, y sessionstore.ModelUsage) int {
			return cmp.Or(cmp.Compare(total(y.Usage), total(x.Usage)), cmp.Compare(y.Sessions, x.Sessions), strings.Compare(x.Model, y.Model))
		})
		b.WriteString("🤖 Models:\n")
		for _, mu := range models[:min(len(models), 5)] {
			fmt.Fprintf(&b, "  %s — %s, %s tokens\n", shortModel(mu.Model), plural(mu.Sessions, "session"), thousands(total(mu.Usage)))
		}
		b.WriteString("\n")
	}
	if len(in.Tools) > 0 {
		b.WriteString("🔧 Top Tools:\n")
		for _, t := range in.Tools[:min(len(in.Tools), 8)] {
			fmt.Fprintf(&b, "  %s — %s calls (%.1f%%)\n", t.Name, thousands(t.Calls), float64(t.Calls)/float64(calls)*100)
		}
		b.WriteString("\n")
	}

	// Activity by the conversations' starts, as Hermes's.
	var byDay [7]int
	var byHour [24]int
	dates := map[string]bool{}
	for _, is := range in.Sessions {
		t := is.StartedAt.In(loc)
		byDay[(int(t.Weekday())+6)%7]++ // Monday first
		byHour[t.Hour()]++
		dates[t.Format(time.DateOnly)] = true
	}
	day, hour := 0, 0
	for i := range byDay {
		if byDay[i] > byDay[day] {
			day = i
		}
	}
	for i := range byHour {
		if byHour[i] > byHour[hour] {
			hour = i
		}
	}
	zone, _ := in.Sessions[0].StartedAt.In(loc).Zone()
	fmt.Fprintf(&b, "📅 Busiest: %ss (%s), %s %s (%s)\n", [7]string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}[day],
		plural(byDay[day], "session"), hour12(hour), zone, plural(byHour[hour], "session"))
	fmt.Fprintf(&b, "Active days: %d\n", len(dates))
	if streak := longestStreak(dates); streak > 1 {
		fmt.Fprintf(&b, "Best streak: %d consecutive days\n", streak)
	}
	return strings.TrimRight(b.String(), "\n")
}

// longestStreak is the longest run of consecutive dates (YYYY-MM-DD).
func longestStreak(dates map[string]bool) int {
	days := make([]time.Time, 0, len(dates))
	for d := range dates {
		t, err := time.Parse(time.DateOnly, d)
		if err == nil {
			days = append(days, t)
		}
	}
	slices.SortFunc(days, func(a, b time.Time) int { return a.Compare(b) })
	best, run := 0, 0
	for i, d := range days {
		if i > 0 && d.Sub(days[i-1]) == 24*time.Hour {
			run++
		} else {
			run = 1
		}
		best = max(best, run)
	}
	return best
}

// shortModel is Hermes's _short_model cut to its 25 characters: the last
// part of a "vendor/model" name; "unknown" for none.
func shortModel(model string) string {
	if model == "" {
		return "unknown"
	}
	model = model[strings.LastIndexByte(model, '/')+1:]
	if r := []rune(model); len(r) > 25 {
		model = string(r[:25])
	}
	return model
}

// hour12 is Hermes's _hour12: 0 → 12AM, 13 → 1PM.
func hour12(h int) string {
	suffix := "AM"
	if h >= 12 {
		suffix = "PM"
	}
	if h%12 == 0 {
		return "12" + suffix
	}
	return strconv.Itoa(h%12) + suffix
}

// compactDuration is Hermes's format_duration_compact: 45s, 12m, 3h 5m,
// 1.5d.
func compactDuration(d time.Duration) string {
	sec := d.Seconds()
	switch {
	case sec < 60:
		return fmt.Sprintf("%.0fs", sec)
	case sec < 3600:
		return fmt.Sprintf("%.0fm", sec/60)
	case sec < 86400:
		h, m := int(sec/3600), int(sec/60)%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh %dm", h, m)
	}
	return fmt.Sprintf("%.1fd", sec/86400)
}
