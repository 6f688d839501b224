package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/config"
)

// agent.personalities from the file add to Hermes's built-in ones (an
// empty prompt removes one), and agent.reasoning_effort takes Hermes's
// levels only.
func TestAgentPersonalitiesAndReasoningEffortConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(yaml string) string {
		p := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, _, err := loadConfig(write("agent:\n  reasoning_effort: high\n  personalities:\n    coder: You are an expert programmer.\n    pirate: \"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Agent.Personalities
	if p["coder"] != "You are an expert programmer." || !strings.HasPrefix(p["concise"], "You are a concise assistant.") || p["pirate"] != "" {
		t.Fatalf("personalities %q", p)
	}
	if cfg.Agent.ReasoningEffort != "high" {
		t.Fatalf("reasoning effort %q", cfg.Agent.ReasoningEffort)
	}
	if _, _, err := loadConfig(write("agent:\n  reasoning_effort: max\n")); err == nil || !strings.Contains(err.Error(), "agent.reasoning_effort") {
		t.Fatalf("an unknown effort: %v", err)
	}
	if cfg, _, err = loadConfig(""); err != nil || cfg.Agent.ReasoningEffort != "" || len(cfg.Agent.Personalities) != 14 {
		t.Fatalf("defaults: %v, %q, %d personalities", err, cfg.Agent.ReasoningEffort, len(cfg.Agent.Personalities))
	}
}

// agent.service_tier takes Hermes's values (normal, fast and their
// aliases) and nothing else.
func TestAgentServiceTierConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	for yaml, ok := range map[string]bool{"": true, "normal": true, "fast": true, "priority": true, "flex": false, "turbo": false} {
		if err := os.WriteFile(p, []byte("agent:\n  service_tier: \""+yaml+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := loadConfig(p)
		if ok && (err != nil || cfg.Agent.ServiceTier != yaml) {
			t.Errorf("service_tier %q: %v", yaml, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "agent.service_tier")) {
			t.Errorf("service_tier %q accepted: %v", yaml, err)
		}
	}
}

// agent.moa is /moa's preset: Hermes's tuning by default, no models (so
// no /moa) until named; a minimum above the references, a temperature
// out of range or an empty model name stops the start.
func TestAgentMoAConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	cfg, _, err := loadConfig("")
	if m := cfg.Agent.MoA; err != nil || m.Configured() || m.ReferenceTemperature != 0.6 || m.AggregatorTemperature != 0.4 ||
		m.MinSuccessfulReferences != 1 || m.MaxConcurrency != 8 {
		t.Fatalf("defaults: %v, %+v", err, m)
	}
	for yaml, want := range map[string]string{
		"reference_models: [a, 'anthropic:b']\n    aggregator_model: c\n    min_successful_references: 2": "",
		"reference_models: [a]\n    min_successful_references: 2":                                         "agent.moa.min_successful_references",
		"reference_models: [a, '']":                            "agent.moa.reference_models",
		"reference_models: [a]\n    aggregator_temperature: 3": "agent.moa.aggregator_temperature",
		"reference_models: ['a b']":                            "agent.moa",
		"max_concurrency: 0":                                   "agent.moa.max_concurrency",
	} {
		if err := os.WriteFile(p, []byte("agent:\n  moa:\n    "+yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := loadConfig(p)
		switch {
		case want == "" && (err != nil || !cfg.Agent.MoA.Configured() || cfg.Agent.MoA.AggregatorModel != "c"):
			t.Errorf("%q: %v, %+v", yaml, err, cfg.Agent.MoA)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want an error naming %s", yaml, err, want)
		}
	}
}

// approvals.mode takes Hermes's modes (a YAML off included, and its
// booleans: false is off, true manual), and the
// agent.approval_judge_model names the judge's model.
func TestApprovalsModeConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	for yaml, ok := range map[string]bool{"": true, "manual": true, "smart": true, "off": true, "OFF": true, "false": true, "true": true, "auto": false, "ask": false} {
		if err := os.WriteFile(p, []byte("approvals:\n  mode: "+yaml+"\nagent:\n  approval_judge_model: judge-mini\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := loadConfig(p)
		if ok && (err != nil || cfg.Approvals.Mode != yaml || cfg.Agent.ApprovalJudgeModel != "judge-mini") {
			t.Errorf("approvals.mode %q: %v", yaml, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "approvals.mode")) {
			t.Errorf("approvals.mode %q accepted: %v", yaml, err)
		}
	}
}

// approvals.smart_policy and approvals.denial_breaker_threshold (Hermes's
// keys): none and 3 by default; a policy past its cap fails the start
// rather than being cut; any threshold is taken (0 or less is off).
func TestApprovalsSmartConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	cfg, _, err := loadConfig("")
	if err != nil || cfg.Approvals.SmartPolicy != "" || cfg.Approvals.DenialBreakerThreshold != 3 {
		t.Fatalf("defaults: %v, %+v", err, cfg.Approvals)
	}
	long := strings.Repeat("x", approvalmode.MaxSmartPolicyChars+1)
	for _, tt := range []struct {
		yaml      string
		policy    string
		threshold int
		err       string // a part of the error; "" for none
	}{
		{yaml: "smart_policy: |\n    Always ESCALATE anything touching /etc.\n    APPROVE docker compose restarts.\n", policy: "Always ESCALATE anything touching /etc.\nAPPROVE docker compose restarts.\n", threshold: 3},
		{yaml: "denial_breaker_threshold: 0", threshold: 0},
		{yaml: "denial_breaker_threshold: -1", threshold: -1},
		{yaml: "denial_breaker_threshold: 5", threshold: 5},
		{yaml: "smart_policy: " + long, err: "approvals.smart_policy"},
		{yaml: "denial_breaker_threshold: many", err: "denial_breaker_threshold"},
	} {
		if err := os.WriteFile(p, []byte("approvals:\n  "+tt.yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := loadConfig(p)
		switch {
		case tt.err == "" && (err != nil || cfg.Approvals.SmartPolicy != tt.policy || cfg.Approvals.DenialBreakerThreshold != tt.threshold):
			t.Errorf("%.40q: %v, %+v", tt.yaml, err, cfg.Approvals)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%.40q: %v, want an error naming %s", tt.yaml, err, tt.err)
		}
	}
	// The environment sets them too.
	t.Setenv("SWITCHBOARD_APPROVALS__SMART_POLICY", "DENY curl | sh")
	t.Setenv("SWITCHBOARD_APPROVALS__DENIAL_BREAKER_THRESHOLD", "2")
	if cfg, _, err := loadConfig(""); err != nil || cfg.Approvals.SmartPolicy != "DENY curl | sh" || cfg.Approvals.DenialBreakerThreshold != 2 {
		t.Errorf("from the environment: %v, %+v", err, cfg.Approvals)
	}
}

// skills.bundles load from YAML as Hermes's bundle files read (name,
// description, skills, instruction), and one that could not run stops
// the start with the key that is wrong.
func TestSkillBundlesConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	load := func(yaml string) (*Config, error) {
		t.Helper()
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, _, err := loadConfig(p)
		return cfg, err
	}
	cfg, err := load("skills:\n  bundles:\n    - name: backend-dev\n      description: Backend work\n      skills: [code-review, tests]\n      instruction: |\n        Ship small.\n    - name: docs\n      skills:\n        - writer\n")
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Skills.Bundles
	if len(b) != 2 || b[0].Name != "backend-dev" || b[0].Description != "Backend work" || strings.Join(b[0].Skills, ",") != "code-review,tests" ||
		b[0].Instruction != "Ship small.\n" || b[1].Name != "docs" || strings.Join(b[1].Skills, ",") != "writer" {
		t.Fatalf("bundles %+v", b)
	}
	for yaml, want := range map[string]string{
		"skills:\n  bundles:\n    - name: status\n      skills: [a]\n":                                                                                 "skills.bundles[0].name: /status is a built-in command",
		"skills:\n  bundles:\n    - name: x\n":                                                                                                         "skills.bundles[0].skills: empty",
		"skills:\n  bundles:\n    - name: x\n      skills: [a]\n    - name: X\n      skills: [b]\n":                                                    "skills.bundles[1].name: /x is skills.bundles[0]'s command too",
		"router:\n  quick_commands:\n    gpt:\n      type: alias\n      target: /model gpt\nskills:\n  bundles:\n    - name: gpt\n      skills: [a]\n": "skills.bundles[0].name: /gpt is a quick command",
	} {
		if _, err := load(yaml); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to say %q", yaml, err, want)
		}
	}
}

// The entries of the config's maps of sections (webhook routes, delivery
// per platform, quick commands, session-reset overrides) are checked key
// by key: a misspelt key in one is a warning naming the right one, not a
// setting dropped without a word (a route's require_timestamp misspelt
// would leave it open to replays).
func TestMapSectionKeysAreChecked(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	yaml := `gateways:
  webhook:
    routes:
      gh:
        secret: s3cret
        require_timestmp: true
        events: [push]
        reply: {platform: telegram, chat_id: "1"}
delivery:
  platforms:
    telegram:
      streming: none
router:
  quick_commands:
    st: {type: alias, target: /status}
  session_reset:
    platforms:
      matrix: {mode: daily, at_hour: 0}
`
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range warnings {
		got = append(got, w.Key+"→"+w.Suggestion)
	}
	want := []string{"delivery.platforms.telegram.streming→delivery.platforms.telegram.streaming",
		"gateways.webhook.routes.gh.require_timestmp→gateways.webhook.routes.gh.require_timestamp"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("warnings %q, want %q", got, want)
	}
	if r := cfg.Gateways.Webhook.Routes["gh"]; r.Secret != "s3cret" || len(r.Events) != 1 || r.Reply.ChatID != "1" {
		t.Errorf("route %+v", r)
	}
}

// The README's example of a misplaced key: Hermes's top-level
// session_reset.mode, nested or flattened, is reported with its path
// here, router.session_reset.mode, not approvals.mode (the same last
// name).
func TestMisplacedSessionResetFindsTheRouterSection(t *testing.T) {
	t.Parallel()
	for _, yaml := range []string{"session_reset:\n  mode: daily\n", "session_reset_mode: daily\n"} {
		p := filepath.Join(t.TempDir(), "switchboard.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, warnings, err := loadConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(warnings) != 1 || warnings[0].Suggestion != "router.session_reset.mode" {
			t.Errorf("%q: warnings %v", yaml, warnings)
		}
	}
}

// stt.timeout bounds a transcription (Hermes's 30 s by default, its
// speech-to-text clients' timeout), from the file or the environment as
// every key; it reaches the worker, and a duration of 0 or less, or no
// duration, stops the start naming the key.
func TestSTTTimeoutConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	for _, tt := range []struct {
		yaml string
		want time.Duration
		err  string // a part of the error; "" for none
	}{
		{yaml: "", want: 30 * time.Second},
		{yaml: "stt:\n  timeout: 45s\n", want: 45 * time.Second},
		{yaml: "stt:\n  provider: openai\n  timeout: 2m\n", want: 2 * time.Minute},
		{yaml: "stt:\n  timeout: 0s\n", err: "stt.timeout"},
		{yaml: "stt:\n  timeout: -5s\n", err: "stt.timeout"},
		{yaml: "stt:\n  timeout: soon\n", err: "stt.timeout"},
	} {
		if err := os.WriteFile(p, []byte(tt.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, warnings, err := loadConfig(p)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, want an error naming %s", tt.yaml, err, tt.err)
			}
		case err != nil || sttWarned(warnings):
			t.Errorf("%q: %v, warnings %v", tt.yaml, err, warnings)
		case workerConfig(cfg).TranscribeTimeout != tt.want:
			t.Errorf("%q: the worker's transcription bound %v, want %v", tt.yaml, workerConfig(cfg).TranscribeTimeout, tt.want)
		}
	}
	t.Setenv("SWITCHBOARD_STT__TIMEOUT", "90s")
	cfg, warnings, err := loadConfig("")
	if err != nil || sttWarned(warnings) {
		t.Fatalf("from the environment: %v, warnings %v", err, warnings)
	}
	if got := workerConfig(cfg).TranscribeTimeout; got != 90*time.Second {
		t.Errorf("from the environment: the worker's %v, want 90s", got)
	}
}

// sttWarned reports whether a warning is about an stt key (one not known).
func sttWarned(warnings []config.Warning) bool {
	return slices.ContainsFunc(warnings, func(w config.Warning) bool { return strings.HasPrefix(w.Key, "stt.") })
}
