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
		{"mention patterns", func(c *Config) { c.MentionPatterns = []string{`\bhey\s+bot\b`, "chompy"} }, ""},
		{"mention pattern Go cannot compile", func(c *Config) { c.MentionPatterns = []string{"chompy", `(?<!x)hermes`} },
			`mention_patterns (TELEGRAM_MENTION_PATTERNS): pattern "(?<!x)hermes" is not a regular expression`},
		{"mention pattern that is no regular expression", func(c *Config) { c.MentionPatterns = []string{`["a(b"]`} }, `pattern "a(b"`},
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

// TestMentionPatternsRead: the patterns come as Hermes reads
// TELEGRAM_MENTION_PATTERNS: a JSON list (whole, though the environment
// loader split it on its commas), or one a line, blank ones skipped.
func TestMentionPatternsRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		raw  []string
		want []string
	}{
		{"none", nil, nil},
		{"json list split on its commas", []string{`["chompy"`, ` "hey\\s+bot"`, ` "a{1`, `3}"]`}, []string{"(?i)chompy", `(?i)hey\s+bot`, "(?i)a{1,3}"}},
		{"lines", []string{"chompy\n\n  hey bot  "}, []string{"(?i)chompy", "(?i)hey bot"}},
		{"yaml list", []string{"chompy", " ", "[ch]ompy"}, []string{"(?i)chompy", "(?i)[ch]ompy"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := mentionPatterns(c.raw)
			if err != nil {
				t.Fatal(err)
			}
			var exprs []string
			for _, re := range got {
				exprs = append(exprs, re.String())
			}
			if strings.Join(exprs, "|") != strings.Join(c.want, "|") {
				t.Errorf("patterns %q, want %q", exprs, c.want)
			}
		})
	}
}
