package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/config"
)

// gateways.sms.webhook_shared_key takes several secrets, for a rotation:
// comma-separated in TWILIO_WEBHOOK_SHARED_KEY, a list or one string in
// YAML (a single key as before).
func TestSMSWebhookSharedKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yaml string
		environ    []string
		want       []string
	}{
		{name: "one key in the variable", environ: []string{"TWILIO_WEBHOOK_SHARED_KEY=only"}, want: []string{"only"}},
		{name: "two keys in the variable", environ: []string{"TWILIO_WEBHOOK_SHARED_KEY=old,new"}, want: []string{"old", "new"}},
		{name: "one key in yaml", yaml: "gateways:\n  sms:\n    webhook_shared_key: only\n", want: []string{"only"}},
		{name: "a list in yaml", yaml: "gateways:\n  sms:\n    webhook_shared_key: [old, new]\n", want: []string{"old", "new"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := config.Options{Environ: c.environ, Aliases: envAliases}
			if opts.Environ == nil {
				opts.Environ = []string{}
			}
			if c.yaml != "" {
				opts.Path = filepath.Join(t.TempDir(), "switchboard.yaml")
				if err := os.WriteFile(opts.Path, []byte(c.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg := defaultConfig()
			if _, err := config.Load(opts, cfg); err != nil {
				t.Fatal(err)
			}
			if got := cfg.Gateways.SMS.WebhookSharedKeys; !slices.Equal(got, c.want) {
				t.Errorf("webhook_shared_key %q, want %q", got, c.want)
			}
		})
	}
}
