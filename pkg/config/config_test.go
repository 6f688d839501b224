package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/config"
)

type resetCfg struct {
	Mode        string `koanf:"mode"`
	IdleMinutes int    `koanf:"idle_minutes"`
}

type routeCfg struct {
	Secret           string `koanf:"secret"`
	RequireTimestamp bool   `koanf:"require_timestamp"`
	Reply            struct {
		ChatID string `koanf:"chat_id"`
	} `koanf:"reply"`
}

type testCfg struct {
	NATS struct {
		URL string `koanf:"url"`
	} `koanf:"nats"`
	SessionReset resetCfg            `koanf:"session_reset"`
	Timeout      time.Duration       `koanf:"timeout"`
	Allowed      []string            `koanf:"allowed"`
	Platforms    map[string]string   `koanf:"platforms"`
	Routes       map[string]routeCfg `koanf:"routes"`
	// Internal is set by code only (a test's shorter wait), as a
	// service's PollWait: no key sets it.
	Internal time.Duration `koanf:"-"`
}

func (c *testCfg) Validate() error {
	switch c.SessionReset.Mode {
	case "none", "idle", "daily", "both":
		return nil
	}
	return config.Invalid("session_reset.mode", c.SessionReset.Mode, "none, idle, daily or both")
}

func defaults() *testCfg {
	c := &testCfg{Timeout: time.Second}
	c.NATS.URL = "nats://default"
	c.SessionReset.Mode = "none"
	return c
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "switchboard.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		env       []string
		want      func(*testCfg)
		warnings  []string // "key→suggestion"
		errSubstr string
	}{
		{name: "defaults only", want: func(*testCfg) {}},
		{
			name: "file values",
			yaml: "nats:\n  url: nats://file\nsession_reset:\n  mode: idle\n  idle_minutes: 30\ntimeout: 3s\nallowed: [a, b]\nplatforms:\n  telegram: x\n",
			want: func(c *testCfg) {
				c.NATS.URL = "nats://file"
				c.SessionReset = resetCfg{Mode: "idle", IdleMinutes: 30}
				c.Timeout = 3 * time.Second
				c.Allowed = []string{"a", "b"}
				c.Platforms = map[string]string{"telegram": "x"}
			},
		},
		{
			name:     "flattened nested key is reported with its real path",
			yaml:     "session_reset_mode: idle\n",
			want:     func(*testCfg) {},
			warnings: []string{"session_reset_mode→session_reset.mode"},
		},
		{
			name:     "key at the wrong level",
			yaml:     "idle_minutes: 5\n",
			want:     func(*testCfg) {},
			warnings: []string{"idle_minutes→session_reset.idle_minutes"},
		},
		{
			name:     "typo",
			yaml:     "nats:\n  ulr: x\n",
			want:     func(*testCfg) {},
			warnings: []string{"nats.ulr→nats.url"},
		},
		{
			name:     "nothing close",
			yaml:     "completely_unrelated_setting: 1\n",
			want:     func(*testCfg) {},
			warnings: []string{"completely_unrelated_setting→"},
		},
		{
			name: "environment overrides file; aliases apply, prefixed wins",
			yaml: "nats:\n  url: nats://file\n",
			env:  []string{"NATS_URL=nats://alias", "SWITCHBOARD_SESSION_RESET__IDLE_MINUTES=7", "SWITCHBOARD_ALLOWED=x,y"},
			want: func(c *testCfg) {
				c.NATS.URL = "nats://alias"
				c.SessionReset.IdleMinutes = 7
				c.Allowed = []string{"x", "y"}
			},
		},
		{
			name:     "unknown prefixed environment variable",
			env:      []string{"SWITCHBOARD_NATS__URLL=x"},
			want:     func(*testCfg) {},
			warnings: []string{"nats.urll→nats.url"},
		},
		{
			name: "variables that are no config keys are not warned about",
			env: []string{"SWITCHBOARD_ADMIN_TOKEN=t", "SWITCHBOARD_IMAGE=x", "SWITCHBOARD_ROUTER_SERVICE_HOST=10.0.0.1",
				"SWITCHBOARD_ROUTER_SERVICE_PORT_OPS=9090", "SWITCHBOARD_ADMIN_PORT=tcp://10.0.0.2:7070",
				"SWITCHBOARD_ADMIN_PORT_7070_TCP_ADDR=10.0.0.2", "SWITCHBOARD_NATS__URLL=x"},
			want:     func(*testCfg) {},
			warnings: []string{"nats.urll→nats.url"},
		},
		{
			// A YAML boolean in a text key is its word, as Hermes's
			// settings read it ("mode: false"), not weak typing's "0".
			name: "a YAML boolean in a text key is true or false",
			yaml: "nats:\n  url: false\nplatforms:\n  telegram: true\n  discord: no\n",
			want: func(c *testCfg) {
				c.NATS.URL = "false"
				c.Platforms = map[string]string{"telegram": "true", "discord": "no"}
			},
		},
		{
			// The entries of a map of sections have the section's keys:
			// a misspelt one would otherwise be dropped without a word
			// (a webhook route's require_timestamp, its events filter).
			name: "misspelt key in an entry of a map of sections",
			yaml: "routes:\n  github:\n    secret: s\n    require_timestmp: true\n    reply:\n      chat_id: c\n      chatid: d\n",
			env:  []string{"SWITCHBOARD_ROUTES__GITHUB__SECERT=x", "SWITCHBOARD_ROUTES__GITLAB__SECRET=t"},
			want: func(c *testCfg) {
				r := routeCfg{Secret: "s"}
				r.Reply.ChatID = "c"
				c.Routes = map[string]routeCfg{"github": r, "gitlab": {Secret: "t"}}
			},
			warnings: []string{"routes.github.reply.chatid→routes.github.reply.chat_id",
				"routes.github.require_timestmp→routes.github.require_timestamp", "routes.github.secert→routes.github.secret"},
		},
		{
			name: "an entry of a map of sections whose name holds dots",
			yaml: "routes:\n  example.com:\n    secret: s\n",
			want: func(c *testCfg) { c.Routes = map[string]routeCfg{"example.com": {Secret: "s"}} },
		},
		{
			// A field tagged "-" is not configurable: the decoder took
			// the tag for its key's name, and a key named "-" set it.
			name:     "a key named - sets no field",
			yaml:     "\"-\": 5ms\nsession_reset:\n  \"-\": 5ms\n",
			env:      []string{"SWITCHBOARD_-=6ms", "SWITCHBOARD_INTERNAL=7ms"},
			want:     func(*testCfg) {},
			warnings: []string{"-→", "-→", "internal→", "session_reset.-→session_reset.mode"},
		},
		{name: "wrong type stops startup", yaml: "session_reset:\n  idle_minutes: soon\n", errSubstr: "idle_minutes"},
		{name: "bad duration stops startup", yaml: "timeout: forever\n", errSubstr: "timeout"},
		{name: "invalid value stops startup", yaml: "session_reset:\n  mode: weekly\n", errSubstr: "session_reset.mode: weekly (want none, idle, daily or both)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := config.Options{Environ: append([]string{}, tc.env...), Aliases: map[string]string{"NATS_URL": "nats.url"}}
			if tc.yaml != "" {
				opts.Path = writeFile(t, tc.yaml)
			}
			got := defaults()
			warns, err := config.Load(opts, got)
			if tc.errSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.errSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := defaults()
			tc.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config = %+v\nwant     %+v", got, want)
			}
			var gotWarn []string
			for _, w := range warns {
				gotWarn = append(gotWarn, w.Key+"→"+w.Suggestion)
			}
			if !reflect.DeepEqual(gotWarn, tc.warnings) {
				t.Errorf("warnings = %q, want %q", gotWarn, tc.warnings)
			}
		})
	}
}

