// Package openai parses OpenAI chat completion and Responses API requests
// (outside input).
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// chatRequest is the part of an OpenAI chat completion request the
// gateway reads; other fields (temperature, tools …) are accepted and
// ignored: the agent decides. What the agent can never give — a tool
// call handed back to the client, an answer held to JSON — is refused
// (supported) rather than answered with plain text the client cannot
// take.
type chatRequest struct {
	Model    string          `json:"model"`
	Messages json.RawMessage `json:"messages"` // read one at a time (eachElement)
	Stream   truth           `json:"stream"`
	User     string          `json:"user"`
	// N is how many choices the client asks for: the agent gives one
	// answer, so a number asking for more is refused rather than
	// answered with fewer choices than asked (checkN).
	N json.RawMessage `json:"n"`
	// StreamOptions.IncludeUsage asks a stream for a last chunk with the
	// usage; stream_options (null aside) without stream: true is refused.
	StreamOptions *struct {
		IncludeUsage truth `json:"include_usage"`
	} `json:"stream_options"`
	// ToolChoice and FunctionCall (its legacy spelling) other than auto
	// or none (allowed tools in mode auto included) ask for the client's
	// tool to be called.
	ToolChoice   json.RawMessage `json:"tool_choice"`
	FunctionCall json.RawMessage `json:"function_call"`
	// ResponseFormat other than text asks for a JSON answer.
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

// supported refuses what the agent cannot give: it runs its own tools on
// the server and hands no tool call back (a client that offers tools
// gets an answer, as from a model that chose not to call them), and it
// answers in prose, held to no format.
func (r *chatRequest) supported() error {
	if !autoOrNone(r.ToolChoice) {
		return unsupported("tool_choice", "tool_choice can only be auto or none: the agent runs its own tools and hands no tool call back")
	}
	if !autoOrNone(r.FunctionCall) {
		return unsupported("function_call", "function_call can only be auto or none: the agent runs its own tools and hands no function call back")
	}
	if f := r.ResponseFormat; f != nil && f.Type != "" && f.Type != "text" {
		return unsupported("response_format", "only text answers are supported, not %q: the agent's answer is not held to a format", Clip(f.Type, 40))
	}
	return nil
}

// autoOrNone reports whether a tool_choice (or function_call) leaves
// the call to the model: absent, null, "auto" or "none", or a set of
// allowed tools in mode auto (the model may call one of them or none,
// as with auto; the SDKs' ChatCompletionAllowedToolChoice).
func autoOrNone(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte(`"auto"`)) || bytes.Equal(raw, []byte(`"none"`)) {
		return true
	}
	var c struct {
		Type         string `json:"type"`
		AllowedTools *struct {
			Mode string `json:"mode"`
		} `json:"allowed_tools"`
	}
	return json.Unmarshal(raw, &c) == nil && c.Type == "allowed_tools" && c.AllowedTools != nil && c.AllowedTools.Mode == "auto"
}

// chatMessage is one message of a chat completion; its fields are read
// by their exact names (UnmarshalJSON).
type chatMessage struct {
	Role    string
	Content json.RawMessage
}

// UnmarshalJSON reads the message's "role" and "content" as spelled, as
// Hermes's msg.get looks them up: "Role" is another key. A role that is
// no string is none (""): Hermes compares it with "system", "user" and
// "assistant" and reads no message whose role is none of them.
func (m *chatMessage) UnmarshalJSON(b []byte) error {
	f, err := exactMembers(b, "role", "content")
	if err != nil {
		return err
	}
	m.Content = f["content"]
	if role := bytes.TrimSpace(f["role"]); len(role) > 0 && role[0] == '"' {
		return json.Unmarshal(role, &m.Role)
	}
	return nil
}

// Input is what a request asks the agent: the newest user message (its
// text and pictures) and the messages around it, oldest first.
type Input struct {
	Text        string
	Attachments []*eventsv1.Attachment
	Context     []*eventsv1.ContextMessage
}

