package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

// TestPseudonymCommand: the command prints what a process with the same
// configuration logs in place of a session key or an id, and the
// defaults pseudonymize; SWITCHBOARD_LOG__PSEUDONYMIZE=false turns it off.
func TestPseudonymCommand(t *testing.T) {
	t.Setenv("SWITCHBOARD_LOG__PSEUDONYM_KEY", "ops secret")
	cfg, _, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Log.Pseudonymize || cfg.Log.PseudonymKey != "ops secret" {
		t.Fatalf("log config %+v: want pseudonyms on by default, keyed from the environment", cfg.Log)
	}
	const key = "agent:main:telegram:dm:123456789"
	var logs bytes.Buffer
	telemetry.NewLogger(cfg.Log, &logs).Info("turn", "session_key", key, "user_id", "123456789")

	var out, errOut bytes.Buffer
	printPseudonyms(&out, &errOut, cfg.Log, []string{key, "123456789"})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "agent:main:telegram:dm:#") || strings.Contains(out.String(), "123456789") {
		t.Fatalf("printed %q", out.String())
	}
	for _, want := range []string{`"session_key":"` + lines[0] + `"`, `"user_id":"` + lines[1] + `"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log line %s has no %s", logs.String(), want)
		}
	}
	if errOut.Len() != 0 {
		t.Errorf("stderr: %s", errOut.String())
	}

	t.Setenv("SWITCHBOARD_LOG__PSEUDONYMIZE", "false")
	if cfg, _, err = loadConfig(""); err != nil || cfg.Log.Pseudonymize {
		t.Fatalf("SWITCHBOARD_LOG__PSEUDONYMIZE=false: %v, %+v", err, cfg.Log)
	}
	errOut.Reset()
	printPseudonyms(&out, &errOut, cfg.Log, []string{key})
	if !strings.Contains(errOut.String(), "log.pseudonymize is off") {
		t.Errorf("no note that pseudonyms are off: %q", errOut.String())
	}
}

// TestPseudonymCommandShapes: for a chat key, a bus message id, a router
// notice's turn id and a delivery key made of one, the command prints
// what the logs show for them, not one pseudonym of the whole value.
func TestPseudonymCommandShapes(t *testing.T) {
	cfg := telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "ops secret"}
	tests := []struct{ attr, value string }{
		{"chat_key", "whatsapp:main:15551234567"},
		{"chat_key", "telegram:8000000001:-1002285219667"},
		{"msg_id", "signal:+15550000000:+15551234567:1700000000000"},
		{"event", "google_chat:aud:spaces/AAAA/messages/BBBB.BBBB"},
		{"turn_id", "notice:signal:main:+15551234567:1700000000000:1"},
		{"key", "press:whatsapp:main:wamid.HBgLMTU1NTEyMzQ1NjcVAgASGBQzQUFC"},
		{"chat_id", "!room:example.org"},
		{"user_id", "+15551234567:17"},
	}
	for _, tt := range tests {
		var logs, out, errOut bytes.Buffer
		telemetry.NewLogger(cfg, &logs).Info("m", tt.attr, tt.value)
		printPseudonyms(&out, &errOut, cfg, []string{tt.value})
		got := strings.TrimSpace(out.String())
		if want := `"` + tt.attr + `":"` + got + `"`; !strings.Contains(logs.String(), want) {
			t.Errorf("%s %s: printed %q, the log shows %s", tt.attr, tt.value, got, logs.String())
		}
	}
}

// `switchboard pseudonym` reports an unknown or misplaced config key with
// the nearest valid path, as every service does at startup: a misspelt
// pseudonym key would otherwise print pseudonyms the logs do not show.
func TestPseudonymCommandReportsUnknownConfigKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	if err := os.WriteFile(path, []byte("log:\n  pseudonym_kye: ops secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := pseudonyms([]string{"--config", path, "123456789"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), `unknown config key "log.pseudonym_kye"`) || !strings.Contains(errOut.String(), `did you mean "log.pseudonym_key"?`) {
		t.Errorf("pseudonym wrote %q to stderr, want the unknown key and the nearest valid one", errOut.String())
	}
	if !strings.HasPrefix(out.String(), "#") {
		t.Errorf("pseudonym printed %q, want the id's pseudonym", out.String())
	}
}
