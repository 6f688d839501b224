package router

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	authDecisions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_auth_decisions_total",
		Help: "Authorization decisions, by platform, outcome and reason.",
	}, []string{"platform", "decision", "reason"})
	inbound = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_inbound_total",
		Help: "Inbound messages by outcome (started: as a turn of its own at once; queued, held: a part of a split text waiting for the rest, command, denied, duplicate, dropped, steered, approval: a plain yes or no that answered a waiting approval, lobby: a prompt in the main view of a Telegram DM in /topic mode, which starts no turn; paused: a message or a command that would start new work, answered with the paused notice while the emergency stop (/pause) holds).",
	}, []string{"outcome"})
	skillInvocations = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_skill_invocations_total",
		Help: "Skill slash commands (/<skill> [instruction]) that became a message to the agent, by skill command (one of the configured skills): each skill a bundle or a stacked invocation loads counts.",
	}, []string{"skill"})
	skillBundleInvocations = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_skill_bundle_invocations_total",
		Help: "Skill bundle commands (/<bundle> [instruction]) that became a message to the agent, by bundle command (one of skills.bundles).",
	}, []string{"bundle"})
	turnsStarted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_router_turns_started_total",
		Help: "Turns published.",
	})
	sweptTurns = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_router_swept_turns_total",
		Help: "Turns started by the sweeper (expired lock or missed completion).",
	})
	lockTakeovers = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_lock_takeovers_total",
		Help: "Sessions the sweep took from a holder that left them: expired (messages waited on a free lock: its worker died or stalled past the lock TTL, or a completion was lost), orphaned_grant (a router died between granting the lock and starting the turn).",
	}, []string{"kind"})
	turnsWaitedForLease = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_router_turn_lease_waits_total",
		Help: "Turn starts that found the session lock free while the session's last turn still held its lease in Postgres (Redis lost the lock while the turn ran): the messages waited for that turn instead of starting a second one beside it.",
	})
	busyActions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_busy_total",
		Help: "Messages that arrived while their session was busy, by action.",
	}, []string{"action"})
	pairingCodes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_pairing_codes_total",
		Help: "Pairing code requests, by result.",
	}, []string{"result"})
	loopFires = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_loop_fires_total",
		Help: "Due /loop and /heartbeat ticks, by kind (loop, heartbeat) and outcome: fired (its wakeup queued), busy (a turn ran or messages waited: it fires when the session is idle), goal (a loop waits while a goal of its conversation is active), ended (its conversation ended: cleared).",
	}, []string{"kind", "outcome"})
	commandsHandled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_commands_total",
		Help: "Commands handled, by name.",
	}, []string{"command"})
	platformPauses = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_platform_pauses_total",
		Help: "Platforms paused and resumed with /platform, by action (pause, resume).",
	}, []string{"action"})
	routerPaused = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchboard_router_paused",
		Help: "1 while the global emergency stop (/pause) holds new work, as this router replica sees it; 0 otherwise.",
	})
	pauseActions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_pause_actions_total",
		Help: "Global emergency stops engaged and lifted with /pause, by action (pause, resume).",
	}, []string{"action"})
	approvalModeChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_approval_mode_changes_total",
		Help: "Changes of the gateway-wide dangerous-command approval mode with /approvals, by the mode set (manual, smart, off).",
	}, []string{"mode"})
	goalsHeld = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_router_goals_held_total",
		Help: "Goals paused because their continuation came due while the emergency stop (/pause) held new work.",
	})
	memoryDecisions = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_memory_writes_total",
		Help: "Pending memory writes (memory.write_approval) decided with /memory: approved (applied), rejected, or failed (could not apply: the notes are full, it stays pending; or its note is gone); by outcome.",
	}, []string{"outcome"})
	commandsReplayed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_commands_replayed_total",
		Help: "Commands that change durable state whose inbound event came again after their effect committed (redelivered after a router died or its ack came too late): not applied again, the recorded answer sent again; by name.",
	}, []string{"command"})
	homeNotices = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_router_home_notices_total",
		Help: "Home channel notices sent (the first message of a conversation on a platform with no home channel).",
	})
	resets = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_router_session_resets_total",
		Help: "Session resets, by reason.",
	}, []string{"reason"})
)
