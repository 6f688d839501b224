package reasoning_test

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/reasoning"
)

func TestWithAnswer(t *testing.T) {
	t.Parallel()
	lines := func(n int) string { return strings.TrimSuffix(strings.Repeat("step\n", n), "\n") }
	tests := []struct {
		name, thinking, answer, want string
	}{
		{"shown", "Six times seven.", "42.", "💭 **Reasoning:**\n```\nSix times seven.\n```\n\n42."},
		{"trimmed", "\n  Six times seven.\n\n", "42.", "💭 **Reasoning:**\n```\nSix times seven.\n```\n\n42."},
		{"no reasoning", " \n", "42.", "42."},
		{"no answer", "Six times seven.", " ", " "},
		{"fifteen lines", lines(15), "42.", "💭 **Reasoning:**\n```\n" + lines(15) + "\n```\n\n42."},
		{"cut", lines(17), "42.", "💭 **Reasoning:**\n```\n" + lines(15) + "\n_... (2 more lines)_\n```\n\n42."},
		{"fences", "```go\nx\n```", "42.", "💭 **Reasoning:**\n```\n`\u200b``go\nx\n`\u200b``\n```\n\n42."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := reasoning.WithAnswer(tt.thinking, tt.answer); got != tt.want {
				t.Errorf("WithAnswer(%q, %q) = %q, want %q", tt.thinking, tt.answer, got, tt.want)
			}
		})
	}
	if got := reasoning.Block("  "); got != "" {
		t.Errorf("Block of blank thinking = %q, want empty", got)
	}
}
