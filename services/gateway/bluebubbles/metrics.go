package bluebubbles

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bluebubbles_messages_skipped_total",
		Help: "BlueBubbles webhook calls answered without an event, by reason (own message, tapback, other event, no mention, empty message …).",
	}, []string{"reason"})
	authFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_bluebubbles_auth_failures_total",
		Help: "Webhook calls refused for a missing or wrong secret.",
	})
)
