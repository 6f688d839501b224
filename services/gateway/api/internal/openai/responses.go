package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// responsesRequest is the part of a Responses API request (POST
// /v1/responses) the gateway reads. Parameters that tune the model
// (temperature, top_p, reasoning, max_output_tokens, truncation …) or
// describe the caller (user, safety_identifier …) are accepted and left
// to the agent; those that would change what the client gets, and that
// the gateway cannot honour, are refused (supported).
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Stream             truth           `json:"stream"`
	Store              json.RawMessage `json:"store"` // Hermes's: absent true, else as Python holds it (falsy)
	PreviousResponseID string          `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	User               string          `json:"user"`
	Metadata           json.RawMessage `json:"metadata"` // counted as it is read (metadataOf)
	Background         truth           `json:"background"`
	Tools              json.RawMessage `json:"tools"` // refused unless empty; not decoded whole
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Prompt             json.RawMessage `json:"prompt"`
	Text               *struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
	} `json:"text"`
	// ConversationHistory is Hermes's: the earlier messages of a client
	// that keeps its own conversation, sent along instead of a
	// previous_response_id.
	ConversationHistory json.RawMessage `json:"conversation_history"`
	// Truncation "auto" keeps the latest truncateKeep messages of the
	// request's context, as Hermes; any other value is no truncation.
	Truncation json.RawMessage `json:"truncation"`
}

// inputItem is one item of a Responses request's input array: a message
// (type "message", or no type with a role, as the SDKs' easy input
// message), or another item type the gateway does not take.
// Its fields are read by their exact names, as Hermes's item.get looks
// them up (UnmarshalJSON).
type inputItem struct {
	Type    string
	Role    string
	Content json.RawMessage
}

// A role that is absent is the user's, as Hermes's item.get("role",
// "user"); so is a null or empty one, which Hermes would hand the model
// as it is. A role that is no string is none (""): it is no role the
// context has (contextRole).
func (it *inputItem) UnmarshalJSON(b []byte) error {
	f, err := exactMembers(b, "type", "role", "content")
	if err != nil {
		return err
	}
	it.Content = f["content"]
	if it.Type, err = stringMember(f, "type"); err != nil {
		return err
	}
	switch role := bytes.TrimSpace(f["role"]); {
	case len(role) == 0 || bytes.Equal(role, []byte("null")):
		it.Role = "user"
	case role[0] == '"':
		if err := json.Unmarshal(role, &it.Role); err != nil {
			return err
		}
		if it.Role == "" {
			it.Role = "user"
		}
	default:
		it.Role = ""
	}
	return nil
}

// inputPart is one part of a message's content (a Responses message's,
// a chat completion user's or assistant's). Its fields are read by their
// exact names, as Hermes's part.get looks them up (UnmarshalJSON): a
// part with "Type" has no type.
type inputPart struct {
	// Type is the part's type when it is a string; "" when it is none
	// (TypeJSON tells which).
	Type string
	// TypeJSON is the type as it came (JSON; nil when absent): one that is
	// no string is refused as Hermes refuses it, by its Python repr
	// (unknownPart).
	TypeJSON json.RawMessage
	// Text is any JSON: a text part's text is read as Hermes reads it
	// (partText).
	Text json.RawMessage
	// ImageURL is a string in the Responses API, an object {"url": …} in
	// Chat Completions' image_url parts; both are taken.
	ImageURL json.RawMessage
	// Detail is a picture's detail beside its image_url (the Responses
	// API's); an image_url object's own detail wins (imageRef).
	Detail json.RawMessage
	// A file_id is not read, as Hermes reads none: a picture by a file's
	// id and without a URL is a picture without a URL (invalid_image_url).
}

func (p *inputPart) UnmarshalJSON(b []byte) error {
	f, err := exactMembers(b, "type", "text", "image_url", "detail")
	if err != nil {
		return err
	}
	p.Text, p.ImageURL, p.Detail, p.TypeJSON = f["text"], f["image_url"], f["detail"], f["type"]
	// A type that is no string is no type Hermes takes (str(type) is
	// never one): refused with the others unknown, not as malformed.
	_ = json.Unmarshal(p.TypeJSON, &p.Type)
	return nil
}

// Responses is a validated Responses API request: the input's last
// message, whatever its role, is the input; the instructions, the
// conversation_history and the input's other messages, in that order,
// are its context.
type Responses struct {
	Input
	Model  string
	Stream bool
	User   string
	// Instructions is the system message the client sent (also the first
	// context message); empty for none.
	Instructions string
	// InstructionsSent reports that the request has instructions, even
	// empty ones: a request without continues with those of the response
	// it follows (CarryInstructions).
	InstructionsSent bool
	// Store keeps the response for GET /v1/responses/{id} and for
	// previous_response_id (the default).
	Store bool
	// PreviousResponseID names the response whose conversation this one
	// continues.
	PreviousResponseID string
	// Conversation names a conversation of the client's choosing.
	Conversation string
	Metadata     map[string]string
	// HistorySent reports that the request sent a conversation_history:
	// as Hermes, it then continues no kept response — neither its
	// conversation nor its instructions.
	HistorySent bool
	// Truncation is "auto" when the request asked for its context to be
	// cut to the latest truncateKeep messages, else "disabled".
	Truncation string
	// ContextLimit is, with truncation "auto", truncateKeep: the turn
	// shows the model at most that many of the latest messages of the
	// conversation kept on the server and the request's context together
	// (MessageReceived.context_limit), as Hermes's _handle_responses cuts
	// the stored conversation_history with the input's earlier items.
	// 0: no limit.
	ContextLimit int32
}

// CodeUnsupportedContent is the code of an input item or content part of
// a kind the gateway does not take (files, tool results).
const CodeUnsupportedContent = "unsupported_content_type"

// Limits of a Responses request's metadata, as OpenAI's.
const (
	maxMetadata      = 16
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// ParseResponses decodes and validates a Responses API request body.
func ParseResponses(body []byte) (*Responses, error) {
	var req responsesRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := req.supported(); err != nil {
		return nil, err
	}
	conversation, err := conversationOf(req.Conversation)
	if err != nil {
		return nil, err
	}
	if conversation != "" && req.PreviousResponseID != "" {
		return nil, invalid("conversation", "conversation and previous_response_id cannot both be set")
	}
	metadata, err := metadataOf(req.Metadata)
	if err != nil {
		return nil, err
	}
	in, err := readInput(req.Input, req.ConversationHistory, req.PreviousResponseID, false)
	if err != nil {
		return nil, err
	}
	out := &Responses{Model: req.Model, Stream: bool(req.Stream), User: req.User, Store: len(req.Store) == 0 || !falsy(req.Store),
		PreviousResponseID: in.previous, Conversation: conversation, Metadata: metadata,
		InstructionsSent: req.Instructions != nil, HistorySent: in.historySent, Truncation: "disabled"}
	keep := 0
	if truncateAuto(req.Truncation) {
		out.Truncation, keep, out.ContextLimit = "auto", truncateKeep, truncateKeep
	}
	// The history comes before the input's items, as a run's.
	if out.Context, err = in.context(responsesHistoryText, keep); err != nil {
		return nil, err
	}
	if req.Instructions != nil {
		out.CarryInstructions(*req.Instructions)
	}
	if out.Text, out.Attachments, err = in.text(true); err != nil {
		return nil, err
	}
	return out, nil
}

// truncateKeep is how many context messages (the instructions aside) a
// request with truncation "auto" keeps, the latest: Hermes's 100.
const truncateKeep = 100

// truncateAuto reports whether a truncation parameter is "auto"; any
// other value, of any type, is Hermes's default (no truncation).
func truncateAuto(raw json.RawMessage) bool {
	var s string
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil && s == "auto"
}

// CarryInstructions makes text the request's instructions: its first
// context message, as a chat completion's system message. Empty text is
// none.
func (r *Responses) CarryInstructions(text string) {
	if text == "" {
		return
	}
	r.Instructions = text
	r.Context = append([]*eventsv1.ContextMessage{{Role: "system", Content: text}}, r.Context...)
}

// supported refuses the parameters the gateway cannot honour.
func (r *responsesRequest) supported() error {
	if r.Background {
		return unsupported("background", "background responses are not supported: send the request without background (with stream: true the answer shows as it is written)")
	}
	if tools := bytes.TrimSpace(r.Tools); len(tools) > 0 && tools[0] != '[' && !bytes.Equal(tools, []byte("null")) {
		return invalid("tools", "tools: expected an array")
	}
	if !falsy(r.Tools) {
		return unsupported("tools", "tools are not supported: the agent runs its own tools on the server and does not hand tool calls back to the client")
	}
	if choice := bytes.TrimSpace(r.ToolChoice); len(choice) > 0 && !bytes.Equal(choice, []byte("null")) &&
		!bytes.Equal(choice, []byte(`"auto"`)) && !bytes.Equal(choice, []byte(`"none"`)) {
		return unsupported("tool_choice", "tool_choice can only be auto or none: the gateway takes no tools")
	}
	if p := bytes.TrimSpace(r.Prompt); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		return unsupported("prompt", "prompt templates are not supported: send the prompt as input")
	}
	if r.Text != nil && r.Text.Format != nil && r.Text.Format.Type != "" && r.Text.Format.Type != "text" {
		return unsupported("text.format", "only text output is supported, not %q: the agent's answer is not held to a format", Clip(r.Text.Format.Type, 40))
	}
	return nil
}

// conversationOf reads the conversation parameter: a name, or an object
// with its id.
func conversationOf(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		return name, nil
	}
	var ref struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil || raw[0] != '{' {
		return "", invalid("conversation", "conversation must be a name or an object with an id")
	}
	return ref.ID, nil
}

// metadataOf reads a request's metadata: null or an object of at most
// maxMetadata pairs of strings (a repeated key's last value counts, as
// in Python), keys of at most maxMetadataKey bytes and values of at most
// maxMetadataValue. Its members are counted as they are read (eachMember)
// and it is refused at the first pair too many, the values and the
// members after it not decoded, so that a body's large metadata costs no
// more than the body; a key or a value too long to be within its bound
// (escapes included) is refused before it is decoded.
func metadataOf(raw json.RawMessage) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, invalid("metadata", "metadata: expected an object")
	}
	m := map[string]string{}
	err := eachMember(raw, func(key, value []byte) error {
		k, ok := boundedString(key, maxMetadataKey)
		if !ok {
			return tooLongMetadata()
		}
		if _, seen := m[k]; !seen && len(m) == maxMetadata {
			return invalid("metadata", "at most %d metadata pairs", maxMetadata)
		}
		if value[0] != '"' {
			return invalid("metadata", "metadata: expected a string")
		}
		v, ok := boundedString(value, maxMetadataValue)
		if !ok {
			return tooLongMetadata()
		}
		m[k] = v
		return nil
	})
	if errors.Is(err, errNotObject) {
		return nil, invalid("metadata", "metadata: expected an object")
	}
	return m, err
}

// boundedString decodes raw, a JSON string, when it is at most max bytes
// long: one longer in JSON than max characters can be, each escaped
// (\u0041 is six bytes for one), is refused without being decoded.
func boundedString(raw []byte, max int) (string, bool) {
	var s string
	if len(raw) > 2+6*max || json.Unmarshal(raw, &s) != nil || len(s) > max {
		return "", false
	}
	return s, true
}

func tooLongMetadata() error {
	return invalid("metadata", "metadata keys are at most %d characters and values at most %d", maxMetadataKey, maxMetadataValue)
}

// message is one message of a request's input or conversation_history.
type message struct {
	// role is "" for a history entry whose role is not a string.
	role    string
	content json.RawMessage
	param   string // where it is in the request, for errors
	// verbatim: content is a string of the input (the input itself, or
	// an item of it), which Hermes takes as it is, uncut (it bounds only
	// the content of a message item).
	verbatim bool
	// notMessage refuses an input item of a type other than message (a
	// tool's output, a reasoning item); nil for a message. readInput
	// refuses such an item, except a run's earlier item, which is read as
	// Hermes's run reads it (input.context).
	notMessage error
}

// read reads an input message's content: its text and pictures.
func (m message) read() (string, []picture, error) {
	if m.verbatim {
		var s string
		if err := json.Unmarshal(m.content, &s); err != nil {
			return "", nil, invalid(m.param, "input must be a string or an array of input items")
		}
		return s, nil, nil
	}
	return responseContent(m.content, m.param+".content")
}

// eachInputMessage calls f with each message of the input, in order,
// with its index, and returns the input's length: a string is one user
// message, an array holds input items (inputItemMessage); an item that
// is neither a string nor an object is skipped, as Hermes's
// _handle_responses skips it.
func eachInputMessage(raw json.RawMessage, f func(int, message) error) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, invalid("input", "input is required: a string or an array of input items")
	}
	switch raw[0] {
	case '"':
		return 1, f(0, message{role: "user", content: raw, param: "input", verbatim: true})
	case '[':
	default:
		return 0, invalid("input", "input must be a string or an array of input items")
	}
	n, err := eachElement(raw, func(i int, item json.RawMessage) error {
		m, ok, err := inputItemMessage(i, item)
		if err != nil || !ok {
			return err
		}
		return f(i, m)
	})
	switch {
	case errors.Is(err, errNotArray):
		return 0, invalid("input", "input must be a string or an array of input items")
	case err == nil && n == 0:
		return 0, invalid("input", "input must not be empty")
	}
	return n, err
}

// inputItemMessage reads item i of the input array: a string (a user
// message, as Hermes takes it) or a message item, of any role: one the
// context has not (a tool's, one Hermes's agent does not know) is read,
// and its content checked, as Hermes reads it, and only then left out of
// the context (contextRole). An item of another type is given with its
// refusal (notMessage). Anything else is no message (false).
func inputItemMessage(i int, item json.RawMessage) (message, bool, error) {
	param := fmt.Sprintf("input[%d]", i)
	item = bytes.TrimSpace(item)
	switch {
	case len(item) == 0:
		return message{}, false, nil
	case item[0] == '"':
		return message{role: "user", content: item, param: param, verbatim: true}, true, nil
	case item[0] != '{':
		// A number, null, a boolean or an array: Hermes's
		// _handle_responses takes strings and dicts, and skips the rest.
		return message{}, false, nil
	}
	var it inputItem
	if json.Unmarshal(item, &it) != nil {
		return message{}, false, invalid(param, "an input item must be an object")
	}
	m := message{role: it.Role, content: it.Content, param: param}
	if it.Type != "" && it.Type != "message" {
		m.notMessage = &InvalidError{Param: param + ".type", Code: CodeUnsupportedContent,
			Msg: fmt.Sprintf("input items of type %q are not supported: the gateway takes messages (the agent runs its own tools)", Clip(it.Type, 40))}
	}
	return m, true, nil
}

// responseContent reads a message's content (a Responses input item's,
// a chat completion user's or assistant's) as Hermes's
// _normalize_multimodal_content: a string, an array of text and image
// parts, or any other value its Python text (pythonText: 5, True, an
// object's {'k': 'v'}), as Hermes gives it the model; within Hermes's
// bounds: each text cut to maxTextLen characters, the parts after the
// first maxListItems not read.
func responseContent(raw json.RawMessage, param string) (string, []picture, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil, nil
	}
	if raw[0] != '[' {
		return clipText(pythonText(raw)), nil, nil
	}
	// Read one part at a time, and no further than Hermes reads: the
	// array is not decoded whole (a body of many small items would take
	// many times its size).
	var texts []string
	var images []picture
	_, err := eachElement(raw, func(i int, item json.RawMessage) error {
		if i == maxListItems {
			return errEnough
		}
		p, ok, err := partOf(item, func(text string) inputPart {
			raw, _ := json.Marshal(text)
			return inputPart{Type: "text", Text: raw}
		})
		if err != nil {
			return invalid(param, "content parts must be objects with a type")
		}
		if !ok {
			return nil
		}
		// As Hermes: str(type).strip().lower().
		switch strings.ToLower(PythonStrip(p.Type)) {
		case "input_text", "output_text", "text":
			if text := clipText(partText(p.Text)); text != "" {
				texts = append(texts, text)
			}
		case "refusal":
			// An earlier answer's refusal: nothing to carry.
		case "input_image", "image_url":
			u, detail, ok := imageRef(p)
			// Stripped, as Hermes's url_value.strip() before it checks
			// the URL and passes it on.
			if u = PythonStrip(u); !ok || u == "" {
				return &InvalidError{Param: param, Code: CodeInvalidImageURL, Msg: msgNoImageURL}
			}
			var err error
			if u, err = image(u); err != nil {
				return imageError(param, err)
			}
			d, ok := detailOf(detail)
			if !ok {
				// After the URL, as Hermes checks them.
				return &InvalidError{Param: param, Code: CodeInvalidContentPart, Msg: msgImageDetail}
			}
			images = append(images, picture{url: u, detail: d})
		case "input_file", "file":
			// Refused in Hermes's words, which say what the client can
			// send instead (a picture inline), not as a type unknown.
			return &InvalidError{Param: fmt.Sprintf("%s[%d].type", param, i), Code: CodeUnsupportedContent, Msg: msgFilePart}
		default:
			return unknownPart(fmt.Sprintf("%s[%d].type", param, i), p.TypeJSON)
		}
		return nil
	})
	switch {
	case errors.Is(err, errNotArray):
		return "", nil, invalid(param, "content must be a string or an array of parts")
	case err != nil:
		return "", nil, err
	}
	return strings.Join(texts, "\n"), images, nil
}

// unknownPart refuses a content part of a type Hermes does not take, of
// JSON typ (nil: absent), as its _normalize_multimodal_content does:
// unsupported_content_type, in its words, the type as Python's repr
// gives it ('input_audio', 5, True, None, ['text']), cut to 64 bytes.
func unknownPart(param string, typ json.RawMessage) error {
	repr := "None"
	if len(typ) > 0 {
		repr = pythonRepr(typ)
	}
	return &InvalidError{Param: param, Code: CodeUnsupportedContent,
		Msg: fmt.Sprintf("Unsupported content part type %s. Only text and image_url/input_image parts are supported.", Clip(repr, 64))}
}

// partText reads a text part's text as Hermes's
// _normalize_multimodal_content does: null is no text, a string itself,
// any other value its Python text (str(text): 5, 2.0, True, an object's
// {'k': 'v'}, an array's ['a']).
func partText(raw json.RawMessage) string {
	if raw = bytes.TrimSpace(raw); bytes.Equal(raw, []byte("null")) {
		return ""
	}
	return pythonText(raw)
}

// imageRef reads an image part's URL and detail as Hermes's
// _normalize_multimodal_content: image_url is the URL, a string (the
// Responses API's) or an object {"url", "detail"} (Chat Completions',
// its keys as spelled), whose "detail", when it has one (null too),
// is the picture's instead of the part's own. ok is false when there is
// no URL string: image_url or its url absent, null or of another type.
func imageRef(p inputPart) (u string, detail json.RawMessage, ok bool) {
	detail = p.Detail
	raw := bytes.TrimSpace(p.ImageURL)
	if len(raw) > 0 && raw[0] == '{' {
		obj, err := exactMembers(raw, "url", "detail")
		if err != nil {
			return "", detail, false
		}
		if d, has := obj["detail"]; has {
			detail = d
		}
		raw = bytes.TrimSpace(obj["url"])
	}
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &u) != nil {
		return "", detail, false
	}
	return u, detail, true
}

// detailOf reads a picture's detail as Hermes takes it: none (absent or
// null), or a string that is not blank (Python's strip()); ok is false
// for any other. The detail passed on to the model is the one taken,
// stripped, when it is one OpenAI's API takes (modelDetail), else "".
func detailOf(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", true
	}
	var d string
	if raw[0] != '"' || json.Unmarshal(raw, &d) != nil {
		return "", false
	}
	if d = PythonStrip(d); d == "" {
		return "", false
	}
	return modelDetail(d), true
}

// modelDetail is d, a picture's detail as a client gave it, as the model
// is given it: one of those OpenAI's API takes, in any case, in lower
// case as it takes them; "" for any other. Hermes passes any on, and
// OpenAI refuses the request for one it does not take ("medium", a
// typo), which here would have the worker ask again without the
// pictures (a model that refuses a turn's pictures is asked without
// them), the agent answering without the picture the client sent.
// Without a detail the model looks at it as with "auto".
func modelDetail(d string) string {
	switch d = strings.ToLower(d); d {
	case "auto", "low", "high", "original":
		return d
	}
	return ""
}