func TestInvalidWrapsSentinel(t *testing.T) {
	_, err := config.Load(config.Options{Environ: []string{"SWITCHBOARD_SESSION_RESET__MODE=x"}}, defaults())
	if !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestMissingFileIsAnError(t *testing.T) {
	_, err := config.Load(config.Options{Path: "/nonexistent/switchboard.yaml", Environ: []string{}}, defaults())
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/switchboard.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzLoadEnv: any environment loads without panicking; a list variable
// is split on commas as written; an unknown SWITCHBOARD_ key is a
// warning naming it, never a silent setting.
func FuzzLoadEnv(f *testing.F) {
	f.Add("SWITCHBOARD_ALLOWED=a, b,,c\nSWITCHBOARD_TIMEOUT=2s")
	f.Add("SWITCHBOARD_SESSION_RESET__MODE=idle\nSWITCHBOARD_SESSION_RESET__IDLE_MINUTES=x")
	f.Add("SWITCHBOARD_PLATFORMS__TELEGRAM=on\nSWITCHBOARD_=1\nSWITCHBOARD_NAST__URL=x\n=\nNOEQUALS")
	f.Add("SWITCHBOARD_TIMEOUT=-1h\nSWITCHBOARD_SESSION_RESET__MODE=\xff")
	f.Fuzz(func(t *testing.T, env string) {
		lines := strings.Split(env, "\n")
		cfg := defaults()
		warnings, err := config.Load(config.Options{Environ: lines}, cfg)
		for _, w := range warnings {
			if w.Key == "" || w.Source == "" {
				t.Fatalf("warning without key or source: %+v", w)
			}
		}
		if err != nil {
			return
		}
		var allowed []string
		n := 0
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, "SWITCHBOARD_ALLOWED="); ok {
				allowed, n = strings.Split(v, ","), n+1
				if v == "" {
					allowed = []string{}
				}
			}
		}
		if n > 0 && !reflect.DeepEqual(cfg.Allowed, allowed) {
			t.Fatalf("allowed = %q, want %q", cfg.Allowed, allowed)
		}
		switch cfg.SessionReset.Mode {
		case "none", "idle", "daily", "both":
		default:
			t.Fatalf("invalid mode %q loaded without an error", cfg.SessionReset.Mode)
		}
	})
}

