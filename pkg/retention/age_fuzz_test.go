package retention_test

import (
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/retention"
)

// FuzzParseAge: any text gives an error or a non-negative age that reads
// back the same from its own String.
func FuzzParseAge(f *testing.F) {
	for _, s := range []string{"", "0", "90d", "2w", "720h", "1h30m", "-1d", "d", "9999999999d", "1.5d", " 7d "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := retention.ParseAge(s)
		if err != nil {
			return
		}
		if a < 0 {
			t.Fatalf("ParseAge(%q) = %v, negative", s, a)
		}
		b, err := retention.ParseAge(a.String())
		if err != nil || b != a {
			t.Fatalf("ParseAge(%q) = %v; its String %q reads as %v, %v", s, a, a.String(), b, err)
		}
	})
}
