package main

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/natsd"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// devEnv is what a `switchboard dev` process of a test needs beside its
// database and Redis prefix: an embedded NATS server and listeners on
// ports of its own, no platform tokens and no real model.
var devEnv = []string{"SWITCHBOARD_DEV__NATS_PORT=-1", "SWITCHBOARD_DEV__NATS_STORE_DIR=",
	"SWITCHBOARD_ADMIN__ADDR=127.0.0.1:0", "SWITCHBOARD_DELIVERY__GRPC_ADDR=127.0.0.1:0",
	"SWITCHBOARD_GATEWAYS__API__ADDR=127.0.0.1:0", "SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR=127.0.0.1:0",
	"API_SERVER_KEY=", "TELEGRAM_BOT_TOKEN=", "DISCORD_BOT_TOKEN=", "SLACK_BOT_TOKEN=", "WHATSAPP_ACCESS_TOKEN=",
	"TWILIO_ACCOUNT_SID=", "LINE_CHANNEL_ACCESS_TOKEN=",
	"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL="}

// stopPoint is where in its start-up a process gets SIGTERM.
type stopPoint string

const (
	// atNATS: connected to NATS, its first JetStream request (stream
	// creation) held unanswered.
	atNATS stopPoint = "creating streams"
	// atPostgres: its connection to Postgres held before the handshake.
	atPostgres stopPoint = "connecting to postgres"
	// atStarted: as it logs "started", while its services still set up
	// (buckets, consumers, listeners).
	atStarted stopPoint = "started"
)

// TestSIGTERMWhileStartingExitsZero: a SIGTERM that reaches a process
// while it starts (a pod deleted as it starts, `docker compose down`
// right after up) stops it as one that comes later does: exit code 0
// and a word of the stop in its log, never a start-up failure. Each
// long-running process gets it at several points of its start-up.
func TestSIGTERMWhileStartingExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("runs switchboard processes")
	}
	t.Parallel()
	type proc struct {
		name   string
		args   []string
		points []stopPoint
		// env is the process's environment beside its database and
		// Redis prefix; natsURL is the NATS server it is to use.
		env func(t *testing.T, natsURL string) []string
	}
	withNATS := func(extra ...string) func(*testing.T, string) []string {
		return func(_ *testing.T, natsURL string) []string { return append([]string{"NATS_URL=" + natsURL}, extra...) }
	}
	all := []stopPoint{atNATS, atPostgres, atStarted}
	for _, p := range []proc{
		{"dev", []string{"dev"}, []stopPoint{atPostgres, atStarted}, func(*testing.T, string) []string { return devEnv }},
		{"router", []string{"router"}, all, withNATS()},
		{"worker", []string{"worker"}, all, withNATS("SWITCHBOARD_LLM__PROVIDER=fake")},
		{"delivery", []string{"delivery"}, all, withNATS("SWITCHBOARD_DELIVERY__GRPC_ADDR=127.0.0.1:0")},
		{"admin", []string{"admin"}, []stopPoint{atPostgres, atStarted}, withNATS("SWITCHBOARD_ADMIN__ADDR=127.0.0.1:0")},
		{"gateway api", []string{"gateway", "api"}, []stopPoint{atNATS, atStarted},
			withNATS("SWITCHBOARD_GATEWAYS__API__ADDR=127.0.0.1:0", "API_SERVER_KEY=a-key-for-the-sigterm-test")},
		{"gateway telegram", []string{"gateway", "telegram"}, []stopPoint{atNATS, atStarted}, func(t *testing.T, natsURL string) []string {
			tg, err := telegramfake.New("4242:term", "termbot")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tg.Close)
			return []string{"NATS_URL=" + natsURL, "TELEGRAM_BOT_TOKEN=4242:term", "TELEGRAM_API_BASE_URL=" + tg.URL}
		}},
	} {
		for _, at := range p.points {
			t.Run(p.name+"/"+string(at), func(t *testing.T) {
				t.Parallel()
				srv, err := natsd.Start(natsd.Config{Port: -1})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Shutdown)
				natsURL := srv.ClientURL()
				_, dbURL := pgtest.NewWithURL(t)
				_, redisPrefix := redistest.New(t)
				var held <-chan struct{}
				switch at {
				case atNATS:
					h := holdNATS(t, natsURL)
					natsURL, held = h.url, h.held
				case atPostgres:
					h := holdPostgres(t, dbURL)
					dbURL, held = h.url, h.accepted
				}
				cmd := exec.Command(binary(t), append(p.args, "--ops-addr", "127.0.0.1:0")...)
				cmd.Env = append(append(os.Environ(), "DATABASE_URL="+dbURL, "SWITCHBOARD_REDIS__PREFIX="+redisPrefix, "LOG_LEVEL=info"),
					p.env(t, natsURL)...)
				out, done := startDetached(t, cmd)

				started := func() bool { return strings.Contains(out.String(), `"msg":"started"`) }
				deadline := time.After(90 * time.Second)
				there := func() bool {
					if at == atStarted {
						return started()
					}
					return isClosed(held)
				}
				for !there() {
					select {
					case err := <-done:
						t.Fatalf("%s ended (%v) before it got to %s\n%s", p.name, err, at, out.String())
					case <-deadline:
						t.Fatalf("%s never got to %s\n%s", p.name, at, out.String())
					case <-time.After(20 * time.Millisecond):
					}
				}
				if at != atStarted && started() {
					t.Fatalf("%s logged started while held %s\n%s", p.name, at, out.String())
				}
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					var exit *exec.ExitError
					if errors.As(err, &exit) {
						t.Fatalf("%s got SIGTERM %s and exited with %v, want 0\n%s", p.name, at, exit, out.String())
					}
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(60 * time.Second):
					t.Fatalf("%s still running 60 s after SIGTERM %s\n%s", p.name, at, out.String())
				}
				want := `"msg":"stopped during start-up"`
				if at == atStarted {
					want = `"msg":"stopped`
				}
				if !strings.Contains(out.String(), want) {
					t.Errorf("%s got SIGTERM %s: no %s in its log\n%s", p.name, at, want, out.String())
				}
			})
		}
	}
}

