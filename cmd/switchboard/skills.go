package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	slashcmd "github.com/switchboard-chat/switchboard/pkg/command"
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
		kv, err := skill.OpenBucket(ctx, b.JetStream(), b.Topology())
		if err == nil {
			err = lib.Follow(ctx, kv)
		}
		if err != nil {
			// The menu stays the start-up one; the gateway serves.
			a.log.Warn("skill reloads not followed; the command menu is the start-up one", "platform", platform, "err", err)
		}
		go a.skillSignals(b)(ctx)
		return run(ctx)
	}
}

// skillSignals returns a run that, once per process, turns a SIGHUP into
// a skill reload everywhere: this process scans skills.dirs again and
// announces the reload to every other (the SKILLS bucket), as
// /reload-skills does. It returns when ctx ends.
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
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
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
