package router

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /goal and /subgoal are Hermes's standing goal, the "Ralph loop"
// (hermes_cli/goals.py, gateway/run.py's _handle_goal_command and
// _post_turn_goal_continuation): the chat gives the agent a goal, the
// goal text runs as the next turn, and after every turn of the
// conversation a judge model decides whether the goal is done, blocked,
// or to be continued; while it continues, Hermes's continuation prompt
// runs as the next turn, until done, blocked, paused, cleared or out of
// its turn budget (router.goal_max_turns, 20).
//
// Here the router keeps the goal (session_goals, migration 00126, one
// per session key, for the conversation it was set in) and answers the
// commands, each applied once per inbound event (sessionstore.Once);
// the worker that ran a turn judges it and, in one Postgres
// transaction, records the verdict (goal_verdicts, 00127), the goal's
// new state and the continuation, queued in the session's queue as any
// message is (services/worker/goal.go). Hermes's completion contracts
// (/goal draft), quality gates (/goal gate), wait barriers (/goal wait)
// and /goal complete are not reproduced: no background process runs
// beside this gateway's agent to wait on or to run gates in.

// goalUnavailable answers /goal and /subgoal where no chat waits for a
// continuation's answer (the API, webhooks, cron runs).
const goalUnavailable = "Goals unavailable on this session."

// goalCommand answers /goal [text | status | show | pause | resume | clear];
// owner is the session lock's value ("" when no turn runs).
func (s *Service) goalCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, owner, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if quietPlatform(m.platform) {
		return reply(goalUnavailable)
	}
	g := command.ParseGoal(args)
	switch g.Action {
	case "status", "show":
		st, err := s.store.Goal(ctx, m.key, sess.ID)
		if err != nil {
			return err
		}
		text := st.StatusLine()
		if g.Action == "show" && st.Has() {
			text += "\n" + st.RenderSubgoals()
		}
		return reply(text)
	case "unsupported":
		return reply(fmt.Sprintf("/goal %s is not available on this gateway: it has no completion contracts, quality gates or wait barriers "+
			"(no background processes run beside the agent here). Set a goal with /goal <text>; add criteria with /subgoal <text>.", g.Word))
	case "pause":
		return s.once(ctx, m, "goal", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			gs, err := st.UpdateGoal(ctx, m.key, sess.ID, func(gs *goal.State) error {
				if gs.Status == goal.Cleared {
					return errNoGoal
				}
				gs.Status, gs.PausedReason = goal.Paused, "user-paused"
				return nil
			})
			if errors.Is(err, errNoGoal) || (err == nil && gs == nil) {
				return "No goal set.", sess.Generation, nil
			}
			if err != nil {
				return "", 0, err
			}
			return "⏸ Goal paused: " + gs.Goal, sess.Generation, nil
		})
	case "resume":
		err := s.once(ctx, m, "goal", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			gs, err := st.UpdateGoal(ctx, m.key, sess.ID, func(gs *goal.State) error {
				if gs.Status == goal.Cleared {
					return errNoGoal
				}
				// Hermes's resume starts a fresh budget.
				gs.Status, gs.PausedReason, gs.TurnsUsed = goal.Active, "", 0
				gs.ParseFailures, gs.TransportFailures = 0, 0
				return nil
			})
			if errors.Is(err, errNoGoal) || (err == nil && gs == nil) {
				return "No goal to resume.", sess.Generation, nil
			}
			if err != nil {
				return "", 0, err
			}
			// Resuming restarts the work (as Hermes's, #75362): the
			// continuation is queued with the goal's new state, after
			// every message waiting, in this transaction.
			cont := proto.CloneOf(m.ev)
			cont.EventId = sessionstore.GoalEventPrefix + "resume:" + m.dedupeID
			cont.Text = gs.ContinuationPrompt()
			cont.Attachments = nil
			if err := st.EnqueueContinuation(ctx, m.key, cont); err != nil {
				return "", 0, err
			}
			return "▶ Goal resumed: " + gs.Goal + "\nSend any message to continue, or wait — I'll take the next step on the next turn.", sess.Generation, nil
		})
		if err != nil {
			return err
		}
		return s.startGoalTurn(ctx, m)
	case "clear":
		return s.once(ctx, m, "goal", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			had := false
			if _, err := st.UpdateGoal(ctx, m.key, sess.ID, func(gs *goal.State) error {
				had = gs.Has()
				gs.Status = goal.Cleared
				return nil
			}); err != nil {
				return "", 0, err
			}
			if had {
				return "✓ Goal cleared.", sess.Generation, nil
			}
			return "No active goal.", sess.Generation, nil
		})
	}
	// A new goal: set, and its text queued as the next message (Hermes's
	// kickoff), in one transaction.
	err := s.once(ctx, m, "goal", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		budget := s.cfg.GoalMaxTurns
		if budget < 1 {
			budget = goal.DefaultMaxTurns
		}
		gs, err := st.SetGoal(ctx, m.key, sess.ID, g.Text, budget)
		if err != nil {
			return "", 0, err
		}
		text := fmt.Sprintf("⊙ Goal set (%d-turn budget): %s\n"+
			"I'll keep working until the goal is done, you pause/clear it, or the budget is exhausted.\n"+
			"Controls: /goal status · /goal pause · /goal resume · /goal clear", gs.MaxTurns, gs.Goal)
		kick := proto.CloneOf(m.ev)
		kick.Text = g.Text
		switch _, err := st.EnqueueWhileHeld(ctx, m.key, owner, m.seq, true, kick, s.cfg.QueueCap); {
		case errors.Is(err, sessionstore.ErrQueueFull):
			text += fmt.Sprintf("\n⚠️ Too many messages are waiting (%d): the goal is judged after their turns.", s.cfg.QueueCap)
		case err != nil && !errors.Is(err, sessionstore.ErrStarted):
			return "", 0, err
		}
		return text, sess.Generation, nil
	})
	if err != nil {
		return err
	}
	return s.startGoalTurn(ctx, m)
}

