package teams

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
)

// TestDeliveryChunksAtTeamsLimit: delivery cuts a Teams answer at the
// gateway's limit, Hermes's 28,000 characters, not at the 4,000 of a
// platform it does not know (an answer of 5,000 characters is one
// message, as in Hermes).
func TestDeliveryChunksAtTeamsLimit(t *testing.T) {
	want := chunk.Limit{Max: maxText, Measure: chunk.Runes}
	if got := chunk.Limits("teams"); got != want {
		t.Fatalf("chunk.Limits(teams) = %+v, want %+v (the gateway's limit)", got, want)
	}
	if n := len(chunk.Split(strings.Repeat("word ", 1000), "teams")); n != 1 {
		t.Fatalf("an answer of 5,000 characters is cut into %d messages, want 1", n)
	}
}
