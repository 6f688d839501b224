package main

import (
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/config"
)

// The Mattermost gateway's allow_bots: MATTERMOST_ALLOW_BOTS, else the
// router's router.auth.allow_bots.mattermost.
func TestMattermostAllowBots(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		environ []string
		want    string
	}{
		{name: "nothing set"},
		{name: "the variable", environ: []string{"MATTERMOST_ALLOW_BOTS=mentions"}, want: "mentions"},
		{name: "the router's setting", environ: []string{"SWITCHBOARD_ROUTER__AUTH__ALLOW_BOTS__MATTERMOST=all"}, want: "all"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultConfig()
			if _, err := config.Load(config.Options{Environ: c.environ, Aliases: envAliases}, cfg); err != nil {
				t.Fatal(err)
			}
			if got := allowBots(cfg.Gateways.Mattermost.AllowBots, cfg.Router.Auth.AllowBots, "mattermost"); got != c.want {
				t.Errorf("allow_bots %q, want %q", got, c.want)
			}
		})
	}
}

// The Google Chat gateway's allow_bots: GOOGLE_CHAT_ALLOW_BOTS, else the
// router's router.auth.allow_bots.google_chat.
func TestGoogleChatAllowBots(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		environ []string
		want    string
	}{
		{name: "nothing set"},
		{name: "the variable", environ: []string{"GOOGLE_CHAT_ALLOW_BOTS=mentions"}, want: "mentions"},
		{name: "the router's setting", environ: []string{"SWITCHBOARD_ROUTER__AUTH__ALLOW_BOTS__GOOGLE_CHAT=all"}, want: "all"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaultConfig()
			if _, err := config.Load(config.Options{Environ: c.environ, Aliases: envAliases}, cfg); err != nil {
				t.Fatal(err)
			}
			if got := allowBots(cfg.Gateways.GoogleChat.AllowBots, cfg.Router.Auth.AllowBots, "google_chat"); got != c.want {
				t.Errorf("allow_bots %q, want %q", got, c.want)
			}
		})
	}
}
