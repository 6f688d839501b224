package whatsapp

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_whatsapp_messages_skipped_total",
		Help: "WhatsApp notification parts answered without an event, by reason (reaction, unsupported message, other phone number, field …).",
	}, []string{"reason"})
	statuses = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_whatsapp_statuses_total",
		Help: "Status notifications about messages the gateway sent, by status (sent, delivered, read, failed).",
	}, []string{"status"})
	signatureFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_whatsapp_signature_failures_total",
		Help: "Webhook calls refused for a missing or wrong X-Hub-Signature-256.",
	})
)
