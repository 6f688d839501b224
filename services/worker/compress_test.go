package worker

import (
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// The summary call's input stays within its budget, keeping the newest
// messages, so shortening a conversation too long for the model is not
// refused as too long itself.
func TestSummaryInputKeepsTheNewestWithinBudget(t *testing.T) {
	t.Parallel()
	msgs := []store.Message{
		{Role: llm.RoleUser, Content: strings.Repeat("a", 300)},
		{Role: llm.RoleAssistant, Content: "b", ToolCalls: []store.ToolCall{{Name: "clock", Arguments: "{}"}}},
		{Role: llm.RoleTool, ToolName: "clock", Content: "noon"},
		{Role: llm.RoleUser, Content: "last"},
	}
	tests := []struct {
		name    string
		summary string
		budget  int
		want    string
	}{
		{"all fit", "", 1000, "user: " + strings.Repeat("a", 300) + "\nassistant called clock({})\nassistant: b\ntool clock result: noon\nuser: last\n"},
		{"the oldest left out", "", 100,
			"[1 older messages left out: too long to summarise at once]\nassistant called clock({})\nassistant: b\ntool clock result: noon\nuser: last\n"},
		{"with the earlier summary", "they met", 80,
			"[Earlier summary]\nthey met\n\n[2 older messages left out: too long to summarise at once]\ntool clock result: noon\nuser: last\n"},
		{"not even the newest", "", 5, "[3 older messages left out: too long to summarise at once]\nuser:…\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summaryInput(tt.summary, msgs, tt.budget)
			if got != tt.want {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
	big := []store.Message{{Role: llm.RoleUser, Content: strings.Repeat("x", 1<<20)}, {Role: llm.RoleUser, Content: "recent"}}
	if got := summaryInput("", big, 4000); len(got) > 4000+100 || !strings.HasSuffix(got, "user: recent\n") {
		t.Errorf("%d bytes, ends %q", len(got), got[max(0, len(got)-20):])
	}
}
