package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// TestMain removes the binary the tests built. A test run under nohup
// (or by anything else that ignores SIGHUP) would pass the ignore on to
// every process the tests start, which keep an ignored SIGHUP ignored
// (hangup.go); catching the signal here gives them its default instead,
// as exec does for a caught signal.
func TestMain(m *testing.M) {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	code := pgtest.Main(m) // the tests' migrated schemas reused
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binary compiles switchboard once per test run.
func binary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "switchboard-bin-*")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "switchboard")
		// -trimpath, as make test's vet: one build cache entry per
		// package whatever the checkout's path (Makefile, TRIM).
		cmd := exec.Command("go", "build", "-trimpath", "-o", built.bin, ".")
		cmd.Stderr = os.Stderr
		built.err = cmd.Run()
	})
	if built.err != nil {
		t.Fatalf("build switchboard: %v", built.err)
	}
	return built.bin
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for a process the test starts to listen on. The port is below the
// kernel's ephemeral range (ip_local_port_range), from which port 0
// listeners and outgoing connections take theirs, so none of them takes
// it before that process binds it, and never one this test binary handed
// out before: a port 0 listener closed at once hands the next one the
// same port now and then (seen: Teams and Google Chat given one port).
// Where the range leaves no room below it, a port 0 listener's port.
func freeAddr(t *testing.T) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	low := ephemeralLow()
	for range 200 {
		port := 0
		if low > 11024 {
			port = low - 10000 + rand.IntN(10000)
		}
		if handedOut.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		addr := ln.Addr().String()
		ln.Close()
		_, p, _ := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		if handedOut.ports[n] {
			continue
		}
		handedOut.ports[n] = true
		return addr
	}
	t.Fatal("no free loopback port found")
	return ""
}

// handedOut are the ports freeAddr returned in this test binary.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux
// ip_local_port_range; 32768, its default, where it cannot be read).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return low
}

// decodeCompletion reads a /v1/chat/completions answer: the content of
// its first choice, ok when it has one, and the code of an error answer.
func decodeCompletion(raw []byte) (content, code string, ok bool) {
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", "", false
	}
	if len(out.Choices) == 0 {
		return "", out.Error.Code, false
	}
	return out.Choices[0].Message.Content, out.Error.Code, true
}

// devProcess is a running `switchboard dev` with its own Postgres schema,
// Redis prefix, embedded NATS and ports, so tests can run side by side.
type devProcess struct {
	cmd       *exec.Cmd
	stderr    *logtest.Buffer
	endpoints map[string]string // label → address as dev printed them
	banner    []string          // the banner's lines
	apiAddr   string
	db        *pgxpool.Pool  // the process's Postgres schema, for checks
	locker    *redisx.Locker // session locks under the process's Redis prefix
}

// startDev starts the binary and waits until /readyz answers 200.
func startDev(t *testing.T, env ...string) *devProcess {
	t.Helper()
	bin := binary(t)
	db, dbURL := pgtest.NewWithURL(t)
	rdb, redisPrefix := redistest.New(t)
	// The API gateway's port is chosen here, free a moment ago: another
	// test may take it before dev binds it. Then dev retries the bind on
	// its reconnect schedule (tens of seconds), so start again instead.
	for attempt := 1; ; attempt++ {
		d := &devProcess{stderr: &logtest.Buffer{}, endpoints: map[string]string{}, apiAddr: freeAddr(t), db: db,
			locker: redisx.NewLocker(rdb, redisPrefix)}
		err := d.start(t, bin, dbURL, redisPrefix, env)
		if err == nil {
			return d
		}
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			t.Fatalf("%v; stderr:\n%s", err, d.stderr.String())
		}
		t.Logf("start %d: %v; starting again", attempt, err)
	}
}

var errPortTaken = errors.New("the API gateway's port was taken")

// start runs the process and waits for its banner and readiness.
func (d *devProcess) start(t *testing.T, bin, dbURL, redisPrefix string, env []string) error {
	t.Helper()
	d.cmd = exec.Command(bin, "dev", "--ops-addr", "127.0.0.1:0")
	d.cmd.Env = append(append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"SWITCHBOARD_REDIS__PREFIX="+redisPrefix,
		"SWITCHBOARD_DEV__NATS_PORT=-1",
		"SWITCHBOARD_DEV__NATS_STORE_DIR=",
		"SWITCHBOARD_ADMIN__ADDR=127.0.0.1:0",
		"SWITCHBOARD_DELIVERY__GRPC_ADDR=127.0.0.1:0",
		"SWITCHBOARD_GATEWAYS__API__ADDR="+d.apiAddr,
		"SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR=127.0.0.1:0",
		"API_SERVER_KEY=", "TELEGRAM_BOT_TOKEN=", "DISCORD_BOT_TOKEN=", "SLACK_BOT_TOKEN=", "WHATSAPP_ACCESS_TOKEN=", "TWILIO_ACCOUNT_SID=", "LINE_CHANNEL_ACCESS_TOKEN=",
		"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL=",
	), env...)
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	proc := d.cmd.Process
	t.Cleanup(func() { _ = proc.Kill() })

	type printed struct {
		endpoints map[string]string
		lines     []string
	}
	banner := make(chan printed, 1)
	go func() {
		line := regexp.MustCompile(`^  (\S.*?)\s{2,}(\S+)$`)
		got := printed{endpoints: map[string]string{}}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			got.lines = append(got.lines, sc.Text())
			if m := line.FindStringSubmatch(sc.Text()); m != nil {
				got.endpoints[m[1]] = m[2]
			}
			if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
				banner <- got
			}
		}
	}()
	select {
	case p := <-banner:
		d.endpoints, d.banner = p.endpoints, p.lines
	case <-time.After(90 * time.Second):
		return errors.New("dev printed no banner")
	}
	ready := d.endpoints["Readiness"]
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if strings.Contains(d.stderr.String(), "listen "+d.apiAddr) {
			return errPortTaken
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz at %q never answered 200 (last: %v)", ready, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waiter returns a function that polls cond until it holds and fails t,
// with the process's stderr, once ctx ends first.
func (d *devProcess) waiter(ctx context.Context, t *testing.T) func(what string, cond func() bool) {
	return func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s\nstderr:\n%s", what, d.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// stop sends SIGTERM and expects exit 0 within 10 seconds.
func (d *devProcess) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", exit.ExitCode(), d.stderr.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM; stderr:\n%s", d.stderr.String())
	}
}
