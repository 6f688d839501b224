package telegram

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/config"
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
		{"mention pattern that is no text", func(c *Config) { c.MentionPatterns = []string{`["chompy", 5]`} }, `5 in the JSON list is not a pattern`},
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
// TELEGRAM_MENTION_PATTERNS: one text is a JSON list (or string), or one
// pattern a line, a comma in it; a list is a pattern an item; blank ones
// are skipped.
func TestMentionPatternsRead(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		raw  []string
		want []string
	}{
		{"none", nil, nil},
		{"json list", []string{` ["chompy", "hey\\s+bot", "a{1,3}"] `}, []string{"(?i)chompy", `(?i)hey\s+bot`, "(?i)a{1,3}"}},
		{"json string", []string{`"a{1,3}"`}, []string{"(?i)a{1,3}"}},
		{"lines", []string{"chompy\n\n  hey, bot  "}, []string{"(?i)chompy", "(?i)hey, bot"}},
		{"one line with commas", []string{"^(hi|hey),? bot{1,2}"}, []string{"(?i)^(hi|hey),? bot{1,2}"}},
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

// TestMentionPatternsFromTheEnvironment: TELEGRAM_MENTION_PATTERNS is
// read as Hermes reads it, through the config loader: a JSON list, else
// one pattern a line, a comma being part of its pattern (a quantifier
// "{2,3}", a class "[,:]"); split on its commas, "^hey\s+\w{2,3}$" was
// two patterns that compile and match other messages, and a wake word
// silently lost.
func TestMentionPatternsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	aliases := map[string]string{"TELEGRAM_BOT_TOKEN": "bot_token", "TELEGRAM_MENTION_PATTERNS": "mention_patterns"}
	for _, c := range []struct {
		name, value string
		want        []string
	}{
		{"one pattern with a comma", `^hey\s+\w{2,3}$`, []string{`(?i)^hey\s+\w{2,3}$`}},
		{"lines", "chompy\n^hey[,:]? bot", []string{"(?i)chompy", "(?i)^hey[,:]? bot"}},
		{"json list", `["chompy", "a{1,3}b"]`, []string{"(?i)chompy", "(?i)a{1,3}b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			environ := []string{"TELEGRAM_BOT_TOKEN=123:abc", "TELEGRAM_MENTION_PATTERNS=" + c.value}
			if _, err := config.Load(config.Options{Environ: environ, Aliases: aliases}, &cfg); err != nil {
				t.Fatal(err)
			}
			got, err := mentionPatterns(cfg.MentionPatterns)
			if err != nil {
				t.Fatal(err)
			}
			var exprs []string
			for _, re := range got {
				exprs = append(exprs, re.String())
			}
			if strings.Join(exprs, "\x00") != strings.Join(c.want, "\x00") {
				t.Errorf("patterns %q, want %q", exprs, c.want)
			}
		})
	}
	// In the YAML file, a list is a pattern an item, commas and all.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("bot_token: \"123:abc\"\nmention_patterns:\n  - 'hey, bot'\n  - '\\w{2,3}'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if _, err := config.Load(config.Options{Path: path, Environ: []string{}}, &cfg); err != nil {
		t.Fatal(err)
	}
	if got, err := mentionPatterns(cfg.MentionPatterns); err != nil || len(got) != 2 || got[0].String() != "(?i)hey, bot" || got[1].String() != `(?i)\w{2,3}` {
		t.Errorf("YAML list: %v %v", got, err)
	}
}
