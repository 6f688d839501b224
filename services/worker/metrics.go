package worker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var turnsCompleted = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_turns_total",
	Help: "Turns that reached an end (their completion was published), by status: completed, failed, interrupted, stopped, stale.",
}, []string{"status"})

var (
	turnSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_worker_turn_seconds",
		Help:    "Time from a turn's delivery to this worker to its completion, by status (one observation per attempt that reached an end).",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"status"})
	turnsInflight = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchboard_worker_turns_inflight",
		Help: "Turns this worker is handling now (claiming the lock, running, completing).",
	})
	lockLost = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_worker_lock_lost_total",
		Help: "Running turns that lost their session lock and stopped, by reason: moved_on (/stop, /new or a reset advanced the session), taken (another attempt of the turn holds the lock: this worker stalled past the lock TTL). Another grant on the lock while the session is still at the turn's generation is a router's that took a lock Redis lost and gives it back on finding the turn's lease: the turn runs on.",
	}, []string{"reason"})
	toolCalls = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_worker_tool_calls_total",
		Help: "Tool calls run for the model, by tool and result: ok, failed, timeout, denied (by the user or the approval timeout), unknown (the model named no such tool; tool=\"unknown\"), interrupted (/stop, an interrupting message or the lost session lock cut it short).",
	}, []string{"tool", "result"})
)

var loopTicks = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_loop_ticks_total",
	Help: "Answers to /loop wakeups evaluated, by outcome: continued, complete (the agent's LOOP_COMPLETE), condition_met (the judge ruled the --until condition met), blocked (judged unachievable: paused), times (the --times runs done), budget (router.loop_max_ticks used: paused).",
}, []string{"outcome"})

var approvalVerdicts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_approval_judge_verdicts_total",
	Help: "Dangerous tool calls the smart-approval judge (approvals.mode smart) assessed, by verdict: approve (run without asking), deny (judged dangerous: the user is asked, for this call only), escalate (the judge is unsure: the user is asked), unclear (the answer was no verdict: the user is asked), error (the judge could not be asked, or the call was too long or unprintable to judge: the user is asked). A judge call cut short by /stop, an interrupting message or the lost session lock is not counted: it has no verdict and the turn stops.",
}, []string{"verdict"})

var approvalBreakerTrips = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_worker_approval_breaker_trips_total",
	Help: "Denied dangerous tool calls whose result told the model that the smart-approval circuit breaker tripped: the conversation's consecutive judge DENY verdicts reached approvals.denial_breaker_threshold, so the model was told to stop trying variations and hand the operation to the user.",
})

var goalVerdicts = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_goal_verdicts_total",
	Help: "Turns of a standing goal (/goal) the goal judge ruled on, by verdict: done, blocked, continue, unparsed (the judge's answer was no verdict: continue), judge_error (the judge could not be asked: continue).",
}, []string{"verdict"})

var moaReferenceCalls = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_moa_reference_calls_total",
	Help: "Reference model calls of /moa turns (Mixture of Agents), by outcome: ok, empty (an answer without text: counted as failed), failed (the provider refused or erred, retries included), timeout (agent.moa.reference_timeout), cancelled (/stop, a newer message or the lost session lock ended the turn).",
}, []string{"outcome"})
