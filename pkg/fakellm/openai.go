package fakellm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

type oaRequest struct {
	Model         string      `json:"model"`
	Messages      []oaMessage `json:"messages"`
	Tools         []oaTool    `json:"tools"`
	Stream        bool        `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           int      `json:"max_tokens"`
	MaxCompletionTokens int      `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"`
	ReasoningEffort     string   `json:"reasoning_effort"`
	ServiceTier         string   `json:"service_tier"`
	// Reasoning is OpenRouter's reasoning object.
	Reasoning *struct {
		Enabled *bool  `json:"enabled"`
		Effort  string `json:"effort"`
	} `json:"reasoning"`
}

type oaMessage struct {
	Role      string  `json:"role"`
	Content   content `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

type oaTool struct {
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

func (s *Server) handleOpenAI(w http.ResponseWriter, r *http.Request) {
	if !s.checkKey(r) {
		writeFailure(w, "openai", &Failure{Status: http.StatusUnauthorized})
		return
	}
	var in oaRequest
	if err := readJSON(r, &in); err != nil {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: "invalid JSON body: " + err.Error()})
		return
	}
	req := Request{
		API:         "openai",
		Model:       in.Model,
		Stream:      in.Stream,
		MaxTokens:   max(in.MaxTokens, in.MaxCompletionTokens),
		Temperature: in.Temperature,
		ServiceTier: in.ServiceTier,
		Header:      r.Header.Clone(),
		Messages:    make([]Message, 0, len(in.Messages)),
	}
	if in.StreamOptions != nil {
		req.IncludeUsage = in.StreamOptions.IncludeUsage
	}
	switch {
	case in.ReasoningEffort != "":
		req.ReasoningEffort, req.ReasoningField = in.ReasoningEffort, "reasoning_effort"
	case in.Reasoning != nil:
		req.ReasoningEffort, req.ReasoningField = in.Reasoning.Effort, "reasoning"
		if in.Reasoning.Enabled != nil && !*in.Reasoning.Enabled {
			req.ReasoningEffort = "none"
		}
	}
	for _, m := range in.Messages {
		text := m.Content.text
		if m.Role == "system" || m.Role == "developer" {
			if req.System != "" {
				req.System += "\n"
			}
			req.System += text
			continue
		}
		msg := Message{Role: m.Role, Content: text, ToolCallID: m.ToolCallID, Images: m.Content.images}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range in.Tools {
		req.Tools = append(req.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	s.record(&req)
	if msg := s.refuseFast(&req); msg != "" {
		writeFailure(w, "openai", &Failure{Status: http.StatusBadRequest, Message: msg})
		return
	}
	p := s.decide(&req)
	if !wait(r.Context(), p.latency) {
		return
	}
	if f := p.reply.Failure; f != nil && f.Status > 0 {
		writeFailure(w, "openai", f)
		return
	}
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	}
	for i := range p.reply.ToolCalls {
		if p.reply.ToolCalls[i].ID == "" {
			p.reply.ToolCalls[i].ID = "call_" + strconv.FormatUint(p.id, 10) + "_" + strconv.Itoa(i)
		}
	}
	if !req.Stream {
		if p.reply.Failure != nil && p.reply.Failure.DropAfter > 0 {
			panic(http.ErrAbortHandler)
		}
		s.openAIWhole(w, model, &p)
		return
	}
	s.openAIStream(w, r, model, &p, req.IncludeUsage)
}

func oaFinish(p *plan) string {
	if p.reply.Truncated {
		return "length"
	}
	if len(p.reply.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func appendOAUsage(b []byte, u Usage) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens+u.CacheReadTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens+u.CacheReadTokens+u.OutputTokens), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CacheReadTokens), 10)
	b = append(b, `},"completion_tokens_details":{"reasoning_tokens":0}}`...)
	return b
}

func (s *Server) openAIWhole(w http.ResponseWriter, model string, p *plan) {
	buf := getBuf()
	defer putBuf(buf)
	b := *buf
	b = append(b, `{"id":"chatcmpl-fake-`...)
	b = strconv.AppendUint(b, p.id, 10)
	b = append(b, `","object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, time.Now().Unix(), 10)
	b = append(b, `,"model":`...)
	b = appendString(b, model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if p.reply.Text == "" && len(p.reply.ToolCalls) > 0 {
		b = append(b, "null"...)
	} else {
		b = appendString(b, p.reply.Text)
	}
	b = append(b, `,"refusal":null`...)
	if p.reply.Reasoning != "" {
		b = append(b, `,"reasoning_content":`...)
		b = appendString(b, p.reply.Reasoning)
	}
	if len(p.reply.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range p.reply.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, tc.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, tc.Arguments)
			b = append(b, `}}`...)
		}
		b = append(b, ']')
	}
	b = append(b, `},"logprobs":null,"finish_reason":"`...)
	b = append(b, oaFinish(p)...)
	b = append(b, `"}],`...)
	b = appendOAUsage(b, p.usage)
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	*buf = b
}