// Chat is a validated chat completion request: the newest user or
// assistant message is the input, the messages around it its context.
type Chat struct {
	Input
	Model  string
	Stream bool
	// IncludeUsage: the stream ends with a chunk holding the usage.
	IncludeUsage bool
	User         string
}

// InvalidError is a request the client must fix (400).
type InvalidError struct {
	Msg   string
	Param string
	// Code is OpenAI's error code; empty: invalid_request.
	Code string
}

func (e *InvalidError) Error() string { return e.Msg }

func invalid(param, format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...), Param: param}
}

// CodeUnsupported is the code of a request asking for something the
// gateway does not do (a parameter, an input item or a content type):
// refused rather than quietly ignored, as ignoring it would change what
// the client gets.
const CodeUnsupported = "unsupported_parameter"

func unsupported(param, format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...), Param: param, Code: CodeUnsupported}
}

// Parse decodes and validates a chat completion request body.
func Parse(body []byte) (*Chat, error) {
	var req chatRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.supported(); err != nil {
		return nil, err
	}
	if req.StreamOptions != nil && !req.Stream {
		// As OpenAI refuses them (its reference: "Only set this when you
		// set stream: true"); taken silently, a client asking for the
		// usage chunk of a stream it did not ask for would never learn
		// why none came.
		return nil, invalid("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	if err := checkN(req.N); err != nil {
		return nil, err
	}
	out := &Chat{Model: req.Model, Stream: bool(req.Stream), User: req.User,
		IncludeUsage: bool(req.Stream) && req.StreamOptions != nil && bool(req.StreamOptions.IncludeUsage)}
	// As Hermes's _handle_chat_completions: the last user or assistant
	// message is the input (a trailing assistant message too, which
	// Hermes gives the agent as the user's), the user and assistant
	// messages before it its history. Each message is read as it comes,
	// into the context, and the input taken out of it at the end.
	last, param := -1, ""
	var images []picture // the input's
	n, err := eachElement(req.Messages, func(i int, raw json.RawMessage) error {
		var m chatMessage
		if raw = bytes.TrimSpace(raw); raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
			return invalid(fmt.Sprintf("messages[%d]", i), "a message must be an object")
		}
		var text string
		switch m.Role {
		case "user", "assistant":
			// What the conversation says is taken as Hermes takes it
			// (_normalize_multimodal_content): text and pictures; a part of
			// another kind (a file, audio) is refused rather than dropped,
			// or the agent would answer without what the client sent.
			var err error
			param = fmt.Sprintf("messages[%d].content", i)
			if text, images, err = responseContent(m.Content, param); err != nil {
				return err
			}
			last = len(out.Context)
		case "system":
			// As Hermes reads a system message: for its text only, nothing
			// refused (chatText).
			text = chatText(m.Content)
		default:
			// As Hermes's _handle_chat_completions, which reads the
			// messages whose role is system, user or assistant (so spelled)
			// and no other: a developer message, whose text is then not the
			// request's instructions; a tool's or a function's result, of
			// the client's own tool loop, for which the context has no
			// place; a role it does not know, or none.
			return nil
		}
		if len(out.Context) > maxContext {
			// With the input, one more than the context can hold.
			return tooMuchContext("messages")
		}
		out.Context = append(out.Context, &eventsv1.ContextMessage{Role: m.Role, Content: text})
		return nil
	})
	switch {
	case err != nil && !errors.Is(err, errNotArray):
		return nil, err
	case err != nil || n == 0:
		return nil, invalid("messages", "messages must be a non-empty array")
	case last < 0:
		return nil, invalid("messages", "messages must contain a user message")
	}
	out.Text, out.Attachments = out.Context[last].GetContent(), imageAttachments(images)
	out.Context = slices.Delete(out.Context, last, last+1)
	if PythonStrip(out.Text) == "" && len(out.Attachments) == 0 {
		return nil, invalid(param, "the last user or assistant message is empty")
	}
	return out, nil
}

// errNotArray: what eachElement was given is no JSON array.
var errNotArray = errors.New("not a JSON array")

// errEnough, from eachElement's f, stops it: the elements after are not
// read.
var errEnough = errors.New("enough elements read")

