package llm

import (
	"errors"
	"regexp"
	"strings"
)

// Fast mode is Hermes's /fast: the provider's faster, dearer processing of
// the same model. OpenAI calls it Priority Processing (service_tier
// "priority" on a chat-completions request); Anthropic calls it fast mode
// (speed "fast" on a Messages request, with the fast-mode-2026-02-01 beta).
// A Request asks for it with Fast; each provider sends its field only for
// the models FastModeSupported names, as Hermes's
// resolve_fast_mode_overrides does, so a chat that turned it on and then
// switched /model to a model without it sends nothing.

// Service tiers: what a session chose with /fast and what
// agent.service_tier holds (Hermes's words; "" is the default).
const (
	TierNormal = "normal"
	TierFast   = "fast"
)

// AnthropicFastModeBeta is the beta Anthropic wants with speed "fast".
const AnthropicFastModeBeta = "fast-mode-2026-02-01"

// ParseServiceTier reads a service tier as Hermes's config does
// (agent.service_tier): fast, priority and on are TierFast; normal,
// standard, default, off, none and "" are TierNormal. ok is false for
// anything else.
func ParseServiceTier(s string) (tier string, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fast", "priority", "on":
		return TierFast, true
	case "", "normal", "standard", "default", "off", "none":
		return TierNormal, true
	}
	return "", false
}

// FastModeSupported reports whether the model, called through a provider
// of kind (KindOpenAI or KindAnthropic), has a fast mode Switchboard
// sends: OpenAI's gpt-*, o1*, o3* and o4* models but not the Codex ones
// (whose API takes no service_tier), and the Claude models Anthropic
// lists for fast mode. A vendor prefix ("openai/gpt-5.4"), a variant tag
// (":beta") and a date suffix are ignored, as Hermes ignores them.
func FastModeSupported(kind, model string) bool {
	switch kind {
	case KindOpenAI:
		return openAIFastModel(model)
	case KindAnthropic:
		return anthropicFastModel(model)
	}
	return false
}

// bareModel is model lower-cased, without vendor prefix and variant tag.
func bareModel(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	if _, rest, ok := strings.Cut(m, "/"); ok {
		m = rest
	}
	m, _, _ = strings.Cut(m, ":")
	return m
}

// openAIFastModel: Hermes's rule for Priority Processing.
func openAIFastModel(model string) bool {
	m := bareModel(model)
	if m == "" || strings.Contains(m, "codex") {
		return false
	}
	for _, p := range []string{"gpt-", "o1", "o3", "o4"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// anthropicFastModels are the Claude models that take speed "fast"
// (Hermes's list, from Anthropic's fast mode page): exact ids, not a
// family, since an Opus not listed either refuses the parameter or bills
// it at standard speed.
var anthropicFastModels = map[string]bool{"claude-opus-4-8": true, "claude-opus-5": true, "claude-opus-5-5": true}

var (
	dottedVersion = regexp.MustCompile(`(\d)\.(\d)`)
	dateSuffix    = regexp.MustCompile(`-\d{8}$`)
)

// anthropicFastModel accepts the dotted (claude-opus-5.5) and dated
// (claude-opus-4-8-20260601) spellings too.
func anthropicFastModel(model string) bool {
	m := dottedVersion.ReplaceAllString(bareModel(model), "$1-$2")
	return anthropicFastModels[dateSuffix.ReplaceAllString(m, "")]
}

// FastRefused reports whether err is a provider refusing a request's
// fast tier: a bad request (400) whose message names service_tier,
// speed or fast mode. The worker then tells the user that /fast is what
// the provider refused, and how to turn it off.
func FastRefused(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Class != BadRequest {
		return false
	}
	return containsAny(strings.ToLower(e.Message), "service_tier", "service tier", "speed", "fast mode", "fast-mode", "priority")
}
