package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// backendFor picks the provider and model for a session: the override set
// with /model ("kind:model" switches provider, a bare name switches model),
// else the default.
func (s *Service) backendFor(override string) (Backend, string) {
	b := s.llm
	if override == "" {
		return b, b.Model
	}
	if kind, model, ok := strings.Cut(override, ":"); ok {
		if ob, found := s.byKind[kind]; found {
			if model == "" {
				model = ob.Model
			}
			return ob, model
		}
	}
	return b, override
}

// RedactID hides a platform id the way Hermes does: the first 12 hex
// characters of its SHA-256.
func RedactID(id string) string {
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:12]
}

// signature covers everything that changes the rendered system prompt or
// the provider's prompt cache: model, key hash, base URL, provider, the
// enabled tools (sorted), the ephemeral prompt, the cache-busting keys,
// the user ids, and the router's own config signature.
func (r *turnRun) signature(b Backend, model string) string {
	src := r.req.GetOrigin()
	keys := make([]string, 0, len(r.s.cfg.Agent.CacheKeys))
	for k, v := range r.s.cfg.Agent.CacheKeys {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	parts := map[string]any{
		"model":      model,
		"key_sha256": b.KeyHash,
		"base_url":   b.BaseURL,
		"provider":   b.Kind,
		"toolsets":   r.s.tools.Names(),
		"ephemeral":  r.s.cfg.Agent.EphemeralPrompt,
		"system":     r.s.cfg.Agent.SystemPrompt,
		"cache_keys": keys,
		"user_ids":   []string{src.GetUserId(), src.GetUserIdAlt()},
		"router":     r.req.GetConfigSignature(),
		"redact":     r.s.cfg.RedactPII,
	}
	if p := r.req.GetPersonalityPrompt(); p != "" {
		// Only when set: the signature of a session without one stays
		// what it was, and so does its stored prompt (the prompt cache).
		parts["personality"] = p
	}
	j, _ := json.Marshal(parts) // map keys marshal sorted
	sum := sha256.Sum256(j)
	return hex.EncodeToString(sum[:])
}

// systemPrompt returns the session's stored prompt while its signature
// matches, and renders and stores a new one when it does not. Every worker
// therefore sends the same bytes for the whole conversation.
func (r *turnRun) systemPrompt(ctx context.Context, b Backend, model string) (string, error) {
	sig := r.signature(b, model)
	ok := r.prompt != nil
	if ok && r.prompt.Signature == sig {
		return r.prompt.Text, nil
	}
	prompt := r.renderPrompt()
	if err := r.s.store.SavePrompt(ctx, r.st, sig, prompt); err != nil {
		return "", err
	}
	r.prompt = &store.Prompt{Signature: sig, Text: prompt}
	r.log.Info("system prompt rendered", "signature", sig[:12], "replaced", ok)
	return prompt, nil
}

// maxClientSystem bounds what an API client's system messages add to a
// turn's system prompt (Hermes cuts a request's content at 64 KiB): it is
// sent again with every model call of the turn.
const maxClientSystem = 64 << 10

// clientSystem is what an API client sent as system messages with the
// turn's inputs: a chat completion's system or developer messages, the
// Responses API's instructions. As Hermes's API server gives them to the
// agent as its ephemeral system prompt, they follow the stored prompt in
// this turn's model calls (agent.client_system: append) and are never
// stored: each request sends its own, and the stored prompt stays
// byte-identical for the prompt cache. A text repeated by several inputs
// is added once; the whole is cut at maxClientSystem.
func (r *turnRun) clientSystem() string {
	if r.s.cfg.Agent.ClientSystem == ClientSystemIgnore {
		return ""
	}
	var parts []string
	for _, in := range r.req.GetInputs() {
		for _, c := range in.GetContext() {
			if text := strings.TrimSpace(c.GetContent()); c.GetRole() == llm.RoleSystem && text != "" && !slices.Contains(parts, text) {
				parts = append(parts, text)
			}
		}
	}
	text := strings.Join(parts, "\n\n")
	if len(text) > maxClientSystem {
		r.log.Warn("client system messages cut", "bytes", len(text), "max", maxClientSystem)
		text = strings.ToValidUTF8(text[:maxClientSystem], "")
	}
	return text
}

func (r *turnRun) renderPrompt() string {
	a := r.s.cfg.Agent
	var b strings.Builder
	b.WriteString(strings.TrimSpace(a.SystemPrompt))
	if p := strings.TrimSpace(r.req.GetPersonalityPrompt()); p != "" {
		// The session's /personality overlays the base prompt, as
		// Hermes composes "<system_prompt>\n\n<personality>".
		b.WriteString("\n\n")
		b.WriteString(p)
	}
	if e := strings.TrimSpace(a.EphemeralPrompt); e != "" {
		b.WriteString("\n\n")
		b.WriteString(e)
	}
	b.WriteString("\n\n")
	b.WriteString(sessionContext(r.req.GetOrigin(), r.s.cfg.RedactPII))
	fmt.Fprintf(&b, "\nConversation started: %s", r.s.now().UTC().Format("Monday, 2 January 2006"))
	return b.String()
}

// sessionContext describes where the conversation happens.
func sessionContext(src *eventsv1.SessionSource, redact bool) string {
	id := func(s string) string {
		if redact {
			return RedactID(s)
		}
		return s
	}
	var b strings.Builder
	b.WriteString("## Current session\n")
	platform := src.GetPlatform()
	if platform == "" {
		platform = "unknown"
	}
	fmt.Fprintf(&b, "Platform: %s\n", platform)
	chatType := src.GetChatType()
	if chatType == "" {
		chatType = "dm"
	}
	switch {
	case chatType == "dm":
		b.WriteString("Chat: direct message\n")
	case src.GetChatName() != "":
		fmt.Fprintf(&b, "Chat: %s %q\n", chatType, src.GetChatName())
	default:
		fmt.Fprintf(&b, "Chat: %s %s\n", chatType, id(src.GetChatId()))
	}
	if t := src.GetThreadId(); t != "" {
		fmt.Fprintf(&b, "Thread: %s\n", id(t))
	}
	user := src.GetUserIdAlt()
	if user == "" {
		user = src.GetUserId()
	}
	switch {
	case src.GetUserName() != "" && user != "":
		fmt.Fprintf(&b, "User: %s (id %s)\n", src.GetUserName(), id(user))
	case src.GetUserName() != "":
		fmt.Fprintf(&b, "User: %s\n", src.GetUserName())
	case user != "":
		fmt.Fprintf(&b, "User: id %s\n", id(user))
	}
	return b.String()
}