// eachElement calls f with each element of raw, a JSON array, in order,
// and returns how many it read (errNotArray when raw is no array); f
// returns errEnough to read no more. raw is JSON the body's decoding
// checked; each element is a slice of it (valueEnd), not a copy, so that
// a body's array of many small elements, which decoded at once would
// take many times the body's size, costs no more memory than what f
// keeps of them.
func eachElement(raw json.RawMessage, f func(int, json.RawMessage) error) (int, error) {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '[' {
		return 0, errNotArray
	}
	n := 0
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] != ']'; n++ {
		end := valueEnd(raw, i)
		if end == i {
			return n, errNotArray
		}
		if err := f(n, raw[i:end:end]); errors.Is(err, errEnough) {
			return n, nil
		} else if err != nil {
			return n, err
		}
		if i = skipSpace(raw, end); i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	if i == len(raw) {
		return n, errNotArray
	}
	return n, nil
}

// maxContext is the most messages a request's context can hold: the
// event that takes a request to the agent (within pkg/platform's
// DefaultMaxEventBytes) spends at least minContextBytes on each (a
// context entry of a role and no content), so a request with more could
// never be published. It is refused as its context is read, before the
// rest of it takes memory. Hermes counts no messages: its bound is the
// body's size.
const maxContext = platform.DefaultMaxEventBytes / minContextBytes

// minContextBytes is the least a context message takes in an encoded
// event: its field's tag and length, and its role's tag, length and four
// bytes ("user").
const minContextBytes = 8

// tooMuchContext refuses a request with more than maxContext messages of
// context.
func tooMuchContext(param string) error {
	return invalid(param, "too many messages: a request carries at most %d besides its input", maxContext)
}

// checkN refuses an n that asks for other than one answer: more, or
// NaN, is more than one answer; less than 1 (0 aside) is invalid. n is
// compared as Python compares it: 1.0, 1e0 and true are 1 (Python's
// bool is an int, True == 1). Hermes reads no n and gives one answer
// whatever it is; 0 (0.0, false), which asks for fewer answers, not
// more, is answered as Hermes answers it, with one.
func checkN(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil
	case bytes.Equal(raw, []byte("true")) || bytes.Equal(raw, []byte("false")):
		return nil
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return invalid("n", "n must be a number")
	case string(raw) == nanNumber:
		// NaN is not 1 answer.
	case parseNumber(raw) == 1 || parseNumber(raw) == 0:
		return nil
	case parseNumber(raw) < 1:
		return invalid("n", "n must be at least 1")
	}
	return unsupported("n", "n must be 1: the agent gives one answer per request")
}

// parseNumber is the value of raw, a JSON number: ±Inf past the float
// range, as Python reads it.
func parseNumber(raw json.RawMessage) float64 {
	f, _ := strconv.ParseFloat(string(raw), 64)
	return f
}

// truth is a boolean parameter read as Python holds its value true or
// false (falsy), as Hermes reads stream (if stream: …): NaN, 1, "no" and
// [0] are true; 0, "", [], {}, false and null false.
type truth bool

func (t *truth) UnmarshalJSON(b []byte) error {
	*t = truth(!falsy(b))
	return nil
}

// decode reads body, one JSON object, into v. The literals NaN,
// Infinity and -Infinity are taken, as Python's json module (Hermes's
// request.json()) takes them (pythonLiterals). A parameter of the wrong
// type is refused with its name (typeError), not as JSON that is not
// valid.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(pythonLiterals(body)))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return typeError(te)
		case te != nil:
			// Valid JSON, of another type than an object (an array, a
			// string): not "not valid JSON", nor the Go type it missed.
			return invalid("", "request body must be a JSON object, not %s", te.Value)
		}
		return invalid("", "request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return invalid("", "request body has data after the JSON object")
	}
	return nil
}

// typeError refuses a parameter whose JSON value is not of its type:
// the message names the parameter and the type, not the value (a NaN is
// nanNumber there, which the client did not send).
func typeError(te *json.UnmarshalTypeError) error {
	want := "of another type"
	switch te.Type.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.Map, reflect.Struct, reflect.Pointer:
		want = "an object"
	case reflect.Slice, reflect.Array:
		want = "an array"
	}
	// The field, and the type of what is in it (a map's value's).
	return invalid(te.Field, "%s: expected %s", te.Field, want)
}

