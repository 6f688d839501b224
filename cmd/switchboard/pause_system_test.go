package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestWholeSystemPause runs every service in this process with the fake
// model: /pause holds a new request (answered with the paused notice,
// no turn), /pause off lets the next one reach the agent.
func TestWholeSystemPause(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	d := startInProcessDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session := randomID()
	ask := func(text string) string {
		t.Helper()
		answer, err := chat(ctx, d.apiAddr, session, text)
		if err != nil {
			return "error: " + err.Error()
		}
		return answer
	}
	if got := ask("/pause fire drill"); !strings.HasPrefix(got, "⏸️ Paused (reason: fire drill).") {
		t.Fatalf("/pause: %q", got)
	}
	// The API's caller gets the notice as its answer, at once.
	if got := ask("hello"); got != "⏸️ Switchboard is paused (fire drill). New work is on hold; an admin can send `/pause off` to pick things back up." {
		t.Errorf("a request while paused: %q", got)
	}
	if got := ask("/pause off"); got != "▶️ Resumed — new work is accepted again." {
		t.Fatalf("/pause off: %q", got)
	}
	if got := ask("hello again"); strings.Contains(got, "paused") || strings.HasPrefix(got, "error: ") {
		t.Errorf("a request after /pause off: %q", got)
	}
}
