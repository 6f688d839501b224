package llm

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3"
)

// sdkMessages is the request's messages in the OpenAI SDK's own parameter
// types: the oracle openAIMessages must agree with.
func sdkMessages(req Request) []openai.ChatCompletionMessageParamUnion {
	var out []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		out = append(out, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		case RoleUser:
			if len(m.Images) == 0 {
				out = append(out, openai.UserMessage(m.Content))
				continue
			}
			var parts []openai.ChatCompletionContentPartUnionParam
			if m.Content != "" {
				parts = append(parts, openai.TextContentPart(m.Content))
			}
			for _, img := range m.Images {
				u := img.URL
				if len(img.Data) > 0 {
					u = "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
				}
				parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: u, Detail: img.Detail}))
			}
			out = append(out, openai.UserMessage(parts))
		case RoleTool:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		case RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if m.Content != "" {
				a.Content.OfString = openai.String(m.Content)
			}
			for _, tc := range m.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments}},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}

func TestOpenAIMessagesEncodeAsTheSDKDoes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  Request
	}{
		{"system and user", Request{System: "be brief", Messages: []Message{{Role: RoleUser, Content: "hi <b>&</b> \"you\"\n\u2028"}}}},
		{"no system", Request{Messages: []Message{{Role: RoleUser, Content: ""}}}},
		{"system message in the list", Request{Messages: []Message{{Role: RoleSystem, Content: "summary"}, {Role: RoleUser, Content: "go"}}}},
		{"tool round", Request{Messages: []Message{
			{Role: RoleUser, Content: "time?"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "clock", Arguments: `{"tz":"UTC"}`}, {ID: "c2", Name: "memory", Arguments: `{}`}}},
			{Role: RoleTool, ToolCallID: "c1", Name: "clock", Content: "12:00"},
			{Role: RoleTool, ToolCallID: "c2", Content: ""},
			{Role: RoleAssistant, Content: "It is noon."},
		}}},
		{"user text and images", Request{Messages: []Message{{Role: RoleUser, Content: "what is this?", Images: []Image{
			{MIME: "image/png", Data: []byte("\x89PNG\r\n\x1a\n\x00\xff")}, {URL: "https://example.com/cat.jpg"}}}}}},
		{"images with and without a detail", Request{Messages: []Message{{Role: RoleUser, Content: "look", Images: []Image{
			{MIME: "image/png", Data: []byte("\x89PNG"), Detail: "low"}, {URL: "https://example.com/cat.jpg", Detail: "high"}, {URL: "https://example.com/dog.jpg"}}}}}},
		{"an image without text", Request{Messages: []Message{{Role: RoleUser, Images: []Image{{MIME: "image/webp", Data: []byte("RIFF")}}}}}},
		{"assistant text and calls", Request{Messages: []Message{{Role: RoleAssistant, Content: "checking", ToolCalls: []ToolCall{{ID: "c", Name: "n", Arguments: "{}"}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := openAIMessages(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(sdkMessages(tt.req))
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("messages\n got %s\nwant %s", got, want)
			}
		})
	}
	if _, err := openAIMessages(Request{Messages: []Message{{Role: "robot"}}}); err == nil {
		t.Fatal("an unknown role was encoded")
	}
}

// sdkParams is the request body the SDK's own parameter types make of req
// (the oracle of OpenAI.body); tools, encoded by openAITools, are set as
// they are.
func sdkParams(t *testing.T, cfg OpenAIConfig, req Request, stream bool) map[string]any {
	t.Helper()
	model := req.Model
	if model == "" {
		model = cfg.Model
	}
	p := openai.ChatCompletionNewParams{Model: model, Messages: sdkMessages(req)}
	if req.MaxTokens > 0 {
		if cfg.MaxCompletionTokens {
			p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
		} else {
			p.MaxTokens = openai.Int(int64(req.MaxTokens))
		}
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	if stream {
		p.StreamOptions.IncludeUsage = openai.Bool(true)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if stream {
		out["stream"] = true
	}
	if len(req.Tools) > 0 {
		tools, err := openAITools(req.Tools)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(tools, &v); err != nil {
			t.Fatal(err)
		}
		out["tools"] = v
	}
	return out
}

func TestOpenAIBodyEncodesAsTheSDKDoes(t *testing.T) {
	t.Parallel()
	temp, zero := 0.7, 0.0
	user := []Message{{Role: RoleUser, Content: "hi \"there\" <&>"}}
	tool := ToolSpec{Name: "clock", Description: "the time", Parameters: json.RawMessage(`{"type":"object","properties":{"tz":{"type":"string"}}}`)}
	tests := []struct {
		name   string
		cfg    OpenAIConfig
		req    Request
		stream bool
	}{
		{"model from the config", OpenAIConfig{Model: "m-1"}, Request{Messages: user}, false},
		{"model of the request", OpenAIConfig{Model: "m-1"}, Request{Model: "other \"quoted\" model", System: "be brief", Messages: user}, false},
		{"streamed", OpenAIConfig{Model: "m"}, Request{Messages: user}, true},
		{"max tokens", OpenAIConfig{Model: "m"}, Request{Messages: user, MaxTokens: 512}, false},
		{"max completion tokens", OpenAIConfig{Model: "m", MaxCompletionTokens: true}, Request{Messages: user, MaxTokens: 64}, true},
		{"temperature", OpenAIConfig{Model: "m"}, Request{Messages: user, Temperature: &temp}, false},
		{"temperature zero is sent", OpenAIConfig{Model: "m"}, Request{Messages: user, Temperature: &zero}, false},
		{"tools", OpenAIConfig{Model: "m"}, Request{Messages: user, Tools: []ToolSpec{tool}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := NewOpenAI(tt.cfg)
			var tools json.RawMessage
			if len(tt.req.Tools) > 0 {
				var err error
				if tools, err = openAITools(tt.req.Tools); err != nil {
					t.Fatal(err)
				}
			}
			got, err := o.body(tt.req, tools, tt.stream)
			if err != nil {
				t.Fatal(err)
			}
			var g map[string]any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
			if want := sdkParams(t, tt.cfg, tt.req, tt.stream); !reflect.DeepEqual(g, want) {
				t.Fatalf("body\n got %s\nwant %v", got, want)
			}
		})
	}
	nan := math.NaN()
	if _, err := NewOpenAI(OpenAIConfig{Model: "m"}).body(Request{Messages: user, Temperature: &nan}, nil, false); err == nil {
		t.Fatal("a NaN temperature was encoded")
	}
}

// OpenRouter takes the reasoning effort in its reasoning object; other
// base URLs keep reasoning_effort.
func TestReasoningObjectForOpenRouter(t *testing.T) {
	for url, want := range map[string]bool{
		"https://openrouter.ai/api/v1": true,
		"https://OpenRouter.ai/api/v1": true,
		"https://api.openai.com/v1":    false,
		"":                             false,
		"http://localhost:11434/v1":    false,
	} {
		if got := NewOpenAI(OpenAIConfig{BaseURL: url}).cfg.ReasoningObject; got != want {
			t.Errorf("%q: reasoning object %v, want %v", url, got, want)
		}
	}
}
