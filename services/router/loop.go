package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/loop"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /loop and /heartbeat are Hermes's recurring in-session prompts
// (hermes_cli/loops.py, hermes_cli/heartbeat.py): /loop re-runs a
// prompt on an interval (or self-paced) inside this conversation until
// --times runs, an --until condition the goal judge rules met, the
// agent's LOOP_COMPLETE, /loop stop, or the backstop budget
// (router.loop_max_ticks) ends or pauses it; /heartbeat re-enters the
// conversation with its prompt whenever the session is idle and its
// interval has elapsed.
//
// Here the router keeps them (session_loops, migration 00134, one of
// each kind per session key, for the conversation they were set in) and
// answers the commands, each applied once per inbound event
// (sessionstore.Once). Every router replica runs the scheduler
// (fireLoops, every router.loop_poll_interval): one transaction claims
// the due rows no other replica holds, advances each by one tick and
// queues its wakeup in the session's queue behind every waiting
// message, the path a user's message takes, so a tick fires once
// whatever replicas run or crash (a crash after the commit leaves the
// wakeup queued: the sweep starts it). A tick fires only into an idle
// session (no turn running, nothing queued, as Hermes's watchers); a
// busy one waits until the session is idle, missed ticks coalescing.
// The wakeup runs as an ordinary turn with the session's settings; the
// worker that runs a loop's wakeup evaluates its answer
// (services/worker/loop.go).

// loopUnavailable answers /loop where no chat waits for a wakeup's
// answer (the API, webhooks, cron runs).
const (
	loopUnavailable      = "Loops unavailable (no active session)."
	heartbeatUnavailable = "Heartbeats unavailable (no session)."
)

// loopBusy is Hermes's answer to a new loop while a turn runs.
const loopBusy = "Agent is running — use /loop status / pause / stop mid-run, or /stop before setting a new loop."

// errNoLoop: the conversation has no loop or heartbeat to change.
var errNoLoop = errors.New("no loop")

// loopID names a loop after the event that set it: the same on a
// redelivery, and without the colons of an event id.
func loopID(dedupeID string) string {
	sum := sha256.Sum256([]byte(dedupeID))
	return hex.EncodeToString(sum[:8])
}

// loopTemplate is the message a chat's wakeups are made from: its
// source and reply route, no text of its own.
func loopTemplate(ev *eventsv1.MessageReceived) *eventsv1.MessageReceived {
	t := proto.CloneOf(ev)
	t.Text, t.Attachments, t.TranscriptCommand, t.EventId, t.MessageId = "", nil, "", "", ""
	return t
}

// loopMinInterval is router.loop_min_interval, no less than Hermes's
// floor of the floor.
func (s *Service) loopMinInterval() time.Duration {
	if s.cfg.LoopMinInterval <= 0 {
		return loop.DefaultMinInterval
	}
	return max(s.cfg.LoopMinInterval, loop.MinIntervalFloor)
}

