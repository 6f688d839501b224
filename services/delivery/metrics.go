package delivery

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	sends = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_delivery_sends_total",
		Help: "Outbox sends to platform gateways, by platform and result (sent, duplicate, retry, rate_limited, timeout, no_gateway, format, edit_refused, failed).",
	}, []string{"platform", "result"})
	expired = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_delivery_expired_total",
		Help: "Outbox rows that expired before they could be sent.",
	}, []string{"platform"})
	deadLetters = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_delivery_dead_letters_total",
		Help: "Outbox rows dead-lettered, by platform and reason.",
	}, []string{"platform", "reason"})
	partitionsOwned = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchboard_delivery_partitions_owned",
		Help: "Reply partitions this delivery replica owns (its fair share of the live replicas).",
	})
	outboxRows = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchboard_delivery_outbox_rows",
		Help: "Outbox rows waiting to be sent (queued, sending) and dead letters (failed, expired), by state; the same table for every replica.",
	}, []string{"state"})
	progress = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_delivery_progress_total",
		Help: "Best-effort progress operations (stream edits, stream deltas, typing), by platform, op and result.",
	}, []string{"platform", "op", "result"})
	finalsDropped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_delivery_finals_dropped_total",
		Help: "Final replies (answers, failure messages) dropped because their turn had shown another: two attempts of one turn each published one, by platform.",
	}, []string{"platform"})
)
