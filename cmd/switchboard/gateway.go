package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/loopback"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/api"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles"
	"github.com/switchboard-chat/switchboard/services/gateway/discord"
	"github.com/switchboard-chat/switchboard/services/gateway/email"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant"
	"github.com/switchboard-chat/switchboard/services/gateway/line"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost"
	"github.com/switchboard-chat/switchboard/services/gateway/signal"
	"github.com/switchboard-chat/switchboard/services/gateway/slack"
	"github.com/switchboard-chat/switchboard/services/gateway/sms"
	"github.com/switchboard-chat/switchboard/services/gateway/teams"
	"github.com/switchboard-chat/switchboard/services/gateway/telegram"
	"github.com/switchboard-chat/switchboard/services/gateway/webhook"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp"
)

// GatewaysConfig holds one section per platform gateway.
type GatewaysConfig struct {
	API           api.Config           `koanf:"api"`
	Signal        signal.Config        `koanf:"signal"`
	Matrix        matrix.Config        `koanf:"matrix"`
	Mattermost    mattermost.Config    `koanf:"mattermost"`
	Webhook       webhook.Config       `koanf:"webhook"`
	Discord       discord.Config       `koanf:"discord"`
	Slack         slack.Config         `koanf:"slack"`
	Telegram      telegram.Config      `koanf:"telegram"`
	WhatsApp      whatsapp.Config      `koanf:"whatsapp"`
	Email         email.Config         `koanf:"email"`
	SMS           sms.Config           `koanf:"sms"`
	Teams         teams.Config         `koanf:"teams"`
	HomeAssistant homeassistant.Config `koanf:"homeassistant"`
	BlueBubbles   bluebubbles.Config   `koanf:"bluebubbles"`
	LINE          line.Config          `koanf:"line"`
	GoogleChat    googlechat.Config    `koanf:"googlechat"`
}

// gateways maps a platform name to its service (`switchboard gateway <platform>`).
var gateways = map[string]string{}

// registerGateway registers a platform gateway's service under
// "gateway-<platform>" and makes `switchboard gateway <platform>` run it.
func registerGateway(platform string, start func(ctx context.Context, a *app) (func(context.Context) error, error), inDev bool) {
	name := "gateway-" + platform
	gateways[platform] = name
	registerService(service{name: name, start: start}, inDev)
}

func init() {
	register(command{name: "gateway", summary: "run a platform gateway: `gateway <platform>` (" + "see `gateway help`)", run: runGateway, serves: true})
	registerGateway("api", startAPIGateway, true)
	registerGateway("webhook", startWebhookGateway, true)
}

func gatewayNames() []string {
	names := make([]string, 0, len(gateways))
	for n := range gateways {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func runGateway(ctx context.Context, args []string) error {
	platform, rest := subcommandOf(args)
	svc, ok := gateways[platform]
	if !ok {
		if platform != "" && platform != "help" {
			fmt.Fprintf(os.Stderr, "switchboard gateway: no gateway %q in this build\n", platform)
		}
		fmt.Fprintf(os.Stderr, "usage: switchboard gateway <platform> [flags]\nplatforms: %s\n", strings.Join(gatewayNames(), ", "))
		return errUsage
	}
	return runServiceCommand(ctx, "gateway-"+platform, rest, svc)
}

func startAPIGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	cfg := a.cfg.Gateways.API
	if a.name == "dev" && cfg.Keyless() && loopback.Addr(cfg.Addr) && !cfg.Insecure {
		// The laptop mode: the web chat works without a key on loopback.
		a.log.Warn("api gateway without API_SERVER_KEY: serving on loopback without authentication", "addr", cfg.Addr)
		cfg.Insecure = true
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, err
	}
	deps := api.Deps{Log: a.log, Bus: b, RunnerOptions: platform.Options{Attachments: a.cfg.Attachments},
		JobTargets: a.cfg.Agent.SendMessageTargets}
	if cfg.Jobs {
		jobs, err := a.apiJobStore(ctx)
		if err != nil {
			return nil, err
		}
		deps.Jobs = jobs
	}
	s, err := api.New(cfg, deps)
	if err != nil {
		return nil, err
	}
	a.health.Add("gateway-api", s.Ready)
	if cfg.WebChat {
		a.announce("Web chat", "http://"+hostPort(cfg.Addr)+"/")
	}
	a.announce("OpenAI API", "http://"+hostPort(cfg.Addr)+"/v1")
	return s.Run, nil
}

func startWebhookGateway(ctx context.Context, a *app) (func(context.Context) error, error) {
	if err := a.cfg.Gateways.Webhook.Validate(); err != nil {
		return nil, err
	}
	b, err := a.Bus(ctx)
	if err != nil {
		return nil, err
	}
	s, err := webhook.New(a.cfg.Gateways.Webhook, webhook.Deps{Log: a.log, Bus: b})
	if err != nil {
		return nil, err
	}
	a.health.Add("gateway-webhook", s.Ready)
	a.announce("Webhooks", "http://"+hostPort(a.cfg.Gateways.Webhook.Addr)+"/webhooks/<route>")
	return s.Run, nil
}