// loopCommand answers /loop [interval] <prompt> [--times N] [--until
// <condition>] | status | pause | resume | stop | help.
func (s *Service) loopCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string, busy bool) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if quietPlatform(m.platform) {
		return reply(loopUnavailable)
	}
	switch loop.Control(loop.KindLoop, args) {
	case "help":
		return reply(loop.Help)
	case "status":
		l, err := s.store.Loop(ctx, m.key, sess.ID, loop.KindLoop)
		if err != nil {
			return err
		}
		return reply(l.StatusLine(s.now()))
	case "pause":
		return s.once(ctx, m, "loop", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			l, err := st.UpdateLoop(ctx, m.key, sess.ID, loop.KindLoop, func(l *loop.State) error {
				if !l.Has() {
					return errNoLoop
				}
				l.Status, l.PausedReason = loop.Paused, "user-paused"
				return nil
			})
			if errors.Is(err, errNoLoop) || (err == nil && l == nil) {
				return "No loop set.", sess.Generation, nil
			}
			if err != nil {
				return "", 0, err
			}
			return "⏸ Loop paused: " + l.Prompt + "\nUse /loop resume to continue.", sess.Generation, nil
		})
	case "resume":
		err := s.once(ctx, m, "loop", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			now := s.now()
			l, err := st.UpdateLoop(ctx, m.key, sess.ID, loop.KindLoop, func(l *loop.State) error {
				if l.Status == loop.Cleared {
					return errNoLoop
				}
				l.Status, l.PausedReason = loop.Active, ""
				// Re-armed from now (Hermes's: at most 5s away), so a long
				// pause does not fire a burst.
				d := l.Delay
				if d <= 0 {
					d = l.Interval
				}
				l.NextDue = now.Add(min(d, 5*time.Second))
				return nil
			})
			if errors.Is(err, errNoLoop) || (err == nil && l == nil) {
				return "No loop to resume.", sess.Generation, nil
			}
			if err != nil {
				return "", 0, err
			}
			return fmt.Sprintf("▶ Loop resumed (%s): %s", l.Cadence(), l.Prompt), sess.Generation, nil
		})
		return err
	case "stop":
		return s.once(ctx, m, "loop", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			had := false
			if _, err := st.UpdateLoop(ctx, m.key, sess.ID, loop.KindLoop, func(l *loop.State) error {
				had = l.Status != loop.Cleared
				l.Status = loop.Cleared
				return nil
			}); err != nil {
				return "", 0, err
			}
			if had {
				return "✓ Loop stopped.", sess.Generation, nil
			}
			return "No active loop.", sess.Generation, nil
		})
	}
	if busy {
		// Recorded with the event (once), as the loop set below is: a
		// redelivery after the turn ended finds it and is refused again,
		// not set.
		return s.once(ctx, m, "loop", func(context.Context, *sessionstore.Store) (string, int64, error) {
			return loopBusy, sess.Generation, nil
		})
	}
	spec := loop.ParseSpec(args)
	if spec.Problem != "" {
		return reply(spec.Problem)
	}
	err := s.once(ctx, m, "loop", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		now := s.now()
		l := loop.State{Kind: loop.KindLoop, ID: loopID(m.dedupeID), Prompt: spec.Prompt, Status: loop.Active,
			Times: spec.Times, Until: spec.Until, MaxTicks: max(0, s.cfg.LoopMaxTicks), NextDue: now}
		if spec.Interval > 0 {
			l.Interval = max(spec.Interval, s.loopMinInterval())
			l.Delay = l.Interval
		} else {
			l.Delay = loop.SelfPacedFloor
		}
		replaced, err := st.SetLoop(ctx, m.key, sess.ID, l, loopTemplate(m.ev))
		if err != nil {
			return "", 0, err
		}
		text := loop.SetText(l, spec, replaced)
		if sess.GoalActive() {
			text += "\nNote: an active /goal is driving this session — loop wakeups defer until the goal finishes, pauses, or parks."
		}
		return text, sess.Generation, nil
	})
	if err != nil {
		return err
	}
	// The first wakeup fires now.
	s.fireLoops(ctx)
	return nil
}

// heartbeatCommand answers /heartbeat [every <interval> <prompt> |
// status | pause | resume | clear].
func (s *Service) heartbeatCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if quietPlatform(m.platform) {
		return reply(heartbeatUnavailable)
	}
	switch loop.Control(loop.KindHeartbeat, args) {
	case "status":
		l, err := s.store.Loop(ctx, m.key, sess.ID, loop.KindHeartbeat)
		if err != nil {
			return err
		}
		return reply(l.HeartbeatStatusLine(s.now()))
	case "pause":
		return s.once(ctx, m, "heartbeat", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			l, err := st.UpdateLoop(ctx, m.key, sess.ID, loop.KindHeartbeat, func(l *loop.State) error {
				if !l.Has() {
					return errNoLoop
				}
				l.Status = loop.Paused
				return nil
			})
			if errors.Is(err, errNoLoop) || (err == nil && l == nil) {
				return "No heartbeat set.", sess.Generation, nil
			}
			if err != nil {
				return "", 0, err
			}
			return "⏸ Heartbeat paused: " + l.Prompt, sess.Generation, nil
		})
	case "resume":
		return s.once(ctx, m, "heartbeat", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			now := s.now()
			l, err := st.UpdateLoop(ctx, m.key, sess.ID, loop.KindHeartbeat, func(l *loop.State) error {
				if !l.Has() {
					return errNoLoop
				}
				// Re-anchored: resuming does not fire a stale tick at once.
				l.Status, l.NextDue = loop.Active, now.Add(l.Interval)
				return nil
			})
			if errors.Is(err, errNoLoop) || (err == nil && l == nil) {
				return "No heartbeat to resume.", sess.Generation, nil
			}
			if err != nil {
				return "", 0, err
			}
			return fmt.Sprintf("▶ Heartbeat resumed (every %s): %s", loop.FormatHeartbeatInterval(l.Interval), l.Prompt), sess.Generation, nil
		})
	case "stop":
		return s.once(ctx, m, "heartbeat", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			had := false
			if _, err := st.UpdateLoop(ctx, m.key, sess.ID, loop.KindHeartbeat, func(l *loop.State) error {
				had = l.Has()
				l.Status = loop.Cleared
				return nil
			}); err != nil {
				return "", 0, err
			}
			if had {
				return "✓ Heartbeat cleared.", sess.Generation, nil
			}
			return "No heartbeat set.", sess.Generation, nil
		})
	}
	interval, prompt, problem := loop.ParseHeartbeat(args)
	if problem != "" {
		return reply(problem)
	}
	return s.once(ctx, m, "heartbeat", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		l := loop.State{Kind: loop.KindHeartbeat, ID: loopID(m.dedupeID), Prompt: prompt, Status: loop.Active,
			Interval: interval, Delay: interval, NextDue: s.now().Add(interval)}
		if _, err := st.SetLoop(ctx, m.key, sess.ID, l, loopTemplate(m.ev)); err != nil {
			return "", 0, err
		}
		return loop.HeartbeatSetText(l), sess.Generation, nil
	})
}

