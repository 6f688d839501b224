package worker

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

func TestRenderTranscript(t *testing.T) {
	long := strings.Repeat("x", sideMessageChars+50)
	many := make([]store.Message, 0, 40)
	for range 40 {
		many = append(many, store.Message{Role: llm.RoleUser, Content: long})
	}
	tests := []struct {
		name    string
		summary string
		msgs    []store.Message
		want    string
	}{
		{"empty", "", nil, "(no prior conversation)"},
		{"tools named, results shown, blanks skipped", "", []store.Message{
			{Role: llm.RoleUser, Content: "what's the time?"},
			{Role: llm.RoleAssistant, ToolCalls: []store.ToolCall{{ID: "1", Name: "clock"}, {ID: "2", Name: "tz"}}},
			{Role: llm.RoleTool, Content: "12:00", ToolCallID: "1"},
			{Role: llm.RoleAssistant, Content: " noon "},
			{Role: llm.RoleUser, Content: "  "},
		}, "USER: what's the time?\nASSISTANT [called tools: clock, tz]\nTOOL RESULT: 12:00\nASSISTANT: noon"},
		{"summary first", "they talked of clocks", []store.Message{{Role: llm.RoleUser, Content: "and now?"}},
			"SUMMARY OF THE EARLIER CONVERSATION: they talked of clocks\nUSER: and now?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := renderTranscript(tt.summary, tt.msgs); got != tt.want {
				t.Errorf("renderTranscript = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("cut to the budget, newest kept", func(t *testing.T) {
		got := renderTranscript("", many)
		if !strings.HasPrefix(got, "[...older conversation omitted...]\nUSER: ") || len(got) > sideTranscriptChars+len("[...older conversation omitted...]\n") {
			t.Errorf("%d characters, starting %q", len(got), got[:60])
		}
		line := strings.Split(got, "\n")[1]
		if !strings.HasSuffix(line, "…") || len(line) > len("USER: ")+sideMessageChars+len("…") {
			t.Errorf("a message is not cut to %d characters: %d", sideMessageChars, len(line))
		}
	})
}
