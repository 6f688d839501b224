package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /pause [reason | off] is Hermes's "Pause new work globally (emergency
// stop); '/pause off' resumes" (gateway/run.py _handle_pause_command,
// agent/estop.py). Hermes writes a sentinel file its one process stats
// before each new turn and cron tick; here the pause is one entry of a
// NATS KV bucket (pkg/estop) that every router replica watches into
// memory: no round trip per message, every replica sees it within the
// watch's delay, and it outlives restarts (no max age) until /pause off,
// or until its expiry when it was set with a TTL (Hermes's `hermes pause
// --ttl`; here `switchboard pause --ttl` over the admin API): every
// replica reads an expired pause as none, and a /pause <reason> that
// re-arms a pause keeps its expiry, as Hermes's does.
//
// While paused, as in Hermes:
//   - a new message of a user is not queued: it is answered with the
//     paused notice (Hermes's paused_reply) and dropped;
//   - commands still work (/pause off, /status, /help, /stop …), but those
//     that would start a new turn (/queue, /retry, /background, /btw,
//     /goal <text>, /goal resume, /steer with no task running, which
//     sends its text as a normal message) are answered with the paused
//     notice too;
//   - the cron scheduler fires nothing (Hermes's tick skips the due-job
//     scan); the runs due meanwhile are late or missed runs at resume
//     (cron.catch_up_missed);
//   - a goal's continuation is not started: the goal is paused with the
//     reason, and /goal resume continues it after /pause off;
//   - work in flight is not touched: running turns finish, messages
//     queued before the pause run after the turn ahead of them, a cron
//     run fired before the pause runs.
//
// Only whoever may run commands runs it, as /platform: router.admins
// where the platform lists admins (commands refuses the others before
// this), every authorized user where it lists none.

// pausedGoalReason is the paused reason of a goal whose continuation the
// pause held.
const pausedGoalReason = "paused by /pause (emergency stop)"

// pauseKV opens the pause's bucket.
func (s *Service) pauseKV(ctx context.Context) (jetstream.KeyValue, error) {
	return estop.Open(ctx, s.bus.JetStream(), s.topo)
}

// watchPause loads the pause and keeps it current until ctx ends.
func (s *Service) watchPause(ctx context.Context) error {
	kv, err := s.pauseKV(ctx)
	if err != nil {
		return err
	}
	v, err := estop.Watch(ctx, kv, s.log, func(st *estop.State) {
		if st == nil {
			routerPaused.Set(0)
			return
		}
		routerPaused.Set(1)
	})
	if err != nil {
		return err
	}
	s.pause.Store(v)
	close(s.pauseReady)
	return nil
}

// pausedFor is the pause as it holds m's new work: nil when none is
// engaged or its allowlist (Hermes's allow: the sender's user id, on a
// router serving one of its profiles when it names some) lets m's
// sender through.
func (s *Service) pausedFor(m *msgCtx) *estop.State {
	st := s.paused()
	profile := s.cfg.Profile
	if profile == "" {
		profile = "default"
	}
	if st.Admits(m.src.GetUserId(), profile) {
		return nil
	}
	return st
}

// paused returns the pause, nil when none is engaged (or before Run).
func (s *Service) paused() *estop.State {
	if v := s.pause.Load(); v != nil {
		return v.Current()
	}
	return nil
}

