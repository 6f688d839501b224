package openai

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		// want is the input as "text|context (role:content, …)|pictures".
		want string
		// err is what the refusal says, with its param and code.
		err, param, code string
	}{
		{name: "a string", body: `{"input":"hi"}`, want: "hi||0"},
		{name: "instructions first", body: `{"input":"hi","instructions":"be brief"}`, want: "hi|system:be brief|0"},
		{name: "items", body: `{"instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":"a"},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"},{"type":"refusal","refusal":"no"}]},` +
			`{"role":"user","content":[{"type":"input_text","text":"c"},{"type":"input_text","text":"d"}]}]}`,
			want: "c\nd|system:i,system:d,user:a,assistant:b|0"},
		{name: "an assistant prefill after the user message", body: `{"input":[{"role":"user","content":"q"},{"role":"assistant","content":"prefill"}]}`, want: "prefill|user:q|0"},
		{name: "a bare string item", body: `{"input":["a","b"]}`, want: "b|user:a|0"},
		{name: "pictures", body: `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/a.png"},` +
			`{"type":"input_image","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"input_image","image_url":"HTTP://x/b.png"}]}]}`, want: "|" + "|3"},
		{name: "a picture no provider can fetch", body: `{"input":[{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"ftp://x/b.png"}]}]}`,
			err: "http(s) URL", param: "input[0].content", code: CodeInvalidImageURL},
		{name: "no input", body: `{}`, err: "input is required", param: "input"},
		{name: "null input", body: `{"input":null}`, err: "input is required", param: "input"},
		{name: "empty string", body: `{"input":""}`, err: "empty", param: "input"},
		{name: "empty list", body: `{"input":[]}`, err: "must not be empty", param: "input"},
		{name: "an object", body: `{"input":{"role":"user"}}`, err: "string or an array", param: "input"},
		{name: "only an item neither a string nor an object", body: `{"input":[12]}`, err: "must contain a message", param: "input"},
		{name: "only an assistant message", body: `{"input":[{"role":"assistant","content":"a"}]}`, want: "a||0"},
		{name: "an empty last user message", body: `{"input":[{"role":"user","content":"a"},{"role":"user","content":[]}]}`, err: "empty", param: "input[1]"},
		{name: "a tool's role", body: `{"input":[{"role":"tool","content":"a"},"q"]}`, want: "q||0"},
		{name: "a tool result", body: `{"input":[{"type":"function_call_output","call_id":"c","output":"o"}]}`, err: "function_call_output", param: "input[0].type", code: CodeUnsupportedContent},
		{name: "a reasoning item", body: `{"input":[{"role":"user","content":"a"},{"type":"reasoning","summary":[]}]}`, err: "reasoning", param: "input[1].type", code: CodeUnsupportedContent},
		{name: "a file", body: `{"input":[{"role":"user","content":[{"type":"input_file","file_data":"x"}]}]}`, err: "uploaded files and document inputs", param: "input[0].content[0].type", code: CodeUnsupportedContent},
		{name: "audio", body: `{"input":[{"role":"user","content":[{"type":"input_audio"}]}]}`, err: "input_audio", param: "input[0].content[0].type", code: CodeUnsupportedContent},
		{name: "an uploaded picture", body: `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, err: "Image parts must include a non-empty image URL.", param: "input[0].content", code: CodeInvalidImageURL},
		{name: "a picture without url", body: `{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`, err: "Image parts must include a non-empty image URL.", param: "input[0].content", code: CodeInvalidImageURL},
		{name: "not a picture", body: `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:text/plain;base64,aGk="}]}]}`, err: "Only image data URLs", param: "input[0].content", code: CodeUnsupportedContent},
		{name: "content of another type", body: `{"input":[{"role":"user","content":{"text":"a"}}]}`, want: "{'text': 'a'}||0"},
		{name: "content of a number or a boolean", body: `{"input":[{"role":"user","content":true},{"role":"user","content":7.0}]}`, want: "7.0|user:True|0"},
		{name: "tools", body: `{"input":"a","tools":[{"type":"web_search"}]}`, err: "tools are not supported", param: "tools", code: CodeUnsupported},
		{name: "no tools", body: `{"input":"a","tools":[],"tool_choice":"none"}`, want: "a||0"},
		{name: "a tool choice", body: `{"input":"a","tool_choice":{"type":"function","name":"f"}}`, err: "tool_choice", param: "tool_choice", code: CodeUnsupported},
		{name: "background", body: `{"input":"a","background":true}`, err: "background", param: "background", code: CodeUnsupported},
		{name: "json output", body: `{"input":"a","text":{"format":{"type":"json_object"}}}`, err: "json_object", param: "text.format", code: CodeUnsupported},
		{name: "a prompt template", body: `{"input":"a","prompt":{"id":"p"}}`, err: "prompt templates", param: "prompt", code: CodeUnsupported},
		{name: "both conversations", body: `{"input":"a","conversation":{"id":"c"},"previous_response_id":"resp_1"}`, err: "cannot both", param: "conversation"},
		{name: "a conversation of another type", body: `{"input":"a","conversation":[1]}`, err: "conversation must be", param: "conversation"},
		{name: "17 metadata pairs", body: `{"input":"a","metadata":{` + metadataPairs(17) + `}}`, err: "at most 16 metadata pairs", param: "metadata"},
		{name: "the 17th pair is refused before a later value is read", body: `{"input":"a","metadata":{` + metadataPairs(17) + `,"x":5}}`, err: "at most 16 metadata pairs", param: "metadata"},
		{name: "a value that is no string", body: `{"input":"a","metadata":{"k":5}}`, err: "metadata: expected a string", param: "metadata"},
		{name: "metadata that is no object", body: `{"input":"a","metadata":["k"]}`, err: "metadata: expected an object", param: "metadata"},
		{name: "a value too long", body: `{"input":"a","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, err: "metadata", param: "metadata"},
		{name: "too much metadata", body: `{"input":"a","metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, err: "metadata", param: "metadata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := ParseResponses([]byte(tt.body))
			if tt.err != "" {
				inv, ok := err.(*InvalidError)
				if !ok || !strings.Contains(inv.Msg, tt.err) || inv.Param != tt.param || inv.Code != tt.code {
					t.Fatalf("error %#v, want one saying %q (param %q, code %q)", err, tt.err, tt.param, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ctx []string
			for _, c := range req.Context {
				ctx = append(ctx, c.Role+":"+c.Content)
			}
			got := req.Text + "|" + strings.Join(ctx, ",") + "|" + string(rune('0'+len(req.Attachments)))
			if got != tt.want {
				t.Fatalf("input %q, want %q", got, tt.want)
			}
		})
	}
}

// metadataPairs is n metadata pairs, a JSON object's members.
func metadataPairs(n int) string {
	var pairs []string
	for i := range n {
		pairs = append(pairs, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return strings.Join(pairs, ",")
}

func TestParseResponsesParameters(t *testing.T) {
	t.Parallel()
	req, err := ParseResponses([]byte(`{"model":"m","input":"a","stream":true,"user":"u","conversation":{"id":"c-1"},"metadata":{"k":"v"},"temperature":0.5}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "m" || !req.Stream || req.User != "u" || req.Conversation != "c-1" || req.Metadata["k"] != "v" || !req.Store {
		t.Fatalf("%+v", req)
	}
	// 16 pairs, a key repeated (its last value counts, as in Python) and
	// escapes read.
	req, err = ParseResponses([]byte(`{"input":"a","metadata":{` + metadataPairs(16) + `,"k0":"w","k\u0031":"\u00e9"}}`))
	if err != nil || len(req.Metadata) != 16 || req.Metadata["k0"] != "w" || req.Metadata["k1"] != "é" {
		t.Fatalf("%v, %v", req.Metadata, err)
	}
	req, err = ParseResponses([]byte(`{"input":"a","store":false,"previous_response_id":"resp_1","conversation":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Store || req.PreviousResponseID != "resp_1" || req.Conversation != "" {
		t.Fatalf("%+v", req)
	}
}

// A Responses request's and a run's input is read as Hermes's
// _handle_responses reads it (gateway/platforms/api_server.py): its last
// message, whatever its role, is the input, and the messages before it
// are the context; an item of a role Hermes's agent does not read (one
// it does not know, in another case, no string) is answered, not
// refused, its content checked (a Responses request's: a run reads its
// earlier items unchecked, as Hermes's run, TestRunInputAsHermes), and
// left out of the context, as a conversation_history entry of such a
// role; an item that is neither a string nor an object is skipped.
func TestInputAsHermes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, input string
		// want is "text|context (role:content, …)"; else the refusal's
		// param and code.
		want, param, code string
		// responsesOnly: not a run's case.
		responsesOnly bool
	}{
		{name: "an assistant item after the user's", input: `[{"role":"user","content":"q"},{"role":"assistant","content":"prefill"}]`, want: "prefill|user:q"},
		{name: "only an assistant item", input: `[{"role":"assistant","content":"a"}]`, want: "a|"},
		{name: "a system item last", input: `["q",{"role":"system","content":"s"}]`, want: "s|user:q"},
		{name: "a developer item last", input: `[{"role":"developer","content":"d"}]`, want: "d|"},
		{name: "an unknown role before", input: `[{"role":"robot","content":"beep"},{"role":"assistant","content":"a"},"q"]`, want: "q|assistant:a"},
		{name: "a tool role before", input: `[{"role":"tool","content":"r"},"q"]`, want: "q|"},
		{name: "a role in another case", input: `[{"role":"User","content":"a"},"q"]`, want: "q|"},
		{name: "a role that is no string", input: `[{"role":5,"content":"a"},{"role":["user"],"content":"b"},{"role":{},"content":"c"},"q"]`, want: "q|"},
		{name: "an unknown role last", input: `["a",{"role":"robot","content":"beep"}]`, want: "beep|user:a"},
		{name: "a role that is no string last", input: `[{"role":true,"content":"q"}]`, want: "q|"},
		{name: "an unknown role's content checked", input: `[{"role":"robot","content":[{"type":"input_file","file_id":"f"}]},"q"]`,
			param: "input[0].content[0].type", code: CodeUnsupportedContent, responsesOnly: true},
		{name: "items neither strings nor objects skipped", input: `["a",5,null,[1],true,"q",0]`, want: "q|user:a"},
		{name: "no message", input: `[5,null]`, param: "input"},
		// Empty: a blank one a run takes (TestRunInputAsHermes).
		{name: "an empty assistant item after the user's", input: `[{"role":"user","content":"q"},{"role":"assistant","content":""}]`, param: "input[1]"},
	} {
		for _, api := range []string{"responses", "run"} {
			if api == "run" && c.responsesOnly {
				continue
			}
			t.Run(api+": "+c.name, func(t *testing.T) {
				t.Parallel()
				body := []byte(`{"input":` + c.input + `}`)
				var in Input
				var err error
				if api == "run" {
					var req *Run
					if req, err = ParseRun(body); req != nil {
						in = req.Input
					}
				} else {
					var req *Responses
					if req, err = ParseResponses(body); req != nil {
						in = req.Input
					}
				}
				if c.param != "" {
					inv, ok := err.(*InvalidError)
					if !ok || inv.Param != c.param || inv.Code != c.code {
						t.Fatalf("error %#v, want a refusal at %s (code %q)", err, c.param, c.code)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var ctx []string
				for _, m := range in.Context {
					ctx = append(ctx, m.Role+":"+m.Content)
				}
				if got := in.Text + "|" + strings.Join(ctx, ","); got != c.want {
					t.Fatalf("input %q, want %q", got, c.want)
				}
			})
		}
	}
}
