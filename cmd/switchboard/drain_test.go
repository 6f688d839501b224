package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
)

// workerProcess is a `switchboard worker` subprocess.
type workerProcess struct {
	cmd    *exec.Cmd
	stderr *logtest.Buffer
	done   chan error
}

func startWorkerProcess(t *testing.T, d *inProcessDev) *workerProcess {
	t.Helper()
	w := &workerProcess{stderr: &logtest.Buffer{}, done: make(chan error, 1)}
	w.cmd = exec.Command(binary(t), "worker", "--ops-addr", "127.0.0.1:0")
	w.cmd.Env = append(os.Environ(),
		"NATS_URL="+d.cfg.NATS.URL,
		"DATABASE_URL="+d.cfg.Postgres.URL,
		"SWITCHBOARD_REDIS__PREFIX="+d.cfg.Redis.Prefix,
		"SWITCHBOARD_LLM__PROVIDER=fake",
		"SWITCHBOARD_WORKER__DRAIN_TIMEOUT=20s",
		"LOG_LEVEL=info",
	)
	w.cmd.Stderr = w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() { _ = w.cmd.Process.Kill() })
	return w
}

// TestWorkerSIGTERMUnderLoadLosesNoTurn runs the router, delivery and API
// gateway in this process and two `switchboard worker` processes on the
// same NATS, Postgres schema and Redis prefix. Several sessions send a
// steady stream of slow requests; one worker gets SIGTERM while it runs a
// turn. Every request must get exactly its one answer, every session's
// transcript must hold each message once, and the stopped worker must exit
// 0 within its drain.
func TestWorkerSIGTERMUnderLoadLosesNoTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system with worker processes")
	}
	d := startInProcessDev(t, "router", "delivery", "gateway-api")
	victim := startWorkerProcess(t, d)
	survivor := startWorkerProcess(t, d)
	db, err := pgxpool.New(context.Background(), d.cfg.Postgres.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	const sessions = 6
	loadAt := time.Now()
	stopLoad := make(chan struct{})
	type result struct {
		session string
		sent    []string
		errs    []error
	}
	results := make([]result, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		results[i].session = randomID()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			for n := 0; ; n++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				text := fmt.Sprintf("message %d of session %d", n, i)
				got, err := chat(ctx, d.apiAddr, r.session, text+" [[latency:300ms]]")
				r.sent = append(r.sent, text)
				if err != nil {
					r.errs = append(r.errs, fmt.Errorf("%s: %w", text, err))
					return
				} else if got != "echo: "+text {
					r.errs = append(r.errs, fmt.Errorf("%s: answered %q", text, got))
				}
			}
		}()
	}

	// SIGTERM the victim while it is running turns: after it has started
	// a few and has one in flight (each takes at least 300ms).
	waitFor(t, 30*time.Second, "the victim worker to be running a turn", func() bool {
		log := victim.stderr.String()
		started := strings.Count(log, `"msg":"turn started"`)
		return started >= 3 && started > strings.Count(log, `"msg":"turn completed"`)
	})
	termAt := time.Now()
	t.Logf("load running %s; SIGTERM to the victim", time.Since(loadAt).Round(time.Millisecond))
	if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-victim.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Errorf("worker after SIGTERM: %v; stderr:\n%s", err, victim.stderr.String())
		}
		t.Logf("victim exited %s after SIGTERM", time.Since(termAt).Round(time.Millisecond))
	case <-time.After(25 * time.Second):
		t.Fatalf("worker still running 25s after SIGTERM; stderr:\n%s", victim.stderr.String())
	}
	// Keep the load on the survivor a little longer, then stop sending
	// and let every open request finish.
	time.Sleep(2 * time.Second)
	close(stopLoad)
	wg.Wait()
	t.Logf("load stopped, every request answered, %s after SIGTERM", time.Since(termAt).Round(time.Millisecond))

	total := 0
	for _, r := range results {
		total += len(r.sent)
		for _, err := range r.errs {
			t.Errorf("session %s: %v", r.session, err)
		}
	}
	if t.Failed() {
		var failed []string
		for _, r := range results {
			if len(r.errs) > 0 {
				failed = append(failed, r.session)
			}
		}
		// The whole logs run to megabytes: keep what concerns the failed
		// sessions and every warning.
		t.Fatalf("log lines about %v and warnings:\nvictim:\n%s\nsurvivor:\n%s\nrouter, delivery, api:\n%s", failed,
			relevantLines(victim.stderr.String(), failed), relevantLines(survivor.stderr.String(), failed),
			relevantLines(d.logs.String(), failed))
	}
	t.Logf("%d requests over %d sessions, victim started %d turns", total, sessions,
		strings.Count(victim.stderr.String(), `"msg":"turn started"`))

	// Exactly once: each session's transcript holds every message and its
	// answer once.
	for _, r := range results {
		var users, assistants []string
		rows, err := db.Query(ctx, `SELECT role, content FROM transcript_messages
			WHERE session_key LIKE '%:' || $1 ORDER BY id`, r.session)
		if err != nil {
			t.Fatalf("read transcript: %v", err)
		}
		for rows.Next() {
			var role, content string
			if err := rows.Scan(&role, &content); err != nil {
				t.Fatal(err)
			}
			switch role {
			case "user":
				users = append(users, content)
			case "assistant":
				assistants = append(assistants, content)
			}
		}
		rows.Close()
		if len(users) != len(r.sent) || len(assistants) != len(r.sent) {
			t.Errorf("session %s: sent %d, transcript has %d user and %d assistant messages:\n%q\n%q",
				r.session, len(r.sent), len(users), len(assistants), users, assistants)
		}
	}
}

// relevantLines keeps the log lines that name one of keys or are a
// warning or an error.
func relevantLines(log string, keys []string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		keep := strings.Contains(line, "WARN") || strings.Contains(line, "ERROR")
		for _, k := range keys {
			keep = keep || strings.Contains(line, k)
		}
		if keep {
			b.WriteString(line)
		}
	}
	return b.String()
}