// TestStartUpFailureWithoutStopExitsNonZero: a start-up that fails
// without a stop signal (Postgres unreachable, a bad config) still ends
// the process with a non-zero code, never taken for a stop.
func TestStartUpFailureWithoutStopExitsNonZero(t *testing.T) {
	if testing.Short() {
		t.Skip("runs switchboard processes")
	}
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := "postgres://postgres@" + ln.Addr().String() + "/test?sslmode=disable&connect_timeout=5"
	ln.Close()
	for _, tc := range []struct {
		name string
		args []string
		env  func(t *testing.T) []string
	}{
		{"dev without postgres", []string{"dev"}, func(*testing.T) []string { return append([]string{"DATABASE_URL=" + unreachable}, devEnv...) }},
		{"router without postgres", []string{"router"}, func(t *testing.T) []string {
			srv, err := natsd.Start(natsd.Config{Port: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Shutdown)
			return []string{"NATS_URL=" + srv.ClientURL(), "DATABASE_URL=" + unreachable}
		}},
		{"gateway api with a bad config", []string{"gateway", "api"}, func(t *testing.T) []string {
			return []string{"NATS_URL=nats://127.0.0.1:1", "SWITCHBOARD_GATEWAYS__API__ADDR="}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, redisPrefix := redistest.New(t)
			cmd := exec.Command(binary(t), append(tc.args, "--ops-addr", "127.0.0.1:0")...)
			cmd.Env = append(append(os.Environ(), "SWITCHBOARD_REDIS__PREFIX="+redisPrefix, "LOG_LEVEL=info"), tc.env(t)...)
			out, done := startDetached(t, cmd)
			select {
			case err := <-done:
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() == 0 {
					t.Fatalf("%s exited with %v, want a non-zero code\n%s", tc.name, err, out.String())
				}
				if strings.Contains(out.String(), "stopped during start-up") {
					t.Errorf("a failed start-up logged as a stop\n%s", out.String())
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s still running 60 s after start\n%s", tc.name, out.String())
			}
		})
	}
}

func isClosed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// heldNATS is a TCP proxy to a NATS server that passes a client's
// handshake (CONNECT, PING) and then holds whatever the client sends
// until the test ends: a process connected through it waits on its first
// request (JetStream's stream creation) meanwhile.
type heldNATS struct {
	url  string
	held chan struct{} // closed when the first request after the handshake is held
}

func holdNATS(t *testing.T, natsURL string) *heldNATS {
	t.Helper()
	p := listenProxy(t, natsURL)
	h := &heldNATS{url: p.url, held: make(chan struct{})}
	var first sync.Once
	p.accept(func(c net.Conn) {
		srv, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			return
		}
		p.track(srv)
		p.run(func() { _, _ = io.Copy(c, srv); c.Close() })
		p.run(func() {
			defer srv.Close()
			var handshake strings.Builder
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if !strings.Contains(handshake.String(), "PING\r\n") {
						handshake.Write(buf[:n])
					} else {
						first.Do(func() { close(h.held) })
						<-p.ended
						return
					}
					if _, werr := srv.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	})
	return h
}
