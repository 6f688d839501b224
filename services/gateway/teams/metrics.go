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
	keepsLetGo = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_teams_kept_presses_let_go_total",
		Help: "Presses held on for their invoke's retry let go before their 30 s were up, the oldest first, as a replica kept the most it may (1024).",
	})
)
