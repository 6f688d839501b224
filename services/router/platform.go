package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /platform [list|pause|resume] [name] is Hermes's "Pause, resume, or
// list a failing gateway platform" (gateway/run.py,
// _handle_platform_command). Hermes's one process knows its adapters:
// the connected ones and those in its reconnect queue, which /platform
// pause takes out of the queue until /platform resume. Here each platform
// is a gateway of its own, in replicas, and any router replica answers
// from what they share (pkg/gatewaystatus):
//
//   - list reads the presence bucket (each replica's connection state,
//     last error and failed attempts, gone a TTL after the replica died)
//     and the pauses bucket;
//   - pause writes the platform's entry in the pauses bucket (kept on
//     disk, beyond any replica's restart); every replica of the platform
//     watches it: the active one closes its connection and releases its
//     lease, standbys stop competing for it, a replica that starts stays
//     paused. resume deletes it and the replicas elect and connect again
//     at once, their reconnect schedule from its start.
//
// As in Hermes, only whoever may run commands runs it: router.admins where
// the platform lists admins (commands refuses the others before this),
// every authorized user where it lists none. Hermes pauses only a
// platform in its retry queue, so never the one a command came in on;
// here any platform can be paused (an operator stops a misbehaving bot,
// not only a failing one), but pausing the platform the command came from
// would leave no way to resume it from there: that takes --force.
// Pausing a platform stops what it receives; the replies of turns in
// flight are still sent (a paused replica serves sends).

// platformUsage is Hermes's _PLATFORM_USAGE, for this gateway's verbs.
const platformUsage = "Usage: /platform <list|pause|resume> [name]\n" +
	"  /platform list — show platform status\n" +
	"  /platform pause <name> [--force] [reason] — stop a platform's connection on every replica\n" +
	"  /platform resume <name> — reconnect a paused platform"

// platformPauseReason is Hermes's reason of a pause without one.
const platformPauseReason = "paused via /platform pause"

// platformCommand answers /platform.
func (s *Service) platformCommand(ctx context.Context, m *msgCtx, args string) error {
	a := command.Platform(args)
	reply := func(text string) error { return s.notice(ctx, m, 0, text, "command") }
	switch a.Action {
	case "list":
		text, err := s.platformList(ctx)
		if err != nil {
			return err
		}
		return reply(text)
	case "":
		return reply(platformUsage)
	}
	if a.Target == "" {
		return reply(fmt.Sprintf("Usage: /platform %s <name>", a.Action))
	}
	if !gatewaystatus.Known(a.Target) {
		return reply("Unknown platform: " + a.Target)
	}
	name := a.Target
	if a.Action == "pause" && name == m.platform && !a.Force {
		return reply(fmt.Sprintf("This chat is on %s: pausing it would leave no way to resume it from here. "+
			"Send `/platform pause %s --force` to pause it anyway, and resume it from another platform.", name, name))
	}
	pauses, err := gatewaystatus.Pauses(ctx, s.bus.JetStream(), s.bus.Topology())
	if err != nil {
		return err
	}
	return s.once(ctx, m, "platform", func(ctx context.Context, _ *sessionstore.Store) (string, int64, error) {
		if a.Action == "resume" {
			resumed, err := gatewaystatus.ClearPause(ctx, pauses, name)
			if err != nil {
				return "", 0, err
			}
			if !resumed {
				return name + " is not paused — nothing to resume.", 0, nil
			}
			platformPauses.WithLabelValues("resume").Inc()
			s.log.InfoContext(ctx, "platform resumed", "target", name, "platform", m.platform, "user_id", m.src.GetUserId())
			return fmt.Sprintf("✓ %s resumed — its gateway connects again now.", name), 0, nil
		}
		reason := a.Reason
		if reason == "" {
			reason = platformPauseReason
		}
		paused, err := gatewaystatus.SetPause(ctx, pauses, gatewaystatus.Pause{
			Platform: name, Reason: reason, By: m.platform + ":" + m.src.GetUserId(),
		})
		if err != nil {
			return "", 0, err
		}
		if !paused {
			return name + " is already paused.", 0, nil
		}
		platformPauses.WithLabelValues("pause").Inc()
		s.log.InfoContext(ctx, "platform paused", "target", name, "reason", reason, "platform", m.platform, "user_id", m.src.GetUserId())
		return fmt.Sprintf("✓ %s paused. Resume with `/platform resume %s`.", name, name), 0, nil
	})
}

