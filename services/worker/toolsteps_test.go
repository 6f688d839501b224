package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/secret"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// The steps of a tool call carry what the API gateway shows of it, as
// Hermes's API server does: the start its one-line preview (the label)
// as its detail, and its arguments as a JSON object a
// client can parse (every key, the longest values shortened to fit 2000
// bytes, not the first 2000 bytes of the text), and the end a preview of
// the result, credentials masked and bounded as Hermes bounds the
// results in response.completed (over 1000 characters: the first 500 and
// how many more).
func TestToolStepsCarryArgumentsAndResult(t *testing.T) {
	t.Parallel()
	const key = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
	output := "OPENAI_API_KEY=" + key + "\n" + strings.Repeat("a line of the file\n", 100)
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Tools = []tools.Tool{{Name: "write_file", Emoji: "✍️", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return output, nil
		}}}
	})
	defer w.stop(t)
	args := fmt.Sprintf(`{"path": "notes.txt", "content": %q, "mode": "append"}`, strings.Repeat("x", 3000))
	h.fake.Enqueue(
		fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "write_file", Arguments: args}}},
		fakellm.Reply{Text: "Written."},
	)
	req := h.requestTurn("s1", "write it down", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
		t.Fatal(c.GetError())
	}
	var started, finished *repliesv1.ToolProgress
	for _, ev := range h.replies(req.TurnId) {
		switch tp := ev.GetToolProgress(); tp.GetPhase() {
		case repliesv1.ToolPhase_TOOL_PHASE_STARTED:
			started = tp
		case repliesv1.ToolPhase_TOOL_PHASE_FINISHED:
			finished = tp
		}
	}
	if started == nil || finished == nil {
		t.Fatalf("steps: started %v, finished %v", started, finished)
	}
	if d := started.GetDetail(); d != "notes.txt" || started.GetPreview() != d {
		t.Errorf("started step's detail %q, preview %q; want the one-line preview", d, started.GetPreview())
	}
	got := started.GetArguments()
	var parsed map[string]string
	if err := json.Unmarshal([]byte(got), &parsed); err != nil || len(got) > 2000 {
		t.Fatalf("arguments (%d bytes) %q: %v; want a JSON object of at most 2000 bytes", len(got), got, err)
	}
	if parsed["path"] != "notes.txt" || parsed["mode"] != "append" ||
		!strings.HasPrefix(parsed["content"], "xxxxxxxxxx") || !strings.HasSuffix(parsed["content"], "…") {
		t.Errorf("arguments %q: want every key, the content shortened", got)
	}
	masked := []rune(secret.Redact(output))
	want := string(masked[:500]) + fmt.Sprintf("...[%d more chars]", len(masked)-500)
	if d := finished.GetDetail(); d != want || strings.Contains(d, key) {
		t.Errorf("finished step's detail %q, want the result's preview %q", d, want)
	}
}

// A result cut at agent.max_tool_result_bytes is masked before it is cut:
// a key that straddles the bound shows no more of itself in the finished
// step (the preview the API gateway lists) than its mask does, where the
// cut half of it, no longer a key to the masking patterns, would.
func TestToolStepMasksAResultBeforeItsCut(t *testing.T) {
	t.Parallel()
	const key = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
	output := "the key is " + key + " keep it safe\n" + strings.Repeat("a line of the file\n", 10)
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", func(cfg *worker.Config, d *worker.Deps) {
		cfg.Agent.MaxToolResultBytes = 20 // the key starts at byte 11
		d.Tools = []tools.Tool{{Name: "read_file", Run: func(context.Context, tools.Call, json.RawMessage) (string, error) {
			return output, nil
		}}}
	})
	defer w.stop(t)
	h.fake.Enqueue(
		fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"path": "notes.txt"}`}}},
		fakellm.Reply{Text: "Read."},
	)
	req := h.requestTurn("s1", "read it", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetError() != "" {
		t.Fatal(c.GetError())
	}
	var finished *repliesv1.ToolProgress
	for _, ev := range h.replies(req.TurnId) {
		if tp := ev.GetToolProgress(); tp.GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_FINISHED {
			finished = tp
		}
	}
	d := finished.GetDetail()
	if !strings.HasPrefix(d, "the key is sk-abc") || strings.Contains(d, key[:7]) || !strings.Contains(d, "[Output truncated") {
		t.Errorf("finished step's detail %q: want the masked result cut, nothing of the key past its mask's head", d)
	}
}
