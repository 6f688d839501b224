package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// The Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}): a request is a message like a chat completion's,
// on the same path (turn.go), answered as a response object or as the
// Responses stream events. Which conversation it continues:
//
//   - conversation: a name of the client's, the body's X-Session-Id;
//   - previous_response_id: the conversation of that response (kept in
//     the response store, responsestore.go);
//   - neither: the X-Session-Id header if sent, else none — the request
//     is stateless, its input items before the last user message are
//     its context, as a chat completion's earlier messages.
//
// With a conversation the input's earlier items are new to it and are
// carried as context too (a chat completion's client resends the whole
// conversation, so there the server's copy is used instead).

// createResponse serves POST /v1/responses.
func (s *Service) createResponse(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, err := openai.ParseResponses(body)
	if err != nil {
		s.rejectInvalid(w, r, "invalid responses request", err)
		return
	}
	identity := identityOf(r)
	session, ok := s.responseSession(w, r, identity, req)
	if !ok {
		return
	}
	t, ok := s.prepare(w, r, message{input: req.Input, session: session, user: req.User, stream: req.Stream, param: "input", received: received})
	if !ok {
		return
	}
	defer t.close()
	o := s.newResponse(t, req, received)
	var k *kept
	if req.Store {
		// Before the message goes out: a request chaining on this response
		// finds its conversation from now on, and a store that cannot be
		// written refuses the request with nothing published.
		if k, err = s.keep(r.Context(), storedResponse{Owner: identity, Session: t.session, Response: o}); err != nil {
			s.log.WarnContext(r.Context(), "record api response failed", "err", err)
			writeUnavailable(w)
			return
		}
	}
	if !s.publish(w, r, t, "responses:"+fingerprint(req.Text, req.Attachments, req.Context)) {
		if k != nil && k.created {
			// Nothing was published: no response.
			s.forget(r, o.ID)
		}
		return
	}
	ctx, cancel := s.replyContext(r)
	defer cancel()
	if req.Stream {
		s.streamResponse(ctx, w, r, t, o, k)
		return
	}
	ans, err := collect(ctx, t.wt)
	if err != nil {
		end := s.waitEndOf(r, err)
		o.stop(end.code, "")
		s.finish(r, k, o)
		writeError(w, end.status, "server_error", end.code, "", end.msg)
		return
	}
	if t.timed() {
		w.Header().Set(HeaderServerTiming, t.serverTiming(ans.hops))
	}
	if ans.errorCode != "" {
		o.fail(ans.errorCode, ans.text)
		s.finish(r, k, o)
		writeTurnError(w, ans.errorCode, ans.text)
		return
	}
	o.complete(ans.text, ans.usage)
	s.finish(r, k, o)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(o)
}

// responseSession is the conversation a Responses request continues
// ("" for none). It answers the request itself (400, 404, 503) and
// returns false when the request names none it can continue.
func (s *Service) responseSession(w http.ResponseWriter, r *http.Request, identity string, req *openai.Responses) (string, bool) {
	header, ok := sessionOf(w, r)
	if !ok {
		return "", false
	}
	session, param := header, HeaderSession
	switch {
	case req.Conversation != "":
		if !sessionIDPattern.MatchString(req.Conversation) {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_id", "conversation",
				"The conversation must be named by 1-128 characters of letters, digits, '.', '_' or '-'.")
			return "", false
		}
		session, param = req.Conversation, "conversation"
	case req.PreviousResponseID != "":
		rec, found, err := s.responses.get(r.Context(), req.PreviousResponseID, identity)
		if err != nil {
			s.log.WarnContext(r.Context(), "read api response failed", "err", err)
			writeUnavailable(w)
			return "", false
		}
		if !found {
			writeError(w, http.StatusNotFound, "invalid_request_error", "previous_response_not_found", "previous_response_id",
				fmt.Sprintf("Previous response with id %q not found.", openai.Clip(req.PreviousResponseID, 64)))
			return "", false
		}
		session, param = rec.Session, "previous_response_id"
	}
	if header != "" && session != header {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", param,
			fmt.Sprintf("The %s names another conversation than the %s header; send one of them.", param, HeaderSession))
		return "", false
	}
	return session, true
}

// getResponse serves GET /v1/responses/{id}.
func (s *Service) getResponse(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("stream") == "true" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", openai.CodeUnsupported, "stream",
			"Streaming a stored response again is not supported; get it without stream.")
		return
	}
	rec, ok := s.ownResponse(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rec.Response)
}

