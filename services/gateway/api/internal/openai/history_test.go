package openai

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// conversation_history is read as Hermes's API server reads it
// (api_server.py, _handle_responses and _handle_runs), then as its
// agent takes the messages (run_agent.py, _sanitize_api_messages): every
// entry needs a role and a content, whatever their values; a role
// other than system, developer, user or assistant is dropped, a tool's
// or a function's result included (the gateway's context carries no
// tool call to answer); scalar content is its Python text; pictures
// are checked as Hermes checks them on the Responses API and not
// carried; a run reads content with Python's str() and refuses none of
// it.
func TestConversationHistoryAsHermes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, history string
		// responses and run: the context, "role:content" joined by "|",
		// or "error <param>" for a refusal.
		responses, run string
	}{
		{"user and assistant", `[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]`, "user:q|assistant:a", "user:q|assistant:a"},
		{"system and developer", `[{"role":"system","content":"s"},{"role":"developer","content":"d"}]`, "system:s|system:d", "system:s|system:d"},
		{"a tool's result", `[{"role":"user","content":"q"},{"role":"tool","content":"42","tool_call_id":"c1"}]`, "user:q", "user:q"},
		{"a function's result", `[{"role":"function","name":"f","content":"42"},{"role":"assistant","content":"a"}]`, "assistant:a", "assistant:a"},
		{"a role the agent does not know", `[{"role":"robot","content":"beep"},{"role":"User","content":"q"}]`, "", ""},
		{"a role that is no string", `[{"role":5,"content":"a"},{"role":null,"content":"b"},{"role":"","content":"c"},{"role":["user"],"content":"d"}]`, "", ""},
		{"no role", `[{"content":"a"}]`, "error conversation_history[0]", "error conversation_history[0]"},
		{"no content", `[{"role":"user"}]`, "error conversation_history[0]", "error conversation_history[0]"},
		{"null content", `[{"role":"user","content":null}]`, "user:", "user:None"},
		{"an integer", `[{"role":"user","content":42},{"role":"user","content":-0},{"role":"user","content":123456789012345678901234567890}]`,
			"user:42|user:0|user:123456789012345678901234567890", "user:42|user:0|user:123456789012345678901234567890"},
		{"a float", `[{"role":"user","content":1.5},{"role":"user","content":2.0},{"role":"user","content":1e16},{"role":"user","content":1e15},{"role":"user","content":0.00001},{"role":"user","content":-0.0},{"role":"user","content":1e400}]`,
			"user:1.5|user:2.0|user:1e+16|user:1000000000000000.0|user:1e-05|user:-0.0|user:inf",
			"user:1.5|user:2.0|user:1e+16|user:1000000000000000.0|user:1e-05|user:-0.0|user:inf"},
		{"a boolean", `[{"role":"user","content":true},{"role":"assistant","content":false}]`, "user:True|assistant:False", "user:True|assistant:False"},
		{"an object", `[{"role":"user","content":{"text":"a"}}]`, "user:{'text': 'a'}", "user:{'text': 'a'}"},
		{"text parts", `[{"role":"assistant","content":["a",{"type":"output_text","text":"b"},7,null]}]`, "assistant:a\nb", "assistant:a\nb"},
		{"a picture", `[{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/a.png"}]},{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]`,
			"user:look|user:", "user:look|user:"},
		{"a picture no provider fetches", `[{"role":"user","content":[{"type":"input_image","image_url":"ftp://x/a.png"}]}]`, "error conversation_history[0].content", "user:"},
		{"a file", `[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]`, "error conversation_history[0].content[0].type", "user:"},
		{"a false value is none", `""`, "", ""},
		{"an empty object is none", `{}`, "", ""},
		{"zero is none", `0`, "", ""},
		{"false is none", `false`, "", ""},
		{"an empty array is none", `[]`, "", ""},
		{"a string", `"before"`, "error conversation_history", "error conversation_history"},
		{"an object for the history", `{"role":"user","content":"a"}`, "error conversation_history", "error conversation_history"},
		{"true", `true`, "error conversation_history", "error conversation_history"},
		{"an entry that is no object", `["before"]`, "error conversation_history[0]", "error conversation_history[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, api := range []string{"responses", "run"} {
				body := fmt.Sprintf(`{"input":"now","conversation_history":%s}`, c.history)
				var in Input
				var err error
				want := c.responses
				if api == "responses" {
					var req *Responses
					if req, err = ParseResponses([]byte(body)); req != nil {
						in = req.Input
					}
				} else {
					want = c.run
					var req *Run
					if req, err = ParseRun([]byte(body)); req != nil {
						in = req.Input
					}
				}
				var got string
				if err != nil {
					var inv *InvalidError
					if !errors.As(err, &inv) {
						t.Fatalf("%s: error %v", api, err)
					}
					got = "error " + inv.Param
				} else {
					got = contextLine(in.Context)
					if in.Text != "now" {
						t.Errorf("%s: input %q", api, in.Text)
					}
				}
				if got != want {
					t.Errorf("%s: %q, want %q", api, got, want)
				}
			}
		})
	}
}