// nanNumber stands for NaN in a body whose Python literals are made
// JSON numbers (pythonLiterals), as no JSON number is NaN: pythonScalar
// reads it as nan. Python reads the number itself as inf, so only a
// client that sends exactly it gets nan for its inf.
const nanNumber = "9e999999999"

// pythonLiterals is body with the literals that Python's json module
// reads besides JSON's made JSON numbers of the same value: Infinity
// and -Infinity 1e999 and -1e999 (inf and -inf to Python too), NaN
// nanNumber. Each is written between spaces, so that it never runs into
// a token beside it (NaN1 stays no JSON, as in Python). Strings are
// left as they are; body is itself when it holds none of them.
func pythonLiterals(body []byte) []byte {
	if !bytes.Contains(body, []byte("NaN")) && !bytes.Contains(body, []byte("Infinity")) {
		return body
	}
	var out []byte
	done := 0 // body[:done] is in out
	inString, escaped := false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		var lit, num string
		switch rest := body[i:]; {
		case c == '"':
			inString = true
			continue
		case bytes.HasPrefix(rest, []byte("NaN")):
			lit, num = "NaN", nanNumber
		case bytes.HasPrefix(rest, []byte("Infinity")):
			lit, num = "Infinity", "1e999"
		case bytes.HasPrefix(rest, []byte("-Infinity")):
			lit, num = "-Infinity", "-1e999"
		default:
			continue
		}
		out = append(out, body[done:i]...)
		out = append(append(append(out, ' '), num...), ' ')
		done = i + len(lit)
		i = done - 1
	}
	if out == nil {
		return body
	}
	return append(out, body[done:]...)
}

