package main

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/deploy"
)

// composeLeftOut are the settings' variables docker-compose.yaml does not
// pass, each for a reason; any other variable the binary reads for a
// service must reach that service, or setting it in .env does nothing.
var composeLeftOut = map[string]string{
	"BLUEBUBBLES_WEBHOOK_HOST":  "compose fixes each listener and publishes its port",
	"BLUEBUBBLES_WEBHOOK_PORT":  "compose fixes each listener and publishes its port",
	"LINE_HOST":                 "compose fixes each listener and publishes its port",
	"LINE_PORT":                 "compose fixes each listener and publishes its port",
	"TEAMS_PORT":                "compose fixes each listener and publishes its port",
	"TELEGRAM_WEBHOOK_URL":      "compose runs Telegram by long polling: a webhook needs an ingress of its own",
	"TELEGRAM_WEBHOOK_SECRET":   "compose runs Telegram by long polling: a webhook needs an ingress of its own",
	"SLACK_SIGNING_SECRET":      "compose runs Slack in Socket Mode: the Events API needs an ingress of its own",
	"GOOGLE_CHAT_API_BASE_URL":  "Google's endpoints, replaced only by the tests' fake",
	"GOOGLE_CHAT_KEYS_URL":      "Google's endpoints, replaced only by the tests' fake",
	"GOOGLE_CHAT_TOKEN_URL":     "Google's endpoints, replaced only by the tests' fake",
	"TEAMS_TOKEN_URL":           "Microsoft's endpoints, replaced only by the tests' fake",
	"TEAMS_OPENID_METADATA_URL": "Microsoft's endpoints, replaced only by the tests' fake",
}

// TestComposePassesEverySetting: every variable the binary reads for a
// platform gateway (envAliases' gateways.<platform>.*) reaches the compose
// service that runs that gateway, every delivery.* one reaches delivery,
// and the router gets, beside each platform's allowlist, its
// <PLATFORM>_ALLOW_ALL_USERS and the <PLATFORM>_ALLOW_BOTS a gateway
// reads (the router reads them by name: auth.New). docker compose passes
// only what a service lists, so a variable left out is silently ignored.
func TestComposePassesEverySetting(t *testing.T) {
	t.Parallel()
	root, err := deploy.Root()
	if err != nil {
		t.Fatal(err)
	}
	c, err := deploy.LoadCompose(context.Background(), root, []string{"*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	services := c.Project.Services
	gateway := map[string]string{}
	for name, s := range services {
		if len(s.Command) == 2 && s.Command[0] == "gateway" {
			gateway[s.Command[1]] = name
		}
	}
	passes := func(service, v string) bool {
		_, ok := services[service].Environment[v]
		return ok
	}
	checked := 0
	for v, key := range envAliases {
		if composeLeftOut[v] != "" {
			continue
		}
		section, rest, _ := strings.Cut(key, ".")
		var service string
		switch section {
		case "gateways":
			platform, _, _ := strings.Cut(rest, ".")
			if service = gateway[platform]; service == "" {
				t.Errorf("%s (%s): no compose service runs `gateway %s`", v, key, platform)
				continue
			}
		case "delivery":
			service = "delivery"
		default:
			continue // infrastructure: each service's own test
		}
		checked++
		if !passes(service, v) {
			t.Errorf("%s sets %s, but docker-compose.yaml does not pass it to %s", v, key, service)
		}
		if strings.HasSuffix(v, "_ALLOW_BOTS") && !passes("router", v) {
			t.Errorf("the router reads %s too (auth.New), but docker-compose.yaml does not pass it", v)
		}
	}
	for v := range services["router"].Environment {
		p, ok := strings.CutSuffix(v, "_ALLOWED_USERS")
		if ok && p != "GATEWAY" && !strings.HasSuffix(p, "_GROUP") && !passes("router", p+"_ALLOW_ALL_USERS") {
			t.Errorf("the router gets %s but not %s_ALLOW_ALL_USERS", v, p)
		}
	}
	for v := range composeLeftOut {
		if _, ok := envAliases[v]; !ok {
			t.Errorf("composeLeftOut names %s, which the binary does not read", v)
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d variables: is the alias table read?", checked)
	}
}
