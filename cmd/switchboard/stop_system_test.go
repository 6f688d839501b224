package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestWholeSystemStopsWhatNobodyWaitsFor runs every service in this
// process with the fake model:
//   - a stateless request whose client leaves mid-turn has its turn
//     stopped (the gateway's /stop), not run to its end;
//   - /stop in a conversation other requests wait in answers at once
//     ("interrupted") the request whose turn it stopped and those whose
//     waiting messages it dropped, instead of at the reply timeout.
func TestWholeSystemStopsWhatNobodyWaitsFor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	d := startInProcessDev(t)

	t.Run("client leaves", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if _, err := chat(ctx, d.apiAddr, "", "leave me [[latency:40s]]"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the slow request ended with %v", err)
		}
		// The turn ends superseded (its worker's log says so) long before
		// the model's 40 s; no table keeps a turn that never answered.
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(d.logs.String(), `"msg":"turn superseded; abandoning"`) {
			if time.Now().After(deadline) {
				t.Fatalf("the turn of a request whose client left still runs after %s", time.Since(start))
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("stop drops waiting requests", func(t *testing.T) {
		session := randomID()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// The running request's turn is stopped: its worker, told so by
		// the router, answers it; the waiting ones are the router's.
		running := make(chan error, 1)
		go func() {
			_, err := chat(ctx, d.apiAddr, session, "long [[latency:40s]]")
			running <- err
		}()
		time.Sleep(500 * time.Millisecond)
		errs := make(chan error, 2)
		for _, text := range []string{"second", "third"} {
			go func() {
				_, err := chat(ctx, d.apiAddr, session, text)
				errs <- err
			}()
		}
		time.Sleep(500 * time.Millisecond)
		stopped := time.Now()
		answer, err := chat(ctx, d.apiAddr, session, "/stop")
		if err != nil || !strings.Contains(answer, "2 waiting messages dropped") {
			t.Fatalf("/stop: %q, %v", answer, err)
		}
		for range 2 {
			err := <-errs
			if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "dropped this waiting message") {
				t.Errorf("a dropped request ended with %v; want a 503 that says why", err)
			}
		}
		if err := <-running; err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "Stopped before it answered") {
			t.Errorf("the stopped request ended with %v; want a 503 that says why", err)
		}
		if waited := time.Since(stopped); waited > 20*time.Second {
			t.Fatalf("the stopped and dropped requests ended %s after /stop", waited)
		}
	})
}
