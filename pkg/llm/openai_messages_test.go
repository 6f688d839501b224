package llm

import (
	"encoding/json"
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
			out = append(out, openai.UserMessage(m.Content))
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