// Paused reports whether new work is paused, waiting for Run to have
// read the pause (the cron scheduler asks it before each tick).
func (s *Service) Paused(ctx context.Context) (bool, error) {
	select {
	case <-s.pauseReady:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return s.paused() != nil, nil
}

// pausedText is Hermes's paused_reply, with the way to resume here.
func pausedText(st *estop.State) string {
	tag := ""
	if st.Reason != "" {
		tag = " (" + st.Reason + ")"
	}
	return "⏸️ Switchboard is paused" + tag + ". New work is on hold; an admin can send `/pause off` to pick things back up." +
		autoResumes(st)
}

// autoResumes is Hermes's " Auto-resumes <expires_at>." for a pause with
// an expiry (set through the admin API), "" for one without.
func autoResumes(st *estop.State) string {
	if st.Until.IsZero() {
		return ""
	}
	return " Auto-resumes " + st.Until.UTC().Format("2006-01-02 15:04:05 UTC") + "."
}

// startsWork are the commands refused while paused: each would start a
// new turn. /goal only when it sets a goal or resumes one (startsGoal).
var startsWork = map[string]bool{"queue": true, "retry": true, "background": true, "btw": true, "moa": true}

// startsGoal reports whether /goal's argument starts a turn.
func startsGoal(args string) bool {
	g := command.ParseGoal(args)
	return g.Action == "resume" || g.Action == "set"
}

// pauseCommand answers /pause, exactly once per inbound event (once).
func (s *Service) pauseCommand(ctx context.Context, m *msgCtx, args string) error {
	a := command.Pause(args)
	kv, err := s.pauseKV(ctx)
	if err != nil {
		return err
	}
	by := m.platform + ":" + m.src.GetUserId()
	return s.once(ctx, m, "pause", func(ctx context.Context, _ *sessionstore.Store) (string, int64, error) {
		if a.Off {
			lifted, err := estop.Disengage(ctx, kv)
			if err != nil {
				return "", 0, err
			}
			if lifted == nil {
				return "Switchboard wasn't paused.", 0, nil
			}
			pauseActions.WithLabelValues("resume").Inc()
			s.log.WarnContext(ctx, "emergency stop lifted: new work accepted again", "by", by)
			return "▶️ Resumed — new work is accepted again.", 0, nil
		}
		// The re-arm keeps what is engaged, so it writes on the
		// condition that nothing changed since its read (estop.Update):
		// a /pause off, the admin API's SetPause or an expiry landing
		// between is read and decided on again, never overwritten.
		var (
			already *estop.State // engaged, and this /pause changes nothing
			st      *estop.State // engaged by this /pause
		)
		err := estop.Update(ctx, kv, func(cur *estop.State) (*estop.State, error) {
			if s.pauseRead != nil {
				s.pauseRead(ctx)
			}
			already, st = nil, nil
			if cur != nil && a.Reason == "" {
				already = cur
				return nil, nil
			}
			st = &estop.State{Reason: a.Reason, By: by, At: s.now().UTC()}
			if cur != nil {
				// As Hermes's re-arm without a TTL: the standing expiry
				// stays, and so does the allowlist.
				st.Until, st.Allow = cur.Until, cur.Allow
			}
			return st, nil
		})
		if err != nil {
			return "", 0, err
		}
		if already != nil {
			suffix := ""
			if already.Reason != "" {
				suffix = " (reason: " + already.Reason + ")"
			}
			return "⏸️ Switchboard is already paused" + suffix + ". Use `/pause off` to resume.", 0, nil
		}
		pauseActions.WithLabelValues("pause").Inc()
		s.log.WarnContext(ctx, "emergency stop engaged: new work paused", "reason", a.Reason, "by", by)
		suffix := ""
		if a.Reason != "" {
			suffix = " (reason: " + a.Reason + ")"
		}
		return "⏸️ Paused" + suffix + ". New cron/goal/gateway work is on hold; in-flight work finishes normally. " +
			"Use `/pause off` to resume." + autoResumes(st), 0, nil
	})
}

// errGoalHeld: a turn would have started only a goal's continuation
// while paused.
var errGoalHeld = errors.New("goal continuation held by the pause")

// holdGoal is the turn start's check: while paused, a turn of nothing but
// a goal's continuation is not started.
func (s *Service) holdGoal(t sessionstore.Turn) error {
	if s.paused() == nil || len(t.Inputs) == 0 {
		return nil
	}
	for _, in := range t.Inputs {
		if !sessionstore.IsGoalContinuation(in.Event) {
			return nil
		}
	}
	return fmt.Errorf("%w (session %s)", errGoalHeld, t.Session.ID)
}

// pauseGoal pauses the goal of the session key whose continuation the
// pause held; pausing it drops the continuation (goal.Paused).
func (s *Service) pauseGoal(ctx context.Context, key string) error {
	sess, err := s.store.Get(ctx, key)
	if err != nil {
		return err
	}
	if _, err := s.store.UpdateGoal(ctx, key, sess.ID, func(gs *goal.State) error {
		if gs.Status == goal.Active {
			gs.Status, gs.PausedReason = goal.Paused, pausedGoalReason
		}
		return nil
	}); err != nil {
		return err
	}
	goalsHeld.Inc()
	s.log.InfoContext(ctx, "goal paused: its continuation is held by the emergency stop", "session_key", key)
	return nil
}

// pauseStatus is /status's line about the pause: "" when none is engaged.
func pauseStatus(st *estop.State) string {
	if st == nil {
		return ""
	}
	reason := ""
	if st.Reason != "" {
		reason = " (reason: " + st.Reason + ")"
	}
	return "\n⏸️ Paused" + reason + ": new work is on hold. /pause off resumes." + autoResumes(st)
}
