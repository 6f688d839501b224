package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/teams"
)

func init() {
	// Hermes's names for the Teams gateway (TEAMS_ALLOWED_USERS and
	// TEAMS_ALLOW_ALL_USERS are the router's, as for every platform;
	// TEAMS_HOME_CHANNEL is delivery's home conversation for Teams).
	for env, key := range map[string]string{
		"TEAMS_CLIENT_ID":           "gateways.teams.client_id",
		"TEAMS_CLIENT_SECRET":       "gateways.teams.client_secret",
		"TEAMS_TENANT_ID":           "gateways.teams.tenant_id",
		"TEAMS_PORT":                "gateways.teams.port",
		"TEAMS_SERVICE_URL":         "gateways.teams.service_url",
		"TEAMS_REQUIRE_MENTION":     "gateways.teams.require_mention",
		"TEAMS_TOKEN_URL":           "gateways.teams.token_url",
		"TEAMS_OPENID_METADATA_URL": "gateways.teams.openid_metadata_url",
		"TEAMS_HOME_CHANNEL":        "delivery.platforms.teams.home",
	} {
		envAliases[env] = key
	}
	registerGateway("teams", startTeamsGateway, true)
}

// startTeamsGateway builds the Microsoft Teams gateway. In dev it starts
// only when TEAMS_CLIENT_ID and TEAMS_CLIENT_SECRET are set. Who may talk
// to the agent is the router's: TEAMS_ALLOWED_USERS (AAD object ids),
// TEAMS_ALLOW_ALL_USERS, pairing.
func startTeamsGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.Teams
	run, err := startChatGateway(ctx, a, "teams", "TEAMS_CLIENT_ID or TEAMS_CLIENT_SECRET", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return teams.New(cfg, teams.Deps{Log: a.log, Bus: b, Runner: platform.Options{Attachments: a.cfg.Attachments}})
	})
	if err == nil && cfg.Enabled() {
		c, _ := cfg.Resolved()
		a.announce("Teams messaging endpoint", "http://"+hostPort(c.Addr)+c.Path)
	}
	return run, err
}
