package llm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// DefaultAnthropicMaxTokens is sent when a Request sets no MaxTokens, which
// the Messages API requires.
const DefaultAnthropicMaxTokens = 4096

// AnthropicConfig configures the Anthropic Messages provider.
type AnthropicConfig struct {
	APIKey string
	// BaseURL without /v1, e.g. http://127.0.0.1:8080; empty means
	// api.anthropic.com.
	BaseURL    string
	Model      string // used when a Request names none
	HTTPClient *http.Client
	Headers    map[string]string
}

// Anthropic is a Provider for the Messages API.
type Anthropic struct {
	client anthropic.Client
	cfg    AnthropicConfig
	tools  toolCache
}

// NewAnthropic builds the provider. The SDK's own retries are off: wrap it
// in WithRetry.
func NewAnthropic(cfg AnthropicConfig) *Anthropic {
	// Environment defaults are off so that only cfg decides key and URL.
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = pooledClient
	}
	opts = append(opts, option.WithHTTPClient(hc))
	for k, v := range cfg.Headers {
		opts = append(opts, option.WithHeader(k, v))
	}
	return &Anthropic{client: anthropic.NewClient(opts...), cfg: cfg}
}

// Stream implements Provider.
func (a *Anthropic) Stream(ctx context.Context, req Request, fn func(Delta) error) (*Response, error) {
	params, opts, err := a.params(req)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		// The SDK refuses a whole-answer call that may take over 10
		// minutes (a large max_tokens): that one streams, unseen.
		if _, err := anthropic.CalculateNonStreamingTimeout(int(params.MaxTokens), params.Model, opts); err != nil {
			fn = func(Delta) error { return nil }
		} else {
			msg, err := a.client.Messages.New(ctx, params, opts...)
			if err != nil {
				return nil, anthropicError(ctx, err)
			}
			return anthropicResponse(msg), nil
		}
	}
	stream := a.client.Messages.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	resp := &Response{}
	var text strings.Builder
	type block struct {
		tool  int // index into resp.ToolCalls, -1 for text
		think int // index into resp.Thinking, -1 for others
		args  strings.Builder
		text  strings.Builder // a thinking block's text
	}
	var blocks []*block
	stopped := false
	for stream.Next() {
		chunkRead(ctx) // the SDK skips "ping" events
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			resp.Model = ev.Message.Model
			resp.Usage = Usage{
				InputTokens:      int(u.InputTokens),
				OutputTokens:     int(u.OutputTokens),
				CacheReadTokens:  int(u.CacheReadInputTokens),
				CacheWriteTokens: int(u.CacheCreationInputTokens),
			}
		case "content_block_start":
			b := &block{tool: -1, think: -1}
			switch ev.ContentBlock.Type {
			case "thinking":
				b.think = len(resp.Thinking)
				resp.Thinking = append(resp.Thinking, Thinking{Signature: ev.ContentBlock.Signature})
				b.text.WriteString(ev.ContentBlock.Thinking)
			case "redacted_thinking":
				b.think = len(resp.Thinking)
				resp.Thinking = append(resp.Thinking, Thinking{Redacted: ev.ContentBlock.Data})
			case "tool_use":
				b.tool = len(resp.ToolCalls)
				resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name})
				start := resp.ToolCalls[b.tool]
				if err := fn(Delta{ToolCall: &start}); err != nil {
					return nil, err
				}
			}
			for int64(len(blocks)) < ev.Index {
				blocks = append(blocks, &block{tool: -1, think: -1})
			}
			if int64(len(blocks)) == ev.Index {
				blocks = append(blocks, b)
			} else if ev.Index >= 0 {
				blocks[ev.Index] = b
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				text.WriteString(ev.Delta.Text)
				if err := fn(Delta{Text: ev.Delta.Text}); err != nil {
					return nil, err
				}
			case "input_json_delta":
				if ev.Index >= 0 && ev.Index < int64(len(blocks)) {
					blocks[ev.Index].args.WriteString(ev.Delta.PartialJSON)
				}
			case "thinking_delta":
				if ev.Index >= 0 && ev.Index < int64(len(blocks)) {
					blocks[ev.Index].text.WriteString(ev.Delta.Thinking)
				}
				if req.StreamReasoning && ev.Delta.Thinking != "" {
					if err := fn(Delta{Reasoning: ev.Delta.Thinking}); err != nil {
						return nil, err
					}
				}
			case "signature_delta":
				if ev.Index >= 0 && ev.Index < int64(len(blocks)) && blocks[ev.Index].think >= 0 {
					resp.Thinking[blocks[ev.Index].think].Signature += ev.Delta.Signature
				}
			}
		case "message_delta":
			resp.StopReason = string(ev.Delta.StopReason)
			resp.Usage.OutputTokens = int(ev.Usage.OutputTokens)
			if ev.Usage.JSON.InputTokens.Valid() {
				resp.Usage.InputTokens = int(ev.Usage.InputTokens)
			}
			if ev.Usage.JSON.CacheReadInputTokens.Valid() {
				resp.Usage.CacheReadTokens = int(ev.Usage.CacheReadInputTokens)
			}
			if ev.Usage.JSON.CacheCreationInputTokens.Valid() {
				resp.Usage.CacheWriteTokens = int(ev.Usage.CacheCreationInputTokens)
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, anthropicError(ctx, err)
	}
	if !stopped {
		return nil, &Error{Class: Server, Message: "stream ended before message_stop"}
	}
	resp.Text = text.String()
	for _, b := range blocks {
		if b.think >= 0 && resp.Thinking[b.think].Redacted == "" {
			resp.Thinking[b.think].Text = b.text.String()
		}
		if b.tool >= 0 {
			args := b.args.String()
			if args == "" {
				args = "{}"
			}
			resp.ToolCalls[b.tool].Arguments = args
		}
	}
	resp.Reasoning = thinkingText(resp.Thinking)
	return resp, nil
}

