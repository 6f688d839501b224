package worker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var turnsCompleted = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_turns_total",
	Help: "Turns that reached an end (their completion was published), by status: completed, failed, interrupted, stopped, stale.",
}, []string{"status"})
