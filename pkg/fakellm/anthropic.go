package fakellm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

type anRequest struct {
	Model       string          `json:"model"`
	MaxTokens   int             `json:"max_tokens"`
	System      json.RawMessage `json:"system"`
	Messages    []anMessage     `json:"messages"`
	Tools       []anTool        `json:"tools"`
	Stream      bool            `json:"stream"`
	Temperature *float64        `json:"temperature"`
	Speed       string          `json:"speed"`
	Thinking    *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
		Display      string `json:"display"`
	} `json:"thinking"`
	OutputConfig *struct {
		Effort string `json:"effort"`
	} `json:"output_config"`
}

type anMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	CacheControl json.RawMessage `json:"cache_control"`
	Thinking     string          `json:"thinking"`
	Signature    string          `json:"signature"`
	Data         string          `json:"data"`
	Source       *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

type anTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control"`
}

func (s *Server) handleAnthropic(w http.ResponseWriter, r *http.Request) {
	if !s.checkKey(r) {
		writeFailure(w, "anthropic", &Failure{Status: http.StatusUnauthorized})
		return
	}
	var in anRequest
	if err := readJSON(r, &in); err != nil {
		writeFailure(w, "anthropic", &Failure{Status: http.StatusBadRequest, Message: "invalid JSON body: " + err.Error()})
		return
	}
	req := Request{
		API:         "anthropic",
		Model:       in.Model,
		Stream:      in.Stream,
		MaxTokens:   in.MaxTokens,
		Temperature: in.Temperature,
		Speed:       in.Speed,
		Header:      r.Header.Clone(),
		Messages:    make([]Message, 0, len(in.Messages)),
	}
	if t := in.Thinking; t != nil {
		req.Thinking = &ThinkingConfig{Type: t.Type, BudgetTokens: t.BudgetTokens, Display: t.Display}
	}
	if o := in.OutputConfig; o != nil && o.Effort != "" {
		req.ReasoningEffort, req.ReasoningField = o.Effort, "output_config"
	}
	if len(in.System) > 0 && in.System[0] == '"' {
		_ = json.Unmarshal(in.System, &req.System)
	} else if len(in.System) > 0 && in.System[0] == '[' {
		var blocks []anBlock
		_ = json.Unmarshal(in.System, &blocks)
		for i, bl := range blocks {
			if i > 0 {
				req.System += "\n"
			}
			req.System += bl.Text
			req.SystemCached = req.SystemCached || len(bl.CacheControl) > 0
		}
	}
	for _, m := range in.Messages {
		if len(m.Content) > 0 && m.Content[0] == '"' {
			var text string
			_ = json.Unmarshal(m.Content, &text)
			req.Messages = append(req.Messages, Message{Role: m.Role, Content: text})
			continue
		}
		var blocks []anBlock
		_ = json.Unmarshal(m.Content, &blocks)
		msg := Message{Role: m.Role}
		var results []Message
		for _, bl := range blocks {
			switch bl.Type {
			case "text":
				msg.Content += bl.Text
			case "image":
				if src := bl.Source; src != nil && src.Type == "url" {
					msg.Images = append(msg.Images, Image{URL: src.URL})
				} else if src != nil {
					data, _ := base64.StdEncoding.DecodeString(src.Data)
					msg.Images = append(msg.Images, Image{MediaType: src.MediaType, Data: data})
				}
			case "thinking":
				msg.Thinking = append(msg.Thinking, Thinking{Text: bl.Thinking, Signature: bl.Signature})
			case "redacted_thinking":
				msg.Thinking = append(msg.Thinking, Thinking{Redacted: bl.Data})
			case "tool_use":
				args := string(bl.Input)
				if args == "" {
					args = "{}"
				}
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: bl.ID, Name: bl.Name, Arguments: args})
			case "tool_result":
				results = append(results, Message{Role: "tool", ToolCallID: bl.ToolUseID, Content: contentText(bl.Content)})
			}
		}
		req.Messages = append(req.Messages, results...)
		if msg.Content != "" || len(msg.ToolCalls) > 0 || len(msg.Images) > 0 || len(results) == 0 {
			req.Messages = append(req.Messages, msg)
		}
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema, Cached: len(t.CacheControl) > 0})
	}
	s.record(&req)
	msg := refuseThinking(&in, &req)
	if msg == "" {
		msg = refuseBlankText(&in)
	}
	if msg == "" {
		msg = s.refuseFast(&req)
	}
	if msg != "" {
		writeFailure(w, "anthropic", &Failure{Status: http.StatusBadRequest, Message: msg})
		return
	}
	p := s.decide(&req)
	if !thinks(&req) {
		p.reply.Reasoning = "" // a model thinks aloud only when asked to
	}
	if !wait(r.Context(), p.latency) {
		return
	}
	if f := p.reply.Failure; f != nil && f.Status > 0 {
		writeFailure(w, "anthropic", f)
		return
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	for i := range p.reply.ToolCalls {
		tc := &p.reply.ToolCalls[i]
		if tc.ID == "" {
			tc.ID = "toolu_fake_" + strconv.FormatUint(p.id, 10) + "_" + strconv.Itoa(i)
		}
		if tc.Arguments == "" {
			tc.Arguments = "{}"
		}
	}
	w.Header().Set("request-id", "req_fake_"+strconv.FormatUint(p.id, 10))
	if !req.Stream {
		if p.reply.Failure != nil && p.reply.Failure.DropAfter > 0 {
			panic(http.ErrAbortHandler)
		}
		anthropicWhole(w, model, &p)
		return
	}
	anthropicStream(w, r, model, &p)
}

