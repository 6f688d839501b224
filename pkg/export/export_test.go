package export_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/export"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

func sample() export.Session {
	at := time.Date(2026, 12, 3, 19, 0, 0, 0, time.UTC)
	return export.Session{
		ID: "20261203_190000_abc", Title: "Plan <b>", Platform: "telegram", Model: "gpt-test", Started: at,
		Summaries: []export.Summary{{UpTo: 2, At: at.Add(time.Hour), Text: "earlier: greetings"}},
		Messages: []export.Message{
			{ID: 1, Role: "system", Content: "SYSTEM PROMPT", At: at},
			{ID: 2, Role: "user", Content: "hello <script>alert(1)</script> ```fence```", At: at.Add(time.Minute)},
			{ID: 3, Role: "assistant", Content: "", ToolCalls: []export.ToolCall{{ID: "c1", Name: "terminal", Arguments: `{"cmd":"ls"}`}}, At: at.Add(2 * time.Minute)},
			{ID: 4, Role: "tool", Content: "file.txt\n</pre><script>x()</script>", ToolCallID: "c1", ToolName: "terminal", At: at.Add(3 * time.Minute)},
			{ID: 5, Role: "assistant", Content: "Done: sk-proj-abcdefghijklmnopqrstuvwxyz1234", At: at.Add(4 * time.Minute)},
		},
	}
}

func TestRenderJSONRoundTrips(t *testing.T) {
	t.Parallel()
	b, err := export.Render(sample(), "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID           string `json:"id"`
		Source       string `json:"source"`
		Model        string `json:"model"`
		Title        string `json:"title"`
		StartedAt    string `json:"started_at"`
		MessageCount int    `json:"message_count"`
		Messages     []struct {
			ID         int64             `json:"id"`
			Role       string            `json:"role"`
			Content    string            `json:"content"`
			ToolCalls  []export.ToolCall `json:"tool_calls"`
			ToolCallID string            `json:"tool_call_id"`
			ToolName   string            `json:"tool_name"`
			Timestamp  string            `json:"timestamp"`
		} `json:"messages"`
		Summaries []struct {
			UpTo    int64  `json:"up_to_message_id"`
			Summary string `json:"summary"`
		} `json:"summaries"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("not valid JSON: %v\n%s", err, b)
	}
	s := sample()
	if got.ID != s.ID || got.Source != "telegram" || got.Model != "gpt-test" || got.Title != s.Title || got.StartedAt != "2026-12-03T19:00:00Z" || got.MessageCount != 5 {
		t.Errorf("header = %+v", got)
	}
	if len(got.Messages) != len(s.Messages) {
		t.Fatalf("%d messages, want %d (the snapshot keeps every one, system too)", len(got.Messages), len(s.Messages))
	}
	for i, m := range s.Messages {
		g := got.Messages[i]
		if g.ID != m.ID || g.Role != m.Role || g.Content != m.Content || g.ToolName != m.ToolName || g.ToolCallID != m.ToolCallID {
			t.Errorf("message %d = %+v, want %+v", i, g, m)
		}
	}
	if len(got.Messages[2].ToolCalls) != 1 || got.Messages[2].ToolCalls[0] != s.Messages[2].ToolCalls[0] {
		t.Errorf("tool calls = %+v", got.Messages[2].ToolCalls)
	}
	if got.Messages[1].Timestamp != "2026-12-03T19:01:00Z" {
		t.Errorf("timestamp = %q", got.Messages[1].Timestamp)
	}
	if len(got.Summaries) != 1 || got.Summaries[0].UpTo != 2 || got.Summaries[0].Summary != "earlier: greetings" {
		t.Errorf("summaries = %+v", got.Summaries)
	}
}

func TestRenderMarkdown(t *testing.T) {
	t.Parallel()
	b, err := export.Render(sample(), "md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"# Session: Plan <b>\n- Session ID: `20261203_190000_abc`\n- Source: `telegram`\n- Model: `gpt-test`\n- Title: Plan <b>\n- Started: 2026-12-03T19:00:00Z\n- Messages: 5\n",
		"## User - 2026-12-03T19:01:00Z\n\nhello <script>alert(1)</script> ```fence```\n",
		"## Assistant - 2026-12-03T19:02:00Z\n\nTool call: `terminal`\n\n```json\n{\"cmd\":\"ls\"}\n```\n",
		"## Tool: terminal - 2026-12-03T19:03:00Z\n\n<details><summary>terminal</summary>\n\n```text\nfile.txt\n</pre><script>x()</script>\n```\n\n</details>\n",
		"## Assistant - 2026-12-03T19:04:00Z\n\nDone: sk-proj-",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "SYSTEM PROMPT") {
		t.Error("the transcript shows the system prompt")
	}
	// A message with a fence inside gets a longer fence.
	s := sample()
	s.Messages = []export.Message{{Role: "tool", ToolName: "x", Content: "a\n```\nb"}}
	b, _ = export.Render(s, "md")
	if !strings.Contains(string(b), "````text\na\n```\nb\n````") {
		t.Errorf("fence not lengthened:\n%s", b)
	}
	s.Messages = nil
	b, _ = export.Render(s, "md")
	if !strings.HasSuffix(string(b), "_No messages found._\n") {
		t.Errorf("empty transcript:\n%s", b)
	}
}

func TestRenderHTMLEscapes(t *testing.T) {
	t.Parallel()
	b, err := export.Render(sample(), "html")
	if err != nil {
		t.Fatal(err)
	}
	h := string(b)
	if !strings.HasPrefix(h, "<!DOCTYPE html>") || !strings.HasSuffix(h, "</html>\n") {
		t.Errorf("not a page:\n%s", h)
	}
	if strings.Contains(strings.ToLower(h), "<script") {
		t.Errorf("the page has a script element:\n%s", h)
	}
	for _, want := range []string{
		"<title>Session: Plan &lt;b&gt;</title>",
		"hello &lt;script&gt;alert(1)&lt;/script&gt;",
		"file.txt\n&lt;/pre&gt;&lt;script&gt;x()&lt;/script&gt;",
		"Content-Security-Policy",
		`<section class="msg tool">`,
		"<code>terminal</code>",
		"<dt>Messages</dt><dd>5</dd>",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("page lacks %q:\n%s", want, h)
		}
	}
	if strings.Contains(h, "SYSTEM PROMPT") {
		t.Error("the page shows the system prompt")
	}
}

