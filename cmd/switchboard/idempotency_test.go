package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/services/gateway/api"
)

// apiReplica is an API gateway replica with its own NATS connection,
// beside an in-process dev system.
type apiReplica struct {
	svc  *api.Service
	stop func()
}

func startAPIReplica(t *testing.T, d *inProcessDev, name string) *apiReplica {
	t.Helper()
	b, err := bus.Connect(d.cfg.NATS.URL, name, (&app{cfg: d.cfg}).topology(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.DefaultConfig()
	cfg.Addr, cfg.Key, cfg.Insecure, cfg.RateLimit = "127.0.0.1:0", "", true, 0
	// A stopped replica gives up on its waiting requests at once: the
	// tests retry them on another replica.
	cfg.ShutdownGrace = 0
	svc, err := api.New(cfg, api.Deps{Log: slog.Default().With("replica", name), Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	r := &apiReplica{svc: svc}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
		_ = b.Close()
	}
	t.Cleanup(r.stop)
	<-svc.Listening()
	waitFor(t, 20*time.Second, name+" ready", func() bool { return svc.Ready(ctx) == nil })
	return r
}

type keyedResult struct {
	code   int
	answer string
	err    error
}

// keyedChat sends one chat completion with a session and an
// Idempotency-Key, as a client that retries would.
func keyedChat(addr, session, key, text string) keyedResult {
	body, _ := json.Marshal(map[string]any{"model": "switchboard", "messages": []map[string]string{{"role": "user", "content": text}}})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-Id", session)
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return keyedResult{err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return keyedResult{code: resp.StatusCode, err: fmt.Errorf("status %d: %s", resp.StatusCode, raw)}
	}
	answer, _, ok := decodeCompletion(raw)
	if !ok {
		return keyedResult{code: resp.StatusCode, err: fmt.Errorf("not a completion: %s", raw)}
	}
	return keyedResult{code: resp.StatusCode, answer: answer}
}

// TestAPIRetryOnAnotherGatewayRunsOneTurn runs router, worker and
// delivery, and two API gateway replicas. A request with an
// Idempotency-Key goes to replica A, which stops while the turn runs;
// the client retries on replica B with the same key. Exactly one turn
// runs, the retry gets its answer, the transcript holds the exchange
// once; a retry after completion gets the same answer without a turn.
func TestAPIRetryOnAnotherGatewayRunsOneTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	d := startInProcessDev(t, "router", "worker", "delivery")
	a := startAPIReplica(t, d, "api-a")
	b := startAPIReplica(t, d, "api-b")
	db, err := pgxpool.New(context.Background(), d.cfg.Postgres.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	session, key := randomID(), "retry-1"
	sessionKey := "agent:main:api:dm:" + session
	text := "remember this [[latency:4s]]"
	want := "echo: remember this"

	count := func(query string) int {
		var n int
		if err := db.QueryRow(ctx, query, sessionKey).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	turns := func() int { return count(`SELECT count(*) FROM worker_turns WHERE session_key = $1`) }

	first := make(chan keyedResult, 1)
	go func() { first <- keyedChat(a.svc.Addr(), session, key, text) }()
	// Started: the router took the message from the queue and bumped the
	// generation for its turn, which then runs for 4 s.
	waitFor(t, 30*time.Second, "the turn to start", func() bool {
		return count(`SELECT count(*) FROM sessions s WHERE session_key = $1 AND generation > 0
			AND NOT EXISTS (SELECT 1 FROM session_queue q WHERE q.session_key = s.session_key)`) == 1
	})
	a.stop()
	if r := <-first; r.err == nil {
		t.Fatalf("replica A answered %q although it stopped before the answer", r.answer)
	}

	r := keyedChat(b.svc.Addr(), session, key, text)
	if r.err != nil || r.answer != want {
		t.Fatalf("retry on replica B: %q, %v; want %q\nlog:\n%s", r.answer, r.err, want, d.logs.String())
	}
	if n := turns(); n != 1 {
		t.Fatalf("%d turns ran, want 1", n)
	}
	var users, assistants int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE role = 'user'), count(*) FILTER (WHERE role = 'assistant')
		FROM transcript_messages WHERE session_key = $1`, sessionKey).Scan(&users, &assistants); err != nil {
		t.Fatal(err)
	}
	if users != 1 || assistants != 1 {
		t.Fatalf("transcript holds %d user and %d assistant messages, want 1 and 1", users, assistants)
	}

	// After completion: the same answer, and no new turn.
	again := keyedChat(b.svc.Addr(), session, key, text)
	if again.err != nil || again.answer != want {
		t.Fatalf("retry after completion: %q, %v; want %q", again.answer, again.err, want)
	}
	if n := turns(); n != 1 {
		t.Fatalf("%d turns after the second retry, want 1", n)
	}

	// A failed turn's error is the stored answer too: a retry with the key
	// gets the same error, and no second turn runs.
	failSession := randomID()
	for i := range 2 {
		r := keyedChat(b.svc.Addr(), failSession, "retry-fail", "[[fail:402]] pay")
		if r.code != http.StatusTooManyRequests || r.err == nil || !strings.Contains(r.err.Error(), "insufficient_quota") {
			t.Fatalf("failed turn, attempt %d: %d %v", i+1, r.code, r.err)
		}
	}
	var failedTurns int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM worker_turns WHERE session_key = $1`, "agent:main:api:dm:"+failSession).Scan(&failedTurns); err != nil || failedTurns != 1 {
		t.Fatalf("%d turns for the failing request (%v), want 1", failedTurns, err)
	}
}