// startsLoop reports whether /loop's args would fire a wakeup now (a new
// loop, or resume): held while /pause is engaged.
func startsLoop(args string) bool {
	c := loop.Control(loop.KindLoop, args)
	return c == "" || c == "resume"
}

// loopFireLimit is how many due ticks one scheduler pass claims.
const loopFireLimit = 100

// scheduleLoops fires due loops and heartbeats every
// router.loop_poll_interval until ctx ends.
func (s *Service) scheduleLoops(ctx context.Context) error {
	every := s.cfg.LoopPollInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.fireLoops(ctx)
	}
}

// fireLoops fires the due ticks (sessionstore.FireDue) and starts the
// turns of their wakeups, unless /pause holds new work. A wakeup that does not start now (the session
// became busy) starts as any queued message does.
func (s *Service) fireLoops(ctx context.Context) {
	if s.paused() != nil {
		// /pause: nothing fires (as the cron scheduler); the ticks due
		// meanwhile fire, coalesced, after /pause off.
		return
	}
	busy := func(ctx context.Context, key string) (bool, error) {
		owner, err := s.locker.Owner(ctx, key)
		if err != nil {
			return false, err
		}
		// The turn's lease stands in for a lock Redis lost.
		owner, err = s.holderOrLease(ctx, key, owner)
		return owner != "", err
	}
	skipped := func(_, kind string, why sessionstore.Skip) {
		loopFires.WithLabelValues(kind, string(why)).Inc()
	}
	now := s.now()
	var after *sessionstore.DueCursor
	for {
		fired, next, err := s.store.FireDuePage(ctx, now, loopFireLimit, after, busy, skipped)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("fire loops failed", "err", err)
			}
			return
		}
		s.startWakeups(ctx, fired)
		if next == nil {
			return
		}
		after = next
	}
}

// startWakeups starts the turns of the wakeups fired.
func (s *Service) startWakeups(ctx context.Context, fired []sessionstore.Fired) {
	for _, f := range fired {
		loopFires.WithLabelValues(f.Kind, "fired").Inc()
		s.log.Info("loop fired", "session_key", f.Key, "kind", f.Kind, "tick", f.Tick)
		if _, err := s.startQueued(ctx, f.Key); err != nil {
			s.log.Warn("start loop wakeup; the sweep starts it", "session_key", f.Key, "err", err)
		}
	}
}

// loopStatus is /status's lines about the conversation's loop and
// heartbeat ("" none).
func (s *Service) loopStatus(ctx context.Context, sess sessionstore.Session, key string) (string, error) {
	out := ""
	for _, kind := range []string{loop.KindLoop, loop.KindHeartbeat} {
		l, err := s.store.Loop(ctx, key, sess.ID, kind)
		if err != nil {
			return "", err
		}
		if !l.Has() {
			continue
		}
		if kind == loop.KindLoop {
			out += l.StatusLine(s.now()) + "\n"
		} else {
			out += l.HeartbeatStatusLine(s.now()) + "\n"
		}
	}
	return out, nil
}