func TestRedacted(t *testing.T) {
	t.Parallel()
	s := sample()
	s.Messages[2].ToolCalls[0].Arguments = `{"api_key": "0123456789abcdef0123"}`
	r := export.Redacted(s)
	if strings.Contains(r.Messages[4].Content, "abcdefghijklmnopqrstuvwxyz") || !strings.Contains(r.Messages[4].Content, "sk-pro...1234") {
		t.Errorf("content not redacted: %q", r.Messages[4].Content)
	}
	if strings.Contains(r.Messages[2].ToolCalls[0].Arguments, "0123456789abcdef0123") {
		t.Errorf("tool arguments not redacted: %q", r.Messages[2].ToolCalls[0].Arguments)
	}
	if s.Messages[4].Content != sample().Messages[4].Content || !strings.Contains(s.Messages[2].ToolCalls[0].Arguments, "0123456789abcdef0123") {
		t.Error("Redacted changed its argument")
	}
}

func TestRenderUnknownFormat(t *testing.T) {
	t.Parallel()
	if _, err := export.Render(sample(), "pdf"); err == nil {
		t.Fatal("pdf rendered")
	}
	for _, f := range export.Formats {
		if export.MediaType(f) == "application/octet-stream" {
			t.Errorf("%s has no media type", f)
		}
	}
}

// The transcripts people read show a skill's invocation as the user typed
// it; the JSON snapshot keeps what the model read.
func TestRenderSkillInvocationAsTyped(t *testing.T) {
	t.Parallel()
	sk, err := skill.Parse([]byte("---\nname: code-review\n---\nSECRET SKILL BODY\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := sample()
	s.Messages[1].Content = sk.Invocation("fix the bug")
	for _, format := range []string{"md", "html"} {
		b, err := export.Render(s, format)
		if err != nil {
			t.Fatal(err)
		}
		if out := string(b); strings.Contains(out, "SECRET SKILL BODY") || !strings.Contains(out, "/code-review fix the bug") {
			t.Errorf("%s shows the invocation so:\n%s", format, out)
		}
	}
	b, err := export.Render(s, "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "SECRET SKILL BODY") {
		t.Error("the JSON snapshot lost the invocation")
	}
	if s.Messages[1].Content != sk.Invocation("fix the bug") {
		t.Error("Render changed the session it was given")
	}
}
