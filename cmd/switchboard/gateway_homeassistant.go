package main

import (
	"context"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant"
)

func init() {
	// Hermes's names for the Home Assistant gateway (HASS_URL, HASS_TOKEN;
	// HASS_HOME_CHANNEL is delivery's home for a bare "homeassistant"
	// target). Hermes reads the filters from its config file only; the
	// HASS_WATCH_* names are Switchboard's.
	for env, key := range map[string]string{
		"HASS_URL":              "gateways.homeassistant.url",
		"HASS_TOKEN":            "gateways.homeassistant.token",
		"HASS_WATCH_DOMAINS":    "gateways.homeassistant.watch_domains",
		"HASS_WATCH_ENTITIES":   "gateways.homeassistant.watch_entities",
		"HASS_IGNORE_ENTITIES":  "gateways.homeassistant.ignore_entities",
		"HASS_WATCH_ALL":        "gateways.homeassistant.watch_all",
		"HASS_COOLDOWN_SECONDS": "gateways.homeassistant.cooldown_seconds",
		"HASS_HOME_CHANNEL":     "delivery.platforms.homeassistant.home",
	} {
		envAliases[env] = key
	}
	registerGateway("homeassistant", startHomeAssistantGateway, true)
}

// startHomeAssistantGateway builds the Home Assistant gateway. In dev it
// starts only when HASS_TOKEN is set.
func startHomeAssistantGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.HomeAssistant
	return startChatGateway(ctx, a, "homeassistant", "HASS_TOKEN", cfg.Enabled(), cfg.Validate, func(b *bus.Bus) (chatService, error) {
		return homeassistant.New(cfg, homeassistant.Deps{Log: a.log, Bus: b})
	})
}
