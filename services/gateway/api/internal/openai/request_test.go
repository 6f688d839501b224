package openai

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// The parts of a chat completion's content, as Hermes takes them: text
// and pictures in either API's spelling; a part of another kind in the
// conversation (a file, audio) is refused, not dropped, while the parts
// of system and tool messages are only read for their text. The agent
// gives one answer: n is 1 or absent.
func TestParseContentParts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		text     string
		images   int
		code     string
		param    string
		contexts int
	}{
		{"text parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_text","text":"b"}]}]}`,
			"a\nb", 0, "", "", 0},
		{"an image_url object with detail", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png","detail":"high"}}]}]}`,
			"", 1, "", "", 0},
		{"an input_image with its URL as a string", `{"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"input_image","image_url":"https://x/a.png"}]}]}`,
			"see", 1, "", "", 0},
		{"a file part", `{"messages":[{"role":"user","content":[{"type":"text","text":"read this"},{"type":"file","file":{"file_id":"file-1"}}]}]}`,
			"", 0, CodeUnsupportedContent, "messages[0].content[1].type", 0},
		{"an audio part", `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"UklGR","format":"wav"}}]}]}`,
			"", 0, CodeUnsupportedContent, "messages[0].content[0].type", 0},
		{"an unknown part in an earlier user message", `{"messages":[{"role":"user","content":[{"type":"video","url":"v"}]},{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupportedContent, "messages[0].content[0].type", 0},
		{"an assistant's refusal part", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]},{"role":"user","content":"b"}]}`,
			"b", 0, "", "", 2},
		{"n of 1", `{"n":1,"messages":[{"role":"user","content":"q"}]}`, "q", 0, "", "", 0},
		{"n of 2", `{"n":2,"messages":[{"role":"user","content":"q"}]}`, "", 0, CodeUnsupported, "n", 0},
		{"n of 0, which Hermes reads not", `{"n":0,"messages":[{"role":"user","content":"q"}]}`, "q", 0, "", "", 0},
		{"n below 1", `{"n":-1,"messages":[{"role":"user","content":"q"}]}`, "", 0, "", "n", 0},
		{"tools the agent may leave alone", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto","messages":[{"role":"user","content":"q"}]}`,
			"q", 0, "", "", 0},
		{"no tool call", `{"tool_choice":"none","function_call":"none","response_format":{"type":"text"},"messages":[{"role":"user","content":"q"}]}`,
			"q", 0, "", "", 0},
		{"a tool call required", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","messages":[{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupported, "tool_choice", 0},
		{"a named tool's call", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}},"messages":[{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupported, "tool_choice", 0},
		{"allowed tools the agent may leave alone", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"f"}}]}},"messages":[{"role":"user","content":"q"}]}`,
			"q", 0, "", "", 0},
		{"one of the allowed tools required", `{"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"f"}}]}},"messages":[{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupported, "tool_choice", 0},
		{"a legacy function's call", `{"functions":[{"name":"f"}],"function_call":{"name":"f"},"messages":[{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupported, "function_call", 0},
		{"an answer held to a JSON schema", `{"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{}}},"messages":[{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupported, "response_format", 0},
		{"an answer held to JSON", `{"response_format":{"type":"json_object"},"messages":[{"role":"user","content":"q"}]}`,
			"", 0, CodeUnsupported, "response_format", 0},
		{"a system message's other parts are skipped", `{"messages":[{"role":"system","content":[{"type":"text","text":"be brief"},{"type":"file","file":{}}]},{"role":"user","content":"q"}]}`,
			"q", 0, "", "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Parse([]byte(tt.body))
			if tt.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Code != tt.code || inv.Param != tt.param {
					t.Fatalf("error %#v, want %s at %s", err, tt.code, tt.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if req.Text != tt.text || len(req.Attachments) != tt.images || len(req.Context) != tt.contexts {
				t.Fatalf("text %q, %d images, %d context messages; want %q, %d, %d", req.Text, len(req.Attachments), len(req.Context), tt.text, tt.images, tt.contexts)
			}
		})
	}
}

// stream_options goes with stream: true only, as OpenAI answers 400
// invalid_request_error for it otherwise; null is its absence.
func TestParseStreamOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		body         string
		param        string
		includeUsage bool
	}{
		{"with a stream", `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}]}`, "", true},
		{"without a stream", `{"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"q"}]}`, "stream_options", false},
		{"with stream false", `{"stream":false,"stream_options":{},"messages":[{"role":"user","content":"q"}]}`, "stream_options", false},
		{"null without a stream", `{"stream_options":null,"messages":[{"role":"user","content":"q"}]}`, "", false},
		{"none", `{"stream":true,"messages":[{"role":"user","content":"q"}]}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := Parse([]byte(tt.body))
			if tt.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != tt.param || inv.Code != "" {
					t.Fatalf("error %#v, want an invalid %s", err, tt.param)
				}
				return
			}
			if err != nil || req.IncludeUsage != tt.includeUsage {
				t.Fatalf("%+v, %v", req, err)
			}
		})
	}
}

// A system message's content as Hermes's _normalize_chat_content reads
// it (gateway/platforms/api_server.py:96-121): a nested array is read
// for its text too (strings and text parts, ten levels deep at most),
// joined as one part; numbers and null are skipped; an output_text part
// is text as a text part is.
func TestParseSystemContentNestedArrays(t *testing.T) {
	t.Parallel()
	deep := `"deep"`
	for range 11 {
		deep = "[" + deep + "]"
	}
	tests := []struct {
		name, content, system string
	}{
		{"a nested array's strings", `["a",["b","c"],7,null]`, "a\nb\nc"},
		{"a nested array's text parts", `[{"type":"text","text":"a"},[{"type":"input_text","text":"b"},{"type":"output_text","text":"c"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]]`, "a\nb\nc"},
		{"arrays in arrays", `["a",[["b",[1,"c"]]]]`, "a\nb\nc"},
		{"ten levels deep", `["a",` + deep[1:len(deep)-1] + `]`, "a\ndeep"},
		{"deeper than ten levels", `["a",` + deep + `]`, "a"},
		{"an empty nested array", `["a",[],[""]]`, "a"},
		{"an output_text part", `[{"type":"output_text","text":"a"},{"type":"text","text":"b"}]`, "a\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Parse([]byte(`{"messages":[{"role":"system","content":` + tt.content + `},{"role":"user","content":"q"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			if len(req.Context) != 1 || req.Context[0].GetRole() != "system" || req.Context[0].GetContent() != tt.system {
				t.Fatalf("context %v, want the system message %q", req.Context, tt.system)
			}
		})
	}
}

// A chat completion's message content as Hermes's _handle_chat_completions
// reads it (gateway/platforms/api_server.py): a system message's with
// _normalize_chat_content — a text part's text that Python holds true is
// its str() (5, True, 2.0, an object's repr), one it holds false adds no
// line, a part of another kind is skipped unchecked, a content that is no
// string nor array is its str(); a user's or an assistant's with
// _normalize_multimodal_content — a number or a boolean, as the content
// or a text part's text, is its str(); a tool's or a function's message
// is not read at all, nor is a developer's (Hermes reads only system,
// user and assistant messages). Expected texts are Python's own.
func TestChatContentAsHermes(t *testing.T) {
	t.Parallel()
	msgs := func(m ...string) string {
		return `{"messages":[` + strings.Join(m, ",") + `]}`
	}
	const q = `{"role":"user","content":"q"}`
	tests := []struct {
		name, body, text, context string
	}{
		{"system parts of numbers and booleans", msgs(`{"role":"system","content":[{"type":"text","text":5},{"type":"input_text","text":true},`+
			`{"type":"output_text","text":2.0},{"type":"text","text":0},{"type":"text","text":false},{"type":"text","text":0.0},{"type":"text","text":"b"}]}`, q),
			"q", "system:5\nTrue\n2.0\nb"},
		{"a system part's object and array text", msgs(`{"role":"system","content":[{"type":"text","text":{"a":[1e16,null]}},{"type":"text","text":["x"]},{"type":"text","text":{}}]}`, q),
			"q", "system:{'a': [1e+16, None]}\n['x']"},
		{"a nested system part of a number", msgs(`{"role":"system","content":["a",[{"type":"text","text":1e-7}]]}`, q), "q", "system:a\n1e-07"},
		{"a developer message not read", msgs(`{"role":"developer","content":"be brief"}`, `{"role":"user","content":"a"}`, `{"role":"developer","content":[{"type":"text","text":"d"}]}`, q),
			"q", "user:a"},
		{"a system part's type in any case", msgs(`{"role":"system","content":[{"type":" TEXT ","text":"a"}]}`, q), "q", "system:a"},
		{"a system content that is a number", msgs(`{"role":"system","content":5}`, `{"role":"system","content":false}`, q), "q", "system:5|system:False"},
		{"a system content that is an object", msgs(`{"role":"system","content":{"k":"v"}}`, q), "q", "system:{'k': 'v'}"},
		{"a system picture skipped unchecked", msgs(`{"role":"system","content":[{"type":"text","text":"be brief"},{"type":"image_url","image_url":{"url":"ftp://x/a.png"}},{"type":"image_url","image_url":5}]}`, q),
			"q", "system:be brief"},
		{"a user content of a number", msgs(`{"role":"user","content":5}`), "5", ""},
		{"a user content of a boolean", msgs(`{"role":"user","content":false}`), "False", ""},
		{"an assistant content of a float", msgs(`{"role":"user","content":"a"}`, `{"role":"assistant","content":2.50}`, q), "q", "user:a|assistant:2.5"},
		{"user parts of numbers and booleans", msgs(`{"role":"user","content":[{"type":"text","text":0},{"type":"input_text","text":true},{"type":"text","text":-3}]}`),
			"0\nTrue\n-3", ""},
		{"a user content of an object", msgs(`{"role":"user","content":{"type":"text","text":"a"}}`), "{'type': 'text', 'text': 'a'}", ""},
		{"user and assistant parts of objects and arrays", msgs(`{"role":"assistant","content":[{"type":"output_text","text":{"k":true}}]}`,
			`{"role":"user","content":[{"type":"text","text":["a",2]},{"type":"text","text":{}}]}`), "['a', 2]\n{}", "assistant:{'k': True}"},
		{"a user part's type in any case", msgs(`{"role":"user","content":[{"type":" Input_Text","text":"a"},{"type":"TEXT","text":"b"}]}`), "a\nb", ""},
		{"a tool's message not read", msgs(`{"role":"user","content":"a"}`, `{"role":"tool","tool_call_id":"c","content":{"k":1}}`,
			`{"role":"function","name":"f","content":[{"type":"image_url","image_url":{"url":"ftp://x"}},7]}`, q), "q", "user:a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, err := Parse([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			ctx := contextLine(req.Context)
			if req.Text != tt.text || ctx != tt.context {
				t.Fatalf("text %q, context %q; want %q, %q", req.Text, ctx, tt.text, tt.context)
			}
		})
	}
}

// A chat completion's messages are read as Hermes's
// _handle_chat_completions reads them: those whose role is system, user
// or assistant, so spelled; a message of another role (one it does not
// know, in another case, no string, none) is not read, not refused.
func TestChatRolesAsHermes(t *testing.T) {
	t.Parallel()
	msgs := func(m ...string) string {
		return `{"messages":[` + strings.Join(m, ",") + `]}`
	}
	const q = `{"role":"user","content":"q"}`
	for _, c := range []struct {
		name, body, text, context string
		invalid                   bool
	}{
		{name: "a role it does not know", body: msgs(`{"role":"robot","content":"beep"}`, `{"role":"user","content":"a"}`, q), text: "q", context: "user:a"},
		{name: "a role in another case", body: msgs(`{"role":"User","content":"a"}`, `{"role":"SYSTEM","content":"s"}`, q), text: "q"},
		{name: "a role of spaces", body: msgs(`{"role":" user ","content":"a"}`, q), text: "q"},
		{name: "a long role", body: msgs(`{"role":"`+strings.Repeat("r", 100)+`","content":"a"}`, q), text: "q"},
		{name: "a role that is no string", body: msgs(`{"role":5,"content":"a"}`, `{"role":["user"],"content":"b"}`, `{"role":{"k":"user"},"content":"c"}`, `{"role":true,"content":"d"}`, q), text: "q"},
		{name: "a null role", body: msgs(`{"role":null,"content":"a"}`, q), text: "q"},
		{name: "no role", body: msgs(`{"content":"a"}`, q, `{"content":"b"}`), text: "q"},
		{name: "an unknown role's content unchecked", body: msgs(`{"role":"robot","content":[{"type":"file","file":{}}]}`, q), text: "q"},
		{name: "nothing but unknown roles", body: msgs(`{"role":"robot","content":"a"}`, `{"content":"b"}`), invalid: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			req, err := Parse([]byte(c.body))
			if c.invalid {
				var inv *InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("error %v, want a refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx := contextLine(req.Context)
			if req.Text != c.text || ctx != c.context {
				t.Fatalf("text %q, context %q; want %q, %q", req.Text, ctx, c.text, c.context)
			}
		})
	}
}

// A chat completion's input is its last user or assistant message, as
// Hermes's _handle_chat_completions takes it (conversation_messages[-1]):
// an assistant message after the last user's is the input, not context,
// and an empty one is refused even after a user message with text; the
// user and assistant messages before it are the context, system
// messages in their places.
func TestChatInputAsHermes(t *testing.T) {
	t.Parallel()
	msgs := func(m ...string) string {
		return `{"messages":[` + strings.Join(m, ",") + `]}`
	}
	for _, c := range []struct {
		name, body, text, context string
		images                    int
		param                     string // of the refusal
	}{
		{name: "an assistant message after the user's", body: msgs(`{"role":"user","content":"a"}`, `{"role":"assistant","content":"b"}`),
			text: "b", context: "user:a"},
		{name: "then system and unread messages", body: msgs(`{"role":"system","content":"s"}`, `{"role":"user","content":"a"}`, `{"role":"assistant","content":"b"}`,
			`{"role":"system","content":"t"}`, `{"role":"tool","content":"r"}`, `{"role":"developer","content":"d"}`), text: "b", context: "system:s|user:a|system:t"},
		{name: "only an assistant message", body: msgs(`{"role":"assistant","content":"hi"}`), text: "hi"},
		{name: "an assistant's picture", body: msgs(`{"role":"user","content":"a"}`, `{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}`),
			images: 1, context: "user:a"},
		{name: "an empty assistant message after the user's", body: msgs(`{"role":"user","content":"a"}`, `{"role":"assistant","content":" "}`), param: "messages[1].content"},
		{name: "a null assistant message after the user's", body: msgs(`{"role":"user","content":"a"}`, `{"role":"assistant","content":null}`), param: "messages[1].content"},
		{name: "a user message after the assistant's", body: msgs(`{"role":"assistant","content":"a"}`, `{"role":"user","content":"b"}`), text: "b", context: "assistant:a"},
		{name: "no user or assistant message", body: msgs(`{"role":"system","content":"s"}`, `{"role":"tool","content":"r"}`), param: "messages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			req, err := Parse([]byte(c.body))
			if c.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != c.param {
					t.Fatalf("error %v, want a refusal at %s", err, c.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx := contextLine(req.Context)
			if req.Text != c.text || ctx != c.context || len(req.Attachments) != c.images {
				t.Fatalf("text %q, context %q, %d pictures; want %q, %q, %d", req.Text, ctx, len(req.Attachments), c.text, c.context, c.images)
			}
		})
	}
}

// A message's, an input item's and a content part's fields are read by
// their exact names, as Hermes's API server looks them up in their dicts
// (msg.get("role"), part.get("type"), image_ref.get("url")): "Type" or
// "TEXT" is another key, which encoding/json alone would take for the
// field.
func TestFieldNamesAsSpelled(t *testing.T) {
	t.Parallel()
	chat := func(content string) string {
		return `{"messages":[{"role":"user","content":` + content + `}]}`
	}
	for _, c := range []struct {
		name, body string
		api        string
		// text and context ("role:content" joined by "|"), or the refusal's
		// param and code.
		text, context, param, code string
	}{
		{name: "a part's type in another case", body: chat(`[{"Type":"text","text":"a"}]`),
			param: "messages[0].content[0].type", code: CodeUnsupportedContent},
		{name: "a part's text in another case", body: chat(`[{"type":"text","TEXT":"a"},{"type":"text","text":"b"}]`), text: "b"},
		{name: "a part's text beside one in another case", body: chat(`[{"type":"text","text":"a","Text":"b"}]`), text: "a"},
		{name: "an image's url in another case", body: chat(`[{"type":"image_url","image_url":{"URL":"https://x/a.png"}}]`),
			param: "messages[0].content", code: CodeInvalidImageURL},
		{name: "a message's content in another case", body: `{"messages":[{"role":"user","Content":"a"}]}`, param: "messages[0].content"},
		{name: "a message's role in another case is none", body: `{"messages":[{"Role":"system","content":"s"},{"role":"user","content":"q"}]}`,
			text: "q"},
		{name: "an input item's role in another case is none", api: "responses",
			body: `{"input":[{"Role":"assistant","content":"a"},{"role":"user","content":"q"}]}`, text: "q", context: "user:a"},
		{name: "an input item's part type in another case", api: "responses",
			body: `{"input":[{"role":"user","content":[{"TYPE":"input_text","text":"q"}]}]}`, param: "input[0].content[0].type", code: CodeUnsupportedContent},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput(c.api, c.body)
			if c.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != c.param || inv.Code != c.code {
					t.Fatalf("error %#v, want %q at %s", err, c.code, c.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx := contextLine(in.Context)
			if in.Text != c.text || ctx != c.context {
				t.Fatalf("text %q, context %q; want %q, %q", in.Text, ctx, c.text, c.context)
			}
		})
	}
}

// Hermes's bounds on a message's content (api_server.py,
// MAX_NORMALIZED_TEXT_LENGTH and MAX_CONTENT_LIST_SIZE): a text is cut
// to its first 65,536 characters (Python's: code points) and an array
// to its first 1,000 items, whose rest is not read, so not refused; a
// system message's parts stop once they hold 65,536 characters. The
// Responses API's input string, and a string item of it, Hermes takes
// uncut.
func TestContentWithinHermesBounds(t *testing.T) {
	t.Parallel()
	x, y := strings.Repeat("x", 40_000), strings.Repeat("y", 40_000)
	long := strings.Repeat("é", 65_537)
	parts := strings.Repeat(`{"type":"text","text":"a"},`, 1_000) + `{"type":"file","file":{}}`
	chat := func(m ...string) string { return `{"messages":[` + strings.Join(m, ",") + `]}` }
	for _, c := range []struct {
		name, body    string
		api           string
		text, context string
	}{
		{name: "a long user message", body: chat(`{"role":"user","content":"` + long + `"}`), text: long[:2*65_536]},
		{name: "a long text part", body: chat(`{"role":"user","content":["` + x + y + `",{"type":"text","text":"b"}]}`), text: (x + y)[:65_536] + "\nb"},
		{name: "a long object", body: chat(`{"role":"user","content":{"k":"` + x + y + `"}}`), text: ("{'k': '" + x + y)[:65_536]},
		{name: "parts past the first 1,000", body: chat(`{"role":"user","content":[` + parts + `]}`), text: strings.TrimSuffix(strings.Repeat("a\n", 1_000), "\n")},
		{name: "a long system message", body: chat(`{"role":"system","content":"`+long+`"}`, `{"role":"user","content":"q"}`),
			text: "q", context: "system:" + long[:2*65_536]},
		{name: "system parts past 65,536 characters", body: chat(`{"role":"system","content":["`+x+`","`+y+`","z"]}`, `{"role":"user","content":"q"}`),
			text: "q", context: "system:" + (x + "\n" + y)[:65_536]},
		{name: "system parts once they hold 65,536 characters", body: chat(`{"role":"system","content":["`+x+y+`","z"]}`, `{"role":"user","content":"q"}`),
			text: "q", context: "system:" + (x + y)[:65_536]},
		{name: "system parts past the first 1,000", body: chat(`{"role":"system","content":[`+strings.Repeat(`"s",`, 1_000)+`"t"]}`, `{"role":"user","content":"q"}`),
			text: "q", context: "system:" + strings.TrimSuffix(strings.Repeat("s\n", 1_000), "\n")},
		{name: "the Responses input string", api: "responses", body: `{"input":"` + x + y + `"}`, text: x + y},
		{name: "a string item of the input", api: "responses", body: `{"input":["` + x + y + `","q"]}`, text: "q", context: "user:" + x + y},
		{name: "an input item's content", api: "responses", body: `{"input":[{"role":"user","content":"` + x + y + `"}]}`, text: (x + y)[:65_536]},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput(c.api, c.body)
			if err != nil {
				t.Fatal(err)
			}
			ctx := contextLine(in.Context)
			if in.Text != c.text || ctx != c.context {
				t.Fatalf("text of %d bytes, context of %d; want %d, %d", len(in.Text), len(ctx), len(c.text), len(c.context))
			}
		})
	}
}

// NaN, Infinity and -Infinity outside strings are taken as Python's
// json module (Hermes's request.json()) takes them: a body holding them
// is no error, and as content they are Python's text for them (nan,
// inf, -inf). Inside strings they are text; spelled otherwise, or run
// into another token, they are no JSON, as in Python.
func TestPythonLiterals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body    string
		api           string // "chat" (the default), "responses" or "run"
		text, context string
		invalid       bool
	}{
		{name: "parameters", body: `{"temperature":NaN,"top_p":Infinity,"presence_penalty":-Infinity,"messages":[{"role":"user","content":"q"}]}`, text: "q"},
		{name: "content", body: `{"messages":[{"role":"system","content":[{"type":"text","text":NaN}]},{"role":"assistant","content":-Infinity},{"role":"user","content":Infinity}]}`,
			text: "inf", context: "system:nan|assistant:-inf"},
		{name: "in an object", body: `{"messages":[{"role":"user","content":{"a":[NaN,Infinity],"b":-Infinity}}]}`, text: "{'a': [nan, inf], 'b': -inf}"},
		{name: "in strings", body: `{"messages":[{"role":"user","content":"NaN \"Infinity\" -Infinity\\"}]}`, text: `NaN "Infinity" -Infinity\`},
		{name: "responses", api: "responses", body: `{"input":[{"role":"user","content":[{"type":"input_text","text":NaN}]}],"temperature":NaN}`, text: "nan"},
		{name: "a run's history", api: "run", body: `{"input":"q","conversation_history":[{"role":"user","content":NaN},{"role":"assistant","content":{"x":-Infinity}}]}`,
			text: "q", context: "user:nan|assistant:{'x': -inf}"},
		{name: "run into a number", body: `{"messages":[{"role":"user","content":NaN1}]}`, invalid: true},
		{name: "run into a letter", body: `{"messages":[{"role":"user","content":"q"}],"x":Infinityx}`, invalid: true},
		{name: "negative NaN", body: `{"messages":[{"role":"user","content":-NaN}]}`, invalid: true},
		{name: "lower case", body: `{"messages":[{"role":"user","content":nan}]}`, invalid: true},
		{name: "a sign apart", body: `{"messages":[{"role":"user","content":- Infinity}]}`, invalid: true},
		{name: "a key", body: `{NaN:1,"messages":[{"role":"user","content":"q"}]}`, invalid: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput(c.api, c.body)
			if c.invalid {
				var inv *InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("error %v, want a refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx := contextLine(in.Context)
			if in.Text != c.text || ctx != c.context {
				t.Fatalf("text %q, context %q; want %q, %q", in.Text, ctx, c.text, c.context)
			}
		})
	}
}

// Hermes's API server takes a request's messages and pictures whatever
// their number (its bound is the body's size): 1,001 messages of a chat
// completion, 1,001 input items, 1,001 history entries, 17 pictures are
// taken, not refused. Past maxImages a message's pictures are named in
// one picture that is not taken; past maxContext messages of context —
// more than an event could carry — a request is refused, unless its
// truncation keeps only the latest.
func TestHermesTakesEveryMessage(t *testing.T) {
	t.Parallel()
	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	pictures := `[` + many(maxImages+1, `{"type":"image_url","image_url":{"url":"https://x/a.png"}}`) + `]`
	for _, c := range []struct {
		name, api, body string
		context         int    // messages
		pictures        int    // taken
		param           string // of the refusal
	}{
		{name: "a chat completion's 1,001 messages", body: `{"messages":[` + many(1_001, `{"role":"user","content":"m"}`) + `]}`, context: 1_000},
		{name: "1,001 input items", api: "responses", body: `{"input":[` + many(1_001, `"m"`) + `]}`, context: 1_000},
		{name: "1,001 history entries", api: "responses", body: `{"input":"q","conversation_history":[` + many(1_001, `{"role":"user","content":"m"}`) + `]}`, context: 1_001},
		{name: "a run's 1,001 history entries and input items", api: "run",
			body: `{"input":[` + many(1_001, `"m"`) + `],"conversation_history":[` + many(1_001, `{"role":"assistant","content":"m"}`) + `]}`, context: 2_001},
		{name: "17 pictures", body: `{"messages":[{"role":"user","content":` + pictures + `}]}`, pictures: maxImages},
		{name: "17 pictures of an input item", api: "responses", body: `{"input":[{"role":"user","content":` + pictures + `}]}`, pictures: maxImages},
		{name: "17 pictures before the input", body: `{"messages":[{"role":"user","content":` + pictures + `},{"role":"user","content":"q"}]}`, context: 1},
		{name: "more messages than an event carries", body: `{"messages":[` + many(maxContext+2, `{"role":"user"}`) + `]}`, param: "messages"},
		{name: "more input items than an event carries", api: "responses", body: `{"input":[` + many(maxContext+2, `"m"`) + `]}`, param: fmt.Sprintf("input[%d]", maxContext)},
		{name: "more history than an event carries", api: "run", body: `{"input":"q","conversation_history":[` + many(maxContext+1, `{"role":"user","content":""}`) + `]}`,
			param: fmt.Sprintf("conversation_history[%d]", maxContext)},
		{name: "more history than an event carries, truncated", api: "responses",
			body: `{"input":"q","truncation":"auto","conversation_history":[` + many(maxContext+1, `{"role":"user","content":""}`) + `]}`, context: 100},
		{name: "more messages than an event carries, most not read", body: `{"messages":[` + many(maxContext+2, `{"role":"tool"}`) + `,{"role":"user","content":"q"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput(c.api, c.body)
			if c.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != c.param {
					t.Fatalf("error %v, want a refusal at %s", err, c.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			taken := 0
			for _, a := range in.Attachments {
				if a.GetUrl() != "" {
					taken++
				}
			}
			if len(in.Context) != c.context || taken != c.pictures {
				t.Fatalf("%d context messages, %d pictures taken; want %d, %d", len(in.Context), taken, c.context, c.pictures)
			}
			if c.pictures > 0 {
				if n := len(in.Attachments); n != c.pictures+1 || !strings.Contains(in.Attachments[n-1].GetUnavailable(), "17 pictures") {
					t.Fatalf("pictures %v, want one more saying there were 17", in.Attachments)
				}
			}
		})
	}
}

// A flag is read as Python holds its value true or false, as Hermes
// reads stream (if stream: …, bool(body.get("stream"))) and a Responses
// request's store (absent: true): NaN, Infinity, 1 and "false" are
// true; 0, "", [], null false. n is 1 when Python's 1 == n (1.0, True:
// Python's bool is an int); NaN is not 1. Hermes reads no n: it gives
// one answer whatever n is, so an n of 0 (0.0, False), which asks for
// fewer answers than one, not more, is answered as Hermes answers it. A parameter of the wrong type (NaN for a string) is refused
// with its name, not as JSON that is not valid, and the message does not
// show the number NaN stands for.
func TestParametersAsPythonReadsThem(t *testing.T) {
	t.Parallel()
	const q = `"messages":[{"role":"user","content":"q"}]`
	for _, c := range []struct {
		name, body string
		responses  bool
		// want: "stream", "stream,usage", "stream,store", "store" or ""
		// (neither); or the refusal's param and code.
		want, param, code string
	}{
		{name: "stream NaN", body: `{"stream":NaN,` + q + `}`, want: "stream"},
		{name: "stream Infinity", body: `{"stream":Infinity,` + q + `}`, want: "stream"},
		{name: "stream 1", body: `{"stream":1,` + q + `}`, want: "stream"},
		{name: "stream \"false\"", body: `{"stream":"false",` + q + `}`, want: "stream"},
		{name: "stream [0]", body: `{"stream":[0],` + q + `}`, want: "stream"},
		{name: "stream 0", body: `{"stream":0,` + q + `}`},
		{name: "stream -0.0", body: `{"stream":-0.0,` + q + `}`},
		{name: "stream \"\"", body: `{"stream":"",` + q + `}`},
		{name: "stream null", body: `{"stream":null,` + q + `}`},
		{name: "stream {}", body: `{"stream":{},` + q + `}`},
		{name: "include_usage NaN", body: `{"stream":NaN,"stream_options":{"include_usage":NaN},` + q + `}`, want: "stream,usage"},
		{name: "stream_options without a true stream", body: `{"stream":0,"stream_options":{"include_usage":1},` + q + `}`, param: "stream_options"},
		{name: "n 1.0", body: `{"n":1.0,` + q + `}`},
		{name: "n 1e0", body: `{"n":1e0,` + q + `}`},
		{name: "n true", body: `{"n":true,` + q + `}`},
		{name: "n false", body: `{"n":false,` + q + `}`},
		{name: "n 0", body: `{"n":0,` + q + `}`},
		{name: "n -0.0", body: `{"n":-0.0,` + q + `}`},
		{name: "n -1", body: `{"n":-1,` + q + `}`, param: "n"},
		{name: "n NaN", body: `{"n":NaN,` + q + `}`, param: "n", code: CodeUnsupported},
		{name: "n Infinity", body: `{"n":Infinity,` + q + `}`, param: "n", code: CodeUnsupported},
		{name: "n -Infinity", body: `{"n":-Infinity,` + q + `}`, param: "n"},
		{name: "n 0.5", body: `{"n":0.5,` + q + `}`, param: "n"},
		{name: "n 1.5", body: `{"n":1.5,` + q + `}`, param: "n", code: CodeUnsupported},
		{name: "n \"1\"", body: `{"n":"1",` + q + `}`, param: "n"},
		{name: "temperature NaN", body: `{"temperature":NaN,"top_p":NaN,` + q + `}`},
		{name: "model NaN", body: `{"model":NaN,` + q + `}`, param: "model"},
		{name: "user NaN", body: `{"user":NaN,` + q + `}`, param: "user"},
		{name: "Responses stream NaN", responses: true, body: `{"input":"q","stream":NaN}`, want: "stream,store"},
		{name: "Responses stream \"no\"", responses: true, body: `{"input":"q","stream":"no"}`, want: "stream,store"},
		{name: "Responses store NaN", responses: true, body: `{"input":"q","store":NaN}`, want: "store"},
		{name: "Responses store 0", responses: true, body: `{"input":"q","store":0}`},
		{name: "Responses store null", responses: true, body: `{"input":"q","store":null}`},
		{name: "Responses store \"\"", responses: true, body: `{"input":"q","store":""}`},
		{name: "Responses background NaN", responses: true, body: `{"input":"q","background":NaN}`, param: "background", code: CodeUnsupported},
		{name: "Responses background 0", responses: true, body: `{"input":"q","background":0}`, want: "store"},
		{name: "Responses instructions NaN", responses: true, body: `{"input":"q","instructions":NaN}`, param: "instructions"},
		{name: "Responses metadata NaN", responses: true, body: `{"input":"q","metadata":{"k":NaN}}`, param: "metadata"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			var err error
			if c.responses {
				var req *Responses
				if req, err = ParseResponses([]byte(c.body)); req != nil {
					if req.Stream {
						got = append(got, "stream")
					}
					if req.Store {
						got = append(got, "store")
					}
				}
			} else {
				var req *Chat
				if req, err = Parse([]byte(c.body)); req != nil {
					if req.Stream {
						got = append(got, "stream")
					}
					if req.IncludeUsage {
						got = append(got, "usage")
					}
				}
			}
			if c.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != c.param || inv.Code != c.code || strings.Contains(inv.Msg, nanNumber) {
					t.Fatalf("error %#v, want %q at %s", err, c.code, c.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != c.want {
				t.Fatalf("%q, want %q", strings.Join(got, ","), c.want)
			}
		})
	}
}

// Blank is what Python's str.strip() strips, as Hermes reads a message
// (_content_has_visible_payload: content.strip()) and a part's type
// (str(type).strip().lower()): the separators U+001C to U+001F too,
// which Go's unicode.IsSpace does not count. A message of them alone
// is refused as empty (a run's is not: TestRunInputAsHermes); a part
// type among them is read.
func TestBlankAsPython(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, api, body string
		text, param     string // the input's text, or the refusal's param
	}{
		{name: "a chat message of separators", body: `{"messages":[{"role":"user","content":"\u001c\u001d \u001e\u001f"}]}`, param: "messages[0].content"},
		{name: "a Responses input of separators", api: "responses", body: `{"input":"\u001f"}`, param: "input"},
		{name: "a Responses item of separators", api: "responses", body: `{"input":[{"role":"user","content":[{"type":"input_text","text":"\u001e"}]}]}`, param: "input[0]"},
		{name: "a zero-width space is no blank", body: `{"messages":[{"role":"user","content":"\u200b"}]}`, text: "\u200b"},
		{name: "a part type among separators", body: `{"messages":[{"role":"user","content":[{"type":"\u001ftext\u001c","text":"a"}]}]}`, text: "a"},
		{name: "an input part type among separators", api: "responses", body: `{"input":[{"role":"user","content":[{"type":" input_text\u001d","text":"b"}]}]}`, text: "b"},
		{name: "a system part type among separators", body: `{"messages":[{"role":"system","content":[{"type":"\u001etext","text":"s"}]},{"role":"user","content":"q"}]}`, text: "q"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput(c.api, c.body)
			if c.param != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != c.param {
					t.Fatalf("error %v, want a refusal at %s", err, c.param)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if in.Text != c.text {
				t.Fatalf("text %q, want %q", in.Text, c.text)
			}
			if strings.HasPrefix(c.name, "a system") && (len(in.Context) != 1 || in.Context[0].Content != "s") {
				t.Fatalf("context %v, want the system message s", in.Context)
			}
		})
	}
}

// parseInput parses body as a request of api ("responses", "run", or a
// chat completion) and returns its input.
func parseInput(api, body string) (Input, error) {
	switch api {
	case "responses":
		req, err := ParseResponses([]byte(body))
		if req == nil {
			return Input{}, err
		}
		return req.Input, err
	case "run":
		req, err := ParseRun([]byte(body))
		if req == nil {
			return Input{}, err
		}
		return req.Input, err
	}
	req, err := Parse([]byte(body))
	if req == nil {
		return Input{}, err
	}
	return req.Input, err
}

// contextLine is a context as "role:content" entries joined with "|".
func contextLine(context []*eventsv1.ContextMessage) string {
	var out []string
	for _, m := range context {
		out = append(out, m.GetRole()+":"+m.GetContent())
	}
	return strings.Join(out, "|")
}

// A body that is JSON but no object (an array, a string, a number) is
// refused as such: it was "not valid JSON", naming the Go type it
// missed ("json: cannot unmarshal array into Go value of type
// openai.chatRequest").
func TestBodyThatIsNoObject(t *testing.T) {
	t.Parallel()
	parsers := map[string]func([]byte) error{
		"chat":      func(b []byte) error { _, err := Parse(b); return err },
		"responses": func(b []byte) error { _, err := ParseResponses(b); return err },
		"run":       func(b []byte) error { _, err := ParseRun(b); return err },
	}
	for _, c := range []struct{ body, want string }{
		{`[{"role":"user","content":"hi"}]`, "request body must be a JSON object, not array"},
		{`"hello"`, "request body must be a JSON object, not string"},
		{`42`, "request body must be a JSON object, not number"},
		{`true`, "request body must be a JSON object, not bool"},
		{`{"messages":`, "request body is not valid JSON: unexpected EOF"},
	} {
		for name, parse := range parsers {
			t.Run(name+" "+c.body, func(t *testing.T) {
				t.Parallel()
				var inv *InvalidError
				if err := parse([]byte(c.body)); !errors.As(err, &inv) || inv.Msg != c.want || inv.Param != "" {
					t.Fatalf("error %v, want %q", err, c.want)
				}
			})
		}
	}
}
