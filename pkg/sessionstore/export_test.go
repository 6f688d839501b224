package sessionstore

import (
	"context"
	"errors"
	"testing"
)

// Export reads the whole conversation, the summarised messages
// included, with the tool calls decoded; only the key's own messages;
// and refuses one over the limit without reading it.
func TestExport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newForkSource(t)
	got, err := f.s.Export(ctx, f.key, f.id, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != f.id || len(got.Messages) != 6 {
		t.Fatalf("Export = %s with %d messages, want %s with 6", got.ID, len(got.Messages), f.id)
	}
	want := []string{"user:alpha", "assistant:", "tool:tool result", "assistant:echo: alpha", "user:bravo", "assistant:echo: bravo"}
	for i, m := range got.Messages {
		if s := m.Role + ":" + m.Content; s != want[i] || m.At.IsZero() {
			t.Errorf("message %d = %q at %v, want %q", i, s, m.At, want[i])
		}
	}
	if c := got.Messages[1].ToolCalls; len(c) != 1 || c[0].ID != "c1" || c[0].Name != "clock" || c[0].Arguments != "{}" {
		t.Errorf("tool calls = %+v", c)
	}
	if got.Messages[2].ToolCallID != "c1" {
		t.Errorf("tool result answers %q", got.Messages[2].ToolCallID)
	}
	if len(got.Summaries) != 2 || got.Summaries[1].UpTo != f.t1Last || got.Summaries[0].Text != "summary to alpha" || got.Summaries[1].Text != "summary to echo" {
		t.Errorf("summaries = %+v", got.Summaries)
	}

	other, err := f.s.Export(ctx, "agent:main:api:dm:someone-else", f.id, 0)
	if err != nil || len(other.Messages) != 0 || len(other.Summaries) != 0 {
		t.Errorf("another key's export = %+v, %v: want nothing", other, err)
	}

	_, err = f.s.Export(ctx, f.key, f.id, 20)
	var big *ExportTooLargeError
	if !errors.As(err, &big) || big.Limit != 20 || big.Bytes <= 20 {
		t.Fatalf("over the limit: %v, want an ExportTooLargeError", err)
	}
}
