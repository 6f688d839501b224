package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/command"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/goal"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// helpText lists the commands, in the order Hermes shows them.
var helpText = strings.Join([]string{
	"Commands:",
	"/new [title] (/reset) — start a new conversation",
	"/stop — stop the current task",
	"/queue <text> (/q) — run <text> after the current task",
	"/steer <text> — add <text> to the current task",
	"/status — session status",
	"/usage — tokens this conversation used",
	"/context [all] (/ctx) — detailed context window view: usage gauge, category breakdown, compression stats and throughput; all: tool results by tool and each compression",
	"/insights [days] — usage report of this chat's conversations (default 30 days)",
	"/model [name] — show or set the model for this session",
	"/provider — the model provider and this session's model",
	"/approve [session|always] — run the pending tool call; session or always: without asking again in this conversation, or ever",
	"/deny [all] [reason] — refuse the pending tool call, telling the agent why; all: the agent's other calls of this step that need approval too",
	"/title [text] — show or name this conversation",
	"/sessions [page] — list this chat's conversations",
	"/resume <title or number> — go back to an earlier conversation",
	"/branch [title] (/fork) — continue in a copy of this conversation; /resume goes back",
	"/retry — run your last message again",
	"/undo [n] — remove the last n exchanges",
	"/compress [here [N] | focus | --preview] — summarize the older part of the conversation now; here N: all but the last N exchanges (default 2); focus: keep what concerns it in detail; --preview: only say what it would do",
	"/save <json|md|html> [filename] [redact] — export the current conversation (bare /save shows usage): a JSON snapshot, a Markdown transcript or an HTML page, sent here as a file; redact: mask API keys, tokens and credentials",
	"/personality [name] — list personalities, or set this chat's (none clears it)",
	"/reasoning [level|show|hide] — reasoning effort (none, minimal, low, medium, high, xhigh, reset) and whether the model's thinking is shown",
	"/yolo — turn on or off running dangerous commands in this chat without asking",
	"/approvals [manual|smart|off] — show or set the persistent dangerous-command approval mode, for the whole gateway: manual asks before every dangerous command, smart lets a judge model approve the harmless ones and asks about the rest, off never asks; admins set it",
	"/verbose [mode] — cycle how tool calls show on this platform: off, new, all, verbose",
	"/busy [queue|steer|interrupt|status] — what a message does while the agent is working, in this chat",
	"/footer [on|off|status] — show the model and context use under the agent's answers in this chat",
	"/voice [on|off|tts|status] — toggle voice mode: voice replies in this chat; on, to your voice messages; tts, to every message; off, text only",
	"/fast [normal|fast|status] — fast mode: OpenAI Priority Processing / Anthropic Fast Mode (normal/fast) in this chat; faster answers, at a higher price",
	"/background <prompt> (/bg) — run <prompt> in a separate session; the result comes here when done",
	"/agents (/tasks) — show active agents and running tasks: this chat's turn, waiting messages, background tasks, side questions, cron runs",
	"/btw <question> — ask a side question about the current conversation without interrupting it (no tools, not saved)",
	"/moa <prompt> — run one prompt through the default Mixture of Agents preset, then restore your model: reference models answer in parallel, an aggregator writes the answer",
	"/goal [text | status | show | pause | resume | clear] — set a standing goal Hermes works on across turns until achieved: after each turn a judge decides done, blocked or continue",
	"/subgoal [text | remove N | clear] — add or manage extra criteria on the active goal",
	"/loop [interval] <prompt> [--times N] [--until <condition>] | status | pause | resume | stop (/proactive) — re-run a prompt on a recurring interval in this conversation (first run now; no interval: self-paced)",
	"/heartbeat [every <interval> <prompt> | status | pause | resume | clear] (/hb) — a recurring prompt that re-enters this conversation when it is idle",
	"/topic [off|help|session-id] — enable or inspect Telegram DM topic sessions: the main view of this private chat a lobby for commands, each topic its own conversation; off: the main view a chat again; a session id (or its prefix), inside a topic: restore that conversation there",
	"/sethome — send scheduled messages to this chat",
	"/cron — scheduled jobs: list, add <schedule> <prompt>, pause, resume, run, remove",
	"/memory [pending|approve|reject|approval] [id|on|off] — review pending memory writes / toggle the approval gate: with it on, the agent's memory writes wait for /memory approve <id|all> or /memory reject <id|all>",
	"/bundles — list skill bundles (aliases /<name> for multiple skills)",
	"/platform [list|pause|resume] [name] — pause, resume, or list a failing gateway platform: list, every gateway replica's state; pause, its connection stops on every replica until resume",
	"/pause [reason | off] — pause new work globally (emergency stop): on every replica new messages (and /queue, /retry, /background, /btw) are answered, not run, cron and goals hold, running turns finish; /pause off resumes",
	"/reload-skills — re-scan skills.dirs for newly installed or removed skills, on every replica and gateway; the next message of this chat tells the agent what changed",
	"/whoami — who the gateway thinks you are",
	"/profile — the agent profile this chat talks to",
	"/version — the running Switchboard release",
	"/commands [page] — this list, page by page",
	"/help — this list",
}, "\n")