func anthropicResponse(msg *anthropic.Message) *Response {
	resp := &Response{
		Model:      msg.Model,
		StopReason: string(msg.StopReason),
		Usage: Usage{
			InputTokens:      int(msg.Usage.InputTokens),
			OutputTokens:     int(msg.Usage.OutputTokens),
			CacheReadTokens:  int(msg.Usage.CacheReadInputTokens),
			CacheWriteTokens: int(msg.Usage.CacheCreationInputTokens),
		},
	}
	var text strings.Builder
	for _, c := range msg.Content {
		switch c.Type {
		case "text":
			text.WriteString(c.Text)
		case "thinking":
			resp.Thinking = append(resp.Thinking, Thinking{Text: c.Thinking, Signature: c.Signature})
		case "redacted_thinking":
			resp.Thinking = append(resp.Thinking, Thinking{Redacted: c.Data})
		case "tool_use":
			args := string(c.Input)
			if args == "" {
				args = "{}"
			}
			resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: c.ID, Name: c.Name, Arguments: args})
		}
	}
	resp.Text = text.String()
	resp.Reasoning = thinkingText(resp.Thinking)
	return resp
}

func (a *Anthropic) params(req Request) (anthropic.MessageNewParams, []option.RequestOption, error) {
	model := req.Model
	if model == "" {
		model = a.cfg.Model
	}
	p := anthropic.MessageNewParams{Model: model, MaxTokens: int64(req.MaxTokens)}
	if p.MaxTokens <= 0 {
		p.MaxTokens = DefaultAnthropicMaxTokens
	}
	think := anthropicThinking(model, req.ReasoningEffort)
	if think.thinks() && unthinkingToolUse(req.Messages) {
		// Thinking would be refused: this call goes without it.
		think = anthropicThinking(model, "none")
	}
	p.Thinking = think.thinking
	if think.effort != "" {
		p.OutputConfig.Effort = think.effort
	}
	// The budget must stay below max_tokens, with room for the answer.
	p.MaxTokens = max(p.MaxTokens, think.minMaxTokens)
	var opts []option.RequestOption
	if req.Fast && anthropicFastModel(model) {
		// Fast mode, as Hermes asks for it: speed and the beta that
		// admits it, added to any beta the operator configured.
		p.Speed = anthropic.MessageNewParamsSpeedFast
		opts = append(opts, option.WithHeader("anthropic-beta", a.betas(AnthropicFastModeBeta)))
	}
	if req.Temperature != nil && !think.noTemperature {
		// This SDK version has no temperature field; the API still takes it.
		opts = append(opts, option.WithJSONSet("temperature", *req.Temperature))
	}
	if !blank(req.System) {
		sys := anthropic.TextBlockParam{Text: req.System}
		if req.CacheSystem {
			sys.CacheControl = anthropic.NewCacheControlEphemeralParam()
		}
		p.System = append(p.System, sys)
	}
	// The API wants tool results inside user messages and no two messages in
	// a row from the same role: consecutive blocks are merged.
	appendBlocks := func(role string, blocks ...anthropic.ContentBlockParamUnion) {
		n := len(p.Messages)
		if n > 0 {
			last := &p.Messages[n-1]
			if role == RoleUser && last.OfUser != nil {
				last.OfUser.Content = append(last.OfUser.Content, blocks...)
				return
			}
			if role == RoleAssistant && last.OfAssistant != nil {
				last.OfAssistant.Content = append(last.OfAssistant.Content, blocks...)
				return
			}
		}
		if role == RoleUser {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
		} else {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
		}
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			// Later system messages extend the system prompt after the cached
			// block, so the cached prefix stays byte-identical.
			if !blank(m.Content) {
				p.System = append(p.System, anthropic.TextBlockParam{Text: m.Content})
			}
		case RoleUser:
			blocks := make([]anthropic.ContentBlockParamUnion, 0, len(m.Images)+1)
			switch {
			case !blank(m.Content):
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			case len(m.Images) == 0:
				// Hermes's adapter's word for it: a message must say something.
				blocks = append(blocks, anthropic.NewTextBlock(emptyMessage))
			}
			for _, img := range m.Images {
				if len(img.Data) == 0 {
					blocks = append(blocks, anthropic.NewImageBlock(anthropic.URLImageSourceParam{URL: img.URL}))
					continue
				}
				blocks = append(blocks, anthropic.NewImageBlockBase64(img.MIME, base64.StdEncoding.EncodeToString(img.Data)))
			}
			appendBlocks(RoleUser, blocks...)
		case RoleTool:
			out := m.Content
			if blank(out) {
				out = noOutput // a command that printed nothing
			}
			appendBlocks(RoleUser, anthropic.NewToolResultBlock(anthropicToolID(m.ToolCallID), out, false))
		case RoleAssistant:
			// Thinking first, as the model wrote it.
			blocks := thinkingBlocks(m.Thinking)
			if !blank(m.Content) {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				args := json.RawMessage(tc.Arguments)
				if len(args) == 0 || !json.Valid(args) {
					args = json.RawMessage("{}")
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(anthropicToolID(tc.ID), args, tc.Name))
			}
			if len(blocks) > 0 {
				appendBlocks(RoleAssistant, blocks...)
			}
		default:
			return p, nil, fmt.Errorf("anthropic request: unknown role %q", m.Role)
		}
	}
	if len(req.Tools) > 0 {
		form := "anthropic"
		if req.CacheSystem {
			form = "anthropic+cache"
		}
		tools, err := a.tools.get(req.Tools, form, func(ts []ToolSpec) (json.RawMessage, error) {
			return anthropicTools(ts, req.CacheSystem)
		})
		if err != nil {
			return p, nil, err
		}
		opts = append(opts, option.WithJSONSet("tools", tools))
	}
	return p, opts, nil
}

