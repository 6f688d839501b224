package telegram

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	base := func() Config {
		c := DefaultConfig()
		c.BotToken = "123:abc"
		return c
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"long polling", func(*Config) {}, ""},
		{"no token", func(c *Config) { c.BotToken = "" }, "bot_token"},
		{"token without id", func(c *Config) { c.BotToken = "abc" }, "<bot id>:<secret>"},
		{"reply mode", func(c *Config) { c.ReplyToMode = "sometimes" }, "reply_to_mode"},
		{"longest press hold", func(c *Config) { c.PressHold = 10 * time.Second }, ""},
		{"press hold too long", func(c *Config) { c.PressHold = 11 * time.Second }, "press_hold"},
		{"webhook with secret", func(c *Config) { c.WebhookURL, c.WebhookSecret = "https://bot.example/tg", "s3cret_-X9" }, ""},
		{"webhook without secret", func(c *Config) { c.WebhookURL = "https://bot.example/tg" }, "webhook_secret (TELEGRAM_WEBHOOK_SECRET) is required"},
		{"secret Telegram refuses", func(c *Config) { c.WebhookURL, c.WebhookSecret = "https://bot.example/tg", "s3cret!" }, "only A-Z"},
		{"secret too long", func(c *Config) { c.WebhookURL, c.WebhookSecret = "https://bot.example/tg", strings.Repeat("a", 257) }, "at most 256"},
		{"longest secret", func(c *Config) { c.WebhookURL, c.WebhookSecret = "https://bot.example/tg", strings.Repeat("a", 256) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base()
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
