package placeholder_test

import (
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/placeholder"
)

// TestTexts: the texts are Hermes's, word for word, for the worker and
// delivery alike.
func TestTexts(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"NoResponse", placeholder.NoResponse, "(No response generated)"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