func anStop(p *plan) string {
	if p.reply.Truncated {
		return "max_tokens"
	}
	if len(p.reply.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func appendANUsage(b []byte, u Usage, output int) []byte {
	b = append(b, `"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens), 10)
	b = append(b, `,"cache_creation_input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CacheWriteTokens), 10)
	b = append(b, `,"cache_read_input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CacheReadTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(output), 10)
	return append(b, '}')
}

func appendANMessageHead(b []byte, id uint64, model string) []byte {
	b = append(b, `{"id":"msg_fake_`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `","type":"message","role":"assistant","model":`...)
	return appendString(b, model)
}

func anthropicWhole(w http.ResponseWriter, model string, p *plan) {
	buf := getBuf()
	defer putBuf(buf)
	b := appendANMessageHead((*buf)[:0], p.id, model)
	b = append(b, `,"content":[`...)
	n := 0
	if p.reply.Reasoning != "" {
		b = append(b, `{"type":"thinking","thinking":`...)
		b = appendString(b, p.reply.Reasoning)
		b = append(b, `,"signature":`...)
		b = appendString(b, ThinkingSignature(p.reply.Reasoning))
		b = append(b, '}')
		n++
	}
	if p.reply.Text != "" {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":`...)
		b = appendString(b, p.reply.Text)
		b = append(b, '}')
		n++
	}
	for _, tc := range p.reply.ToolCalls {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"tool_use","id":`...)
		b = appendString(b, tc.ID)
		b = append(b, `,"name":`...)
		b = appendString(b, tc.Name)
		b = append(b, `,"input":`...)
		if json.Valid([]byte(tc.Arguments)) {
			b = append(b, tc.Arguments...)
		} else {
			b = append(b, "{}"...) // cut short: the API sends what it parsed
		}
		b = append(b, '}')
		n++
	}
	b = append(b, `],"stop_reason":"`...)
	b = append(b, anStop(p)...)
	b = append(b, `","stop_sequence":null,`...)
	b = appendANUsage(b, p.usage, p.usage.OutputTokens)
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	*buf = b
}

func anthropicStream(w http.ResponseWriter, r *http.Request, model string, p *plan) {
	st := newStream(r.Context(), w, p)
	st.pingMsg = []byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")
	buf := getBuf()
	defer putBuf(buf)
	b := append((*buf)[:0], "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"...)
	b = appendANMessageHead(b, p.id, model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,`...)
	b = appendANUsage(b, p.usage, 1)
	b = append(b, "}}\n\n"...)
	if !st.send(b, false) {
		return
	}
	index := 0
	ok := true
	block := func(start string) bool {
		b = append(b[:0], "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, `,"content_block":`...)
		b = append(b, start...)
		b = append(b, "}\n\n"...)
		return st.send(b, false)
	}
	delta := func(kind, field, piece string) bool {
		b = append(b[:0], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, `,"delta":{"type":"`...)
		b = append(b, kind...)
		b = append(b, `","`...)
		b = append(b, field...)
		b = append(b, `":`...)
		b = appendString(b, piece)
		b = append(b, "}}\n\n"...)
		ok = st.send(b, true)
		return ok
	}
	stop := func() bool {
		b = append(b[:0], "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
		b = strconv.AppendInt(b, int64(index), 10)
		b = append(b, "}\n\n"...)
		index++
		return st.send(b, false)
	}
	if p.reply.Reasoning != "" {
		if !block(`{"type":"thinking","thinking":"","signature":""}`) {
			return
		}
		split(p.reply.Reasoning, 2, func(piece string) bool { return delta("thinking_delta", "thinking", piece) })
		if !ok || !delta("signature_delta", "signature", ThinkingSignature(p.reply.Reasoning)) || !stop() {
			return
		}
	}
	if p.reply.Text != "" || len(p.reply.ToolCalls) == 0 {
		if !block(`{"type":"text","text":""}`) {
			return
		}
		b = append(b[:0], "event: ping\ndata: {\"type\": \"ping\"}\n\n"...)
		if !st.send(b, false) {
			return
		}
		split(p.reply.Text, p.chunks, func(piece string) bool { return delta("text_delta", "text", piece) })
		if !ok || !stop() {
			return
		}
	}
	for _, tc := range p.reply.ToolCalls {
		start := appendString(append(make([]byte, 0, 64), `{"type":"tool_use","id":`...), tc.ID)
		start = append(start, `,"name":`...)
		start = appendString(start, tc.Name)
		start = append(start, `,"input":{}}`...)
		if !block(string(start)) {
			return
		}
		split(tc.Arguments, 2, func(piece string) bool { return delta("input_json_delta", "partial_json", piece) })
		if !ok || !stop() {
			return
		}
	}
	st.finish()
	b = append(b[:0], "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""...)
	b = append(b, anStop(p)...)
	b = append(b, `","stop_sequence":null},"usage":{"output_tokens":`...)
	b = strconv.AppendInt(b, int64(p.usage.OutputTokens), 10)
	b = append(b, "}}\n\n"...)
	if !st.send(b, false) {
		return
	}
	b = append(b[:0], "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
	st.send(b, false)
	*buf = b
}

// ThinkingSignature is the signature the fake gives a thinking block
// with text: it refuses a block sent back whose signature differs, as
// Anthropic does a block changed or not its own.
func ThinkingSignature(text string) string {
	sum := sha256.Sum256([]byte("fakellm thinking\x00" + text))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// thinks reports whether req turned thinking on.
func thinks(req *Request) bool {
	return req.Thinking != nil && (req.Thinking.Type == "enabled" || req.Thinking.Type == "adaptive")
}

// refuseThinking is why Anthropic would refuse req's thinking (its
// invalid_request_error message), or "": a budget below 1024 or not
// below max_tokens, a temperature other than 1 with thinking, a thinking
// block whose signature is not the fake's, and, with a thinking budget,
// a last assistant message that calls tools without starting with its
// thinking.
func refuseThinking(in *anRequest, req *Request) string {
	for i := range req.Messages {
		for _, t := range req.Messages[i].Thinking {
			if t.Redacted == "" && t.Signature != ThinkingSignature(t.Text) {
				return "messages." + strconv.Itoa(i) + ": Invalid `signature` in `thinking` block"
			}
		}
	}
	t := req.Thinking
	if t == nil || t.Type != "enabled" {
		return ""
	}
	switch {
	case t.BudgetTokens < 1024:
		return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
	case t.BudgetTokens >= req.MaxTokens:
		return "`max_tokens` must be greater than `thinking.budget_tokens`."
	case req.Temperature != nil && *req.Temperature != 1:
		return "`temperature` may only be set to 1 when thinking is enabled or in streaming mode."
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role != "assistant" {
			continue
		}
		var blocks []anBlock
		_ = json.Unmarshal(in.Messages[i].Content, &blocks)
		calls := false
		for _, bl := range blocks {
			calls = calls || bl.Type == "tool_use"
		}
		if calls && blocks[0].Type != "thinking" && blocks[0].Type != "redacted_thinking" {
			return "messages." + strconv.Itoa(i) + ".content.0.type: Expected `thinking` or `redacted_thinking`, but found `" + blocks[0].Type +
				"`. When `thinking` is enabled, a final `assistant` message must start with a thinking block."
		}
		break
	}
	return ""
}

// refuseBlankText is the Messages API's refusal of a request with a text
// block that is empty or only whitespace, in the system prompt, a
// message or a tool result, or a message of no content (its
// invalid_request_error message), or "". The real API refuses these
// before it reads anything else; a client must not send them.
func refuseBlankText(in *anRequest) string {
	if len(in.System) > 0 && in.System[0] == '[' {
		var blocks []anBlock
		_ = json.Unmarshal(in.System, &blocks)
		if msg := blankText("system", blocks); msg != "" {
			return msg
		}
	}
	for i, m := range in.Messages {
		last := i == len(in.Messages)-1 && m.Role == "assistant" // a prefill may be empty
		if len(m.Content) > 0 && m.Content[0] == '"' {
			var text string
			_ = json.Unmarshal(m.Content, &text)
			if text == "" && !last {
				return "messages." + strconv.Itoa(i) + ": all messages must have non-empty content except for the optional final assistant message"
			}
			continue
		}
		var blocks []anBlock
		_ = json.Unmarshal(m.Content, &blocks)
		if len(blocks) == 0 && !last {
			return "messages." + strconv.Itoa(i) + ": all messages must have non-empty content except for the optional final assistant message"
		}
		if msg := blankText("messages", blocks); msg != "" {
			return msg
		}
		for _, bl := range blocks {
			if bl.Type != "tool_result" || len(bl.Content) == 0 || bl.Content[0] != '[' {
				continue
			}
			var inner []anBlock
			_ = json.Unmarshal(bl.Content, &inner)
			if msg := blankText("messages", inner); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// blankText is the refusal of the first blank text block of blocks, in
// where (system or messages), or "".
func blankText(where string, blocks []anBlock) string {
	for _, bl := range blocks {
		switch {
		case bl.Type != "text":
		case bl.Text == "":
			return where + ": text content blocks must be non-empty"
		case strings.TrimSpace(bl.Text) == "":
			return where + ": text content blocks must contain non-whitespace text"
		}
	}
	return ""
}
