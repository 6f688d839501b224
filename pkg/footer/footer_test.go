package footer

import "testing"

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		model          string
		tokens, window int64
		want           string
	}{
		{"openai/gpt-5.4", 25, 100, "gpt-5.4 · 25%"},
		{"gpt-4o-mini", 42000, 128000, "gpt-4o-mini · 33%"},
		{"vendor/family/model", 1, 1000, "model · 0%"},
		{"m", 300, 100, "m · 100%"},
		{"m", 0, 100, "m"},
		{"m", 50, 0, "m"},
		{"", 50, 100, "50%"},
		{"", 0, 0, ""},
		{"openai/", 0, 0, ""},
	} {
		if got := Format(tt.model, tt.tokens, tt.window); got != tt.want {
			t.Errorf("Format(%q, %d, %d) = %q, want %q", tt.model, tt.tokens, tt.window, got, tt.want)
		}
	}
}

func TestAppend(t *testing.T) {
	for _, tt := range []struct{ answer, line, want string }{
		{"Hello.", "m · 3%", "Hello.\n\nm · 3%"},
		{"Hello.\n\n", "m", "Hello.\n\nm"},
		{"Hello.", "", "Hello."},
		{"  \n", "m", "  \n"},
		{"", "m", ""},
	} {
		if got := Append(tt.answer, tt.line); got != tt.want {
			t.Errorf("Append(%q, %q) = %q, want %q", tt.answer, tt.line, got, tt.want)
		}
	}
}
