package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	slashcmd "github.com/switchboard-chat/switchboard/pkg/command"
	pf "github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// loadSkills loads the skills (skills.dirs) with the router's quick
// commands reserved, once per process (dev runs the router and the
// gateways in one, which share them), logging each one that does not
// load. /reload-skills, the admin's announcement and SIGHUP scan them
// again (skill.Library).
func (a *app) loadSkills() *skill.Library {
	a.skillsOnce.Do(func() {
		a.skills = skill.NewLibrary(a.cfg.Skills, func(name string) bool {
			_, quick := a.cfg.Router.QuickCommands[name]
			return quick
		}, a.log)
	})
	return a.skills
}

// menu is the command menu of a gateway's platform (Telegram's
// setMyCommands, Discord's slash commands): the built-in commands, then
// the skills that run there, within the platforms' 100 entries; nil (the
// built-in commands) when no skills are configured.
func (a *app) menu(platform string) []slashcmd.MenuEntry {
	if len(a.cfg.Skills.Dirs) == 0 {
		return nil
	}
	return menuOf(a.loadSkills().Current(), platform)
}

func menuOf(set *skill.Set, platform string) []slashcmd.MenuEntry {
	return set.Menu(platform, slashcmd.Menu(), 100)
}

// menuSetter is a gateway whose platform command menu a reload refreshes.
type menuSetter interface {
	SetMenu(ctx context.Context, menu []slashcmd.MenuEntry)
}

// followMenu wraps a Telegram or Discord gateway's run: while it runs,
// the process follows skill reloads (the SKILLS bucket, skill.Library)
// and each reload sets the platform's new menu, the latest one first
// when reloads come faster than the platform takes them. Without
// skills.dirs it is run itself.
func (a *app) followMenu(b *bus.Bus, platform string, g menuSetter, run func(context.Context) error) func(context.Context) error {
	if len(a.cfg.Skills.Dirs) == 0 {
		return run
	}
	lib := a.loadSkills()
	latest := make(chan []slashcmd.MenuEntry, 1)
	lib.OnChange(func(set *skill.Set) {
		// OnChange calls come one at a time: the slot holds the newest.
		select {
		case <-latest:
		default:
		}
		latest <- menuOf(set, platform)
	})
	return func(ctx context.Context) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case menu := <-latest:
					g.SetMenu(ctx, menu)
				}
			}
		}()
		go followReloads(ctx, a.log.With("platform", platform), lib, func(ctx context.Context) (jetstream.KeyValue, error) {
			return skill.OpenBucket(ctx, b.JetStream(), b.Topology())
		}, pf.QuickBackoff)
		go a.skillSignals(b)(ctx)
		return run(ctx)
	}
}

// followReloads has lib follow the SKILLS bucket (open) until ctx ends.
// The gateway serves meanwhile: when the bucket cannot be opened or
// watched (NATS down or JetStream unready as the gateway starts), the
// menu stays as it is and the attempt is made again after backoff, so
// that later reloads still reach the platform's menu; an announcement
// made meanwhile is read when the watch starts (skill.Library.Follow).
func followReloads(ctx context.Context, log *slog.Logger, lib *skill.Library, open func(context.Context) (jetstream.KeyValue, error), backoff pf.Backoff) {
	for attempt := 0; ; attempt++ {
		kv, err := open(ctx)
		if err == nil {
			err = lib.Follow(ctx, kv)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		wait := backoff(attempt)
		log.Warn("skill reloads not followed yet; the command menu stays as it is until they are", "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// holdsSkills reports whether a process running these services holds
// skills: skills.dirs is set and the router or the Telegram or Discord
// gateway is among them (skillSignals runs there). Known before any of
// them starts, it tells what a SIGHUP during start-up asks (hangup).
func holdsSkills(cfg *Config, services []string) bool {
	if len(cfg.Skills.Dirs) == 0 {
		return false
	}
	for _, s := range services {
		switch s {
		case "router", "gateway-telegram", "gateway-discord":
			return true
		}
	}
	return false
}

// skillSignals returns a run that, once per process, turns a SIGHUP into
// a skill reload everywhere: this process scans skills.dirs again and
// announces the reload to every other (the SKILLS bucket), as
// /reload-skills does. A SIGHUP that came while the process was still
// starting is carried out as it begins (hangups.reloads). It returns
// when ctx ends.
func (a *app) skillSignals(b *bus.Bus) func(context.Context) error {
	return func(ctx context.Context) error {
		if len(a.cfg.Skills.Dirs) == 0 {
			return nil
		}
		first := false
		a.hupOnce.Do(func() { first = true })
		if !first {
			return nil
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hangups.reloads:
			}
			a.log.Info("SIGHUP: reloading skills on every process")
			lib := a.loadSkills()
			if kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology()); err != nil {
				a.log.Warn("skill reload not announced", "err", err)
			} else if err := lib.Announce(ctx, kv, "signal"); err != nil {
				a.log.Warn("skill reload not announced", "err", err)
			}
			lib.Reload(skill.SourceSignal)
		}
	}
}