// A conversation_history entry's fields are "role" and "content" as
// spelled, as Hermes's API server looks them up in the entry's dict
// ("role" not in entry): "Role" or "CONTENT" is another key, so an entry
// with only those is refused on both endpoints, and one beside the right
// key changes nothing.
func TestConversationHistoryFieldNamesAsSpelled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, history, want string }{
		{"a role in another case", `[{"Role":"user","content":"q"}]`, "error conversation_history[0]"},
		{"a content in another case", `[{"role":"user","Content":"q"}]`, "error conversation_history[0]"},
		{"both in capitals", `[{"ROLE":"user","CONTENT":"q"}]`, "error conversation_history[0]"},
		{"other cases beside the fields", `[{"role":"user","content":"q","Role":"system","CONTENT":"x"},{"Content":"y","content":"a","role":"assistant"}]`,
			"user:q|assistant:a"},
		{"the last of a repeated field", `[{"role":"system","content":"x","role":"user","content":"q"}]`, "user:q"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(fmt.Sprintf(`{"input":"now","conversation_history":%s}`, c.history))
			resp, respErr := ParseResponses(body)
			run, runErr := ParseRun(body)
			for api, got := range map[string]struct {
				in  *Input
				err error
			}{"responses": {inputOf(resp), respErr}, "run": {inputOfRun(run), runErr}} {
				var text string
				if got.err != nil {
					var inv *InvalidError
					if !errors.As(got.err, &inv) {
						t.Fatalf("%s: error %v", api, got.err)
					}
					text = "error " + inv.Param
				} else {
					text = contextLine(got.in.Context)
				}
				if text != c.want {
					t.Errorf("%s: %q, want %q", api, text, c.want)
				}
			}
		})
	}
}

func inputOf(r *Responses) *Input {
	if r == nil {
		return nil
	}
	return &r.Input
}

func inputOfRun(r *Run) *Input {
	if r == nil {
		return nil
	}
	return &r.Input
}

// A Responses request's truncation "auto" keeps the latest 100 messages
// of its context — its history, then its input's earlier items — as
// Hermes cuts its conversation_history, counting the entries it drops
// later; the instructions stay. Any other value cuts nothing.
func TestResponsesTruncation(t *testing.T) {
	t.Parallel()
	entries := func(n int, role string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(`{"role":%q,"content":"%s%d"}`, role, role[:1], i)
		}
		return out
	}
	for _, c := range []struct {
		name, truncation string
		history          []string
		items            int // the input's items before its last
		// first and n: the first message kept after the instructions, and
		// how many are.
		first string
		n     int
		want  string
	}{
		{"auto, 150 entries", `"auto"`, entries(150, "user"), 0, "user:u50", 100, "auto"},
		{"auto, 100 entries", `"auto"`, entries(100, "user"), 0, "user:u0", 100, "auto"},
		{"auto, history and items", `"auto"`, entries(99, "user"), 3, "user:u2", 100, "auto"},
		{"auto, a dropped entry counts", `"auto"`, append(entries(100, "user"), entries(1, "tool")...), 0, "user:u1", 99, "auto"},
		{"disabled", `"disabled"`, entries(150, "user"), 0, "user:u0", 150, "disabled"},
		{"not given", ``, entries(150, "user"), 0, "user:u0", 150, "disabled"},
		{"another type", `{"type":"auto"}`, entries(150, "user"), 0, "user:u0", 150, "disabled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			items := []string{}
			for i := range c.items {
				items = append(items, fmt.Sprintf(`{"role":"assistant","content":"i%d"}`, i))
			}
			items = append(items, `"now"`)
			body := `{"instructions":"be brief","input":[` + strings.Join(items, ",") + `],"conversation_history":[` + strings.Join(c.history, ",") + `]`
			if c.truncation != "" {
				body += `,"truncation":` + c.truncation
			}
			req, err := ParseResponses([]byte(body + "}"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := req.Context
			if len(ctx) == 0 || ctx[0].GetRole() != "system" || ctx[0].GetContent() != "be brief" {
				t.Fatalf("context %v does not start with the instructions", ctx)
			}
			ctx = ctx[1:]
			if len(ctx) != c.n || ctx[0].GetRole()+":"+ctx[0].GetContent() != c.first || req.Truncation != c.want {
				t.Fatalf("%d messages from %s:%s, truncation %q; want %d from %s, %q", len(ctx), ctx[0].GetRole(), ctx[0].GetContent(), req.Truncation, c.n, c.first, c.want)
			}
			if c.items > 0 {
				if last := ctx[len(ctx)-1]; last.GetContent() != fmt.Sprintf("i%d", c.items-1) {
					t.Fatalf("last context message %v, want the input's last item before its message", last)
				}
			}
		})
	}
}

