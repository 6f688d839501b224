package bustest

import (
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// FoundGoneOnTime checks when a replica was found gone (bus.Silence),
// from at, the times the questions whether it is there went out, the
// first of them silent and the last the one that found it gone: that
// last at least bus.GoneGrace (less its 50 ms for the ticks) after the
// first, the one before it less. Judged by those times, not by how many
// questions were asked: a round or tick taken late on a busy machine
// moves the question that finds the replica gone. slack allows for a
// question's round trip on a racing machine.
func FoundGoneOnTime(t testing.TB, at []time.Time) {
	t.Helper()
	const (
		grace = bus.GoneGrace - 50*time.Millisecond // less the ticks' jitter
		slack = 20 * time.Millisecond
	)
	if len(at) < 2 {
		t.Fatalf("found gone after %d questions, want a silence of %v first", len(at), grace)
	}
	last, before := at[len(at)-1].Sub(at[0]), at[len(at)-2].Sub(at[0])
	if last < grace-slack {
		t.Errorf("found gone by a question %v after the first silent one, want at least %v", last, grace)
	}
	if before >= grace+slack {
		t.Errorf("not found gone by a question %v after the first silent one, want found by the first at or after %v (found %v after)", before, grace, last)
	}
}