// refusedMidTurn are the commands that, as in Hermes, wait for the running
// task (Hermes's busy_policy reject: its catch-all "⏳ Agent is running"
// answer): they would change or read the conversation under it (/resume
// would even end it without a word; /save would export half a turn;
// /memory's pending writes are the running turn's own; /usage and
// /insights read the counts the turn adds to), change what the chat's
// next turns run with (/personality, /reasoning, /voice, /fast: Hermes's
// "config-only, take effect next message … set them between turns"),
// or act beside it (/cron: the jobs the turn's cronjob tool changes;
// /reload-skills: the skills it runs with; /platform: the gateways that
// carry its replies). /provider is Hermes's from before it dropped the
// command, which refused it the same way. /help, /status, /stop, /new,
// /queue, /steer, /approve, /deny, /yolo, /verbose, /busy, /footer,
// /agents, /context, /goal, /subgoal (a goal set mid-turn starts after
// it), /loop and /heartbeat controls, /pause, /commands, /profile,
// /version, /background and /btw (sessions of their own) work mid-turn,
// and /model and /moa are refused with their own texts.
//
// Differs from Hermes: /whoami and /bundles work mid-turn. Hermes
// refuses them by his default busy_policy (reject), which every command
// gets that does not declare another, not for anything they do: they
// read only the message's sender and the configuration and resolve no
// session, so they neither read nor change anything of the running turn.
var refusedMidTurn = []string{"sessions", "resume", "title", "retry", "undo", "compress", "sethome", "personality", "reasoning", "branch", "save", "memory", "approvals",
	"usage", "insights", "voice", "fast", "platform", "reload-skills", "provider", "cron"}

// ownTurnCommand reports whether the command runs as a turn of its own
// (a transcript command the worker applies, queued as a message is).
func ownTurnCommand(name string) bool { return name == "retry" || name == "undo" || name == "compress" }

// openCommands stay available to non-admins where an admin list exists.
// /approvals shows the mode to anyone; a change is refused to
// non-admins by approvalsCommand (Hermes's second check at the side
// effect).
var openCommands = []string{"help", "whoami", "approvals"}

func (s *Service) isAdmin(m *msgCtx) (admin, restricted bool) {
	list := s.cfg.Admins[m.platform]
	if len(list) == 0 {
		return true, false
	}
	return slices.Contains(list, m.src.GetUserId()) || (m.src.GetUserIdAlt() != "" && slices.Contains(list, m.src.GetUserIdAlt())), true
}

