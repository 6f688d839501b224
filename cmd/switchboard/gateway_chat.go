package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/services/gateway/discord"
	"github.com/switchboard-chat/switchboard/services/gateway/slack"
)

func init() {
	for env, key := range map[string]string{
		"DISCORD_BOT_TOKEN":    "gateways.discord.bot_token",
		"DISCORD_API_BASE_URL": "gateways.discord.api_base_url",
		"SLACK_BOT_TOKEN":      "gateways.slack.bot_token",
		"SLACK_APP_TOKEN":      "gateways.slack.app_token",
		"SLACK_SIGNING_SECRET": "gateways.slack.signing_secret",
		"SLACK_API_BASE_URL":   "gateways.slack.api_base_url",
	} {
		envAliases[env] = key
	}
	registerGateway("discord", startDiscordGateway, true)
	registerGateway("slack", startSlackGateway, true)
}

// idle is the run of a gateway dev skips because its token is not set.
func idle(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func startDiscordGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Discord
	if a.name == "dev" && !cfg.Enabled() {
		a.log.Info("discord gateway off: DISCORD_BOT_TOKEN not set")
		return idle, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, err
	}
	s, err := discord.New(cfg, discord.Deps{Log: a.log, Bus: b})
	if err != nil {
		return nil, err
	}
	a.health.Add("gateway-discord", s.Ready)
	return s.Run, nil
}

func startSlackGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Slack
	if a.name == "dev" && !cfg.Enabled() {
		a.log.Info("slack gateway off: SLACK_BOT_TOKEN not set")
		return idle, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, err
	}
	s, err := slack.New(cfg, slack.Deps{Log: a.log, Bus: b})
	if err != nil {
		return nil, err
	}
	a.health.Add("gateway-slack", s.Ready)
	if cfg.AppToken == "" {
		a.announce("Slack events", "http://"+hostPort(cfg.Addr)+cfg.Path)
	}
	return s.Run, nil
}
