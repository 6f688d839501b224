package googlechat

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_googlechat_events_skipped_total",
		Help: "Verified Google Chat events answered without a message, by reason (event type, bot, empty).",
	}, []string{"reason"})
	authFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_googlechat_auth_failures_total",
		Help: "Events refused for a missing or invalid Google Chat token.",
	})
)
