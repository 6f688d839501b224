package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/natsd"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

// TestSIGHUPDrainsAProcessWithoutSkills: a process holding no skills has
// nothing to scan again on a SIGHUP (a terminal closed under it, say): it
// drains and stops as on SIGTERM, exit code 0, not at once by the
// signal's default.
func TestSIGHUPDrainsAProcessWithoutSkills(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	cmd := exec.Command(binary(t), "fakellm", "--addr", addr)
	// No controlling terminal: its hang-up would stop the process anyway.
	out, done := startDetached(t, cmd)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fakellm not listening on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("fakellm ended by %v, want a drain and exit 0\n%s", exit, out.String())
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "SIGHUP: this process holds no skills") {
			t.Errorf("no word of the SIGHUP in its output:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fakellm still running 30 s after SIGHUP\n%s", out.String())
	}
}

// TestHangupWhileStartingReloadsSkills: a SIGHUP meant as a reload
// (kill -HUP, a supervisor's reload) that reaches a process holding
// skills while it still starts, here held connecting to Postgres before
// it listens for skill reloads, is carried out as a reload once it
// runs; it never stops the process.
func TestHangupWhileStartingReloadsSkills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs switchboard processes")
	}
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  func(t *testing.T) []string
	}{
		{"router", []string{"router", "--ops-addr", "127.0.0.1:0"}, func(t *testing.T) []string {
			srv, err := natsd.Start(natsd.Config{Port: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Shutdown)
			return []string{"NATS_URL=" + srv.ClientURL()}
		}},
		{"dev", []string{"dev", "--ops-addr", "127.0.0.1:0"}, func(t *testing.T) []string {
			return []string{"SWITCHBOARD_DEV__NATS_PORT=-1", "SWITCHBOARD_DEV__NATS_STORE_DIR=",
				"SWITCHBOARD_ADMIN__ADDR=127.0.0.1:0", "SWITCHBOARD_DELIVERY__GRPC_ADDR=127.0.0.1:0",
				"SWITCHBOARD_GATEWAYS__API__ADDR=127.0.0.1:0", "SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR=127.0.0.1:0",
				"API_SERVER_KEY=", "TELEGRAM_BOT_TOKEN=", "DISCORD_BOT_TOKEN=", "SLACK_BOT_TOKEN=", "WHATSAPP_ACCESS_TOKEN=",
				"TWILIO_ACCOUNT_SID=", "LINE_CHANNEL_ACCESS_TOKEN=",
				"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "ANTHROPIC_API_KEY=", "ANTHROPIC_BASE_URL="}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "review"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "review", "SKILL.md"), []byte("---\nname: code-review\n---\nRead the diff.\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, dbURL := pgtest.NewWithURL(t)
			_, redisPrefix := redistest.New(t)
			pgHeld := holdPostgres(t, dbURL)
			cmd := exec.Command(binary(t), tc.args...)
			cmd.Env = append(append(os.Environ(), "DATABASE_URL="+pgHeld.url, "SWITCHBOARD_REDIS__PREFIX="+redisPrefix,
				"SWITCHBOARD_SKILLS__DIRS="+dir, "LOG_LEVEL=info"), tc.env(t)...)
			// A session of its own: no controlling terminal, as under
			// systemd or in a container.
			out, done := startDetached(t, cmd)

			select {
			case <-pgHeld.accepted:
			case err := <-done:
				t.Fatalf("%s ended before it connected to Postgres: %v\n%s", tc.name, err, out.String())
			case <-time.After(60 * time.Second):
				t.Fatalf("%s never connected to Postgres\n%s", tc.name, out.String())
			}
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			pgHeld.release()
			reloaded := func() bool {
				log := out.String()
				return strings.Contains(log, "SIGHUP: reloading skills") && strings.Count(log, `"msg":"skills loaded"`) >= 2
			}
			deadline := time.After(90 * time.Second)
			for !reloaded() {
				select {
				case err := <-done:
					t.Fatalf("%s ended (%v) by a SIGHUP sent as it started; want a skill reload once it runs\n%s", tc.name, err, out.String())
				case <-deadline:
					t.Fatalf("%s did not reload its skills after a SIGHUP sent as it started\n%s", tc.name, out.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
}

// heldPostgres is a TCP proxy to Postgres that holds every connection
// until release: a process that connects through it waits in its
// start-up meanwhile.
type heldPostgres struct {
	url      string        // the database URL through the proxy
	accepted chan struct{} // closed at the first connection
	released chan struct{}
	once     sync.Once
}

func (h *heldPostgres) release() { h.once.Do(func() { close(h.released) }) }

func holdPostgres(t *testing.T, dbURL string) *heldPostgres {
	t.Helper()
	p := listenProxy(t, dbURL)
	h := &heldPostgres{url: p.url, accepted: make(chan struct{}), released: make(chan struct{})}
	var first sync.Once
	p.accept(func(c net.Conn) {
		first.Do(func() { close(h.accepted) })
		p.run(func() {
			select {
			case <-h.released:
			case <-p.ended:
				return
			}
			pg, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.track(pg)
			go func() { _, _ = io.Copy(pg, c); pg.Close() }()
			_, _ = io.Copy(c, pg)
			c.Close()
		})
	})
	return h
}

// proxyListener is a test proxy's listener in front of target (the
// host of the URL it was made for; url is that URL with the proxy's
// address): its connections are tracked, and at the test's end ended is
// closed, the listener and every connection closed and the goroutines
// started with run waited for.
type proxyListener struct {
	ln          net.Listener
	url, target string
	ended       chan struct{}
	mu          sync.Mutex
	conns       []net.Conn
	wg          sync.WaitGroup
}

func listenProxy(t *testing.T, rawURL string) *proxyListener {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyListener{ln: ln, target: u.Host, ended: make(chan struct{})}
	u.Host = ln.Addr().String()
	p.url = u.String()
	t.Cleanup(func() {
		close(p.ended)
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// track closes c at the test's end.
func (p *proxyListener) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

// run runs f in a goroutine the test's end waits for.
func (p *proxyListener) run(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// accept hands each connection, tracked, to serve, in turn, until the
// listener closes.
func (p *proxyListener) accept(serve func(c net.Conn)) {
	p.run(func() {
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.track(c)
			serve(c)
		}
	})
}

// TestHangupDecision: what a SIGHUP does, by how the process started,
// whether its terminal went with the signal, and whether it holds
// skills. A SIGHUP ignored at start (nohup) stays ignored; the hang-up
// of a terminal stops `switchboard dev` with skills too; any other
// (systemd, containers with a terminal or not, kill -HUP) reloads
// skills where there are some and stops any other process.
func TestHangupDecision(t *testing.T) {
	for _, tc := range []struct {
		ignored, hungUp, holds bool
		want                   hangupAction
	}{
		{ignored: true, hungUp: false, holds: false, want: hangupIgnore},
		{ignored: true, hungUp: false, holds: true, want: hangupIgnore},
		{ignored: true, hungUp: true, holds: false, want: hangupIgnore},
		{ignored: true, hungUp: true, holds: true, want: hangupIgnore},
		{ignored: false, hungUp: true, holds: false, want: hangupStop},
		{ignored: false, hungUp: true, holds: true, want: hangupStop},
		{ignored: false, hungUp: false, holds: false, want: hangupStop},
		{ignored: false, hungUp: false, holds: true, want: hangupReload},
	} {
		if got := onHangup(tc.ignored, tc.hungUp, tc.holds); got != tc.want {
			t.Errorf("onHangup(ignored %v, hung up %v, holds skills %v) = %v, want %v", tc.ignored, tc.hungUp, tc.holds, got, tc.want)
		}
	}
}

// TestTerminalHungUp: a SIGHUP is the terminal's hang-up when the
// terminal is gone, at once or within the settle time (a shell's
// huponexit signals its jobs before it leaves the terminal); a terminal
// that stays means an operator's signal.
func TestTerminalHungUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone int // the check from which the terminal is gone (0: never)
		want bool
	}{
		{"gone at once", 1, true},
		{"gone as the shell exits", 4, true},
		{"stays", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checks := 0
			have := func() bool {
				checks++
				return tc.gone == 0 || checks < tc.gone
			}
			if got := terminalHungUp(have, 300*time.Millisecond); got != tc.want {
				t.Errorf("terminalHungUp = %v after %d checks, want %v", got, checks, tc.want)
			}
		})
	}
}

// TestHangupHoldsSkills: a process holds skills where skills.dirs is set
// and it runs the router or the Telegram or Discord gateway.
func TestHangupHoldsSkills(t *testing.T) {
	for _, tc := range []struct {
		dirs     []string
		services []string
		want     bool
	}{
		{nil, []string{"router"}, false},
		{[]string{"/skills"}, []string{"router"}, true},
		{[]string{"/skills"}, []string{"gateway-telegram"}, true},
		{[]string{"/skills"}, []string{"gateway-discord"}, true},
		{[]string{"/skills"}, []string{"gateway-slack"}, false},
		{[]string{"/skills"}, []string{"worker"}, false},
		{[]string{"/skills"}, devServices, true},
		{nil, devServices, false},
	} {
		cfg := defaultConfig()
		cfg.Skills.Dirs = tc.dirs
		if got := holdsSkills(cfg, tc.services); got != tc.want {
			t.Errorf("holdsSkills(dirs %v, %v) = %v, want %v", tc.dirs, tc.services, got, tc.want)
		}
	}
}

// TestHangupIgnoredAtStartStaysIgnored: a process started with SIGHUP
// ignored (nohup, so that closing its terminal leaves it running) keeps
// it ignored: a SIGHUP neither stops it nor reaches it.
func TestHangupIgnoredAtStartStaysIgnored(t *testing.T) {
	t.Parallel()
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup")
	}
	addr := freeAddr(t)
	cmd := exec.Command(nohup, binary(t), "fakellm", "--addr", addr)
	out, done := startDetached(t, cmd)
	waitFor(t, 30*time.Second, "fakellm listening on "+addr, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	// Listening, it has set up its signals: SIGHUP must still be
	// ignored, not caught.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	ignored, caught := sigMask(t, string(status), "SigIgn"), sigMask(t, string(status), "SigCgt")
	if hup := uint64(1) << (syscall.SIGHUP - 1); ignored&hup == 0 || caught&hup != 0 {
		t.Fatalf("SIGHUP ignored %v, caught %v; want it left ignored as nohup set it\n%s", ignored&hup != 0, caught&hup != 0, status)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fakellm after SIGHUP and SIGTERM: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fakellm still running 30 s after SIGTERM\n%s", out.String())
	}
	if strings.Contains(out.String(), "SIGHUP") {
		t.Errorf("the SIGHUP reached it:\n%s", out.String())
	}
}

// sigMask reads a signal mask line (SigIgn, SigCgt) of /proc/<pid>/status.
func sigMask(t *testing.T, status, name string) uint64 {
	t.Helper()
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return m
		}
	}
	t.Fatalf("no %s in /proc status:\n%s", name, status)
	return 0
}

// TestHangupOfATerminalStopsAProcessWithSkills: a router with
// skills.dirs whose terminal hangs up drains and stops, as a `switchboard
// dev` in a closed terminal window must, instead of scanning its skills
// again. script(1) runs it on a pseudo-terminal of its own, its
// controlling terminal; killing script closes the terminal, and the
// kernel sends the router SIGHUP.
func TestHangupOfATerminalStopsAProcessWithSkills(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a switchboard process")
	}
	t.Parallel()
	r := routerOnATerminal(t)
	r.hangUp()
	deadline := time.Now().Add(60 * time.Second)
	for !r.ended() {
		if time.Now().After(deadline) {
			t.Fatalf("router still running 60 s after its terminal hung up\n%s", r.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := r.log(); !strings.Contains(got, "SIGHUP: taken for the hang-up of the terminal") || !strings.Contains(got, `"msg":"stopped"`) ||
		strings.Contains(got, "SIGHUP: reloading skills") {
		t.Errorf("want a drain and stop on the terminal's hang-up, no reload:\n%s", got)
	}
}

// TestHangupFromAnOperatorReloadsAProcessWithATerminal: a SIGHUP that
// leaves the process its terminal is an operator's (kill -HUP from
// another shell, docker kill -s HUP on a container run with -t or
// compose's tty: true): a router holding skills scans them again and
// goes on. Every SIGHUP to a process with a terminal was taken for the
// terminal's hang-up, and the router stopped.
func TestHangupFromAnOperatorReloadsAProcessWithATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a switchboard process")
	}
	t.Parallel()
	r := routerOnATerminal(t)
	if err := syscall.Kill(r.pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reloaded := func() bool {
		log := r.log()
		return strings.Contains(log, "SIGHUP: reloading skills") && strings.Count(log, `"msg":"skills loaded"`) >= 2
	}
	deadline := time.Now().Add(60 * time.Second)
	for !reloaded() {
		if r.ended() || strings.Contains(r.log(), "SIGHUP: taken for") {
			t.Fatalf("the router stopped on an operator's SIGHUP; want a skill reload\n%s", r.log())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no skill reload 60 s after an operator's SIGHUP\n%s", r.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.ended() {
		t.Fatalf("the router ended after reloading its skills\n%s", r.log())
	}
}

// terminalRouter is a router process with skills.dirs on a terminal of
// its own.
type terminalRouter struct {
	pid int
	// log is what the router wrote to its log file so far.
	log func() string
	// hangUp closes its terminal: script(1), which holds it, is killed.
	hangUp func()
}

// ended: the router is gone, or a zombie its new parent has not reaped.
func (r *terminalRouter) ended() bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// routerOnATerminal starts a router with skills under script(1), which
// runs it on a pseudo-terminal of its own, its controlling terminal, and
// waits until it runs. It is killed at the test's end.
func routerOnATerminal(t *testing.T) *terminalRouter {
	t.Helper()
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no script(1) to give the process a terminal")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "review"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "review", "SKILL.md"), []byte("---\nname: code-review\n---\nRead the diff.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := natsd.Start(natsd.Config{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, dbURL := pgtest.NewWithURL(t)
	_, redisPrefix := redistest.New(t)
	logFile := filepath.Join(t.TempDir(), "router.log")
	// The router's log goes to a file, which outlives the terminal.
	cmd := exec.Command(scriptBin, "-qfec", "exec "+binary(t)+" router --ops-addr 127.0.0.1:0 2>"+logFile, "/dev/null")
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(), "DATABASE_URL="+dbURL,
		"SWITCHBOARD_REDIS__PREFIX="+redisPrefix, "SWITCHBOARD_SKILLS__DIRS="+dir, "LOG_LEVEL=info")
	// Not startDetached: script's output stays unread, so that no pipe
	// of ours reaches the router and waiting for script waits for
	// script alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	r := &terminalRouter{log: func() string {
		b, _ := os.ReadFile(logFile)
		return string(b)
	}}
	waitFor(t, 60*time.Second, "the router to start", func() bool { return strings.Contains(r.log(), `"msg":"started"`) })
	// script's child, the shell it ran, became the router (exec).
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc children list: %v", err)
	}
	if r.pid, err = strconv.Atoi(strings.TrimSpace(string(children))); err != nil {
		t.Fatalf("script's children %q: %v", children, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(r.pid, syscall.SIGKILL) })
	r.hangUp = func() {
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	return r
}

// startDetached starts cmd in a session of its own (no controlling
// terminal, as under systemd or in a container), its output in out,
// read while it may still write; done gets its end, and it is killed at
// the test's end.
func startDetached(t *testing.T, cmd *exec.Cmd) (out *logtest.Buffer, done <-chan error) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out = &logtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return out, ended
}
