package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// tooManyRuns is Hermes's answer to a run beyond the cap of 2.
const tooManyRuns = `{"error":{"message":"Too many concurrent runs (max 2)","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`

// waitRunStatus waits until run id's status is want.
func waitRunStatus(t *testing.T, s *Service, id, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for runStatusOf(t, s, id).Status != want {
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not become %s", id, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// As Hermes, no more than max_concurrent_runs runs go on at once: one
// more is refused with 429 rate_limit_exceeded and Retry-After: 1, on
// every replica (the slots are the bus's); a run that ends gives its
// slot back, and a retry of an accepted run (Idempotency-Key) is no new
// run.
func TestRunConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	capped := func(c *Config) { c.MaxConcurrentRuns = 2 }
	first := startService(t, b, capped)
	second := startService(t, b, capped)
	agent := startRunAgent(t, b)
	key := map[string]string{HeaderIdempotencyKey: "k-slow"}
	slow, _ := startRun(t, first, `{"input":"slow","session_id":"c1"}`, key)
	startRun(t, second, `{"input":"slow","session_id":"c2"}`, nil)

	for _, s := range []*Service{first, second} {
		r := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/runs", testKey, `{"input":"hello","session_id":"c3"}`, nil)
		if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" || strings.TrimSpace(string(r.body)) != tooManyRuns {
			t.Errorf("a third run: %d %s (Retry-After %q)", r.code, r.body, r.header.Get("Retry-After"))
		}
	}
	if again, r := startRun(t, second, `{"input":"slow","session_id":"c1"}`, key); again != slow || r.header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("retry of an accepted run: %s %s", again, r.body)
	}
	// A refused run was never published nor kept.
	time.Sleep(100 * time.Millisecond)
	if n := len(agent.received()); n != 2 {
		t.Errorf("%d runs published, want 2", n)
	}

	// Stopped, the first gives its slot back: a new run goes, and once it
	// completed, another.
	if r := do(t, http.MethodPost, "http://"+second.Addr()+"/v1/runs/"+slow+"/stop", testKey, "", nil); r.code != http.StatusOK {
		t.Fatalf("stop: %d %s", r.code, r.body)
	}
	waitRunStatus(t, first, slow, runCancelled)
	for range 2 {
		id, _ := startRun(t, second, `{"input":"hello","session_id":"c3"}`, nil)
		waitRunStatus(t, first, id, runCompleted)
	}
}

// A slot whose run can no longer give it back (its replica crashed) is
// taken over once its run has ended or is no longer kept; one whose run
// goes on is not.
func TestRunSlotTakenOver(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		holder func(t *testing.T, s *Service) string
		want   int
	}{
		{"run no longer kept", func(*testing.T, *Service) string { return "run_" + strings.Repeat("0", 32) }, http.StatusAccepted},
		{"run ended", func(t *testing.T, s *Service) string {
			id, _ := startRun(t, s, `{"input":"hello"}`, nil)
			waitRunStatus(t, s, id, runCompleted)
			return id
		}, http.StatusAccepted},
		{"not a run", func(*testing.T, *Service) string { return "garbage" }, http.StatusAccepted},
		{"run going on", func(t *testing.T, s *Service) string {
			id, _ := startRun(t, s, `{"input":"slow"}`, nil)
			return id
		}, http.StatusTooManyRequests},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newBus(t)
			s := startService(t, b, func(c *Config) { c.MaxConcurrentRuns = 1 })
			startRunAgent(t, b)
			holder := c.holder(t, s)
			// As a replica that crashed would leave it: held, never given back.
			kv, err := s.slots.kv.open(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(context.Background(), slotKey(0), []byte(holder)); err != nil {
				t.Fatal(err)
			}
			// A slow run, which goes on (and holds its slot) until the test
			// ends: a run that ended would have given the slot back already.
			r := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/runs", testKey, `{"input":"slow"}`, nil)
			if r.code != c.want {
				t.Fatalf("run: %d %s, want %d", r.code, r.body, c.want)
			}
			if c.want == http.StatusAccepted {
				// It holds the slot now.
				e, err := kv.Get(context.Background(), slotKey(0))
				if err != nil || !strings.Contains(string(r.body), string(e.Value())) {
					t.Errorf("slot holder %v (%v), run %s", e, err, r.body)
				}
			}
		})
	}
}

// With max_concurrent_runs 0 there is no cap.
func TestRunNoConcurrencyLimit(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.MaxConcurrentRuns = 0 })
	startRunAgent(t, b)
	for range 4 {
		startRun(t, s, `{"input":"slow"}`, nil)
	}
}

// A slot given back while a new run takes it over (its run's end is
// being recorded on another replica: its status says ended, the slot is
// not yet deleted) is taken as a free one, not lost to the race.
func TestRunSlotGivenBackDuringTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var rs *runSlots
	rs = newRunSlots(newBus(t), 1, func(ctx context.Context, id string) (bool, error) {
		// The ended run's replica gives the slot back between the
		// takeover's read of the slot and its update.
		return true, rs.give(ctx, id, 1)
	})
	if n, err := rs.take(ctx, "run_ended"); err != nil || n != 1 {
		t.Fatalf("first run: slot %d, %v", n, err)
	}
	if n, err := rs.take(ctx, "run_next"); err != nil || n != 1 {
		t.Fatalf("next run: slot %d, %v; want slot 1", n, err)
	}
}
