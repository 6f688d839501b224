package openai

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

func TestParseRun(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		// want: text, then "role:content" of each context message.
		want      []string
		session   string
		previous  string
		errParam  string
		errSubstr string
	}{
		{name: "string input", body: `{"input":"hello"}`, want: []string{"hello"}},
		{name: "instructions and history", body: `{"input":"now","instructions":"be brief","session_id":"s-1",
			"conversation_history":[{"role":"user","content":"before"},{"role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`,
			want: []string{"now", "system:be brief", "user:before", "assistant:ok"}, session: "s-1"},
		{name: "input messages", body: `{"input":[{"role":"developer","content":"d"},"first",{"role":"user","content":[{"type":"input_text","text":"last"}]}],"previous_response_id":"resp_1"}`,
			want: []string{"last", "system:d", "user:first"}, previous: "resp_1"},
		{name: "an assistant prefill after the user message is the input, as Hermes's", body: `{"input":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`,
			want: []string{"a", "user:q"}},
		{name: "missing input", body: `{"model":"m"}`, errParam: "input", errSubstr: "input is required"},
		{name: "empty input", body: `{"input":""}`, errParam: "input", errSubstr: "empty"},
		{name: "no message", body: `{"input":[7]}`, errParam: "input", errSubstr: "must contain a message"},
		{name: "history not an array", body: `{"input":"x","conversation_history":{"role":"user"}}`, errParam: "conversation_history", errSubstr: "array"},
		{name: "history entry without content", body: `{"input":"x","conversation_history":[{"role":"user"}]}`,
			errParam: "conversation_history[0]", errSubstr: "'role' and 'content'"},
		{name: "history roles the context has not", body: `{"input":"x","conversation_history":[{"role":"tool","content":"r"},{"role":"robot","content":"b"}]}`,
			want: []string{"x"}},
		{name: "not JSON", body: `{"input":`, errSubstr: "not valid JSON"},
		{name: "two objects", body: `{"input":"a"} {}`, errSubstr: "after the JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, err := ParseRun([]byte(c.body))
			if c.errSubstr != "" {
				var inv *InvalidError
				if !errors.As(err, &inv) || inv.Param != c.errParam || !strings.Contains(inv.Msg, c.errSubstr) {
					t.Fatalf("error %v (%+v), want param %q with %q", err, inv, c.errParam, c.errSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []string{run.Text}
			for _, m := range run.Context {
				got = append(got, m.GetRole()+":"+m.GetContent())
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("parsed %q, want %q", got, c.want)
			}
			if run.SessionID != c.session || run.PreviousResponseID != c.previous {
				t.Errorf("session %q previous %q", run.SessionID, run.PreviousResponseID)
			}
		})
	}
}

// A run's input is read as Hermes's _handle_runs reads it where that is
// no bug, and says so where it is.
//   - Blank: Hermes's run refuses an input only when Python holds it
//     false (if not raw_input, if not user_message: "", [], null, a last
//     item of empty content), not a blank one, which its chat completions
//     and Responses API refuse (_content_has_visible_payload strips it);
//     a run of blanks is started and the agent answers it. An external
//     UI that sends one gets its run here too.
//   - Empty text parts: Hermes's run takes a last item whose content is
//     a list of empty text parts (the list is not empty) and hands the
//     agent that list, a message of no text, which the model providers
//     refuse: a bug. It is refused here as empty.
//   - Earlier items are read as Hermes's run reads them, not as its
//     Responses API does: an item whose content Python holds false (or
//     that has none: a tool's output, a reasoning item) is skipped, and
//     none is refused for its type or its parts (a file, a picture of
//     another scheme: Hermes's run starts such a run, and an earlier
//     item's pictures never reach the model); the content is its text,
//     as the run's conversation_history's (runText).
//   - Earlier items Hermes's run drops that carry text stay context:
//     all of them when it has a conversation_history or finds the
//     previous_response_id's (its "if not conversation_history" before
//     it adds them), though its /v1/responses adds them after either;
//     otherwise a string or an item without a role (Hermes keeps only
//     objects with a role). Dropping them would have the agent answer
//     without messages the client sent this time: they are context
//     here, after the history, a string or an item without a role the
//     user's, as the Responses API's.
func TestRunInputAsHermes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		// want is the text, then "role:content" of each context message;
		// param the refusal's.
		want, param string
	}{
		{name: "a blank input", body: `{"input":"  "}`, want: "  "},
		{name: "an input of separators", body: `{"input":"\u001c\n"}`, want: "\x1c\n"},
		{name: "a blank last item", body: `{"input":["q",{"role":"user","content":" "}]}`, want: " |user:q"},
		{name: "a blank text part", body: `{"input":[{"role":"user","content":[{"type":"input_text","text":"\t"}]}]}`, want: "\t"},
		{name: "an empty input", body: `{"input":""}`, param: "input"},
		{name: "an empty last item", body: `{"input":["q",{"role":"user","content":""}]}`, param: "input[1]"},
		{name: "a last item without content", body: `{"input":["q",{"role":"user","content":null}]}`, param: "input[1]"},
		{name: "empty text parts", body: `{"input":[{"role":"user","content":[{"type":"input_text","text":""}]}]}`, param: "input[0]"},
		// Hermes's run refuses a last item whose content Python holds
		// false (if not user_message), where a Responses request reads
		// it as its Python text ("0", "False", "{}").
		{name: "a last item whose content is 0", body: `{"input":["q",{"role":"user","content":0}]}`, param: "input[1]"},
		{name: "a last item whose content is 0.0", body: `{"input":[{"role":"user","content":0.0}]}`, param: "input[0]"},
		{name: "a last item whose content is -0", body: `{"input":[{"role":"user","content":-0}]}`, param: "input[0]"},
		{name: "a last item whose content is false", body: `{"input":[{"role":"assistant","content":false}]}`, param: "input[0]"},
		{name: "a last item whose content is an empty object", body: `{"input":[{"role":"user","content":{}}]}`, param: "input[0]"},
		{name: "a last item whose content is 1", body: `{"input":[{"role":"user","content":1}]}`, want: "1"},
		{name: "a last item whose content is true", body: `{"input":[{"role":"user","content":true}]}`, want: "True"},
		{name: "a last item whose content is NaN", body: `{"input":[{"role":"user","content":NaN}]}`, want: "nan"},
		{name: "earlier items after a history", body: `{"input":["a","b"],"conversation_history":[{"role":"user","content":"h"}]}`, want: "b|user:h|user:a"},
		{name: "earlier items with a previous response", body: `{"input":["a","b"],"previous_response_id":"resp_1"}`, want: "b|user:a"},
		{name: "earlier items of empty content", body: `{"input":[{"role":"user","content":""},{"role":"assistant","content":0},` +
			`{"role":"user","content":[]},{"role":"user","content":null},{"role":"system","content":{}},{"role":"user"},{"role":"user","content":false},"","q"]}`, want: "q"},
		{name: "earlier items of another type", body: `{"input":[{"type":"function_call_output","call_id":"c","output":"4"},` +
			`{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},"q"]}`, want: "q"},
		{name: "an earlier item of another type with a role and content", body: `{"input":[{"type":"note","role":"assistant","content":"n"},"q"]}`, want: "q|assistant:n"},
		{name: "an earlier item's parts are not checked", body: `{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},` +
			`{"type":"input_file","file_id":"f"},{"type":"input_image","image_url":"ftp://x/a.png"},{"type":"input_image"},{"type":5}]},"q"]}`, want: "q|user:a"},
		{name: "an earlier item's content as Python's text", body: `{"input":[{"role":"user","content":{"k":true}},{"role":"assistant","content":1.0},"q"]}`,
			want: "q|user:{'k': True}|assistant:1.0"},
		{name: "an earlier string, an item without a role", body: `{"input":["a",{"content":"b"},{"role":null,"content":"c"},"q"]}`, want: "q|user:a|user:b|user:c"},
		{name: "a last item of another type", body: `{"input":["a",{"type":"function_call_output","call_id":"c","output":"4"}]}`, param: "input[1].type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseInput("run", c.body)
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
			got := in.Text
			if ctx := contextLine(in.Context); ctx != "" {
				got += "|" + ctx
			}
			if got != c.want {
				t.Fatalf("%q, want %q", got, c.want)
			}
		})
	}
}

