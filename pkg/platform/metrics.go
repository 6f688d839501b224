package platform

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	inboundTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_gateway_inbound_total",
		Help: "Inbound platform events, by platform and result (published, duplicate, rejected, error).",
	}, []string{"platform", "result"})
	attachmentsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_gateway_attachments_total",
		Help: "Attachments the agent reads, by platform and result (kept in the store, found there already, too_large, failed, late: asked for after its worker stopped waiting, so not downloaded).",
	}, []string{"platform", "result"})
	sendsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_gateway_sends_total",
		Help: "Send requests served, by platform, operation and result (ok, duplicate, or the error class).",
	}, []string{"platform", "op", "result"})
	reactionsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_gateway_reactions_total",
		Help: "Processing reactions on users' messages, by platform, operation (react, unreact; queue for dropped ones) and result (ok, canceled, dropped, or the error class).",
	}, []string{"platform", "op", "result"})
	sendSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchboard_gateway_send_seconds",
		Help:    "Time a platform operation took.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"platform", "op"})
	typingHolds = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_gateway_typing_holds",
		Help: "Messages waiting now for their chat's typing call in flight, which goes to the platform before them.",
	}, []string{"platform"})
	typingCutTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_gateway_typing_cut_total",
		Help: "Typing calls cancelled because a message to their chat waited for them past the bound (Options.TypingHold): the platform hung on them.",
	}, []string{"platform"})
	connectedGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_gateway_connected",
		Help: "1 while the platform connection is up.",
	}, []string{"platform"})
	fatalGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_gateway_fatal",
		Help: "1 when the connection failed fatally (bad token, second poller) and the gateway stopped retrying.",
	}, []string{"platform"})
	pausedGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_gateway_paused",
		Help: "1 while an operator has this platform paused (/platform pause): the replica holds no connection and no lease.",
	}, []string{"platform"})
	reconnectsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_gateway_reconnects_total",
		Help: "Connection attempts after a retryable failure.",
	}, []string{"platform"})
	leaseGauge = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_gateway_lease_active",
		Help: "1 while this replica holds the single-consumer lease (is the active connection).",
	}, []string{"platform"})
)
