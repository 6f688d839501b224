package main

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/discord"
	"github.com/switchboard-chat/switchboard/services/gateway/slack"
)

func init() {
	for env, key := range map[string]string{
		"DISCORD_BOT_TOKEN":    "gateways.discord.bot_token",
		"DISCORD_API_BASE_URL": "gateways.discord.api_base_url",
		// Hermes's names for the channel gating.
		"DISCORD_REQUIRE_MENTION":        "gateways.discord.require_mention",
		"DISCORD_FREE_RESPONSE_CHANNELS": "gateways.discord.free_response_channels",
		"DISCORD_AUTO_THREAD":            "gateways.discord.auto_thread",
		"DISCORD_IGNORE_NO_MENTION":      "gateways.discord.ignore_no_mention",
		"DISCORD_ALLOWED_CHANNELS":       "gateways.discord.allowed_channels",
		"DISCORD_IGNORED_CHANNELS":       "gateways.discord.ignored_channels",
		"DISCORD_ALLOWED_ROLES":          "gateways.discord.allowed_roles",
		"DISCORD_REACTIONS":              "gateways.discord.reactions",
		"DISCORD_ALLOW_BOTS":             "gateways.discord.allow_bots",
		"DISCORD_REGISTER_COMMANDS":      "gateways.discord.register_commands",
		"SLACK_REQUIRE_MENTION":          "gateways.slack.require_mention",
		"SLACK_FREE_RESPONSE_CHANNELS":   "gateways.slack.free_response_channels",
		"SLACK_REACTIONS":                "gateways.slack.reactions",
		"SLACK_ALLOW_BOTS":               "gateways.slack.allow_bots",
		"SLACK_BOT_TOKEN":                "gateways.slack.bot_token",
		"SLACK_APP_TOKEN":                "gateways.slack.app_token",
		"SLACK_SIGNING_SECRET":           "gateways.slack.signing_secret",
		"SLACK_API_BASE_URL":             "gateways.slack.api_base_url",
		// Hermes's names for discord.allow_mentions.*.
		"DISCORD_ALLOW_MENTION_EVERYONE":     "gateways.discord.allow_mentions.everyone",
		"DISCORD_ALLOW_MENTION_ROLES":        "gateways.discord.allow_mentions.roles",
		"DISCORD_ALLOW_MENTION_USERS":        "gateways.discord.allow_mentions.users",
		"DISCORD_ALLOW_MENTION_REPLIED_USER": "gateways.discord.allow_mentions.replied_user",
	} {
		envAliases[env] = key
	}
	registerGateway("discord", startDiscordGateway, true)
	registerGateway("slack", startSlackGateway, true)
}

// allowBots is a gateway's allow_bots: its own setting (or its Hermes
// variable, <PLATFORM>_ALLOW_BOTS, which the router reads too), else the
// router's router.auth.allow_bots.<platform>. A gateway that dropped the
// bots' messages itself would leave the router's setting nothing to
// admit.
func allowBots(own string, router map[string]string, platform string) string {
	if own != "" {
		return own
	}
	for p, v := range router {
		if strings.EqualFold(p, platform) {
			return v
		}
	}
	return ""
}

// idle is the run of a gateway dev skips because its token is not set.
func idle(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// chatService is a chat platform gateway's service.
type chatService interface {
	Run(context.Context) error
	Ready(context.Context) error
}

// startChatGateway does what starting any chat gateway takes: off in dev
// while its token (tokenEnv) is not set, its config checked, the bus
// opened, build run on it and its readiness reported.
func startChatGateway(ctx context.Context, a *app, name, tokenEnv string, enabled bool, validate func() error,
	build func(*bus.Bus) (chatService, error)) (func(context.Context) error, error) {
	if a.name == "dev" && !enabled {
		a.log.Info(name+" gateway off: "+tokenEnv+" not set", "gateway", name)
		a.switchedOff("gateway-"+name, tokenEnv+" not set")
		return idle, nil
	}
	if err := validate(); err != nil {
		return nil, err
	}
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, err
	}
	s, err := build(b)
	if err != nil {
		return nil, err
	}
	a.health.Add("gateway-"+name, s.Ready)
	return s.Run, nil
}

func startDiscordGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Discord
	cfg.AllowBots = allowBots(cfg.AllowBots, a.cfg.Router.Auth.AllowBots, "discord")
	var svc *discord.Service
	var sb *bus.Bus
	run, err := startChatGateway(ctx, a, "discord", "DISCORD_BOT_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		s, err := discord.New(cfg, discord.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}, Menu: a.menu("discord")})
		svc, sb = s, b
		return s, err
	})
	if err != nil || svc == nil {
		return run, err
	}
	// A skill reload registers the new menu (skills.go).
	return a.followMenu(sb, "discord", svc, run), nil
}

func startSlackGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Slack
	cfg.AllowBots = allowBots(cfg.AllowBots, a.cfg.Router.Auth.AllowBots, "slack")
	run, err := startChatGateway(ctx, a, "slack", "SLACK_BOT_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return slack.New(cfg, slack.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() && cfg.AppToken == "" {
		a.announce("Slack events", "http://"+hostPort(cfg.Addr)+cfg.Path)
	}
	return run, err
}