// A text part's text that is not a string is its Python text, as
// Hermes's _normalize_multimodal_content takes it (str(text)): 5, True,
// an object's {'a': 1}, an array's ['a']; a null or empty text is no
// text. So is a message's content that is an object. So on the
// Responses API's input and in its conversation_history alike.
func TestTextPartsOfNumbersAndBooleans(t *testing.T) {
	t.Parallel()
	parts := `[{"type":"input_text","text":5},{"type":"output_text","text":true},{"type":"text","text":2.0},` +
		`{"type":"input_text","text":null},{"type":"input_text","text":""},{"type":"input_text"},{"type":"text","text":"b"}]`
	for _, c := range []struct{ name, body, text, context, errParam string }{
		{"input", `{"input":[{"role":"user","content":` + parts + `}]}`, "5\nTrue\n2.0\nb", "", ""},
		{"history", `{"input":"now","conversation_history":[{"role":"assistant","content":` + parts + `}]}`, "now", "assistant:5\nTrue\n2.0\nb", ""},
		{"an object", `{"input":[{"role":"user","content":[{"type":"input_text","text":{"a":1}}]}]}`, "{'a': 1}", "", ""},
		{"an array in the history", `{"input":"now","conversation_history":[{"role":"user","content":[{"type":"text","text":["a"]}]}]}`,
			"now", "user:['a']", ""},
		{"an object for content", `{"input":[{"role":"assistant","content":{"k":[1.0,null]}},{"role":"user","content":{"text":"hi"}}]}`,
			"{'text': 'hi'}", "assistant:{'k': [1.0, None]}", ""},
	} {
		req, err := ParseResponses([]byte(c.body))
		if c.errParam != "" {
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Param != c.errParam || !strings.Contains(inv.Msg, "text") {
				t.Errorf("%s: error %v, want one for %s", c.name, err, c.errParam)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ctx := contextLine(req.Context)
		if req.Text != c.text || ctx != c.context {
			t.Errorf("%s: text %q, context %q; want %q, %q", c.name, req.Text, ctx, c.text, c.context)
		}
	}
}

// A run's history entry whose content is an object is its Python text
// (str(content)), as Hermes's run reads every content: nothing is
// refused. The texts here are Python's own.
func TestRunHistoryObjectIsItsPythonText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ content, want string }{
		{"{\"text\":\"a\"}", "{'text': 'a'}"},
		{"{\"a\":1,\"b\":[true,null,2.0,1e16,[]],\"c\":{\"d\":\"it's\"},\"a\":-0}", "{'a': 0, 'b': [True, None, 2.0, 1e+16, []], 'c': {'d': \"it's\"}}"},
		{"{\"q\":\"say \\\"hi\\\" it's\",\"n\":\"tab\\there\\u00e9\\u00a0\\u0001\\\\ \\u00ad \\u4e2d \\ud83d\\ude00 \\u2028\",\"e\":\"\"}", "{'q': 'say \"hi\" it\\'s', 'n': 'tab\\thereé\\xa0\\x01\\\\ \\xad 中 😀 \\u2028', 'e': ''}"},
		{"{\"only\":\"say \\\"hi\\\"\"}", "{'only': 'say \"hi\"'}"},
		{"{}", "{}"},
		{"{\"k\":{\"type\":\"text\",\"text\":\"hi\"},\"x\":1e-7,\"y\":123456789012345678901234567890}", "{'k': {'type': 'text', 'text': 'hi'}, 'x': 1e-07, 'y': 123456789012345678901234567890}"},
	} {
		run, err := ParseRun([]byte(`{"input":"now","conversation_history":[{"role":"user","content":` + c.content + `}]}`))
		if err != nil {
			t.Errorf("%s: %v", c.content, err)
			continue
		}
		if len(run.Context) != 1 || run.Context[0].GetContent() != c.want {
			t.Errorf("%s: context %v, want %q", c.content, run.Context, c.want)
		}
	}
}