// command handles a slash command.
func (s *Service) command(ctx context.Context, m *msgCtx, cmd command.Command) error {
	reply := func(gen int64, text string) error { return s.notice(ctx, m, gen, text, "command") }
	if !cmd.Known {
		if m.skillAnswer != "" {
			// A bundle or a stack that cannot run as typed (skills.go).
			commandsHandled.WithLabelValues("skill_disabled").Inc()
			return reply(0, m.skillAnswer)
		}
		if text, ok := s.skillRefusal(cmd.Typed, m.platform); ok {
			// A skill that does not run here (skills.go).
			commandsHandled.WithLabelValues("skill_disabled").Inc()
			return reply(0, text)
		}
		commandsHandled.WithLabelValues("unknown").Inc()
		text := fmt.Sprintf("Unknown command /%s.", cmd.Typed)
		if sug := command.Suggest(cmd.Typed); len(sug) > 0 {
			for i := range sug {
				sug[i] = "/" + sug[i]
			}
			text += " Did you mean " + strings.Join(sug, ", ") + "?"
		}
		return reply(0, text+" Send /help for the list.")
	}
	commandsHandled.WithLabelValues(cmd.Name).Inc()
	if cmd.Name == "start" {
		// A client's "open the bot" ping (Telegram): as Hermes, no answer,
		// and nothing running is interrupted.
		return nil
	}
	if admin, _ := s.isAdmin(m); !admin && !slices.Contains(openCommands, cmd.Name) {
		s.log.InfoContext(ctx, "command refused: not an admin", "command", cmd.Name, "platform", m.platform, "user_id", m.src.GetUserId())
		return reply(0, fmt.Sprintf("/%s is reserved for admins here. /help and /whoami are available.", cmd.Name))
	}
	if cmd.Name == "help" {
		return reply(0, helpText+s.quickHelp()+s.skillsHelp(m.platform))
	}
	if cmd.Name == "pause" {
		// About the whole gateway, not this chat, and mid-turn too
		// (Hermes's busy_policy dispatch): no session is resolved.
		return s.pauseCommand(ctx, m, cmd.Args)
	}
	if st := s.pausedFor(m); st != nil && (startsWork[cmd.Name] || cmd.Name == "goal" && startsGoal(cmd.Args) || cmd.Name == "loop" && startsLoop(cmd.Args)) {
		// New work, held as a new message is (pause.go).
		inbound.WithLabelValues("paused").Inc()
		return reply(0, pausedText(st))
	}
	owner, err := s.locker.Owner(ctx, m.key)
	if err != nil {
		return err
	}
	// Redis may have lost the running turn's lock: its lease in Postgres
	// (migration 00148) still says it runs, and the commands meet it as
	// behind its lock (/status, /steer, /agents see it; a command that
	// moves the session on, /branch or /resume, would fence it off
	// unanswered).
	if owner, err = s.holderOrLease(ctx, m.key, owner); err != nil {
		return err
	}
	// A running memory flush (flush.go) is no task of the user's, as
	// Hermes's runs beside the chat: commands meet an idle agent.
	busy := owner != "" && !s.flushRunning(ctx, m.key, owner)
	if slices.Contains(refusedMidTurn, cmd.Name) {
		if busy && ownTurnCommand(cmd.Name) {
			// A redelivery of one that was queued, whose turn may be the
			// running one (a crash before the dedupe record): it is
			// handled already, and refusing it would answer it twice.
			if seen, err := s.store.QueuedOrStarted(ctx, m.key, m.ev.GetEventId()); err != nil {
				return err
			} else if seen {
				return s.startedAlready(m)
			}
		}
		if busy {
			return s.refuseOnce(ctx, m, cmd.Name, midTurnRefusal(cmd.Name), 0)
		}
		// A redelivery after the turn ended (a /retry would start a turn).
		if done, err := s.replayRefusal(ctx, m, cmd.Name); err != nil || done {
			return err
		}
	}
	if cmd.Name == "agents" {
		// Read-only, mid-turn too (Hermes's busy_policy dispatch): it
		// resolves no session, so it neither creates nor resets one.
		return s.agents(ctx, m, owner)
	}
	if cmd.Name == "platform" {
		// About the gateways, not this chat: no session is resolved.
		return s.platformCommand(ctx, m, cmd.Args)
	}
	if cmd.Name == "whoami" {
		admin, restricted := s.isAdmin(m)
		role := "user"
		if admin && restricted {
			role = "admin"
		}
		// A field the platform did not give (an API request without
		// OpenAI's "user" has no name) is left out, not shown empty.
		var b strings.Builder
		field := func(name, value string) {
			if value != "" {
				fmt.Fprintf(&b, "%s: %s\n", name, value)
			}
		}
		field("Platform", m.platform)
		field("User id", m.src.GetUserId())
		// The second id a platform gives (Signal's UUID beside the
		// number), when there is one: a direct chat's memories are filed
		// under it, and an operator forgetting the user needs it too.
		if a := m.src.GetUserIdAlt(); a != m.src.GetUserId() {
			field("Alternate id", a)
		}
		field("Name", m.src.GetUserName())
		if c := m.src.GetChatId(); c != "" {
			field("Chat", c+" ("+orDM(m.src.GetChatType())+")")
		}
		field("Authorized by", string(m.decision.Reason))
		field("Role", role)
		field("Session key", m.key)
		return reply(0, strings.TrimSuffix(b.String(), "\n"))
	}

	if cmd.Name == "bundles" {
		// About the configuration, not this chat: no session is resolved.
		return reply(0, s.bundlesText())
	}
	if cmd.Name == "approvals" {
		// About the whole gateway, not this chat: no session is resolved.
		return s.approvalsCommand(ctx, m, cmd.Args)
	}

	var sess sessionstore.Session
	if cmd.Name == "new" {
		// /new starts a conversation itself, as Hermes's does before it
		// looks at the reset policy: a reset the policy has due would
		// come first, with its own notice and an empty conversation left
		// in /sessions.
		sess, _, _, err = s.arrive(ctx, m)
	} else {
		sess, err = s.session(ctx, m)
	}
	if err != nil {
		return err
	}

	switch cmd.Name {
	case "reload-skills":
		return s.reloadSkillsCommand(ctx, m, sess)
	case "new":
		if m.place == topicLobby {
			// As Hermes: the lobby has no conversation to replace.
			return reply(sess.Generation, topicRootNew)
		}
		var unlock func(context.Context)
		err := s.onceThen(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			unlock = nil // a failed attempt's
			// The reset first, as /stop's: it locks the session's row
			// until the commit, so a turn start landing meanwhile (the
			// stopped turn's completion, the sweep, a message) waits for
			// the reset and finds the waiting messages dropped, instead
			// of running them as a turn of the conversation this ends.
			sess, dropped, err := st.ResetDropping(ctx, m.key, "new", s.flushFor(m))
			if err != nil {
				return "", 0, err
			}
			// The stop now, the lock freed once the reset has committed
			// (forceUnlock).
			if _, unlock, err = s.forceUnlock(ctx, m, st, sess.Generation, sess.LastTurnID); err != nil {
				return "", 0, err
			}
			if s.stopSent != nil {
				s.stopSent(ctx, cmd.Name, st.Tx())
			}
			// As /stop's: before the commit, so a rollback answers them
			// again under the same ids.
			if err := s.answerDropped(ctx, m, sess.Generation, dropped, newDroppedText); err != nil {
				return "", 0, err
			}
			resets.WithLabelValues("new").Inc()
			if cmd.Args == "" && m.place == topicLane {
				return topicNewHeader, sess.Generation, nil
			}
			if cmd.Args == "" {
				return "✨ New session started.", sess.Generation, nil
			}
			// As Hermes: /new <title> names the new conversation.
			title, problem := cleanTitle(cmd.Args)
			if problem != "" {
				return "✨ New session started. " + problem, sess.Generation, nil
			}
			// A title another conversation has continues its lineage
			// ("Plan #2"), as Hermes names a conversation it titles itself:
			// the new conversation is started either way.
			title, err = st.SetTitleInLineage(ctx, m.key, title, maxTitle)
			if err != nil {
				return "", 0, err
			}
			return "✨ New session started: " + title, sess.Generation, nil
		}, func(ctx context.Context) {
			if unlock != nil {
				unlock(ctx)
			}
		})
		if err != nil {
			return err
		}
		// The ended conversation's memory flush, if /new queued one.
		return s.startFlush(ctx, m)
	case "stop":
		// Once: a redelivered /stop steps no generation (it would fence
		// a turn started since) and empties no queue again.
		var unlock func(context.Context)
		return s.onceThen(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			unlock = nil // a failed attempt's
			gen, lastTurn, dropped, err := st.Stop(ctx, m.key)
			if err != nil {
				return "", 0, err
			}
			// The lock is freed once the stop has committed (forceUnlock),
			// as /new's.
			owner, release, err := s.forceUnlock(ctx, m, st, gen, lastTurn)
			if err != nil {
				return "", 0, err
			}
			unlock = release
			if s.stopSent != nil {
				s.stopSent(ctx, cmd.Name, st.Tx())
			}
			// Before the commit: a crash after it would leave the dropped
			// messages unanswered (the redelivery drops nothing); a
			// rollback answers them again under the same ids.
			if err := s.answerDropped(ctx, m, gen, dropped, stoppedText); err != nil {
				return "", 0, err
			}
			// Hermes's words, and what became of the waiting messages.
			text := "No active task to stop."
			switch {
			case owner != "" && redisx.GrantOf(owner) == owner:
				text = "⚡ Stopped. The agent hadn't started yet — you can continue this session."
			case owner != "":
				text = "⚡ Stopped. You can continue this session."
			}
			// Steering the stopped turn had not read yet is dropped with
			// it, as Hermes's hard stop drops a pending steer, but it was
			// no waiting message to the user.
			n := 0
			for _, q := range dropped {
				if _, _, wakeup := sessionstore.WakeupOf(q.Event.GetEventId()); !wakeup && !sessionstore.IsGoalContinuation(q.Event) && !q.IsSteeringOf(owner) {
					n++
				}
			}
			if n > 0 {
				text += fmt.Sprintf(" %s dropped.", plural(n, "waiting message"))
			}
			// As Hermes's: /stop stops the loop's wakeup, not the loop
			// (/loop stop does): the stopped wakeup counts as a run and
			// the next is scheduled from now; a heartbeat goes on as it
			// was.
			if c, err := st.StopWakeup(ctx, m.key); err != nil {
				return "", 0, err
			} else if c.Message != "" {
				text += "\n" + c.Message
			}
			// An active goal pauses: the stopped turn is not judged, and
			// the next message must not restart the loop the user
			// stopped (Hermes's judge rules a turn the user stopped
			// "blocked", which pauses the goal the same way).
			if gs, err := st.UpdateGoal(ctx, m.key, sess.ID, func(gs *goal.State) error {
				if gs.Status == goal.Active {
					gs.Status, gs.PausedReason = goal.Paused, "stopped by /stop"
				}
				return nil
			}); err != nil {
				return "", 0, err
			} else if gs != nil && gs.Status == goal.Paused && gs.PausedReason == "stopped by /stop" {
				text += "\n⏸ Goal paused: " + gs.Goal + " (/goal resume continues it)"
			}
			return text, gen, nil
		}, func(ctx context.Context) {
			if unlock != nil {
				unlock(ctx)
			}
		})
	case "queue":
		if cmd.Args == "" && len(m.ev.GetAttachments()) == 0 {
			return reply(sess.Generation, "Usage: /queue <prompt>")
		}
		return s.route(ctx, m.withText(cmd.Args), sess, routeOpts{ownTurn: true, mode: BusyQueue, command: "queue"})
	case "steer":
		if cmd.Args == "" {
			if !busy {
				return reply(sess.Generation, "Usage: /steer <prompt>  (no agent is running; sending as a normal message)")
			}
			return reply(sess.Generation, "Usage: /steer <prompt>")
		}
		if st := s.pausedFor(m); st != nil && !busy {
			// No task to steer: the text would run as a normal message,
			// which the pause holds as it holds any other (handle).
			inbound.WithLabelValues("paused").Inc()
			return reply(sess.Generation, pausedText(st))
		}
		return s.route(ctx, m.withText(cmd.Args), sess, routeOpts{mode: BusySteer, command: "steer"})
	case "status":
		n, steering, err := s.store.Waiting(ctx, m.key, owner)
		if err != nil {
			return err
		}
		state := "idle"
		if busy {
			state = "working"
		}
		waiting := plural(n, "message") + " waiting"
		if steering > 0 {
			// Queued until the running turn reads it, but the user sent
			// it into that turn, not for the next one.
			waiting += ", " + plural(steering, "steer") + " not yet read by the agent"
		}
		model := sess.ModelOverride
		if model == "" {
			model = "default"
		}
		title := sess.Title
		if title == "" {
			title = "(untitled)"
		}
		counted := []sessionstore.Session{sess}
		if err := s.store.AddTurnUsage(ctx, counted); err != nil {
			return err
		}
		sess = counted[0]
		goalLine, err := s.goalStatus(ctx, sess, m.key)
		if err != nil {
			return err
		}
		loopLines, err := s.loopStatus(ctx, sess, m.key)
		if err != nil {
			return err
		}
		goalLine += loopLines
		return reply(sess.Generation, fmt.Sprintf("Session: %s\nTitle: %s\nKey: %s\nState: %s, %s\nModel: %s\n%s%sTokens: %d in, %d out\nStarted: %s%s",
			sess.ID, title, m.key, state, waiting, model, s.chatSettings(sess, m.key, m.platform), goalLine, sess.InputTokens, sess.OutputTokens, sess.CreatedAt.UTC().Format("2006-01-02 15:04 MST"), pauseStatus(s.paused())))
	case "context":
		// Read-only, mid-turn too (context.go).
		return s.contextCommand(ctx, m, sess, cmd.Args, busy)
	case "usage":
		// Hermes's /usage: the conversation's token counts (refused
		// mid-turn, refusedMidTurn).
		counted := []sessionstore.Session{sess}
		if err := s.store.AddTurnUsage(ctx, counted); err != nil {
			return err
		}
		in, out := counted[0].InputTokens, counted[0].OutputTokens
		if in == 0 && out == 0 {
			return reply(sess.Generation, "No usage data available for this session.")
		}
		return reply(sess.Generation, fmt.Sprintf("📊 Session token usage\nInput: %s\nOutput: %s\nTotal: %s",
			thousands(in), thousands(out), thousands(in+out)))
	case "model":
		return s.modelCommand(ctx, m, sess, cmd.Args, busy)
	case "memory":
		return s.memoryCommand(ctx, m, sess, cmd.Args)
	case "approve", "deny":
		action := controlApprove
		if cmd.Name == "deny" {
			action = controlDeny
		}
		if m.ev.GetButtonPress().GetMessageId() != "" {
			// A press names the prompt's call, which alone takes it.
			took := false
			if busy {
				if took, err = s.request(ctx, m, action, cmd.Args); err != nil {
					return err
				}
			}
			return s.pressed(ctx, m, sess.Generation, action, cmd.Args, took)
		}
		// A typed answer names no call: the turn gives it to whichever
		// waits. Once per event, so that a redelivery does not answer a
		// call the turn asked about since, one the user has not seen.
		return s.once(ctx, m, cmd.Name, func(ctx context.Context, _ *sessionstore.Store) (string, int64, error) {
			if busy {
				// Only a turn waiting for an approval takes the answer.
				took, err := s.request(ctx, m, action, cmd.Args)
				if err != nil {
					return "", 0, err
				}
				if took {
					return approvalReply(action, cmd.Args), sess.Generation, nil
				}
			}
			return "No pending command to " + cmd.Name + ".", sess.Generation, nil
		})
	case "title":
		if cmd.Args == "" {
			if sess.Title == "" {
				return reply(sess.Generation, "This conversation has no title. /title <text> names it.")
			}
			return reply(sess.Generation, "Title: "+sess.Title)
		}
		title, problem := cleanTitle(cmd.Args)
		if problem != "" {
			return reply(sess.Generation, problem)
		}
		return s.once(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			var taken *sessionstore.TitleTakenError
			if err := st.SetTitle(ctx, m.key, title); errors.As(err, &taken) {
				// As Hermes: titles are unique, a taken one is refused.
				return fmt.Sprintf("⚠️ Title '%s' is already in use by session %s. /resume %s goes back to it.", taken.Title, taken.SessionID, taken.Title), sess.Generation, nil
			} else if err != nil {
				return "", 0, err
			}
			return "Title set: " + title, sess.Generation, nil
		})
	case "sessions":
		page, err := strconv.Atoi(cmd.Args)
		if err != nil || page < 1 {
			page = 1
		}
		return s.listSessions(ctx, m, sess, page)
	case "resume":
		if cmd.Args == "" {
			return s.listSessions(ctx, m, sess, 1)
		}
		err := s.once(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			return s.resume(ctx, st, m, sess, cmd.Args)
		})
		if err != nil {
			return err
		}
		// The memory flush of the conversation left, if the switch
		// queued one.
		return s.startFlush(ctx, m)
	case "retry", "undo", "compress":
		m.ev.TranscriptCommand = cmd.Name
		if cmd.Name == "compress" {
			// Hermes's "/compress [here [N] | focus topic | --preview]":
			// the argument waits in the queue with the command, as
			// ParseCompress reads it, and goes to the worker on the turn
			// (publishTurn: TurnRequested.compress_focus,
			// compress_keep_last, compress_preview).
			c := command.ParseCompress(cmd.Args)
			if c.Aggressive {
				return reply(sess.Generation, compressAggressive)
			}
			if arg := c.String(); arg != "" {
				m.ev.TranscriptCommand = "compress " + arg
			}
		}
		if cmd.Name == "undo" && cmd.Args != "" {
			n, err := strconv.Atoi(cmd.Args)
			if err != nil || n < 1 || n > 50 {
				return reply(sess.Generation, "Usage: /undo [n], n from 1 to 50")
			}
			m.ev.TranscriptCommand = "undo " + strconv.Itoa(n)
		}
		// Transcript edits belong to the worker: the command runs as a
		// turn of its own, in order, with the command as its input.
		return s.route(ctx, m, sess, routeOpts{ownTurn: true, mode: BusyQueue})
	case "insights":
		text, err := s.insights(ctx, m, cmd.Args)
		if err != nil {
			return err
		}
		return reply(sess.Generation, text)
	case "provider":
		return reply(sess.Generation, s.providerText(sess))
	case "cron":
		if !cronChanges(cmd.Args) {
			return reply(sess.Generation, s.cronCommand(ctx, m, s.cron, cmd.Args))
		}
		// The job's change commits with the record of the event: a
		// redelivered /cron add makes no second job.
		return s.once(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			return s.cronCommand(ctx, m, s.cron.InTx(st.Tx()), cmd.Args), sess.Generation, nil
		})
	case "personality":
		return s.once(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			text, err := s.personalityCommand(ctx, st, m, cmd.Args)
			return text, sess.Generation, err
		})
	case "reasoning":
		return s.once(ctx, m, cmd.Name, func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			text, err := s.reasoningCommand(ctx, st, m, sess, cmd.Args)
			return text, sess.Generation, err
		})
	case "verbose":
		return s.verboseCommand(ctx, m, sess, cmd.Args)
	case "commands", "profile", "version":
		return reply(sess.Generation, s.infoCommand(m, cmd))
	case "branch":
		return s.branch(ctx, m, sess, cmd.Args)
	case "yolo":
		return s.yolo(ctx, m, sess, cmd.Args)
	case "busy":
		return s.busyCommand(ctx, m, sess, cmd.Args)
	case "footer":
		return s.footerCommand(ctx, m, sess, cmd.Args)
	case "voice":
		return s.voiceCommand(ctx, m, sess, cmd.Args)
	case "fast":
		return s.fastCommand(ctx, m, sess, cmd.Args)
	case "topic":
		return s.topicCommand(ctx, m, sess, cmd.Args, busy)
	case "background":
		return s.background(ctx, m, sess, cmd.Args)
	case "btw":
		return s.btw(ctx, m, sess, cmd.Args)
	case "moa":
		return s.moa(ctx, m, sess, cmd.Args, busy)
	case "goal":
		return s.goalCommand(ctx, m, sess, owner, cmd.Args)
	case "subgoal":
		return s.subgoalCommand(ctx, m, sess, cmd.Args)
	case "save":
		return s.saveCommand(ctx, m, sess, cmd.Args)
	case "loop":
		return s.loopCommand(ctx, m, sess, cmd.Args, busy)
	case "heartbeat":
		return s.heartbeatCommand(ctx, m, sess, cmd.Args)
	case "sethome":
		if s.homes(m.platform) != "" {
			return reply(sess.Generation, "🏠 The home channel for "+m.platform+" is set by the operator (delivery.platforms."+m.platform+".home); /sethome does not change it.")
		}
		if err := s.store.SetHome(ctx, m.src, m.platform+":"+m.src.GetUserId()); err != nil {
			return err
		}
		return reply(sess.Generation, "🏠 This chat is now the home channel for "+m.platform+".")
	}
	return reply(sess.Generation, "/"+cmd.Name+" is not available.")
}