func (s *Server) openAIStream(w http.ResponseWriter, r *http.Request, model string, p *plan, includeUsage bool) {
	st := newStream(r.Context(), w, p)
	st.pingMsg = []byte(": keep-alive\n\n")
	buf := getBuf()
	defer putBuf(buf)
	created := time.Now().Unix()
	head := func(b []byte) []byte {
		b = append(b, `data: {"id":"chatcmpl-fake-`...)
		b = strconv.AppendUint(b, p.id, 10)
		b = append(b, `","object":"chat.completion.chunk","created":`...)
		b = strconv.AppendInt(b, created, 10)
		b = append(b, `,"model":`...)
		b = appendString(b, model)
		return append(b, `,"choices":[`...)
	}
	const tail = "\n\n"
	b := head((*buf)[:0])
	b = append(b, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+tail...)
	if !st.send(b, false) {
		return
	}
	ok := true
	if p.reply.Reasoning != "" {
		split(p.reply.Reasoning, 2, func(piece string) bool {
			b = head(b[:0])
			b = append(b, `{"index":0,"delta":{"reasoning_content":`...)
			b = appendString(b, piece)
			b = append(b, `},"logprobs":null,"finish_reason":null}]}`+tail...)
			ok = st.send(b, true)
			return ok
		})
		if !ok {
			return
		}
	}
	split(p.reply.Text, p.chunks, func(piece string) bool {
		b = head(b[:0])
		b = append(b, `{"index":0,"delta":{"content":`...)
		b = appendString(b, piece)
		b = append(b, `},"logprobs":null,"finish_reason":null}]}`+tail...)
		ok = st.send(b, true)
		return ok
	})
	for i, tc := range p.reply.ToolCalls {
		if !ok {
			return
		}
		b = head(b[:0])
		b = append(b, `{"index":0,"delta":{"tool_calls":[{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"id":`...)
		b = appendString(b, tc.ID)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, tc.Name)
		b = append(b, `,"arguments":""}}]},"logprobs":null,"finish_reason":null}]}`+tail...)
		if ok = st.send(b, false); !ok {
			return
		}
		split(tc.Arguments, 2, func(piece string) bool {
			b = head(b[:0])
			b = append(b, `{"index":0,"delta":{"tool_calls":[{"index":`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `,"function":{"arguments":`...)
			b = appendString(b, piece)
			b = append(b, `}}]},"logprobs":null,"finish_reason":null}]}`+tail...)
			ok = st.send(b, true)
			return ok
		})
	}
	if !ok {
		return
	}
	st.finish()
	b = head(b[:0])
	b = append(b, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	b = append(b, oaFinish(p)...)
	b = append(b, `"}]}`+tail...)
	if !st.send(b, false) {
		return
	}
	if includeUsage {
		b = head(b[:0])
		b = append(b, "],"...)
		b = appendOAUsage(b, p.usage)
		b = append(b, "}"+tail...)
		if !st.send(b, false) {
			return
		}
	}
	b = append(b[:0], "data: [DONE]"+tail...)
	st.send(b, false)
	*buf = b
}
