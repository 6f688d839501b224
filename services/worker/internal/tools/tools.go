// Package tools is the worker's tool registry and its built-in tools.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
)

// Call is the context a tool runs in.
type Call struct {
	ID         string // the model's tool call id (stable across redeliveries)
	TurnID     string
	SessionKey string
	SessionID  string
	// UserKey is "<platform>:<user id>", the owner of memories and
	// transcripts.
	UserKey string
	// Origin is the chat the turn answers, as a send target
	// ("platform:chat_id[:thread_id]"; "" when its replies go nowhere).
	Origin string
	// Target is that chat with its account (nil when replies go nowhere).
	Target *deliveryv1.Target
}

// Tool is one callable tool.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters json.RawMessage
	// Emoji marks the tool's lines in chat platforms' tool progress
	// (delivery shows "⚙️" when it is empty).
	Emoji string
	// Preview, when set, is the call's main argument as progress lines
	// show it; the first string argument otherwise.
	Preview func(args json.RawMessage) string
	// Dangerous tools run only after the user approves.
	Dangerous bool
	// Confirm, when set, says why one call of a tool that is not
	// dangerous needs the user's approval all the same, "" when it does
	// not (send_message to a chat nobody allowed).
	Confirm func(call Call, args json.RawMessage) string
	// Pattern, when set, is what a standing approval of one call covers
	// ("/approve session", "/approve always"); the tool's name otherwise.
	Pattern func(args json.RawMessage) string
	Run     func(ctx context.Context, call Call, args json.RawMessage) (string, error)
}

// ApprovalPattern is what a standing approval of this call covers.
func (t Tool) ApprovalPattern(args json.RawMessage) string {
	if t.Pattern != nil {
		return t.Pattern(args)
	}
	return t.Name
}

// Approval reports whether this call of t runs only after the user
// approves it, and why (the approval prompt's reason).
func (t Tool) Approval(call Call, args json.RawMessage) (reason string, needed bool) {
	if t.Confirm != nil {
		if r := t.Confirm(call, args); r != "" {
			return r, true
		}
	}
	if t.Dangerous {
		return "dangerous tool (agent.dangerous_tools): " + t.Description, true
	}
	return "", false
}

// PreviewOf is the main argument of a call of t on one line: t.Preview's,
// or the first string argument.
func (t Tool) PreviewOf(args json.RawMessage) string {
	if t.Preview != nil {
		return oneLine(t.Preview(args))
	}
	return oneLine(firstString(args))
}

// firstString is the first top-level string value of a JSON object, in
// the order the model wrote it; "" for none.
func firstString(args json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(args))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the key
			return ""
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
		var s string
		if json.Unmarshal(v, &s) == nil && strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

// oneLine collapses runs of white space, newlines included, to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ErrUnknown is returned for a tool the registry does not have.
var ErrUnknown = errors.New("unknown tool")

// Registry holds the enabled tools.
type Registry struct {
	tools map[string]Tool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{tools: map[string]Tool{}} }

