package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// OpenAIConfig configures an OpenAI-compatible chat-completions provider.
type OpenAIConfig struct {
	APIKey string
	// BaseURL including /v1, e.g. https://openrouter.ai/api/v1 or
	// http://localhost:11434/v1; empty means api.openai.com.
	BaseURL string
	// Model is used when a Request names none.
	Model string
	// MaxCompletionTokens sends max_completion_tokens instead of max_tokens
	// (OpenAI reasoning models need it; many local servers only know max_tokens).
	MaxCompletionTokens bool
	HTTPClient          *http.Client
	// Headers are added to every request (e.g. OpenRouter's HTTP-Referer).
	Headers map[string]string
	// ReasoningObject sends a request's reasoning effort as OpenRouter's
	// reasoning object ({"enabled": true, "effort": …}) instead of
	// reasoning_effort; NewOpenAI sets it for a BaseURL on openrouter.
	ReasoningObject bool
}

// OpenAI is a Provider for the chat-completions API.
type OpenAI struct {
	client openai.Client
	cfg    OpenAIConfig
	auth   option.RequestOption // the bearer credentials of each request
	tools  toolCache
}

// NewOpenAI builds the provider. The SDK's own retries are off: wrap it in
// WithRetry.
func NewOpenAI(cfg OpenAIConfig) *OpenAI {
	// Local servers need no key, but the SDK insists on one.
	auth := "Bearer none"
	if cfg.APIKey != "" {
		auth = "Bearer " + cfg.APIKey
	}
	opts := []option.RequestOption{option.WithMaxRetries(0)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = pooledClient
	}
	opts = append(opts, option.WithHTTPClient(hc))
	for k, v := range cfg.Headers {
		if http.CanonicalHeaderKey(k) == "Authorization" {
			auth = v // a gateway's own scheme wins
			continue
		}
		opts = append(opts, option.WithHeader(k, v))
	}
	if strings.Contains(strings.ToLower(cfg.BaseURL), "openrouter") {
		cfg.ReasoningObject = true
	}
	return &OpenAI{client: openai.NewClient(opts...), cfg: cfg, auth: option.WithHeader("Authorization", auth)}
}

// Stream implements Provider.
func (o *OpenAI) Stream(ctx context.Context, req Request, fn func(Delta) error) (*Response, error) {
	var tools json.RawMessage
	if len(req.Tools) > 0 {
		var err error
		if tools, err = o.tools.get(req.Tools, "openai", openAITools); err != nil {
			return nil, err
		}
	}
	body, err := o.body(req, tools, fn != nil)
	if err != nil {
		return nil, err
	}
	// The request goes out as encoded here, through the client's generic
	// Post: the typed methods would marshal an (empty) parameter struct by
	// reflection and re-validate what is set on it. Post leaves the
	// credentials to the caller (o.auth).
	if fn == nil {
		var cc oaResponse
		if err := o.client.Post(ctx, "chat/completions", body, &cc, o.auth); err != nil {
			return nil, openAIError(ctx, err)
		}
		return cc.response(), nil
	}
	var raw *http.Response
	err = o.client.Post(ctx, "chat/completions", body, &raw, o.auth)
	stream := ssestream.NewStream[openai.ChatCompletionChunk](ssestream.NewDecoder(raw), err)
	defer stream.Close()
	resp, err := consumeOpenAI(ctx, stream, req.StreamReasoning, fn)
	if err != nil {
		return nil, openAIError(ctx, err)
	}
	return resp, nil
}

// errCallback carries an error returned by the caller's delta callback,
// which must come back to the caller unclassified.
type errCallback struct{ err error }

func (e errCallback) Error() string { return e.err.Error() }