// errNoGoal: the chat's conversation has no goal to change.
var errNoGoal = errors.New("no goal")

// startGoalTurn starts what /goal queued, when the session is free; a
// running turn's completion starts it otherwise, as any queued message.
func (s *Service) startGoalTurn(ctx context.Context, m *msgCtx) error {
	if _, err := s.startQueued(ctx, m.key); err != nil {
		return fmt.Errorf("start goal turn: %w", err)
	}
	return nil
}

// subgoalCommand answers /subgoal [text | remove N | clear]: criteria
// added to the goal mid-loop, which the continuation prompt and the
// judge both see from the next turn on.
func (s *Service) subgoalCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if quietPlatform(m.platform) {
		return reply(goalUnavailable)
	}
	sg := command.ParseSubgoal(args)
	if sg.Action == "list" || sg.Problem != "" {
		st, err := s.store.Goal(ctx, m.key, sess.ID)
		if err != nil {
			return err
		}
		if !st.Has() {
			return reply(goal.NoGoal)
		}
		if sg.Problem != "" {
			return reply(sg.Problem)
		}
		return reply(st.StatusLine() + "\n" + st.RenderSubgoals())
	}
	return s.once(ctx, m, "subgoal", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		var text string
		gs, err := st.UpdateGoal(ctx, m.key, sess.ID, func(gs *goal.State) error {
			if !gs.Has() {
				return errNoGoal
			}
			switch sg.Action {
			case "remove":
				if sg.Index < 1 || sg.Index > len(gs.Subgoals) {
					text = fmt.Sprintf("/subgoal remove: index out of range (1..%d)", len(gs.Subgoals))
					return nil
				}
				removed := gs.Subgoals[sg.Index-1]
				gs.Subgoals = append(gs.Subgoals[:sg.Index-1:sg.Index-1], gs.Subgoals[sg.Index:]...)
				text = fmt.Sprintf("✓ Removed subgoal %d: %s", sg.Index, removed)
			case "clear":
				n := len(gs.Subgoals)
				gs.Subgoals = nil
				text = "No subgoals to clear."
				if n > 0 {
					text = fmt.Sprintf("✓ Cleared %d subgoal%s.", n, map[bool]string{true: "", false: "s"}[n == 1])
				}
			default:
				gs.Subgoals = append(gs.Subgoals, sg.Text)
				text = fmt.Sprintf("✓ Added subgoal %d: %s", len(gs.Subgoals), sg.Text)
			}
			return nil
		})
		if errors.Is(err, errNoGoal) || (err == nil && gs == nil) {
			return goal.NoGoal, sess.Generation, nil
		}
		if err != nil {
			return "", 0, err
		}
		return text, sess.Generation, nil
	})
}

// goalStatus is /status's line about the conversation's goal ("" none).
func (s *Service) goalStatus(ctx context.Context, sess sessionstore.Session, key string) (string, error) {
	st, err := s.store.Goal(ctx, key, sess.ID)
	if err != nil || !st.Has() {
		return "", err
	}
	return st.StatusLine() + "\n", nil
}