// Register adds t, replacing a tool of the same name.
func (r *Registry) Register(t Tool) error {
	if t.Name == "" || t.Run == nil {
		return errors.New("tool needs a name and a Run function")
	}
	if len(t.Parameters) == 0 {
		t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	var schema map[string]any
	if err := json.Unmarshal(t.Parameters, &schema); err != nil {
		return fmt.Errorf("tool %s: parameters are not a JSON schema object: %w", t.Name, err)
	}
	r.tools[t.Name] = t
	return nil
}

// MarkDangerous flags the named tools as needing approval.
func (r *Registry) MarkDangerous(names ...string) {
	for _, n := range names {
		if t, ok := r.tools[n]; ok {
			t.Dangerous = true
			r.tools[n] = t
		}
	}
}

// Keep removes every tool not named (nil keeps all).
func (r *Registry) Keep(names []string) {
	if names == nil {
		return
	}
	for n := range r.tools {
		if !slices.Contains(names, n) {
			delete(r.tools, n)
		}
	}
}

// Get returns the named tool.
func (r *Registry) Get(name string) (Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Names lists the tools, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.tools))
	for n := range r.tools {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Specs describes the tools for the model, sorted by name so the request
// (and the provider's prompt cache) stays stable.
func (r *Registry) Specs() []llm.ToolSpec {
	names := r.Names()
	out := make([]llm.ToolSpec, 0, len(names))
	for _, n := range names {
		t := r.tools[n]
		out = append(out, llm.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return out
}

// Clock is the clock tool.
func Clock(now func() time.Time) Tool {
	return Tool{
		Name:        "clock",
		Emoji:       "🕐",
		Description: "Current date and time, optionally in an IANA time zone.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string","description":"IANA time zone, e.g. Europe/Paris; default UTC"}}}`),
		Run: func(_ context.Context, _ Call, args json.RawMessage) (string, error) {
			var a struct {
				TZ string `json:"tz"`
			}
			if err := decode(args, &a); err != nil {
				return "", err
			}
			loc := time.UTC
			if a.TZ != "" {
				l, err := time.LoadLocation(a.TZ)
				if err != nil {
					return "", fmt.Errorf("unknown time zone %q", a.TZ)
				}
				loc = l
			}
			t := now().In(loc)
			return t.Format("Monday, 2 January 2006 15:04:05 MST (-07:00)"), nil
		},
	}
}

// MemoryStore keeps durable per-user notes, and holds their writes
// while the user's memory.write_approval gate is on.
type MemoryStore interface {
	AddMemory(ctx context.Context, userKey, content string) (int64, error)
	MemoryList(ctx context.Context, userKey string) (string, error)
	DeleteMemory(ctx context.Context, userKey string, id int64) (bool, error)
	// MemoryNote is the text of one note; false when there is none.
	MemoryNote(ctx context.Context, userKey string, id int64) (string, bool, error)
	// WriteApproval reports the user's memory.write_approval.
	WriteApproval(ctx context.Context, userKey string) (bool, error)
	// StageMemory holds a write for /memory approve and returns its id.
	StageMemory(ctx context.Context, w memorygate.Write) (string, error)
}

// staged is the tool's answer when the gate holds a write, Hermes's
// JSON.
func staged(id string) (string, error) {
	b, err := json.Marshal(struct {
		Success   bool   `json:"success"`
		Staged    bool   `json:"staged"`
		PendingID string `json:"pending_id"`
		Message   string `json:"message"`
	}{true, true, id, memorygate.StagedText})
	return string(b), err
}

// hold stages w when call's user has the gate on: the answer to give
// the model and true, or false when the write goes ahead.
func hold(ctx context.Context, s MemoryStore, call Call, w memorygate.Write) (string, bool, error) {
	on, err := s.WriteApproval(ctx, call.UserKey)
	if err != nil || !on {
		return "", false, err
	}
	w.Owner, w.SessionKey, w.TurnID, w.CallID = call.UserKey, call.SessionKey, call.TurnID, call.ID
	id, err := s.StageMemory(ctx, w)
	if err != nil {
		return "", false, err
	}
	text, err := staged(id)
	return text, true, err
}

// Memory is the memory tool.
func Memory(s MemoryStore) Tool {
	return Tool{
		Name:  "memory",
		Emoji: "🧠",
		// "add: likes tea", "list", "remove: 3".
		Preview: func(args json.RawMessage) string {
			var a struct {
				Action  string          `json:"action"`
				Content string          `json:"content"`
				ID      json.RawMessage `json:"id"`
			}
			_ = decode(args, &a)
			switch {
			case a.Content != "":
				return a.Action + ": " + a.Content
			case len(a.ID) > 0:
				return a.Action + ": " + string(a.ID)
			}
			return a.Action
		},
		Description: "Durable notes about the user that persist across conversations. action=add stores content, list shows notes with ids, remove deletes the note with id.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["add","list","remove"]},` +
			`"content":{"type":"string"},"id":{"type":"integer"}},"required":["action"]}`),
		Run: func(ctx context.Context, call Call, args json.RawMessage) (string, error) {
			var a struct {
				Action  string `json:"action"`
				Content string `json:"content"`
				ID      int64  `json:"id"`
			}
			if err := decode(args, &a); err != nil {
				return "", err
			}
			switch a.Action {
			case "add":
				if strings.TrimSpace(a.Content) == "" {
					return "", errors.New("content is empty")
				}
				if call.UserKey == "" {
					return "", errors.New("no user to remember for")
				}
				// With memory.write_approval on, the write waits for
				// /memory approve (Hermes's gate).
				if text, held, err := hold(ctx, s, call, memorygate.Write{Action: memorygate.ActionAdd, Content: a.Content}); err != nil || held {
					return text, err
				}
				id, err := s.AddMemory(ctx, call.UserKey, a.Content)
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("saved note %d", id), nil
			case "list":
				return s.MemoryList(ctx, call.UserKey)
			case "remove":
				// As Hermes, a removal is held too; one of a note that is
				// not there is answered at once, not staged.
				if on, err := s.WriteApproval(ctx, call.UserKey); err != nil {
					return "", err
				} else if on {
					content, ok, err := s.MemoryNote(ctx, call.UserKey, a.ID)
					if err != nil {
						return "", err
					}
					if !ok {
						return fmt.Sprintf("no note %d", a.ID), nil
					}
					text, _, err := hold(ctx, s, call, memorygate.Write{Action: memorygate.ActionRemove, Content: content, NoteID: a.ID})
					return text, err
				}
				ok, err := s.DeleteMemory(ctx, call.UserKey, a.ID)
				if err != nil {
					return "", err
				}
				if !ok {
					return fmt.Sprintf("no note %d", a.ID), nil
				}
				return fmt.Sprintf("removed note %d", a.ID), nil
			}
			return "", fmt.Errorf("unknown action %q", a.Action)
		},
	}
}

