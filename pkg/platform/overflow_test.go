package platform

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
)

// Pieces returns text that fits as it is, and cuts a longer one into
// messages that each fit, without "(i/N)" counters, losing nothing but
// the separators at the cuts, a code block closed and reopened across a
// cut.
func TestPieces(t *testing.T) {
	t.Parallel()
	l := chunk.Limit{Max: 100, Measure: chunk.Runes}
	for _, c := range []struct {
		name string
		text string
		want []string
	}{
		{"fits", strings.Repeat("a", 100), []string{strings.Repeat("a", 100)}},
		{"at a line", strings.Repeat("a", 90) + "\n" + strings.Repeat("b", 20), []string{strings.Repeat("a", 90), strings.Repeat("b", 20)}},
		{"in a code block", "```\n" + strings.Repeat("c", 90) + "\n" + strings.Repeat("d", 20) + "\n```",
			[]string{"```\n" + strings.Repeat("c", 90) + "\n```", "```\n" + strings.Repeat("d", 20) + "\n```"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Pieces(c.text, l)
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Fatalf("Pieces = %q, want %q", got, c.want)
			}
			for _, p := range got {
				if !l.Fits(p) {
					t.Errorf("piece of %d characters", l.Len(p))
				}
			}
		})
	}
}

// TestCaptionPiecePart: the later pieces of every attachment's caption
// have parts of their own, from 1,000 on, where no other part of the
// send is.
func TestCaptionPiecePart(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		seen := map[int]bool{}
		for i := 0; i < n; i++ {
			for j := 1; j <= 4; j++ {
				part := CaptionPiecePart(n, i, j)
				if part < captionPieceBase || seen[part] {
					t.Fatalf("n=%d: piece %d of caption %d is part %d, taken or below 1,000", n, j, i, part)
				}
				seen[part] = true
			}
		}
	}
}
