// Package export renders one conversation as a file, for /save: a JSON
// snapshot, a Markdown transcript or a standalone HTML page, the three
// formats of Hermes's /save (hermes_cli/session_export.py). It does no
// I/O.
package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/secret"
	"github.com/switchboard-chat/switchboard/pkg/skill"
)

// Session is the conversation to render.
type Session struct {
	ID       string
	Title    string
	Platform string
	Model    string
	Started  time.Time
	// Summaries are the conversation's compression summaries, oldest
	// first. The messages they summarise are still in Messages: an
	// export shows everything, as Hermes's includes compacted turns.
	Summaries []Summary
	// Messages are oldest first.
	Messages []Message
}

// Summary is one compression of the conversation: Text stands, in what
// the model sees, for the messages up to UpTo (a message id).
type Summary struct {
	UpTo int64
	At   time.Time
	Text string
}

// Message is one message of the transcript.
type Message struct {
	ID      int64
	Role    string // user, assistant, tool or system
	Content string
	// ToolCalls are an assistant step's calls; ToolCallID and ToolName
	// say which call a tool message answers.
	ToolCalls  []ToolCall
	ToolCallID string
	ToolName   string
	At         time.Time
}

// ToolCall is one call an assistant step made.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Formats are the formats Render takes.
var Formats = []string{"json", "md", "html"}

// MediaType is the media type of a format's file.
func MediaType(format string) string {
	switch format {
	case "json":
		return "application/json"
	case "md":
		return "text/markdown; charset=utf-8"
	case "html":
		return "text/html; charset=utf-8"
	}
	return "application/octet-stream"
}

// Render renders s in format (json, md or html). The transcripts for
// people to read (md and html) show a user message that invoked a skill
// as the user typed it ("/<skill> <instruction>", pkg/skill's Describe,
// as Hermes's chat transcripts do) instead of the skill's whole file,
// which the JSON snapshot keeps as the model read it.
func Render(s Session, format string) ([]byte, error) {
	switch format {
	case "json":
		return renderJSON(s)
	case "md":
		return []byte(renderMarkdown(typed(s))), nil
	case "html":
		return renderHTML(typed(s))
	}
	return nil, fmt.Errorf("export: unknown format %q", format)
}

// typed returns s with each user message that invoked a skill as typed.
func typed(s Session) Session {
	out := s
	out.Messages = make([]Message, len(s.Messages))
	for i, m := range s.Messages {
		if m.Role == "user" {
			if t, ok := skill.Describe(m.Content, " "); ok {
				m.Content = t
			}
		}
		out.Messages[i] = m
	}
	return out
}

// Redacted returns a copy of s whose texts — the title, the messages'
// content and tool call arguments, the summaries — have their
// credentials masked (secret.Redact), as Hermes's redact_session_data
// runs every message's content and tool-call arguments through its
// force-mode redaction.
func Redacted(s Session) Session {
	out := s
	out.Title = secret.Redact(s.Title)
	out.Summaries = make([]Summary, len(s.Summaries))
	for i, sm := range s.Summaries {
		sm.Text = secret.Redact(sm.Text)
		out.Summaries[i] = sm
	}
	out.Messages = make([]Message, len(s.Messages))
	for i, m := range s.Messages {
		m.Content = secret.Redact(m.Content)
		if len(m.ToolCalls) > 0 {
			calls := make([]ToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				c.Arguments = secret.Redact(c.Arguments)
				calls[j] = c
			}
			m.ToolCalls = calls
		}
		out.Messages[i] = m
	}
	return out
}

// timestamp writes t as Hermes's exports do: UTC, seconds, "Z"; "" for
// the zero time.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// jsonSession is the JSON snapshot's shape: Hermes's export_session
// fields (id, source, model, title, started_at, message_count,
// messages with role, content, tool_calls, tool_call_id, tool_name,
// timestamp), and the compression summaries.
type jsonSession struct {
	ID           string        `json:"id"`
	Source       string        `json:"source,omitempty"`
	Model        string        `json:"model,omitempty"`
	Title        string        `json:"title,omitempty"`
	StartedAt    string        `json:"started_at,omitempty"`
	MessageCount int           `json:"message_count"`
	Messages     []jsonMessage `json:"messages"`
	Summaries    []jsonSummary `json:"summaries,omitempty"`
}

