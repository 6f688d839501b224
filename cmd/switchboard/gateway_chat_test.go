package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/services/gateway/telegram"
)

func TestChatGatewaysRegistered(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"discord", "slack", "whatsapp", "sms", "teams", "bluebubbles", "line", "googlechat"} {
		if _, ok := services[gateways[p]]; !ok {
			t.Fatalf("gateway %s has no service", p)
		}
	}
	// dev runs a gateway only when its token is set.
	cfg := defaultConfig()
	cfg.Gateways.Discord.BotToken, cfg.Gateways.Slack.BotToken, cfg.Gateways.WhatsApp.AccessToken = "", "", ""
	cfg.Gateways.SMS.AccountSID, cfg.Gateways.SMS.AuthToken = "", ""
	cfg.Gateways.LINE.ChannelAccessToken, cfg.Gateways.LINE.ChannelSecret = "", ""
	dev := newApp("dev", cfg)
	for name, start := range map[string]func(context.Context, *app) (func(context.Context) error, error){
		"discord": startDiscordGateway, "slack": startSlackGateway, "whatsapp": startWhatsAppGateway,
		"sms": startSMSGateway, "teams": startTeamsGateway, "bluebubbles": startBlueBubblesGateway,
		"line": startLINEGateway, "googlechat": startGoogleChatGateway,
	} {
		run, err := start(context.Background(), dev)
		if err != nil {
			t.Fatalf("%s in dev without a token: %v", name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		if err := run(ctx); err != nil {
			t.Fatalf("%s idle run: %v", name, err)
		}
		cancel()
	}
	// `switchboard gateway <platform>` without a token is an error.
	if _, err := startSlackGateway(context.Background(), newApp("gateway-slack", cfg)); err == nil || !strings.Contains(err.Error(), "SLACK_BOT_TOKEN") {
		t.Fatalf("slack without a token: %v", err)
	}
	if _, err := startDiscordGateway(context.Background(), newApp("gateway-discord", cfg)); err == nil || !strings.Contains(err.Error(), "DISCORD_BOT_TOKEN") {
		t.Fatalf("discord without a token: %v", err)
	}
	if _, err := startWhatsAppGateway(context.Background(), newApp("gateway-whatsapp", cfg)); err == nil || !strings.Contains(err.Error(), "WHATSAPP_ACCESS_TOKEN") {
		t.Fatalf("whatsapp without a token: %v", err)
	}
	// With a token but without the app secret that signs notifications,
	// even dev refuses to start it.
	cfg.Gateways.WhatsApp.AccessToken, cfg.Gateways.WhatsApp.PhoneNumberID = "token", "123"
	if _, err := startWhatsAppGateway(context.Background(), newApp("dev", cfg)); err == nil || !strings.Contains(err.Error(), "WHATSAPP_APP_SECRET") {
		t.Fatalf("whatsapp without an app secret: %v", err)
	}
	if _, err := startSMSGateway(context.Background(), newApp("gateway-sms", cfg)); err == nil || !strings.Contains(err.Error(), "TWILIO_ACCOUNT_SID") {
		t.Fatalf("sms without credentials: %v", err)
	}
	// With credentials but without the public URL the signatures cover,
	// even dev refuses to start it.
	cfg.Gateways.SMS.AccountSID, cfg.Gateways.SMS.AuthToken, cfg.Gateways.SMS.PhoneNumber = "AC"+strings.Repeat("0", 32), "token", "+15550006789"
	if _, err := startSMSGateway(context.Background(), newApp("dev", cfg)); err == nil || !strings.Contains(err.Error(), "SMS_WEBHOOK_PUBLIC_URL") {
		t.Fatalf("sms without a public url: %v", err)
	}
	if _, err := startBlueBubblesGateway(context.Background(), newApp("gateway-bluebubbles", cfg)); err == nil || !strings.Contains(err.Error(), "BLUEBUBBLES_SERVER_URL") {
		t.Fatalf("bluebubbles without a server: %v", err)
	}
	if _, err := startLINEGateway(context.Background(), newApp("gateway-line", cfg)); err == nil || !strings.Contains(err.Error(), "LINE_CHANNEL_ACCESS_TOKEN") {
		t.Fatalf("line without credentials: %v", err)
	}
	if _, err := startTeamsGateway(context.Background(), newApp("gateway-teams", cfg)); err == nil || !strings.Contains(err.Error(), "TEAMS_CLIENT_ID") {
		t.Fatalf("teams without credentials: %v", err)
	}
	if _, err := startGoogleChatGateway(context.Background(), newApp("gateway-googlechat", cfg)); err == nil || !strings.Contains(err.Error(), "GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE") {
		t.Fatalf("googlechat without credentials: %v", err)
	}
	// With the app's id and secret but no tenant to ask tokens of, even
	// dev refuses to start it.
	cfg.Gateways.Teams.ClientID, cfg.Gateways.Teams.ClientSecret = "app", "secret"
	if _, err := startTeamsGateway(context.Background(), newApp("dev", cfg)); err == nil || !strings.Contains(err.Error(), "TEAMS_TENANT_ID") {
		t.Fatalf("teams without a tenant: %v", err)
	}
}

// A chat gateway's allow_bots: its own setting or Hermes's variable,
// else the router's router.auth.allow_bots.<platform>, so a bot the
// router would admit is not dropped by the gateway before it gets there.
func TestGatewayAllowBots(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		environ []string
		yaml    string
		discord string
		slack   string
	}{
		{name: "nothing set"},
		{name: "Hermes's variables", environ: []string{"DISCORD_ALLOW_BOTS=mentions", "SLACK_ALLOW_BOTS=all"}, discord: "mentions", slack: "all"},
		{name: "the router's setting", yaml: "router:\n  auth:\n    allow_bots:\n      Discord: all\n", discord: "all"},
		{name: "the gateway's own wins", yaml: "router:\n  auth:\n    allow_bots:\n      slack: all\ngateways:\n  slack:\n    allow_bots: mentions\n", slack: "mentions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := ""
			if c.yaml != "" {
				path = t.TempDir() + "/switchboard.yaml"
				if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := defaultConfig()
			if _, err := config.Load(config.Options{Path: path, Environ: c.environ, Aliases: envAliases}, cfg); err != nil {
				t.Fatal(err)
			}
			if got := allowBots(cfg.Gateways.Discord.AllowBots, cfg.Router.Auth.AllowBots, "discord"); got != c.discord {
				t.Errorf("discord allow_bots %q, want %q", got, c.discord)
			}
			if got := allowBots(cfg.Gateways.Slack.AllowBots, cfg.Router.Auth.AllowBots, "slack"); got != c.slack {
				t.Errorf("slack allow_bots %q, want %q", got, c.slack)
			}
		})
	}
}