// resume is /resume <title or number>: the chat goes back to an earlier
// conversation. It reads the list a number counts in with st, in the
// transaction of the switch (a redelivery must not count in the list the
// switch changed).
func (s *Service) resume(ctx context.Context, st *sessionstore.Store, m *msgCtx, sess sessionstore.Session, args string) (string, int64, error) {
	name, problem := cleanTitle(args)
	if problem != "" {
		// No conversation is called that: titles are stored clean.
		return "No earlier conversation is called that. /sessions lists them.", sess.Generation, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n >= 1 {
		// A number counts in the /sessions list, on any of its pages.
		hist, err := s.conversations(ctx, st, m, min(n, maxResumeNumber))
		if err != nil {
			return "", 0, err
		}
		if n > len(hist) {
			return fmt.Sprintf("There is no conversation %d. /sessions lists them.", n), sess.Generation, nil
		}
		if hist[n-1].SessionID == sess.ID {
			return "📌 Already on that conversation.", sess.Generation, nil
		}
		name = hist[n-1].SessionID
	} else if sess.Title != "" && strings.EqualFold(name, sess.Title) {
		// As by number: Resume looks for an earlier conversation only.
		return "📌 Already on that conversation.", sess.Generation, nil
	}
	// As Hermes's /resume, a switch to another conversation flushes the
	// memory of the one it leaves (flush.go), as a reset does.
	// A conversation is one key's at a time: turns are locked per key,
	// so two threads on one conversation would run two turns on it at
	// once. One another thread of the chat is on is refused.
	var resumed sessionstore.Session
	var err error
	root, chat := s.chatRoot(m), s.dmRoot(m)
	switch {
	case root != "":
		resumed, err = st.ResumeInChat(ctx, m.key, root, name, s.flushFor(m))
	case chat != "":
		resumed, err = st.ResumeOwn(ctx, m.key, chat, name, s.flushFor(m))
	default:
		resumed, err = st.Resume(ctx, m.key, name, s.flushFor(m))
	}
	if errors.Is(err, sessionstore.ErrNotFound) {
		return "No earlier conversation is called that. /sessions lists them.", sess.Generation, nil
	}
	if held := (*sessionstore.HeldError)(nil); errors.As(err, &held) {
		return heldAnswer(m.platform, m.place, chat, held), sess.Generation, nil
	}
	if err != nil {
		return "", 0, err
	}
	shown := resumed.Title
	if shown == "" {
		shown = resumed.ID
	}
	return "↩️ Resumed " + shown + ".", resumed.Generation, nil
}

// listSessions answers /sessions: page (from 1) of this chat's
// conversations, newest first, numbered as /resume counts them.
func (s *Service) listSessions(ctx context.Context, m *msgCtx, sess sessionstore.Session, page int) error {
	page = min(page, maxResumeNumber/sessionsListed)
	hist, err := s.conversations(ctx, s.store, m, page*sessionsListed+1)
	if err != nil {
		return err
	}
	first := (page - 1) * sessionsListed
	if first >= len(hist) {
		return s.notice(ctx, m, sess.Generation, fmt.Sprintf("No conversations on page %d. /sessions lists the newest.", page), "command")
	}
	var b strings.Builder
	b.WriteString("Conversations in this chat:")
	for i := first; i < min(len(hist), first+sessionsListed); i++ {
		h := hist[i]
		name := h.Title
		if name == "" {
			name = h.SessionID
		}
		mark := ""
		if h.SessionID == sess.ID {
			mark = " (current)"
		}
		fmt.Fprintf(&b, "\n%d. %s — %s%s", i+1, name, h.StartedAt.UTC().Format("2006-01-02 15:04"), mark)
	}
	b.WriteString("\n/resume <title or number> switches back.")
	if len(hist) > first+sessionsListed {
		fmt.Fprintf(&b, " Older: /sessions %d", page+1)
	}
	return s.notice(ctx, m, sess.Generation, b.String(), "command")
}

// conversations lists up to limit of the conversations /sessions shows
// and /resume takes, newest first: the session key's, or in a Slack DM
// the whole DM's (chatRoot).
func (s *Service) conversations(ctx context.Context, st *sessionstore.Store, m *msgCtx, limit int) ([]sessionstore.History, error) {
	if root := s.chatRoot(m); root != "" {
		return st.ChatHistory(ctx, root, limit)
	}
	return st.History(ctx, m.key, limit)
}

// chatRoot is, for a Slack DM, its session key without a thread, whose
// conversations and its threads' /sessions lists and /resume takes: with
// dm_top_level_threads_as_sessions (on by default) each top-level DM is a
// conversation of its own, in its thread, and its user would otherwise
// see only the one of the thread they ask in. Hermes's /resume lists the
// titled conversations of the whole platform, every user's, and resumes
// any of them by title; a DM here is one user's (a group DM its members',
// who see its threads), so the list stops at it. "" elsewhere: the key's
// own conversations (a channel's keys hold other users' and threads').
func (s *Service) chatRoot(m *msgCtx) string {
	if m.platform != "slack" || !isDM(m.src) {
		return ""
	}
	bare := proto.CloneOf(m.src)
	bare.ThreadId = ""
	return sessionkey.Build(bare, s.keyOpts)
}

// dmRoot is, in a DM, its session key without a thread (a Telegram
// DM's, its topics' root): the keys a conversation of the DM's may be
// on besides m's (one resumed in another thread, one a topic took), which
// /resume must not put m's key on too. "" elsewhere: no conversation
// moves between the keys of a group.
func (s *Service) dmRoot(m *msgCtx) string {
	if !isDM(m.src) {
		return ""
	}
	if m.rootKey != "" {
		return m.rootKey
	}
	bare := proto.CloneOf(m.src)
	bare.ThreadId = ""
	return sessionkey.Build(bare, s.keyOpts)
}

// heldAnswer refuses a /resume of a conversation that held.Key, another
// key of the DM whose key without a thread is root, is on, saying where
// it is open: the DM outside its threads, or the thread (a Slack
// thread by when it began: its id is that time). In a topic of a
// Telegram DM in topic mode (place), the main view takes no /new and
// no prompt: there the answer is /topic <session-id>, which moves the
// main view's conversation into the topic (restoreTopic). Hermes's
// /resume puts the topic on it beside the main view, which this
// gateway refuses (two keys on one conversation).
func heldAnswer(platform string, place topicPlace, root string, held *sessionstore.HeldError) string {
	if held.Key == root && place == topicLane {
		return "That conversation is open in the main chat, which topic mode keeps for commands: send /topic " + held.ID + " here to move it into this topic."
	}
	where := "another chat"
	switch thread := sessionstore.TopicThread(root, held.Key); {
	case held.Key == root:
		where = "this chat, outside its threads"
		if platform == "telegram" {
			where = "this chat, outside its topics"
		}
	case thread != "" && platform == "slack":
		where = "another thread of this chat"
		if sec, err := strconv.ParseFloat(thread, 64); err == nil && sec > 0 {
			where = "the thread of this chat begun " + time.Unix(int64(sec), 0).UTC().Format("Jan 2, 15:04 MST")
		}
	case thread != "" && platform == "telegram":
		where = "another topic of this chat"
	case thread != "":
		where = "another thread of this chat"
	}
	return "That conversation is open in " + where + ": continue it there, or send /new there to free it for this one."
}

// sessionsListed is how many conversations a page of /sessions lists;
// maxResumeNumber bounds the numbers /resume and /sessions read.
const (
	sessionsListed  = 10
	maxResumeNumber = 1000
)

// withText is m with the event's text replaced (the body of /queue, /steer).
func (m *msgCtx) withText(text string) *msgCtx {
	c := *m
	c.ev = proto.CloneOf(m.ev)
	c.ev.Text = text
	return &c
}

func orDM(t string) string {
	if t == "" {
		return "dm"
	}
	return t
}

func validModelName(s string) bool {
	if len(s) > 128 {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) < 0
}

// maxTitle is the longest title, in characters (Hermes: MAX_TITLE_LENGTH).
const maxTitle = 100

// cleanTitle cleans a title typed by a user as Hermes does: control
// characters (NUL included, which Postgres text refuses), zero-width, bidi
// and object-replacement code points and invalid UTF-8 are removed, runs
// of whitespace become one space, and the ends are trimmed. problem is
// the answer for a title that is empty after that, or longer than
// maxTitle: it is refused, not cut.
func cleanTitle(s string) (title, problem string) {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "") {
		switch {
		case r == '\t', r == '\n', r == '\r':
			b.WriteRune(' ')
		case unicode.IsControl(r), invisible(r):
		default:
			b.WriteRune(r)
		}
	}
	title = strings.Join(strings.Fields(b.String()), " ")
	switch n := utf8.RuneCountInString(title); {
	case n == 0:
		return "", "⚠️ Title is empty after cleanup. Please use printable characters."
	case n > maxTitle:
		return "", fmt.Sprintf("⚠️ Title too long (%d chars, max %d)", n, maxTitle)
	}
	return title, ""
}

