package main

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

// buildBinary compiles switchboard once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "switchboard")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build switchboard: %v", err)
	}
	return bin
}

// TestDevStartsReadyAndStopsOnSIGTERM runs the real binary the way a
// person does: `switchboard dev`, waits for /readyz, sends SIGTERM and
// expects a clean exit well within 10 seconds.
func TestDevStartsReadyAndStopsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := buildBinary(t)
	_, dbURL := pgtest.NewWithURL(t)
	_, redisPrefix := redistest.New(t)

	cmd := exec.Command(bin, "dev", "--ops-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"SWITCHBOARD_REDIS__PREFIX="+redisPrefix,
		"SWITCHBOARD_DEV__NATS_PORT=-1",
		"SWITCHBOARD_DEV__NATS_STORE_DIR=",
		"SWITCHBOARD_ADMIN__ADDR=127.0.0.1:0",
		"SWITCHBOARD_GATEWAYS__API__ADDR=127.0.0.1:0",
		"SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR=127.0.0.1:0",
		"API_SERVER_KEY=",
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	readyURL := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`Readiness\s+(http://\S+/readyz)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				readyURL <- m[1]
			}
		}
	}()
	var url string
	select {
	case url = <-readyURL:
	case <-time.After(60 * time.Second):
		t.Fatalf("dev printed no readiness URL; stderr:\n%s", stderr.String())
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 (last: %v); stderr:\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", exit.ExitCode(), stderr.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM; stderr:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no clean stop logged; stderr:\n%s", stderr.String())
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	if err := dispatch(context.Background(), []string{"frobnicate"}); !errors.Is(err, errUsage) {
		t.Fatalf("err = %v, want usage error", err)
	}
}

func TestConfigDefaultsAreValid(t *testing.T) {
	t.Parallel()
	if err := defaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestGatewayCommand(t *testing.T) {
	t.Parallel()
	if err := dispatch(context.Background(), []string{"gateway", "nosuchplatform"}); !errors.Is(err, errUsage) {
		t.Fatalf("unknown platform: err = %v, want usage error", err)
	}
	for _, p := range []string{"api", "webhook"} {
		if _, ok := services[gateways[p]]; !ok {
			t.Fatalf("gateway %s has no service", p)
		}
	}
	// Without API_SERVER_KEY the API gateway refuses to start.
	cfg := defaultConfig()
	cfg.Gateways.API.Key = ""
	a := newApp("gateway-api", cfg)
	if _, err := startAPIGateway(context.Background(), a); err == nil || !strings.Contains(err.Error(), "gateways.api.key") {
		t.Fatalf("start without a key: %v", err)
	}
}
