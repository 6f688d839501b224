package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// refused counts deliveries answered with a refusal, by route (empty for
// an unknown one, so senders cannot add labels) and reason (the answer's
// status: rate_limited, bad_signature, too_large, malformed_payload …).
var refused = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_webhook_refused_total",
	Help: "Webhook deliveries refused, by configured route (empty: unknown route) and reason (rate_limited, bad_signature, too_large, malformed_payload, …).",
}, []string{"route", "reason"})
