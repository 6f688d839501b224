package line

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_line_events_skipped_total",
		Help: "LINE webhook events published as nothing, by reason (event type, standby, group not allowed, not mentioned, own message, empty message …).",
	}, []string{"reason"})
	signatureFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_line_signature_failures_total",
		Help: "Webhook deliveries refused for a missing or wrong X-Line-Signature.",
	})
	sends = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_line_sends_total",
		Help: "Messages sent to LINE, by endpoint: reply (free, with a reply token) or push (metered).",
	}, []string{"endpoint"})
)
