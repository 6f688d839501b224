package bus

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	published = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_published_total",
		Help: "Messages published to JetStream, by subject and result.",
	}, []string{"subject", "result"})
	publishSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_bus_publish_seconds",
		Help:    "Time to a JetStream publish acknowledgement.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
	}, []string{"subject"})
	duplicates = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_duplicates_total",
		Help: "Publishes JetStream recognised as duplicates by Nats-Msg-Id.",
	}, []string{"subject"})
	handled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_handled_total",
		Help: "Messages handled by consumers, by outcome (ack, nak, term).",
	}, []string{"consumer", "outcome"})
	handleSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_bus_handle_seconds",
		Help:    "Time a consumer's handler took.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18),
	}, []string{"consumer"})
	redeliveries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_redeliveries_total",
		Help: "Messages received more than once by a consumer.",
	}, []string{"consumer"})
	terminated = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_terminated_total",
		Help: "Messages a consumer gave up on and dead-lettered, by reason.",
	}, []string{"consumer", "reason"})
	handlerPanics = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_handler_panics_total",
		Help: "Handler panics a consumer recovered; each message is dead-lettered with reason \"panic\".",
	}, []string{"consumer"})
	unavailableRetries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_unavailable_retries_total",
		Help: "In-place handler retries while a dependency was unavailable (no delivery attempt used).",
	}, []string{"consumer"})
	consumerPending = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_bus_consumer_pending",
		Help: "Messages of a durable consumer's stream not yet delivered to it (JetStream num_pending), read by every process that runs the consumer (every 15 s by default).",
	}, []string{"consumer"})
	consumerAckPending = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_bus_consumer_ack_pending",
		Help: "Messages delivered to a durable consumer and not yet acknowledged (JetStream num_ack_pending), read by every process that runs the consumer (every 15 s by default).",
	}, []string{"consumer"})
	advisories = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_bus_advisories_total",
		Help: "JetStream advisories seen (max deliveries, terminated).",
	}, []string{"kind", "stream", "consumer"})
)

// subjectLabel strips the prefix and the partition so label cardinality
// stays bounded.
func subjectLabel(t Topology, subject string) string {
	if t.Prefix != "" {
		subject = strings.TrimPrefix(subject, t.Prefix+".")
	}
	for _, s := range []string{SubjectInbound, SubjectReplies, SubjectControl, SubjectDeadLetter} {
		if strings.HasPrefix(subject, s+".") {
			return s
		}
	}
	return subject
}

func resultLabel(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
