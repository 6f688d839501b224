package sms

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_sms_messages_skipped_total",
		Help: "Twilio webhook calls answered without an event, by reason (status callback, other phone number, own number, empty message …).",
	}, []string{"reason"})
	signatureFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_sms_signature_failures_total",
		Help: "Webhook calls refused for a missing or wrong X-Twilio-Signature.",
	})
)
