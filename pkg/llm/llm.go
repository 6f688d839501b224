// Package llm puts LLM providers (OpenAI-compatible chat completions and
// Anthropic Messages) behind one small streaming interface, classifies their
// errors, and retries the retryable ones.
package llm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Stop reasons, normalised across providers.
const (
	StopEndTurn   = "end_turn"
	StopToolUse   = "tool_use"
	StopMaxTokens = "max_tokens"
)

// Message is one turn of the conversation.
type Message struct {
	Role       string     // system, user, assistant or tool
	Content    string     // text; for tool messages, the tool's result
	ToolCalls  []ToolCall // assistant messages: the calls the model made
	ToolCallID string     // tool messages: the call answered
	Name       string     // tool messages: the tool's name (optional)
	Images     []Image    // user messages: pictures shown with the text
	// Thinking is an assistant message's thinking blocks as the model
	// returned them (Response.Thinking): Anthropic wants them back,
	// signed and unchanged, when the tool calls' results follow.
	Thinking []Thinking
}

// Thinking is one block of a model's extended thinking (Anthropic): its
// text and the signature that vouches for it, or, for a block the
// provider hid, the encrypted Redacted data.
type Thinking struct {
	Text      string
	Signature string
	Redacted  string
}

// Image is a picture in a user message: its bytes, or a URL the provider
// fetches itself.
type Image struct {
	MIME string // image/png, image/jpeg, image/gif or image/webp
	Data []byte
	URL  string // used when Data is empty
	// Detail is how closely the model is to look at the picture (OpenAI's
	// image_url detail: low, high, auto …), as the client asked; "" sends
	// none. Anthropic's API has no such setting.
	Detail string
}

// dataURL is img as the URL the OpenAI API takes.
func (img Image) dataURL() string {
	if len(img.Data) == 0 {
		return img.URL
	}
	const prefix = ";base64,"
	b := make([]byte, 0, len("data:")+len(img.MIME)+len(prefix)+base64.StdEncoding.EncodedLen(len(img.Data)))
	b = append(append(append(b, "data:"...), img.MIME...), prefix...)
	return string(base64.StdEncoding.AppendEncode(b, img.Data))
}

// ToolCall is a tool invocation requested by the model.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON object
}

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema of the arguments object
}

// Request is one model call.
type Request struct {
	Model       string // empty: the provider's default
	System      string
	Messages    []Message
	Tools       []ToolSpec
	MaxTokens   int      // 0: the provider's default
	Temperature *float64 // nil: the provider's default
	// CacheSystem asks for prompt caching of the system prompt and tools
	// (Anthropic cache_control markers; OpenAI caches automatically).
	CacheSystem bool
	// ReasoningEffort asks a reasoning model to think this hard: none,
	// minimal, low, medium, high or xhigh; empty sends nothing (the
	// provider's default). OpenAI-compatible providers get it as
	// reasoning_effort, OpenRouter as its reasoning object, Anthropic as
	// extended thinking (anthropicThinking).
	ReasoningEffort string
	// Fast asks for the provider's fast processing (/fast): OpenAI's
	// service_tier "priority", Anthropic's speed "fast" with its beta
	// header; sent only for the models FastModeSupported names.
	Fast bool
	// StreamReasoning asks for the model's thinking as deltas too
	// (Delta.Reasoning), as it arrives: a chat that shows the reasoning
	// (/reasoning show) sees it while the model thinks. Without it no
	// delta carries reasoning.
	StreamReasoning bool
}

// Usage is the token accounting of one call. InputTokens excludes cached
// tokens, which are counted in CacheReadTokens and CacheWriteTokens.
type Usage struct {
	InputTokens      int
	OutputTokens     int
	CacheReadTokens  int
	CacheWriteTokens int
}

// Response is the model's complete answer.
type Response struct {
	Text       string
	ToolCalls  []ToolCall
	Usage      Usage
	StopReason string // StopEndTurn, StopToolUse, StopMaxTokens or the provider's own
	Model      string
	// Reasoning is the thinking the model showed with its answer, when
	// the provider sends it (OpenAI-compatible reasoning_content,
	// OpenRouter's reasoning, the text of Anthropic's thinking blocks).
	Reasoning string
	// Thinking is Anthropic's thinking blocks with their signatures, for
	// the assistant message that carries the answer's tool calls back.
	Thinking []Thinking
}

// Delta is an increment of a streamed answer: text, the start of a tool
// call (ID and Name set, Arguments still empty), or, when the request
// asked for it (StreamReasoning), a piece of the model's thinking.
type Delta struct {
	Text     string
	ToolCall *ToolCall
	// Reasoning is a piece of Response.Reasoning.
	Reasoning string
}

// Provider calls a model. Stream calls fn for every delta as it arrives and
// returns the whole answer; an error from fn stops the stream and is
// returned as is. A nil fn makes a non-streaming call.
type Provider interface {
	Stream(ctx context.Context, req Request, fn func(Delta) error) (*Response, error)
}

// Complete makes a non-streaming call.
func Complete(ctx context.Context, p Provider, req Request) (*Response, error) {
	return p.Stream(ctx, req, nil)
}

// pooledClient is the providers' HTTP client when none is configured: the
// SDKs' default keeps two idle connections per host, so a worker running
// dozens of turns at once would dial a new connection for most model
// calls. This one keeps up to maxIdlePerHost warm.
var pooledClient = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxIdlePerHost
	t.MaxIdleConnsPerHost = maxIdlePerHost
	return &http.Client{Transport: t}
}()

const maxIdlePerHost = 256
