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
	sendFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_whatsapp_send_failures_total",
		Help: "Messages the Cloud API accepted and later reported failed (a failed status notification), by Meta's error code (131047: the 24-hour window closed; 131026: undeliverable; unknown: no code). The outbox still says sent.",
	}, []string{"code"})
	signatureFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_whatsapp_signature_failures_total",
		Help: "Webhook calls refused for a missing or wrong X-Hub-Signature-256.",
	})
)