type jsonMessage struct {
	ID         int64      `json:"id"`
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolName   string     `json:"tool_name,omitempty"`
	Timestamp  string     `json:"timestamp,omitempty"`
}

type jsonSummary struct {
	UpToMessageID int64  `json:"up_to_message_id"`
	CreatedAt     string `json:"created_at,omitempty"`
	Summary       string `json:"summary"`
}

func renderJSON(s Session) ([]byte, error) {
	out := jsonSession{ID: s.ID, Source: s.Platform, Model: s.Model, Title: s.Title, StartedAt: timestamp(s.Started),
		MessageCount: len(s.Messages), Messages: make([]jsonMessage, 0, len(s.Messages))}
	for _, m := range s.Messages {
		out.Messages = append(out.Messages, jsonMessage{ID: m.ID, Role: m.Role, Content: m.Content, ToolCalls: m.ToolCalls,
			ToolCallID: m.ToolCallID, ToolName: m.ToolName, Timestamp: timestamp(m.At)})
	}
	for _, sm := range s.Summaries {
		out.Summaries = append(out.Summaries, jsonSummary{UpToMessageID: sm.UpTo, CreatedAt: timestamp(sm.At), Summary: sm.Text})
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	// Hermes writes ensure_ascii=False: the text as typed. HTML
	// escaping stays on: "<" in a JSON file opened by a browser is
	// harmless either way.
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("export json: %w", err)
	}
	return b.Bytes(), nil
}

// heading is one line of s: a heading or list item cannot span lines.
func heading(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "unknown"
	}
	return s
}

// fenced puts text in a code fence longer than any backtick run in it,
// as Hermes's _fenced_text.
func fenced(text, lang string) string {
	fence := "```"
	for strings.Contains(text, fence) {
		fence += "`"
	}
	return fence + lang + "\n" + text + "\n" + fence
}

// label is how a role is shown.
func label(role string) string {
	switch role {
	case "user":
		return "User"
	case "assistant":
		return "Assistant"
	case "tool":
		return "Tool"
	case "":
		return "Unknown"
	}
	return strings.ToUpper(role[:1]) + role[1:]
}

