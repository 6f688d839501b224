package teams

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_teams_activities_skipped_total",
		Help: "Verified Teams activities answered without an event, by reason (activity type, own, not_mentioned, empty).",
	}, []string{"reason"})
	authFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_teams_auth_failures_total",
		Help: "Activities refused for a missing or invalid Bot Framework token.",
	})
)