// deleteResponse serves DELETE /v1/responses/{id}: the response is no
// longer kept, and no longer continued. Its conversation stays: a
// response chained on it before, and X-Session-Id, continue it.
func (s *Service) deleteResponse(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownResponse(w, r)
	if !ok {
		return
	}
	if err := s.responses.remove(r.Context(), rec.Response.ID); err != nil {
		s.log.WarnContext(r.Context(), "delete api response failed", "err", err)
		writeUnavailable(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(deletedResponse{ID: rec.Response.ID, Object: "response", Deleted: true})
}

// ownResponse reads the response the URL names, if it is the client's.
// It answers the request itself (404, 503) otherwise.
func (s *Service) ownResponse(w http.ResponseWriter, r *http.Request) (storedResponse, bool) {
	id := r.PathValue("id")
	rec, found, err := s.responses.get(r.Context(), id, identityOf(r))
	if err != nil {
		s.log.WarnContext(r.Context(), "read api response failed", "err", err)
		writeUnavailable(w)
		return storedResponse{}, false
	}
	if !found {
		writeError(w, http.StatusNotFound, "invalid_request_error", "response_not_found", "", fmt.Sprintf("Response with id %q not found.", openai.Clip(id, 64)))
		return storedResponse{}, false
	}
	return rec, true
}

// kept is a response record being answered: written when the request
// was accepted (or by an earlier attempt with the same Idempotency-Key),
// updated when it ends.
type kept struct {
	rec     storedResponse
	rev     uint64
	created bool // by this request
}

// keep records a response being answered, unless an earlier attempt of
// the request did: a retry with another request under the same key
// (refused with 422) must not overwrite the first one's.
func (s *Service) keep(ctx context.Context, rec storedResponse) (*kept, error) {
	rev, created, err := s.responses.begin(ctx, rec)
	if err != nil {
		return nil, err
	}
	return &kept{rec: rec, rev: rev, created: created}, nil
}

// finish writes the response's final state over its record, if it is
// kept (store), even when the client has left. A record the client
// deleted meanwhile stays deleted. Failing, the record stays in progress:
// GET shows it so, and previous_response_id still continues its
// conversation.
func (s *Service) finish(r *http.Request, k *kept, o *responseObject) {
	if k == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	rec := k.rec
	rec.Response = o
	if _, err := s.responses.update(ctx, rec, k.rev); err != nil {
		s.log.WarnContext(ctx, "record api response failed", "err", err)
	}
}

// forget deletes the record of a response that was never asked.
func (s *Service) forget(r *http.Request, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	if err := s.responses.remove(ctx, id); err != nil {
		s.log.WarnContext(ctx, "delete api response failed", "err", err)
	}
}

// streamResponse writes the Responses stream events as the reply
// arrives: response.created and response.in_progress; with the first
// text the message item and its output_text part (output_item.added,
// content_part.added), each piece of text (output_text.delta); then the
// text, the part and the item done, and response.completed — or
// response.failed for a failed turn, response.incomplete when the wait
// ended first. Every event has its sequence_number.
func (s *Service) streamResponse(ctx context.Context, w http.ResponseWriter, r *http.Request, t *turn, o *responseObject, k *kept) {
	e := &responseEvents{out: startSSE(w, t.timed()), o: o}
	e.response("response.created")
	e.response("response.in_progress")
	end := relay(ctx, t.wt, e.delta, e.out.keepalive)
	var timing string
	if end.final != nil && t.timed() {
		timing = t.serverTiming(end.final.hops)
	}
	switch {
	case end.err != nil:
		stop := s.waitEndOf(r, end.err)
		if e.opened {
			e.itemDone("incomplete", end.text)
		}
		o.stop(stop.code, end.text)
		s.finish(r, k, o)
		e.response("response.incomplete")
	case end.errorCode != "":
		o.fail(end.errorCode, end.errorText)
		s.finish(r, k, o)
		e.response("response.failed")
	default:
		e.itemDone("completed", end.text)
		o.complete(end.text, end.final.usage)
		s.finish(r, k, o)
		e.response("response.completed")
	}
	if timing != "" {
		w.Header().Set(HeaderServerTiming, timing)
	}
}

// responseEvents writes the events of one streamed response.
type responseEvents struct {
	out    *sse
	o      *responseObject
	seq    int
	opened bool // the message item was added
}

func (e *responseEvents) head(typ string) eventHead {
	h := eventHead{Type: typ, SequenceNumber: e.seq}
	e.seq++
	return h
}

// response sends an event carrying the response as it is now.
func (e *responseEvents) response(typ string) {
	e.out.send(typ, responseEvent{eventHead: e.head(typ), Response: e.o})
}

// open adds the message item and its text part.
func (e *responseEvents) open() {
	e.opened = true
	e.out.send("response.output_item.added", itemEvent{eventHead: e.head("response.output_item.added"),
		Item: outputMessage{ID: e.o.messageID, Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}})
	e.out.send("response.content_part.added", partEvent{eventHead: e.head("response.content_part.added"),
		ItemID: e.o.messageID, Part: newOutputText("")})
}

// delta shows a piece of the answer.
func (e *responseEvents) delta(text string) {
	if !e.opened {
		e.open()
	}
	e.out.send("response.output_text.delta", textDeltaEvent{eventHead: e.head("response.output_text.delta"),
		ItemID: e.o.messageID, Delta: text, Logprobs: []struct{}{}})
}

// itemDone ends the text, its part and the message item (status).
func (e *responseEvents) itemDone(status, text string) {
	if !e.opened {
		e.open()
	}
	e.out.send("response.output_text.done", textDoneEvent{eventHead: e.head("response.output_text.done"),
		ItemID: e.o.messageID, Text: text, Logprobs: []struct{}{}})
	e.out.send("response.content_part.done", partEvent{eventHead: e.head("response.content_part.done"),
		ItemID: e.o.messageID, Part: newOutputText(text)})
	e.out.send("response.output_item.done", itemEvent{eventHead: e.head("response.output_item.done"),
		Item: e.o.message(status, text)})
}

// Stream events. The answer is one message item (output_index 0) with
// one output_text part (content_index 0).
type eventHead struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
}

type responseEvent struct {
	eventHead
	Response *responseObject `json:"response"`
}

type itemEvent struct {
	eventHead
	OutputIndex int           `json:"output_index"`
	Item        outputMessage `json:"item"`
}

type partEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Part         outputText `json:"part"`
}

type textDeltaEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Delta        string     `json:"delta"`
	Logprobs     []struct{} `json:"logprobs"`
}

type textDoneEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Text         string     `json:"text"`
	Logprobs     []struct{} `json:"logprobs"`
}

// responseObject is a Responses API response, as answered and kept.
// Parameters the gateway takes without applying them (temperature,
// top_p, tool_choice) read as their defaults.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	CompletedAt        *int64             `json:"completed_at"`
	Status             string             `json:"status"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	Model              string             `json:"model"`
	Output             []outputMessage    `json:"output"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Conversation       *conversationRef   `json:"conversation"`
	Store              bool               `json:"store"`
	Background         bool               `json:"background"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	ToolChoice         string             `json:"tool_choice"`
	Tools              []struct{}         `json:"tools"`
	Temperature        *float64           `json:"temperature"`
	TopP               *float64           `json:"top_p"`
	Text               responseText       `json:"text"`
	Truncation         string             `json:"truncation"`
	Metadata           map[string]string  `json:"metadata"`
	User               *string            `json:"user"`
	Usage              *responseUsage     `json:"usage"`

	// messageID is the id of the answer's message item.
	messageID string
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type conversationRef struct {
	ID string `json:"id"`
}

type responseText struct {
	Format struct {
		Type string `json:"type"`
	} `json:"format"`
}

type outputMessage struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string     `json:"type"`
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []struct{}{}}
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type deletedResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// newResponse is the response to req, in progress.
func (s *Service) newResponse(t *turn, req *openai.Responses, received time.Time) *responseObject {
	o := &responseObject{
		ID: "resp_" + t.suffix(), Object: "response", CreatedAt: received.Unix(), Status: "in_progress",
		Model: req.Model, Output: []outputMessage{}, Store: req.Store, ParallelToolCalls: true, ToolChoice: "auto",
		Tools: []struct{}{}, Truncation: "disabled", Metadata: req.Metadata, messageID: "msg_" + t.suffix(),
	}
	o.Text.Format.Type = "text"
	if o.Model == "" {
		o.Model = s.cfg.Model
	}
	if o.Metadata == nil {
		o.Metadata = map[string]string{}
	}
	if req.Instructions != "" {
		o.Instructions = &req.Instructions
	}
	if req.PreviousResponseID != "" {
		o.PreviousResponseID = &req.PreviousResponseID
	}
	if req.Conversation != "" {
		o.Conversation = &conversationRef{ID: req.Conversation}
	}
	if req.User != "" {
		o.User = &req.User
	}
	return o
}

// message is the answer's message item.
func (o *responseObject) message(status, text string) outputMessage {
	return outputMessage{ID: o.messageID, Type: "message", Status: status, Role: "assistant", Content: []outputText{newOutputText(text)}}
}

// complete makes the response the answer text, with the turn's usage
// when the reply carried it.
func (o *responseObject) complete(text string, u *deliveryv1.TokenUsage) {
	now := time.Now().Unix()
	o.Status, o.CompletedAt = "completed", &now
	o.Output = []outputMessage{o.message("completed", text)}
	if u != nil {
		o.Usage = &responseUsage{InputTokens: int(u.GetPromptTokens()), OutputTokens: int(u.GetCompletionTokens()),
			TotalTokens: int(u.GetPromptTokens() + u.GetCompletionTokens())}
	}
}

// fail makes the response a failed turn's, code its worker error code
// and text its explanation.
func (o *responseObject) fail(code, text string) {
	o.Status = "failed"
	o.Error = &responseError{Code: failureOf(code).code, Message: failureMessage(text)}
}

// stop makes the response incomplete: the request stopped waiting for
// the answer (reason: timeout, shutting_down, unavailable) after text.
func (o *responseObject) stop(reason, text string) {
	o.Status = "incomplete"
	o.IncompleteDetails = &incompleteDetails{Reason: reason}
	if text != "" {
		o.Output = []outputMessage{o.message("incomplete", text)}
	}
}