// FuzzParseRun: a run request is accepted only with a user message to
// answer; whatever is accepted goes on the bus as it is.
func FuzzParseRun(f *testing.F) {
	for _, s := range []string{
		`{"input":"hi","session_id":"s1","instructions":"be brief","model":"m"}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
		`{"input":["a",{"role":"assistant","content":"b"},"c"],"conversation_history":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"}]}]}`,
		`{"input":"x","conversation_history":[{"role":"user"}]}`, `{"input":"x","conversation_history":"no"}`,
		`{"input":[]}`, `{"input":null}`, `[]`, `null`, `{} {}`,
		"{\"input\":\"bad \xff\xfe utf-8\",\"session_id\":\"\xc3\"}",
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]}]}`,
		`{"input":[{"type":"function_call_output","output":"x"}]}`,
		`{"input":"a","conversation_history":[{"role":"user","content":{"k":["it's",{"q":"\"\u00a0\ud83d\ude00"},1e-7,true,null],"k":{}}}]}`,
		`{"input":"a","conversation_history":[{"role":"function","content":-0},{"role":null,"content":false},{"role":"user","content":null},{"role":"assistant","content":[[{"type":"text","text":"t"}],{"type":"input_file"}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"ftp://x","detail":5},{"type":"input_file","file_id":7}]},{"type":"reasoning","summary":[]},{"type":"function_call_output","output":"x"},{"role":"user","content":[{"type":"input_image","image_url":"HTTPS://x/a.png","detail":"Low"},{"type":"input_image","image_url":"https://x/b.png","file_id":"f","detail":"medium"},{"type":"input_text","text":"q"}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		run, err := ParseRun(body)
		if err != nil {
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("error %T is not an InvalidError", err)
			}
			return
		}
		if run.Text == "" && len(run.Attachments) == 0 {
			// A blank one is taken, as Hermes's run takes it
			// (TestRunInputAsHermes).
			t.Fatal("accepted a run without input")
		}
		if len(run.Context) > maxContext+1 {
			t.Fatalf("%d context messages", len(run.Context))
		}
		checkPictures(t, run.Attachments)
		for _, c := range run.Context {
			if c.Role != "system" && c.Role != "user" && c.Role != "assistant" {
				t.Fatalf("context role %q", c.Role)
			}
		}
		if run.Instructions != "" && (run.Context[0].GetRole() != "system" || run.Context[0].GetContent() != run.Instructions) {
			t.Fatal("instructions are not the first context message")
		}
		ev := &eventsv1.MessageReceived{Text: run.Text, Attachments: run.Attachments, Context: run.Context}
		if _, err := proto.Marshal(ev); err != nil {
			t.Fatalf("accepted run does not encode: %v", err)
		}
		for _, s := range []string{run.Model, run.SessionID, run.PreviousResponseID} {
			if !utf8.ValidString(s) {
				t.Fatalf("%q is not UTF-8", s)
			}
		}
	})
}