// Searcher searches a user's past transcripts.
type Searcher interface {
	SearchText(ctx context.Context, userKey, exceptSession, query string, limit int) (string, error)
}

// SessionSearch is the session_search tool.
func SessionSearch(s Searcher) Tool {
	return Tool{
		Name:        "session_search",
		Emoji:       "🔍",
		Description: "Full-text search over this user's past conversations. Supports quoted phrases, OR and -exclusions.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},` +
			`"limit":{"type":"integer","minimum":1,"maximum":20}},"required":["query"]}`),
		Run: func(ctx context.Context, call Call, args json.RawMessage) (string, error) {
			var a struct {
				Query string `json:"query"`
				Limit int    `json:"limit"`
			}
			if err := decode(args, &a); err != nil {
				return "", err
			}
			if a.Limit <= 0 || a.Limit > 20 {
				a.Limit = 5
			}
			return s.SearchText(ctx, call.UserKey, call.SessionID, a.Query, a.Limit)
		},
	}
}

// Sender sends a proactive message to a target ("platform:chat[:thread]",
// "platform:#name", a bare platform for its home channel, or "home");
// idempotencyKey makes a repeat harmless.
type Sender interface {
	Send(ctx context.Context, target, text, idempotencyKey string) (string, error)
}

// SendMessage is the send_message tool. Without approval it reaches only
// the chat the turn answers, the home channels ("home", or a bare
// platform name) and the targets allowed lists ("platform:chat_id", or
// "platform:*" for every chat of a platform): text a prompt injection
// slipped into the conversation must not post in the bot's name to any
// chat it likes. Any other target waits for the user's /approve.
func SendMessage(s Sender, allowed []string) Tool {
	return Tool{
		Name:        "send_message",
		Emoji:       "📨",
		Description: `Send a message to another chat. target is "platform:chat_id[:thread_id]", "platform:#channel-name", a platform name such as "telegram" for that platform's home channel, or "home".`,
		Parameters: json.RawMessage(`{"type":"object","properties":{"target":{"type":"string"},` +
			`"text":{"type":"string"}},"required":["target","text"]}`),
		Confirm: func(call Call, args json.RawMessage) string {
			var a struct {
				Target string `json:"target"`
			}
			if decode(args, &a) != nil || sendAllowed(a.Target, call.Origin, allowed) {
				return "" // allowed, or refused by Run
			}
			return "send_message to " + a.Target + ", a chat that is neither this one, a home channel nor in agent.send_message_targets"
		},
		// Approved for good, a send covers its target, not every chat.
		Pattern: func(args json.RawMessage) string {
			var a struct {
				Target string `json:"target"`
			}
			_ = decode(args, &a)
			return "send_message " + a.Target
		},
		Run: func(ctx context.Context, call Call, args json.RawMessage) (string, error) {
			var a struct {
				Target string `json:"target"`
				Text   string `json:"text"`
			}
			if err := decode(args, &a); err != nil {
				return "", err
			}
			if a.Target == "" || a.Text == "" {
				return "", errors.New("target and text are required")
			}
			return s.Send(ctx, a.Target, a.Text, call.TurnID+":"+call.ID)
		},
	}
}

// sendAllowed reports whether send_message may reach target without the
// user's approval.
func sendAllowed(target, origin string, allowed []string) bool {
	if target == "home" || (target != "" && !strings.Contains(target, ":")) || (origin != "" && target == origin) {
		return true
	}
	for _, a := range allowed {
		if p, ok := strings.CutSuffix(a, ":*"); ok {
			if rest, ok := strings.CutPrefix(target, p+":"); ok && rest != "" && !strings.HasPrefix(rest, "#") {
				return true
			}
			continue
		}
		if a == target {
			return true
		}
	}
	return false
}

func decode(args json.RawMessage, v any) error {
	if len(args) == 0 || string(args) == "null" {
		return nil
	}
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("invalid arguments: %w", err)
	}
	return nil
}
