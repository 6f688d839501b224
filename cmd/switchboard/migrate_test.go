package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `switchboard migrate` reports an unknown or misplaced config key with
// the nearest valid path, as every service does at startup: a misspelt
// postgres key would otherwise migrate the default database in silence.
// The database here refuses the connection; the warning comes before.
func TestMigrateReportsUnknownConfigKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "switchboard.yaml")
	yaml := "postgres:\n  url: postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=5\n  ulr: postgres://db.example.test/switchboard\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs bytes.Buffer
	if err := migrate(ctx, []string{"--config", path}, &logs); err == nil {
		t.Fatal("migrate with an unreachable database succeeded")
	}
	if !strings.Contains(logs.String(), `unknown config key \"postgres.ulr\"`) || !strings.Contains(logs.String(), `did you mean \"postgres.url\"?`) {
		t.Errorf("migrate logged %q, want the unknown key and the nearest valid one", logs.String())
	}
}