// invisible reports the code points Hermes strips from titles: zero-width
// and directional marks, line and paragraph separators, bidi embeddings
// and isolates, word joiners, the byte order mark, interlinear annotation
// and object replacement characters.
func invisible(r rune) bool {
	switch {
	case r >= 0x200b && r <= 0x200f, r >= 0x2028 && r <= 0x202e, r >= 0x2060 && r <= 0x2069,
		r == 0xfeff, r == 0xfffc, r >= 0xfff9 && r <= 0xfffb:
		return true
	}
	return false
}

// compressAggressive is Hermes's refusal of "/compress --aggressive",
// which it has no way to carry out (nor has Switchboard).
const compressAggressive = "--aggressive is not supported; use '/compress here [N]' to keep only recent exchanges, or /undo to drop turns."

// approvalReply is Hermes's confirmation of an answer to an approval;
// args is /approve's argument ("session" or "always" make it stand) or
// /deny's ("[all] [reason]": the reason is relayed to the agent in the
// denied call's result, command.Deny). One call waits at a time, so the
// answer is Hermes's for one command even after "/deny all".
func approvalReply(action turnsv1.ControlAction, args string) string {
	if action != controlApprove {
		if _, reason := command.Deny(args); reason != "" {
			return fmt.Sprintf("❌ Command denied. Reason relayed to the agent: \"%s\"", reason)
		}
		return "❌ Command denied."
	}
	scope := map[string]string{
		command.ApproveSession: " (pattern approved for this session)",
		command.ApproveAlways:  " (pattern approved permanently)",
	}[command.ApprovalScope(args)]
	return "✅ Command approved" + scope + ". The agent is resuming..."
}

// approvalWord reads a plain message as Hermes does while a tool call may
// wait for an approval: yes/ok/👍 approve, no/cancel/👎 deny, "always" and
// "session" approve for good. ok is false for any other text.
func approvalWord(text string) (action turnsv1.ControlAction, args string, ok bool) {
	switch strings.ToLower(strings.TrimSpace(strings.TrimRight(text, ".!"))) {
	case "yes", "y", "ok", "okay", "confirm", "approve", "👍":
		return controlApprove, "", true
	case "no", "n", "deny", "reject", "cancel", "👎":
		return controlDeny, "", true
	case "always", "approve always", "always approve":
		return controlApprove, "always", true
	case "session", "approve session", "session approve":
		return controlApprove, "session", true
	}
	return 0, "", false
}

// thousands writes n with commas between groups of three digits, as
// Hermes's "{:,}" does.
func thousands(n int64) string {
	d := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(d, "-")
	d = strings.TrimPrefix(d, "-")
	var b strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// midTurnRefusal is Hermes's answer to a command that cannot run while
// the agent runs in the conversation it acts on.
func midTurnRefusal(name string) string {
	return "⏳ Agent is running — `/" + name + "` can't run mid-turn. Wait for the current response or `/stop` first."
}