// platformList is /platform list: Hermes's connected line, then each
// platform's replicas and their state, then the paused ones.
func (s *Service) platformList(ctx context.Context) (string, error) {
	js, topo := s.bus.JetStream(), s.bus.Topology()
	var replicas []gatewaystatus.Replica
	presence, err := js.KeyValue(ctx, topo.Stream(gatewaystatus.BucketPresence))
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		// No gateway has run yet.
	case err != nil:
		return "", fmt.Errorf("presence bucket: %w", err)
	default:
		if replicas, err = gatewaystatus.Replicas(ctx, presence); err != nil {
			return "", err
		}
	}
	pauses, err := gatewaystatus.Pauses(ctx, js, topo)
	if err != nil {
		return "", err
	}
	paused, err := gatewaystatus.Paused(ctx, pauses)
	if err != nil {
		return "", err
	}
	return platformListText(replicas, paused, time.Now()), nil
}

// platformListText renders /platform list.
func platformListText(replicas []gatewaystatus.Replica, paused []gatewaystatus.Pause, now time.Time) string {
	byPlatform := map[string][]gatewaystatus.Replica{}
	var names, connected []string
	for _, r := range replicas {
		if _, ok := byPlatform[r.Platform]; !ok {
			names = append(names, r.Platform)
		}
		byPlatform[r.Platform] = append(byPlatform[r.Platform], r)
		if r.State == "connected" && !slices.Contains(connected, r.Platform) {
			connected = append(connected, r.Platform)
		}
	}
	pauseOf := map[string]gatewaystatus.Pause{}
	for _, p := range paused {
		pauseOf[p.Platform] = p
		if !slices.Contains(names, p.Platform) {
			names = append(names, p.Platform)
		}
	}
	slices.Sort(names)
	slices.Sort(connected)
	lines := []string{"**Gateway platforms**", "Connected: " + orNone(strings.Join(connected, ", "))}
	troubled := 0
	for _, name := range names {
		rs := byPlatform[name]
		p, isPaused := pauseOf[name]
		switch {
		case isPaused:
			troubled++
			lines = append(lines, fmt.Sprintf("%s — PAUSED (%s, by %s %s). Resume with `/platform resume %s`.",
				name, orDefault(p.Reason, "paused"), orDefault(p.By, "?"), ago(now, p.At), name))
			if len(rs) == 0 {
				lines = append(lines, "  · no replica running")
			}
		case !slices.Contains(connected, name):
			troubled++
			lines = append(lines, fmt.Sprintf("%s — not connected (%s)", name, plural(len(rs), "replica")))
		default:
			lines = append(lines, fmt.Sprintf("%s (%s)", name, plural(len(rs), "replica")))
		}
		for _, r := range rs {
			lines = append(lines, "  · "+r.Instance+" — "+replicaState(r, now))
		}
	}
	if troubled == 0 {
		lines = append(lines, "Failed/paused: (none)")
	}
	return strings.Join(lines, "\n")
}

// replicaState is one replica's state in /platform list's words.
func replicaState(r gatewaystatus.Replica, now time.Time) string {
	reason := ""
	if r.Reason != "" {
		reason = ": " + clip(r.Reason, 120)
	}
	switch r.State {
	case "connected":
		return "connected " + ago(now, r.Since)
	case "standby":
		return "standby"
	case "paused":
		return "paused"
	case "fatal":
		return "failed, not retrying" + reason
	case "connecting":
		if r.Attempts > 0 {
			return fmt.Sprintf("retrying (attempt %d)%s", r.Attempts, reason)
		}
		return "connecting" + reason
	}
	return r.State + reason
}

// ago is "since 5m ago"-style: how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func orNone(s string) string { return orDefault(s, "(none)") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// clip cuts s to n characters with an ellipsis.
func clip(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}