// A key of a section that lives under another one (Hermes's top-level
// session_reset is router.session_reset here) finds its path with the
// outer section added, whether it is given nested or flattened, before
// another section's key of the same last name (approvals.mode).
func TestNearestAddsTheSectionLeftOut(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Router struct {
			SessionReset resetCfg      `koanf:"session_reset"`
			LockTTL      time.Duration `koanf:"lock_ttl"`
		} `koanf:"router"`
		Approvals struct {
			Mode string `koanf:"mode"`
		} `koanf:"approvals"`
	}
	keys := config.KnownKeys(&cfg)
	for key, want := range map[string]string{
		"session_reset.mode":         "router.session_reset.mode",
		"session_reset_mode":         "router.session_reset.mode",
		"router.session_reset_mode":  "router.session_reset.mode",
		"session_reset.idle_minutes": "router.session_reset.idle_minutes",
		"idle_minutes":               "router.session_reset.idle_minutes",
		"router.lock_tll":            "router.lock_ttl",
		"approvals.mdoe":             "approvals.mode",
	} {
		if got := keys.Nearest(key); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestBooleanWords: a boolean given as text, by an environment alias
// (SLACK_REQUIRE_MENTION=yes), a SWITCHBOARD_ variable or the YAML, takes
// Hermes's words: "1", "true", "yes", "on" and "0", "false", "no", "off",
// in any case and with spaces around, as Hermes's _coerce_bool reads
// them; strconv.ParseBool's own ("t", "F") still count, "" is false, and
// any other word stops startup naming the key.
func TestBooleanWords(t *testing.T) {
	t.Parallel()
	type cfg struct {
		Flag  bool            `koanf:"flag"`
		Allow map[string]bool `koanf:"allow"`
	}
	aliases := map[string]string{"FLAG": "flag"}
	for _, c := range []struct {
		name    string
		env     []string
		yaml    string
		start   bool // the default
		want    bool
		allow   map[string]bool
		invalid bool
	}{
		{name: "alias 1", env: []string{"FLAG=1"}, want: true},
		{name: "alias yes", env: []string{"FLAG=yes"}, want: true},
		{name: "alias on", env: []string{"FLAG=on"}, want: true},
		{name: "alias YES", env: []string{"FLAG=YES"}, want: true},
		{name: "alias tRuE", env: []string{"FLAG=tRuE"}, want: true},
		{name: "alias On with spaces", env: []string{"FLAG= On "}, want: true},
		{name: "alias 0", env: []string{"FLAG=0"}, start: true},
		{name: "alias no", env: []string{"FLAG=no"}, start: true},
		{name: "alias off", env: []string{"FLAG=off"}, start: true},
		{name: "alias OFF", env: []string{"FLAG=OFF"}, start: true},
		{name: "alias fAlSe", env: []string{"FLAG=fAlSe"}, start: true},
		{name: "alias t, as before", env: []string{"FLAG=t"}, want: true},
		{name: "prefixed yes", env: []string{"SWITCHBOARD_FLAG=yes"}, want: true},
		{name: "prefixed off", env: []string{"SWITCHBOARD_FLAG=off"}, start: true},
		{name: "prefixed empty, as before", env: []string{"SWITCHBOARD_FLAG="}, start: true},
		{name: "map entry yes", env: []string{"SWITCHBOARD_ALLOW__TELEGRAM=yes"}, allow: map[string]bool{"telegram": true}},
		{name: "yaml yes", yaml: "flag: yes\n", want: true},
		{name: "yaml quoted on", yaml: "flag: \"on\"\n", want: true},
		{name: "yaml off", yaml: "flag: off\n", start: true},
		{name: "yaml map entry no", yaml: "allow:\n  slack: no\n", allow: map[string]bool{"slack": false}},
		{name: "another word", env: []string{"FLAG=maybe"}, invalid: true},
		{name: "another word in the yaml", yaml: "flag: enabled\n", invalid: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := config.Options{Environ: c.env, Aliases: aliases}
			if c.yaml != "" {
				opts.Path = writeFile(t, c.yaml)
			}
			got := &cfg{Flag: c.start}
			_, err := config.Load(opts, got)
			if c.invalid {
				if err == nil || !strings.Contains(err.Error(), "flag") {
					t.Fatalf("err = %v, want an error naming flag", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Flag != c.want {
				t.Errorf("flag = %v, want %v", got.Flag, c.want)
			}
			if !reflect.DeepEqual(got.Allow, c.allow) {
				t.Errorf("allow = %v, want %v", got.Allow, c.allow)
			}
		})
	}
}
