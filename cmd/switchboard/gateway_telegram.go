package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/services/gateway/telegram"
)

func init() {
	registerGateway("telegram", startTelegram, true)
}

// startTelegram builds the Telegram gateway. In dev it starts only when
// TELEGRAM_BOT_TOKEN (gateways.telegram.bot_token) is set.
func startTelegram(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Telegram
	if a.name == "dev" && cfg.BotToken == "" {
		a.log.Info("telegram gateway off: TELEGRAM_BOT_TOKEN not set", "gateway", "telegram")
		a.switchedOff("gateway-telegram", "TELEGRAM_BOT_TOKEN not set")
		return idle, nil
	}
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, err
	}
	s, err := telegram.New(cfg, telegram.Deps{Log: a.log.With("service", "gateway-telegram"), Bus: b, Attachments: a.cfg.Attachments,
		Menu: a.menu("telegram")})
	if err != nil {
		return nil, err
	}
	a.health.Add("telegram", s.Ready)
	return a.followMenu(b, "telegram", s, s.Run), nil
}
