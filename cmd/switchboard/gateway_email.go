package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/email"
)

func init() {
	// Hermes's names for the email gateway (EMAIL_ALLOWED_USERS is the
	// router's, as for every platform).
	for env, key := range map[string]string{
		"EMAIL_ADDRESS":       "gateways.email.address",
		"EMAIL_PASSWORD":      "gateways.email.password",
		"EMAIL_IMAP_HOST":     "gateways.email.imap_host",
		"EMAIL_IMAP_PORT":     "gateways.email.imap_port",
		"EMAIL_SMTP_HOST":     "gateways.email.smtp_host",
		"EMAIL_SMTP_PORT":     "gateways.email.smtp_port",
		"EMAIL_POLL_INTERVAL": "gateways.email.poll_interval",
		"EMAIL_AUTHSERV_ID":   "gateways.email.authserv_id",
		// Hermes has it on by default (EMAIL_TRUST_FROM_HEADER turns it
		// off); here it is asked for.
		"EMAIL_REQUIRE_AUTHENTICATED_SENDER": "gateways.email.require_authenticated_sender",
	} {
		envAliases[env] = key
	}
	registerGateway("email", startEmailGateway, true)
}

// startEmailGateway builds the email gateway. In dev it starts only when
// EMAIL_ADDRESS, EMAIL_IMAP_HOST and EMAIL_SMTP_HOST are set.
func startEmailGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Email
	return startChatGateway(ctx, a, "email", "EMAIL_ADDRESS, EMAIL_IMAP_HOST or EMAIL_SMTP_HOST", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return email.New(cfg, email.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
}