// exactMembers reads the members names of a JSON object by their exact
// names, as Python's dict.get looks them up, where encoding/json matches
// a struct's fields in any case ("Type" or "TEXT" for type and text); a
// repeated name's last value counts, as in Python. null has no members.
// b is JSON the body's decoding checked; each member read is a slice of
// it (eachMember), the others are skipped, so that an object of many
// keys holds no more memory than itself.
func exactMembers(b []byte, names ...string) (map[string]json.RawMessage, error) {
	if i := skipSpace(b, 0); bytes.HasPrefix(b[i:], []byte("null")) {
		return nil, nil
	}
	f := make(map[string]json.RawMessage, len(names))
	err := eachMember(b, func(key, value []byte) error {
		if name, ok := memberName(key, names); ok {
			f[name] = value
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// eachMember calls f with each member of b, a JSON object, in order: its
// key (the JSON string, quotes and escapes as they are) and its value,
// each a slice of b (valueEnd), not a copy; f returns errEnough to read
// no more. null has no members; what is no object is errNotObject. b is
// JSON the body's decoding checked, read here without decoding it
// again.
func eachMember(b []byte, f func(key, value []byte) error) error {
	i := skipSpace(b, 0)
	if bytes.HasPrefix(b[i:], []byte("null")) {
		return nil
	}
	if i == len(b) || b[i] != '{' {
		return errNotObject
	}
	for i = skipSpace(b, i+1); i < len(b) && b[i] != '}'; {
		if b[i] != '"' {
			return errNotObject
		}
		keyEnd := stringEnd(b, i)
		key := b[i:keyEnd:keyEnd]
		if i = skipSpace(b, keyEnd); i == len(b) || b[i] != ':' {
			return errNotObject
		}
		i = skipSpace(b, i+1)
		end := valueEnd(b, i)
		if end == i {
			return errNotObject
		}
		if err := f(key, b[i:end:end]); errors.Is(err, errEnough) {
			return nil
		} else if err != nil {
			return err
		}
		if i = skipSpace(b, end); i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	if i == len(b) {
		return errNotObject
	}
	return nil
}

// errNotObject: what exactMembers was given is no JSON object.
var errNotObject = errors.New("not a JSON object")

// memberName reports which of names key, a JSON string, is.
func memberName(key []byte, names []string) (string, bool) {
	if len(key) < 2 {
		return "", false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		// No escapes: the name is what is between the quotes.
		for _, n := range names {
			if string(key[1:len(key)-1]) == n {
				return n, true
			}
		}
		return "", false
	}
	var k string
	if json.Unmarshal(key, &k) != nil || !slices.Contains(names, k) {
		return "", false
	}
	return k, true
}

// skipSpace is the index of the first byte of b from i on that is no
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index just past the JSON string that starts at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd is the index just past the JSON value that starts at b[i]
// (i itself when none does). b is JSON the body's decoding checked, read
// here without decoding it again (and without copying what is read).
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			i = stringEnd(b, i) - 1
			if depth == 0 {
				return i + 1
			}
		case '[', '{':
			depth++
		case ']', '}':
			if depth == 0 {
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// stringMember is the string member name of f: "" when it is absent or
// null, an error when it is no string.
func stringMember(f map[string]json.RawMessage, name string) (string, error) {
	var s string
	if raw, ok := f[name]; ok {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
	}
	return s, nil
}

// Hermes's bounds on a message's content (api_server.py,
// MAX_NORMALIZED_TEXT_LENGTH and MAX_CONTENT_LIST_SIZE): a text is cut
// to its first 65,536 characters (code points, as Python counts them)
// and an array to its first 1,000 items; what is past them is dropped
// unread, not refused.
const (
	maxTextLen   = 65_536
	maxListItems = 1_000
)

// clipText is s cut to its first maxTextLen characters.
func clipText(s string) string {
	if len(s) <= maxTextLen {
		return s
	}
	n := 0
	for i := range s {
		if n == maxTextLen {
			return s[:i]
		}
		n++
	}
	return s
}

// chatText is the text of a chat completion's system message, as
// Hermes's _normalize_chat_content reads it
// (gateway/platforms/api_server.py): a string is itself, null nothing,
// an array the text of its parts (nestedText), and any other value its
// Python text (pythonText: 5, True, an object's repr). Nothing is
// refused: a picture or a part of another kind is skipped unchecked.
func chatText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return ""
	case raw[0] == '[':
		return nestedText(raw, 0)
	}
	return clipText(pythonText(raw))
}

// maxContentDepth is how deep nested content arrays are read, as
// Hermes's _normalize_chat_content (_max_depth).
const maxContentDepth = 10

// nestedText is the text of a content array nested depth levels in a
// message's content, as Hermes's _normalize_chat_content reads it
// (gateway/platforms/api_server.py): its non-empty strings, the text of
// its text parts (a part's "type", exactly so named, is text, input_text
// or output_text in any case and spacing) when Python holds it true, as
// Python's str() gives it (pythonText: 5, True, an object's repr), and
// the text of the arrays in it, joined by line breaks; anything else is
// skipped, and nothing deeper than maxContentDepth is read. Within
// Hermes's bounds: each text, and the whole, cut to maxTextLen
// characters, no item read past the first maxListItems or once the
// texts hold maxTextLen.
func nestedText(raw json.RawMessage, depth int) string {
	if depth > maxContentDepth {
		return ""
	}
	// Read one item at a time, and no further than Hermes reads
	// (eachElement), not decoded whole.
	var parts []string
	total := 0
	_, err := eachElement(raw, func(i int, item json.RawMessage) error {
		if i == maxListItems {
			return errEnough
		}
		var text string
		switch item = bytes.TrimSpace(item); {
		case len(item) == 0:
		case item[0] == '"':
			_ = json.Unmarshal(item, &text)
		case item[0] == '{':
			// Hermes's item.get("type"), item.get("text"): the keys as
			// spelled, not in any case as a struct would take them.
			if p, err := exactMembers(item, "type", "text"); err == nil && textType(p["type"]) && !falsy(p["text"]) {
				text = pythonText(p["text"])
			}
		case item[0] == '[':
			text = nestedText(item, depth+1)
		}
		if text = clipText(text); text != "" {
			parts = append(parts, text)
			total += utf8.RuneCountInString(text)
		}
		if total >= maxTextLen {
			// As Hermes: no more parts once they hold maxTextLen.
			return errEnough
		}
		return nil
	})
	if err != nil {
		return ""
	}
	return clipText(strings.Join(parts, "\n"))
}

// textType reports whether a part's type, JSON, names a text part as
// Hermes's API server reads it (str(type).strip().lower()): text,
// input_text or output_text.
func textType(raw json.RawMessage) bool {
	var t string
	if json.Unmarshal(raw, &t) != nil {
		return false
	}
	switch strings.ToLower(PythonStrip(t)) {
	case "text", "input_text", "output_text":
		return true
	}
	return false
}

// partOf reads one element of a content array as Hermes's API server
// takes it: an object is a part of its type, a string a text part (some
// clients send ["hello", {"type": "image_url", …}]); anything else — a
// number, null, a nested array, an empty string — is no part (false),
// skipped as Hermes skips it.
func partOf[P any](raw json.RawMessage, textPart func(string) P) (P, bool, error) {
	var p P
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return p, false, nil
	}
	switch raw[0] {
	case '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil || text == "" {
			return p, false, err
		}
		return textPart(text), true, nil
	case '{':
		if err := json.Unmarshal(raw, &p); err != nil {
			return p, false, err
		}
		return p, true, nil
	}
	return p, false, nil
}

// contextRole is the role a message other than the input has in the
// context ("" for none: the tool results of a client's own tool loop).
func contextRole(role string) string {
	switch role {
	case "system", "user", "assistant":
		return role
	case "developer":
		return "system"
	}
	return ""
}

// CodeInvalidImageURL is the code of a picture without a URL, or whose
// URL is neither a web address nor a data: URL (Hermes's
// invalid_image_url).
const CodeInvalidImageURL = "invalid_image_url"

// CodeInvalidContentPart is the code of a picture whose detail is given
// and is no text (Hermes's invalid_content_part).
const CodeInvalidContentPart = "invalid_content_part"

// Hermes's refusals of a picture (_normalize_multimodal_content), in its
// words.
const (
	msgNoImageURL  = "Image parts must include a non-empty image URL."
	msgImageScheme = "Image inputs must use http(s) URLs or data:image/... URLs."
	msgImageDetail = "Image detail must be a non-empty string when provided."
	// msgDataNotImage (unsupported_content_type): a data: URL whose
	// media type is not image/..., or without a comma before its data.
	msgDataNotImage = "Only image data URLs are supported. Non-image data payloads are not supported."
	// msgFilePart (unsupported_content_type): a file part (file,
	// input_file), whatever it carries.
	msgFilePart = "Inline image inputs are supported, but uploaded files and document inputs are not supported on this endpoint."
)

// image checks a picture's URL and returns it as it is passed on: web
// addresses (the scheme in any case, passed on in lower case), which the
// model provider fetches, and pictures sent inline (data: URLs), which
// the gateway keeps in the attachment store. A data: URL's scheme and
// media type are read in any case, as Hermes lowercases the URL before
// it compares it with "data:image/", and passed on in lower case
// (inlineURL). A data: URL
// that is no picture is an error, and so, as Hermes has it, is any other
// URL (ftp:, file:, a bucket's): no provider fetches it, and dropping it
// would have the agent answer without the picture the client sent.
func image(u string) (string, error) {
	scheme, _, _ := strings.Cut(u, ":")
	switch {
	case strings.EqualFold(scheme, "data"):
		u = inlineURL(u)
		return u, checkDataURL(u)
	case strings.EqualFold(scheme, "https"), strings.EqualFold(scheme, "http"):
		if rest := u[len(scheme):]; strings.HasPrefix(rest, "://") && len(rest) > len("://") {
			// The scheme in lower case (it has no case): the worker
			// shows the model an API client's web addresses by their
			// https:// or http:// prefix.
			return strings.ToLower(scheme) + rest, nil
		}
	}
	return "", &InvalidError{Code: CodeInvalidImageURL, Msg: msgImageScheme}
}

// inlineURL is u, a data: URL, with what comes before its data (the
// scheme, the media type and its parameters) in lower case, as the
// runner finds the inline pictures it keeps (by "data:"), as the
// attachment store keeps a media type and as the data URL is checked
// (base64); the data itself is left as it came.
func inlineURL(u string) string {
	meta, data, found := strings.Cut(u, ",")
	if !found {
		return strings.ToLower(u)
	}
	return strings.ToLower(meta) + "," + data
}

// imageError is err, the refusal of a picture, as the refusal of the
// content at param.
func imageError(param string, err error) error {
	var inv *InvalidError
	if errors.As(err, &inv) {
		return &InvalidError{Msg: inv.Msg, Param: param, Code: inv.Code}
	}
	return invalid(param, "%v", err)
}

// picture is one picture of a message: its URL as it is passed on
// (image) and its detail, stripped ("" for none), which the model is
// given with it, as Hermes passes it on.
type picture struct {
	url, detail string
}

// imageAttachments are the input's pictures, by URL with their detail:
// the first maxImages, and when more came, one picture more that is not
// taken and says how many (unavailable), so that the agent knows of
// them.
func imageAttachments(pics []picture) []*eventsv1.Attachment {
	var out []*eventsv1.Attachment
	for _, p := range pics[:min(len(pics), maxImages)] {
		out = append(out, &eventsv1.Attachment{
			Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: p.url}, Detail: p.detail,
		})
	}
	if len(pics) > maxImages {
		out = append(out, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Unavailable: fmt.Sprintf("the message came with %d pictures; only its first %d are taken", len(pics), maxImages)})
	}
	return out
}

