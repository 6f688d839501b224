package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/sms"
)

func init() {
	// Hermes's names: the TWILIO_* credentials it shares with its
	// telephony skill, SMS_* for the gateway. SMS_ALLOWED_USERS and
	// SMS_ALLOW_ALL_USERS are the router's, as for every platform;
	// SMS_HOME_CHANNEL is delivery's.
	for env, key := range map[string]string{
		"TWILIO_ACCOUNT_SID":        "gateways.sms.account_sid",
		"TWILIO_AUTH_TOKEN":         "gateways.sms.auth_token",
		"TWILIO_PHONE_NUMBER":       "gateways.sms.phone_number",
		"TWILIO_WEBHOOK_SHARED_KEY": "gateways.sms.webhook_shared_key",
		"SMS_WEBHOOK_PUBLIC_URL":    "gateways.sms.public_url",
		"SMS_API_BASE_URL":          "gateways.sms.api_base_url",
		"SMS_HOME_CHANNEL":          "delivery.platforms.sms.home",
	} {
		envAliases[env] = key
	}
	registerGateway("sms", startSMSGateway, true)
}

// startSMSGateway builds the Twilio SMS gateway. In dev it starts only
// when TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN are set. Who may text the
// agent is the router's: SMS_ALLOWED_USERS (E.164 numbers),
// SMS_ALLOW_ALL_USERS, pairing.
func startSMSGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.SMS
	run, err := startChatGateway(ctx, a, "sms", "TWILIO_ACCOUNT_SID or TWILIO_AUTH_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return sms.New(cfg, sms.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() {
		path := cfg.Path
		if path == "" {
			path = sms.DefaultConfig().Path
		}
		a.announce("SMS webhook (Twilio)", "http://"+hostPort(cfg.Addr)+path)
	}
	return run, err
}
