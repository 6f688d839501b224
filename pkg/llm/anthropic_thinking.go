package llm

import (
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
)

// Extended thinking, as Hermes maps a reasoning effort onto it
// (agent/anthropic_adapter.py): Claude 4.6 and later think adaptively,
// told how hard by output_config.effort; the older Claude models (and
// other models behind an Anthropic-compatible endpoint) take a budget of
// thinking tokens; Haiku gets no thinking.

// thinkingBudget is the budget of thinking tokens per effort for the
// models that take one (Hermes's THINKING_BUDGET); an effort it does not
// name gets medium's. "minimal" is low, as Hermes treats it on the
// adaptive models.
var thinkingBudget = map[string]int64{"xhigh": 32000, "high": 16000, "medium": 8000, "low": 4000, "minimal": 4000}

// thinkingAnswerRoom is what max_tokens keeps for the answer above the
// thinking budget (Hermes's budget + 4096).
const thinkingAnswerRoom = 4096

// adaptiveEffort is output_config.effort per effort (Hermes's
// ADAPTIVE_EFFORT_MAP); an effort it does not name is medium.
var adaptiveEffort = map[string]anthropic.OutputConfigEffort{
	"minimal": anthropic.OutputConfigEffortLow,
	"low":     anthropic.OutputConfigEffortLow,
	"medium":  anthropic.OutputConfigEffortMedium,
	"high":    anthropic.OutputConfigEffortHigh,
	"xhigh":   anthropic.OutputConfigEffortXhigh,
}

// Model families, matched as substrings of the lower-cased model name
// (Hermes's lists): the Claude models that still take a budget, the
// adaptive ones without the xhigh effort, and the ones that always think.
var (
	budgetThinkingClaude = []string{
		"claude-3", "claude-opus-4-0", "claude-opus-4.0", "claude-opus-4-1", "claude-opus-4.1",
		"claude-sonnet-4-0", "claude-sonnet-4.0", "claude-opus-4-2025", "claude-sonnet-4-2025",
		"claude-opus-4-5", "claude-opus-4.5", "claude-sonnet-4-5", "claude-sonnet-4.5", "claude-haiku-4-5",
		"claude-haiku-4.5",
	}
	noXhighClaude        = []string{"claude-opus-4-6", "claude-opus-4.6", "claude-sonnet-4-6", "claude-sonnet-4.6"}
	mandatoryThinkClaude = []string{"claude-fable"}
)

func matchesAny(model string, families []string) bool {
	for _, f := range families {
		if strings.Contains(model, f) {
			return true
		}
	}
	return false
}

// thinkingPlan is how one request thinks.
type thinkingPlan struct {
	thinking anthropic.ThinkingConfigParamUnion // zero: not sent
	effort   anthropic.OutputConfigEffort       // adaptive: output_config.effort
	// minMaxTokens is the least max_tokens the thinking leaves room in.
	minMaxTokens int64
	// noTemperature: the request must not set one (thinking is on, or
	// the model refuses sampling parameters).
	noTemperature bool
}

// anthropicThinking maps a reasoning effort onto model's thinking. An
// empty effort sends nothing. Unknown Claude models are taken to be
// adaptive, as the newest are; other models behind an Anthropic
// endpoint (MiniMax, Qwen …) take a budget, except Kimi's, which is
// adaptive.
func anthropicThinking(model, effort string) thinkingPlan {
	m := strings.ToLower(model)
	claude := strings.Contains(m, "claude")
	adaptive := strings.Contains(m, "kimi") || strings.Contains(m, "moonshot") ||
		(claude && !matchesAny(m, budgetThinkingClaude))
	var p thinkingPlan
	// Claude from Opus 4.7 on refuses temperature and its kin.
	p.noTemperature = claude && !matchesAny(m, noXhighClaude) && !matchesAny(m, budgetThinkingClaude)
	effort = strings.ToLower(strings.TrimSpace(effort))
	switch {
	case effort == "":
		return p
	case effort == "none":
		// The adaptive Claude models think unless told not to; the
		// others think only when asked, and the ones that always think
		// refuse being told not to.
		if claude && adaptive && !matchesAny(m, mandatoryThinkClaude) {
			p.thinking.OfDisabled = &anthropic.ThinkingConfigDisabledParam{}
		}
		return p
	case strings.Contains(m, "haiku"):
		return p
	}
	budget, ok := thinkingBudget[effort]
	if !ok {
		budget = thinkingBudget["medium"]
	}
	p.minMaxTokens = budget + thinkingAnswerRoom
	p.noTemperature = true
	if !adaptive {
		p.thinking = anthropic.ThinkingConfigParamOfEnabled(budget)
		return p
	}
	// Summarized: from Claude 4.7 the thinking's text is omitted
	// unless asked for, and /reasoning show shows it.
	p.thinking.OfAdaptive = &anthropic.ThinkingConfigAdaptiveParam{Display: anthropic.ThinkingConfigAdaptiveDisplaySummarized}
	p.effort, ok = adaptiveEffort[effort]
	if !ok {
		p.effort = anthropic.OutputConfigEffortMedium
	}
	if p.effort == anthropic.OutputConfigEffortXhigh && matchesAny(m, noXhighClaude) {
		p.effort = anthropic.OutputConfigEffortMax
	}
	return p
}

// thinks reports whether the plan turns thinking on.
func (p thinkingPlan) thinks() bool {
	return p.thinking.OfEnabled != nil || p.thinking.OfAdaptive != nil
}

// unthinkingToolUse reports whether the conversation's last assistant
// message called tools without the thinking that came with the calls
// (an answer the model gave without thinking, or a step stored before
// the transcript kept thinking): Anthropic refuses thinking then, as the
// message must start with its thinking block.
func unthinkingToolUse(msgs []Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleAssistant {
			return len(msgs[i].ToolCalls) > 0 && len(msgs[i].Thinking) == 0
		}
	}
	return false
}

// thinkingBlocks are an assistant message's thinking blocks as the API
// takes them back.
func thinkingBlocks(ts []Thinking) []anthropic.ContentBlockParamUnion {
	blocks := make([]anthropic.ContentBlockParamUnion, 0, len(ts))
	for _, t := range ts {
		if t.Redacted != "" {
			blocks = append(blocks, anthropic.NewRedactedThinkingBlock(t.Redacted))
			continue
		}
		blocks = append(blocks, anthropic.NewThinkingBlock(t.Signature, t.Text))
	}
	return blocks
}

// thinkingText is the readable text of the thinking blocks.
func thinkingText(ts []Thinking) string {
	var b strings.Builder
	for _, t := range ts {
		if t.Text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(t.Text)
	}
	return b.String()
}