// maxImages bounds the pictures of one message taken (the agent shows
// the model at most 8 of them): each inline one is a write to the
// attachment store. Hermes takes them all (within its 1,000 content
// items), with 200, and so are they all checked and answered here; past
// the first maxImages they are named, not taken (imageAttachments).
const maxImages = 16

// checkDataURL accepts a data: URL of a picture whose data the runner can
// keep (RFC 2397: base64, or percent-encoded, as attachment.ParseDataURL
// decodes it) in a format the model is shown (attachment.IsPictureType):
// PNG, JPEG, GIF or WebP as it is, BMP or TIFF as the PNG or JPEG the
// worker makes of it. u's scheme and media type are in lower case
// (inlineURL). A data: URL that is no picture at all is refused as Hermes
// refuses it (msgDataNotImage). Hermes passes any other data:image/...
// on; these are refused here, as their picture would never be shown:
// another format (SVG, HEIC) no provider takes and the worker does not
// convert (TestImageDataURLFormats), data that does not decode or is
// empty nothing to keep.
func checkDataURL(u string) error {
	meta, _, found := strings.Cut(strings.TrimPrefix(u, "data:"), ",")
	if !found || !strings.HasPrefix(meta, "image/") {
		return &InvalidError{Code: CodeUnsupportedContent, Msg: msgDataNotImage}
	}
	if mime, _, _ := strings.Cut(meta, ";"); !attachment.IsPictureType(mime) {
		return &InvalidError{Code: CodeUnsupportedContent,
			Msg: fmt.Sprintf("Only PNG, JPEG, GIF, WebP, BMP and TIFF image data URLs are supported, not %s.", Clip(mime, 40))}
	}
	data, _, _, err := attachment.ParseDataURL(u)
	switch {
	case err != nil:
		return &InvalidError{Code: CodeInvalidImageURL, Msg: "The image data URL's data is neither valid base64 nor valid percent-encoding."}
	case len(data) == 0:
		return &InvalidError{Code: CodeInvalidImageURL, Msg: "The image data URL holds no data."}
	}
	return nil
}

// PythonStrip is s without its leading and trailing whitespace as
// Python's str.strip() takes it (Hermes strips a message to find it
// empty, a part's type to read it, a job's name and schedule): Go's
// (unicode.IsSpace) and the separators U+001C to U+001F, which Python's
// str.isspace counts too.
func PythonStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
	})
}

// Clip cuts s to at most n bytes on a rune boundary, for error messages.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