// Settings on by default, as in Hermes, are on unless set off by the
// YAML or by their variable: Telegram's exclusive_bot_mentions (Hermes's
// TELEGRAM_EXCLUSIVE_BOT_MENTIONS) and Slack's
// dm_top_level_threads_as_sessions (Hermes's
// platforms.slack.extra.dm_top_level_threads_as_sessions; its
// SWITCHBOARD_ variable).
func TestSettingsOnByDefault(t *testing.T) {
	t.Parallel()
	telegram := func(c *Config) bool { return c.Gateways.Telegram.ExclusiveBotMentions }
	slack := func(c *Config) bool { return c.Gateways.Slack.DMTopLevelThreadsAsSessions }
	for _, c := range []struct {
		name    string
		setting func(*Config) bool
		environ []string
		yaml    string
		want    bool
	}{
		{name: "telegram exclusive_bot_mentions, nothing set", setting: telegram, want: true},
		{name: "telegram exclusive_bot_mentions, Hermes's variable", setting: telegram, environ: []string{"TELEGRAM_EXCLUSIVE_BOT_MENTIONS=false"}},
		{name: "telegram exclusive_bot_mentions, the YAML", setting: telegram, yaml: "gateways:\n  telegram:\n    exclusive_bot_mentions: false\n"},
		{name: "slack dm_top_level_threads_as_sessions, nothing set", setting: slack, want: true},
		{name: "slack dm_top_level_threads_as_sessions, the variable", setting: slack, environ: []string{"SWITCHBOARD_GATEWAYS__SLACK__DM_TOP_LEVEL_THREADS_AS_SESSIONS=false"}},
		{name: "slack dm_top_level_threads_as_sessions, the YAML", setting: slack, yaml: "gateways:\n  slack:\n    dm_top_level_threads_as_sessions: false\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := ""
			if c.yaml != "" {
				path = t.TempDir() + "/switchboard.yaml"
				if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := defaultConfig()
			warns, err := config.Load(config.Options{Path: path, Environ: c.environ, Aliases: envAliases}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(warns) > 0 {
				t.Errorf("warnings %v", warns)
			}
			if got := c.setting(cfg); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestTelegramMentionPatternsVariable: Hermes's TELEGRAM_MENTION_PATTERNS
// reaches the Telegram gateway, a JSON list whole though the loader
// splits values on commas, and a pattern that does not compile stops the
// gateway at start-up, saying which and why.
func TestTelegramMentionPatternsVariable(t *testing.T) {
	t.Parallel()
	start := func(patterns string) error {
		cfg := defaultConfig()
		environ := []string{"TELEGRAM_BOT_TOKEN=123:abc", "TELEGRAM_MENTION_PATTERNS=" + patterns}
		if _, err := config.Load(config.Options{Environ: environ, Aliases: envAliases}, cfg); err != nil {
			return err
		}
		_, err := telegram.NewPlatform(cfg.Gateways.Telegram, nil, nil)
		return err
	}
	if err := start(`["\\bchompy\\b", "^hey\\s+(team|all){1,2}"]`); err != nil {
		t.Fatalf("good patterns: %v", err)
	}
	err := start(`["chompy", "(?<=hey )bot"]`)
	if err == nil || !strings.Contains(err.Error(), `TELEGRAM_MENTION_PATTERNS): pattern "(?<=hey )bot" is not a regular expression`) {
		t.Fatalf("a pattern Go cannot compile: %v", err)
	}
}
