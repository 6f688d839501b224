package worker

import (
	"strings"
	"testing"
	"unicode/utf8"

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

// What the summary call reads has its credentials masked, as Hermes
// redacts what crosses its compaction boundary: a tool's output, a call's
// arguments, the messages and the earlier summary; a key cut by the
// per-result bound is masked whole first.
func TestSummaryInputMasksCredentials(t *testing.T) {
	t.Parallel()
	key := "sk-proj-" + strings.Repeat("Q7x", 12)
	msgs := []store.Message{
		{Role: llm.RoleUser, Content: "my key is " + key},
		{Role: llm.RoleAssistant, ToolCalls: []store.ToolCall{{Name: "terminal", Arguments: `{"command":"curl -H 'Authorization: Bearer ` + key + `'"}`}}},
		{Role: llm.RoleTool, ToolName: "terminal", Content: "OPENAI_API_KEY=" + key + "\n" +
			"-----BEGIN RSA PRIVATE KEY-----\n" + strings.Repeat("MIIEpAIBAAKCAQEA", 200) + "\n-----END RSA PRIVATE KEY-----"},
	}
	if note := focusNote("the deploy with OPENAI_API_KEY=" + key); strings.Contains(note, key) || !strings.Contains(note, "OPENAI_API_KEY=sk-pro...") {
		t.Errorf("the focus topic reaches the summariser unmasked: %q", note[:80])
	}
	got := summaryInput("the key "+key+" works", msgs, 100000)
	if strings.Contains(got, key) || strings.Contains(got, "MIIEpAIBAAKCAQEA") {
		t.Errorf("a credential reaches the summariser:\n%s", got)
	}
	for _, want := range []string{"[Earlier summary]\nthe key sk-pro...", "user: my key is sk-pro...", "assistant called terminal(",
		"tool terminal result: OPENAI_API_KEY=sk-pro...", "[REDACTED PRIVATE KEY]"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q missing from:\n%s", want, got)
		}
	}
}

// A summary longer than its bound is cut after a whole line, never
// mid-sentence or mid-character, without a heading left bare, and says
// so; one long line is cut on a character boundary.
func TestCutSummary(t *testing.T) {
	t.Parallel()
	note := "\n\n[Summary cut at 200 bytes: the lines after this were left out]"
	room := 200 - len(note)
	tests := []struct {
		name    string
		summary string
		want    string
	}{
		{"short", "## Completed Actions\n1. READ a", "## Completed Actions\n1. READ a"},
		{"cut after a whole line", "## Completed Actions\n1. READ page one — ok\n2. READ page two — ok\n3. READ page three — ok\n" +
			"4. READ page four — ok, " + strings.Repeat("très ", 30),
			"## Completed Actions\n1. READ page one — ok\n2. READ page two — ok\n3. READ page three — ok" + note},
		{"a bare heading goes", "## Completed Actions\n1. READ page one — ok\n2. READ page two — ok\n\n## Active State\n" +
			strings.Repeat("état ", 40), "## Completed Actions\n1. READ page one — ok\n2. READ page two — ok" + note},
		{"one long line", strings.Repeat("é", 300), strings.Repeat("é", (room-3)/2) + "…" + note},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cutSummary(tt.summary, 200)
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if len(got) > 200 || !utf8.ValidString(got) {
				t.Errorf("%d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

func FuzzCutSummary(f *testing.F) {
	f.Add("## Completed Actions\n1. READ a\n## Active State\nnothing", 40)
	f.Add(strings.Repeat("é\n", 50), 64)
	f.Add("\n\n\n#\n#\n", 3)
	f.Fuzz(func(t *testing.T, summary string, max int) {
		if max < 0 || max > 1<<16 || !utf8.ValidString(summary) {
			return
		}
		got := cutSummary(summary, max)
		if len(got) > max && len(summary) > max {
			t.Fatalf("%d bytes over %d", len(got), max)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
		if len(summary) <= max && got != summary {
			t.Fatalf("a summary within bounds changed: %q", got)
		}
	})
}