func consumeOpenAI(ctx context.Context, stream *ssestream.Stream[openai.ChatCompletionChunk], withReasoning bool, fn func(Delta) error) (*Response, error) {
	resp := &Response{}
	var text, reasoning strings.Builder
	var args []strings.Builder
	finished := false
	for stream.Next() {
		chunkRead(ctx)
		chunk := stream.Current()
		if chunk.Model != "" {
			resp.Model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			u := chunk.Usage
			cached := int(u.PromptTokensDetails.CachedTokens)
			resp.Usage = Usage{
				InputTokens:     int(u.PromptTokens) - cached,
				OutputTokens:    int(u.CompletionTokens),
				CacheReadTokens: cached,
			}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if r := reasoningOf(ch.Delta.JSON.ExtraFields); r != "" {
				reasoning.WriteString(r)
				if withReasoning {
					if err := fn(Delta{Reasoning: r}); err != nil {
						return nil, errCallback{err}
					}
				}
			}
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				if err := fn(Delta{Text: ch.Delta.Content}); err != nil {
					return nil, errCallback{err}
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				i := int(tc.Index)
				if i < 0 || i > 128 {
					return nil, fmt.Errorf("tool call index %d out of range", i)
				}
				for len(resp.ToolCalls) <= i {
					resp.ToolCalls = append(resp.ToolCalls, ToolCall{})
					args = append(args, strings.Builder{})
				}
				call := &resp.ToolCalls[i]
				if tc.ID != "" && call.ID == "" {
					call.ID = tc.ID
				}
				if tc.Function.Name != "" && call.Name == "" {
					call.Name = tc.Function.Name
					start := ToolCall{ID: call.ID, Name: call.Name}
					if err := fn(Delta{ToolCall: &start}); err != nil {
						return nil, errCallback{err}
					}
				}
				args[i].WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finished = true
				resp.StopReason = openAIStop(ch.FinishReason)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	if !finished {
		return nil, &Error{Class: Server, Message: "stream ended before finish_reason"}
	}
	resp.Text = text.String()
	resp.Reasoning = reasoning.String()
	for i := range resp.ToolCalls {
		resp.ToolCalls[i].Arguments = args[i].String()
		if resp.ToolCalls[i].Arguments == "" {
			resp.ToolCalls[i].Arguments = "{}"
		}
	}
	return resp, nil
}

// oaResponse is a whole chat-completions answer, as far as it is read.
type oaResponse struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content string `json:"content"`
			// The thinking, by the providers that send it: a string, or
			// not (then ignored).
			ReasoningContent json.RawMessage `json:"reasoning_content"`
			Reasoning        json.RawMessage `json:"reasoning"`
			ToolCalls        []struct {
				ID       string         `json:"id"`
				Function oaFunctionCall `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (cc *oaResponse) response() *Response {
	cached := cc.Usage.PromptTokensDetails.CachedTokens
	resp := &Response{
		Model: cc.Model,
		Usage: Usage{
			InputTokens:     cc.Usage.PromptTokens - cached,
			OutputTokens:    cc.Usage.CompletionTokens,
			CacheReadTokens: cached,
		},
	}
	if len(cc.Choices) == 0 {
		return resp
	}
	ch := cc.Choices[0]
	resp.Text = ch.Message.Content
	resp.Reasoning = reasoningText(ch.Message.ReasoningContent)
	if resp.Reasoning == "" {
		resp.Reasoning = reasoningText(ch.Message.Reasoning)
	}
	resp.StopReason = openAIStop(ch.FinishReason)
	for _, tc := range ch.Message.ToolCalls {
		args := tc.Function.Arguments
		if args == "" {
			args = "{}"
		}
		resp.ToolCalls = append(resp.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
	}
	return resp
}

// reasoningOf is the thinking in a streamed delta's fields the SDK does
// not know: reasoning_content (DeepSeek, vLLM, many compatible servers)
// or reasoning (OpenRouter).
func reasoningOf(extra map[string]respjson.Field) string {
	for _, k := range []string{"reasoning_content", "reasoning"} {
		if f, ok := extra[k]; ok {
			if s := reasoningText(json.RawMessage(f.Raw())); s != "" {
				return s
			}
		}
	}
	return ""
}

// reasoningText reads raw as a JSON string; anything else is no text.
func reasoningText(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func openAIStop(reason string) string {
	switch reason {
	case "stop":
		return StopEndTurn
	case "tool_calls", "function_call":
		return StopToolUse
	case "length":
		return StopMaxTokens
	}
	return reason
}

// body encodes req as a chat-completions request body, with tools encoded
// already (nil: none); a streamed one asks for the usage at its end. It
// is written out field by field: the parts are JSON already, and
// json.Marshal would compact and validate them again.
func (o *OpenAI) body(req Request, tools json.RawMessage, stream bool) ([]byte, error) {
	messages, err := openAIMessages(req)
	if err != nil {
		return nil, err
	}
	model := req.Model
	if model == "" {
		model = o.cfg.Model
	}
	name, err := json.Marshal(model)
	if err != nil {
		return nil, fmt.Errorf("encode openai request: model: %w", err)
	}
	b := make([]byte, 0, len(messages)+len(tools)+len(name)+128)
	b = append(b, '{')
	if stream {
		b = append(b, `"stream":true,`...)
	}
	b = append(b, `"model":`...)
	b = append(b, name...)
	b = append(b, `,"messages":`...)
	b = append(b, messages...)
	if len(tools) > 0 {
		b = append(b, `,"tools":`...)
		b = append(b, tools...)
	}
	if req.MaxTokens > 0 {
		field := `,"max_tokens":`
		if o.cfg.MaxCompletionTokens {
			field = `,"max_completion_tokens":`
		}
		b = strconv.AppendInt(append(b, field...), int64(req.MaxTokens), 10)
	}
	if t := req.Temperature; t != nil {
		if math.IsNaN(*t) || math.IsInf(*t, 0) {
			return nil, fmt.Errorf("encode openai request: temperature %v", *t)
		}
		b = strconv.AppendFloat(append(b, `,"temperature":`...), *t, 'g', -1, 64)
	}
	if e := req.ReasoningEffort; e != "" {
		effort, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode openai request: reasoning effort: %w", err)
		}
		switch {
		case !o.cfg.ReasoningObject:
			// OpenAI's chat completions field, which the compatible
			// servers that reason (vLLM, Ollama, Groq …) read too.
			b = append(append(b, `,"reasoning_effort":`...), effort...)
		case e == "none":
			// OpenRouter's unified reasoning object, as Hermes sends it.
			b = append(b, `,"reasoning":{"enabled":false}`...)
		default:
			b = append(append(append(b, `,"reasoning":{"enabled":true,"effort":`...), effort...), '}')
		}
	}
	if req.Fast && openAIFastModel(model) {
		// Priority Processing, as Hermes asks for it.
		b = append(b, `,"service_tier":"priority"`...)
	}
	if stream {
		b = append(b, `,"stream_options":{"include_usage":true}`...)
	}
	return append(b, '}'), nil
}

// oaMessage is one chat-completions message as the API takes it.
type oaMessage struct {
	Role string `json:"role"`
	// Content is a *string, or []oaPart for a user message with images.
	Content    any          `json:"content,omitempty"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

// oaPart is one part of a user message's content array.
type oaPart struct {
	Type     string      `json:"type"`
	Text     *string     `json:"text,omitempty"`
	ImageURL *oaImageURL `json:"image_url,omitempty"`
}

type oaImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

type oaToolCall struct {
	ID       string         `json:"id"`
	Type     string         `json:"type"`
	Function oaFunctionCall `json:"function"`
}

type oaFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// openAIMessages encodes req's system prompt and messages as the
// chat-completions "messages" array.
func openAIMessages(req Request) (json.RawMessage, error) {
	msgs := make([]oaMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, oaMessage{Role: "system", Content: &req.System})
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case RoleSystem:
			msgs = append(msgs, oaMessage{Role: m.Role, Content: &m.Content})
		case RoleUser:
			if len(m.Images) == 0 {
				msgs = append(msgs, oaMessage{Role: m.Role, Content: &m.Content})
				continue
			}
			parts := make([]oaPart, 0, len(m.Images)+1)
			if m.Content != "" {
				parts = append(parts, oaPart{Type: "text", Text: &m.Content})
			}
			for _, img := range m.Images {
				parts = append(parts, oaPart{Type: "image_url", ImageURL: &oaImageURL{URL: img.dataURL(), Detail: img.Detail}})
			}
			msgs = append(msgs, oaMessage{Role: m.Role, Content: parts})
		case RoleTool:
			msgs = append(msgs, oaMessage{Role: "tool", Content: &m.Content, ToolCallID: m.ToolCallID})
		case RoleAssistant:
			a := oaMessage{Role: "assistant"}
			if m.Content != "" {
				a.Content = &m.Content
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, oaToolCall{ID: tc.ID, Type: "function", Function: oaFunctionCall{Name: tc.Name, Arguments: tc.Arguments}})
			}
			msgs = append(msgs, a)
		default:
			return nil, fmt.Errorf("openai request: unknown role %q", m.Role)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(msgs); err != nil {
		return nil, fmt.Errorf("encode openai messages: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// openAIError classifies an error from the OpenAI SDK.
func openAIError(ctx context.Context, err error) error {
	var cb errCallback
	if errors.As(err, &cb) {
		return cb.err
	}
	var le *Error
	if errors.As(err, &le) {
		return le
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		e := Classify(apiErr.StatusCode, h, apiErr.RawJSON()+" "+apiErr.Code+" "+apiErr.Type)
		if apiErr.Message != "" {
			e.Message = apiErr.Message
		}
		// Codes like insufficient_quota live outside the message.
		if apiErr.Code == "insufficient_quota" || apiErr.Type == "insufficient_quota" {
			e.Class = Quota
		}
		if apiErr.Code == "context_length_exceeded" {
			e.Class = ContextOverflow
		}
		e.Err = err
		return e
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return classifyStreamError("", se.Message, err)
	}
	return classifyTransport(ctx, err)
}

// Models lists the ids of the models the endpoint serves (GET /models
// of the OpenAI-compatible API, /v1/models), in its order.
func (p *OpenAI) Models(ctx context.Context) ([]string, error) {
	page, err := p.client.Models.List(ctx, p.auth)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	ids := make([]string, 0, len(page.Data))
	for _, m := range page.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	return ids, nil
}