// renderMarkdown is Hermes's Markdown transcript (render_sessions_export
// of one session): an H1 with the title (or id), the metadata list,
// then each message but the system ones under an H2 with its role and
// time; a tool result folded in a <details> block, fenced. Differs from
// Hermes: an assistant step's tool calls are listed under its text
// (Hermes shows only the text), so a step that only called tools is not
// an empty section.
func renderMarkdown(s Session) string {
	title := s.Title
	if strings.TrimSpace(title) == "" {
		title = s.ID
	}
	lines := []string{"# Session: " + heading(title), "- Session ID: `" + heading(s.ID) + "`"}
	if s.Platform != "" {
		lines = append(lines, "- Source: `"+heading(s.Platform)+"`")
	}
	if s.Model != "" {
		lines = append(lines, "- Model: `"+heading(s.Model)+"`")
	}
	if s.Title != "" {
		lines = append(lines, "- Title: "+heading(s.Title))
	}
	if t := timestamp(s.Started); t != "" {
		lines = append(lines, "- Started: "+t)
	}
	lines = append(lines, fmt.Sprintf("- Messages: %d", len(s.Messages)), "")
	shown := 0
	for _, m := range s.Messages {
		if m.Role == "system" {
			continue
		}
		shown++
		suffix := ""
		if t := timestamp(m.At); t != "" {
			suffix = " - " + t
		}
		if m.Role == "tool" {
			name := m.ToolName
			if name == "" {
				name = "tool"
			}
			lines = append(lines, "## Tool: "+heading(name)+suffix, "",
				"<details><summary>"+template.HTMLEscapeString(heading(name))+"</summary>", "",
				fenced(m.Content, "text"), "", "</details>", "")
			continue
		}
		lines = append(lines, "## "+label(m.Role)+suffix, "")
		if m.Content != "" {
			lines = append(lines, m.Content, "")
		}
		for _, c := range m.ToolCalls {
			lines = append(lines, "Tool call: `"+heading(c.Name)+"`", "", fenced(c.Arguments, "json"), "")
		}
	}
	if shown == 0 {
		lines = append(lines, "_No messages found._", "")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n") + "\n"
}

// page is the HTML export: one file, no script, no outside resource,
// everything from the conversation escaped by html/template; its
// Content-Security-Policy forbids scripts besides.
var page = template.Must(template.New("page").Funcs(template.FuncMap{"label": label, "ts": timestamp}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Heading}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#1f2328;background:#fff;line-height:1.5}
header{border-bottom:1px solid #d0d7de;margin-bottom:1.5rem}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem;font-size:.9rem}
dt{font-weight:600}dd{margin:0}
.msg{border:1px solid #d0d7de;border-radius:8px;padding:.75rem 1rem;margin:0 0 1rem}
.msg.user{background:#f6f8fa}
.msg.tool{background:#fffbea}
.role{font-weight:600;font-size:.9rem;margin-bottom:.4rem}
.role time{font-weight:400;color:#656d76;margin-left:.5rem}
pre{white-space:pre-wrap;word-wrap:break-word;margin:0;font-family:inherit}
pre.code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.85rem;background:#f6f8fa;padding:.5rem;border-radius:6px}
.call{margin-top:.5rem}
</style>
</head>
<body>
<header>
<h1>{{.Heading}}</h1>
<dl>
<dt>Session ID</dt><dd><code>{{.S.ID}}</code></dd>
{{- if .S.Platform}}<dt>Source</dt><dd>{{.S.Platform}}</dd>{{end}}
{{- if .S.Model}}<dt>Model</dt><dd>{{.S.Model}}</dd>{{end}}
{{- with ts .S.Started}}<dt>Started</dt><dd><time>{{.}}</time></dd>{{end}}
<dt>Messages</dt><dd>{{len .S.Messages}}</dd>
</dl>
</header>
<main>
{{- range .Shown}}
<section class="msg {{.Role}}">
{{- if eq .Role "tool"}}
<div class="role">Tool: {{if .ToolName}}{{.ToolName}}{{else}}tool{{end}}{{with ts .At}}<time>{{.}}</time>{{end}}</div>
<details><summary>Result</summary><pre class="code">{{.Content}}</pre></details>
{{- else}}
<div class="role">{{label .Role}}{{with ts .At}}<time>{{.}}</time>{{end}}</div>
{{- if .Content}}<pre>{{.Content}}</pre>{{end}}
{{- range .ToolCalls}}<div class="call">Tool call: <code>{{.Name}}</code><pre class="code">{{.Arguments}}</pre></div>{{end}}
{{- end}}
</section>
{{- else}}
<p><em>No messages found.</em></p>
{{- end}}
</main>
</body>
</html>
`))

// renderHTML is the standalone page (Hermes's generate_html_export:
// shareable, no dependencies). Differs from Hermes's page: the text is
// shown as written, not rendered from Markdown, and there is no script.
func renderHTML(s Session) ([]byte, error) {
	title := s.Title
	if strings.TrimSpace(title) == "" {
		title = s.ID
	}
	var shown []Message
	for _, m := range s.Messages {
		if m.Role != "system" {
			shown = append(shown, m)
		}
	}
	var b bytes.Buffer
	if err := page.Execute(&b, struct {
		Heading string
		S       Session
		Shown   []Message
	}{Heading: "Session: " + heading(title), S: s, Shown: shown}); err != nil {
		return nil, fmt.Errorf("export html: %w", err)
	}
	return b.Bytes(), nil
}