// The Messages API refuses a text block that is empty or only
// whitespace, wherever it is (the system prompt, a message, a tool
// result): such text is left out, or said in these words where something
// must be said, as Hermes's Anthropic adapter says them.
const (
	emptyMessage = "(empty message)"
	noOutput     = "(no output)"
)

// blank reports whether text would be refused as a text block.
func blank(text string) bool { return strings.TrimSpace(text) == "" }

// betas is the anthropic-beta header of a request that needs beta: the
// betas configured in AnthropicConfig.Headers, then beta.
func (a *Anthropic) betas(beta string) string {
	for k, v := range a.cfg.Headers {
		if strings.EqualFold(k, "anthropic-beta") && strings.TrimSpace(v) != "" {
			for _, b := range strings.Split(v, ",") {
				if strings.TrimSpace(b) == beta {
					return v
				}
			}
			return v + "," + beta
		}
	}
	return beta
}

// anthropicError classifies an error from the Anthropic SDK.
func anthropicError(ctx context.Context, err error) error {
	var le *Error
	if errors.As(err, &le) {
		return le
	}
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		if apiErr.StatusCode < 400 {
			// An error event inside a 200 stream (e.g. overloaded_error).
			return classifyStreamError(string(apiErr.Type()), apiErr.Message, err)
		}
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		e := Classify(apiErr.StatusCode, h, apiErr.RawJSON()+" "+string(apiErr.Type())+" "+apiErr.Message)
		if apiErr.Message != "" {
			e.Message = apiErr.Message
		}
		if apiErr.StatusCode == 529 || apiErr.Type() == "overloaded_error" {
			e.Class = Server
		}
		e.Err = err
		return e
	}
	if ctx.Err() == nil && strings.HasPrefix(err.Error(), "received error while streaming") {
		return classifyStreamError("", err.Error(), err)
	}
	return classifyTransport(ctx, err)
}

// anthropicToolID is id as the Messages API takes a tool-use id: letters,
// digits, "_" and "-" (^[a-zA-Z0-9_-]+$), else the whole request is
// refused. Ids from other providers (Kimi's "functions.clock:0", a
// conversation that switched models) get their other characters replaced
// with "_", as Hermes's adapter does, and a hash of the original after
// them, so two ids that differ only there stay apart. The same id always
// maps alike: a call and its result still match. A valid id is kept.
func anthropicToolID(id string) string {
	valid := id != ""
	for i := 0; i < len(id) && valid; i++ {
		c := id[i]
		valid = c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	if valid {
		return id
	}
	b := make([]byte, 0, len(id)+9)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return fmt.Sprintf("%s_%08x", b, h.Sum32())
}
