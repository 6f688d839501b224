package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// The Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}): a request is a message like a chat completion's,
// on the same path (turn.go), answered as a response object or as the
// Responses stream events. Which conversation it continues:
//
//   - conversation: a name of the client's, the body's X-Session-Id;
//   - previous_response_id: the conversation of that response (kept in
//     the response store, responsestore.go) when it is the latest
//     response of it (its head); otherwise a new conversation, named
//     after the new response, that starts as a copy of that one up to
//     the response's answer (the router copies it when it opens the
//     session: MessageReceived.fork_from), so that the model sees the
//     conversation as it was then and the responses that came after it
//     keep theirs;
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
	session, previous, ok := s.responseSession(w, r, identity, req)
	if !ok {
		return
	}
	if !req.InstructionsSent {
		// As Hermes: the instructions of the response it continues.
		text, ok := s.continuedInstructions(w, r, identity, session, previous, req.HistorySent)
		if !ok {
			return
		}
		req.CarryInstructions(text)
	}
	t, ok := s.prepare(w, r, message{input: req.Input, session: session, user: req.User, stream: req.Stream, param: "input", received: received,
		listsToolCalls: true})
	if !ok {
		return
	}
	defer t.close()
	// truncation "auto": the worker cuts the conversation kept here too.
	t.ev.ContextLimit = req.ContextLimit
	// Before the record: a message the runner would refuse is refused
	// as it would be, with nothing written.
	if !s.checkEvent(w, r, t) {
		return
	}
	o := s.newResponse(t, req, received)
	h, ok := s.place(w, r, identity, session, previous, req.Store, t)
	if !ok {
		return
	}
	var k *kept
	if req.Store {
		// Before the message goes out: a request chaining on this response
		// finds its conversation from now on, and a store that cannot be
		// written refuses the request with nothing published.
		if k, ok = s.keep(w, r, storedResponse{Owner: identity, Session: t.session, Instructions: req.Instructions, Response: o}); !ok {
			s.giveBackHead(r.Context(), h)
			return
		}
		if !k.created {
			// An earlier attempt's (the same Idempotency-Key): its id,
			// creation time, parameters and conversation are the
			// response's (its message went there; this one is a copy).
			o = k.resume(o.messageID)
			if k.rec.Session != t.session {
				s.giveBackHead(r.Context(), h)
				h = nil
				moveTo(t, identity, k.rec.Session, previous)
			}
		}
	}
	if !s.publish(w, r, t, responsesFingerprint(req, s.modelOf(req))) {
		if k != nil && k.created {
			// Nothing was published: no response.
			s.forget(r.Context(), o.ID)
		}
		s.giveBackHead(r.Context(), h)
		return
	}
	ctx, cancel := s.replyContext(r, req.Stream)
	defer cancel()
	if req.Stream {
		s.streamResponse(ctx, w, r, t, o, k)
		return
	}
	// The turn's tool calls are listed before the message (toolsFirst).
	e := &responseEvents{o: o}
	ans, err := collect(ctx, t.wt, e.tool)
	e.closeCalls()
	if err != nil {
		end := s.waitEndOf(r, err)
		o.stop(end.code, "")
		o.Output = e.toolsFirst(o.Output)
		s.finish(r.Context(), k, o, answerPoint{})
		t.noRetry(w)
		writeError(w, end.status, "server_error", end.code, "", end.msg)
		return
	}
	if t.timed() {
		w.Header().Set(HeaderServerTiming, t.serverTiming(ans.hops))
	}
	if ans.errorCode != "" {
		o.fail(ans.errorCode, ans.text)
		o.Output = e.toolsFirst(o.Output)
		s.finish(r.Context(), k, o, ans.at)
		writeTurnError(w, ans.errorCode, ans.text)
		return
	}
	o.complete(ans.text, ans.usage)
	o.Output = e.toolsFirst(o.Output)
	s.finish(r.Context(), k, o, ans.at)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(o)
}

// responsesFingerprint identifies what a Responses request asks, for its
// Idempotency-Key: the message and its context, instructions included,
// as a chat completion's, and what else the response is made of — the
// model, metadata, user and the conversation it continues — so that a
// retry cannot change the response an earlier attempt made.
func responsesFingerprint(req *openai.Responses, model string) string {
	meta := []byte("{}")
	if len(req.Metadata) > 0 {
		meta, _ = json.Marshal(req.Metadata) // keys sorted
	}
	params := strings.Join([]string{model, string(meta), req.User, req.PreviousResponseID, req.Conversation}, "\x00")
	if req.ContextLimit > 0 {
		// What the model is shown of the kept conversation (truncation
		// "auto"); without one, the fingerprint is that of a release
		// before it.
		params += "\x00context_limit=" + strconv.Itoa(int(req.ContextLimit))
	}
	sum := sha256.Sum256([]byte(fingerprint(req.Text, req.Attachments, req.Context) + "\x00" + params))
	return "responses:" + hex.EncodeToString(sum[:16])
}

// modelOf is the model a response names: the request's, or the
// gateway's.
func (s *Service) modelOf(req *openai.Responses) string {
	if req.Model != "" {
		return req.Model
	}
	return s.cfg.Model
}

// checkEvent refuses, as publishing it would (400), a message the runner
// would not publish: too large with its context and instructions, or
// not encodable. An inline picture's bytes do not count: the runner
// moves them to the attachment store before its own check.
func (s *Service) checkEvent(w http.ResponseWriter, r *http.Request, t *turn) bool {
	ev := t.ev
	var inline []*eventsv1.Attachment
	var locations []*eventsv1.Attachment_Url
	for i, a := range ev.GetAttachments() {
		if loc, ok := a.GetLocation().(*eventsv1.Attachment_Url); ok && strings.HasPrefix(loc.Url, "data:") {
			// As the runner leaves it: a reference to the kept copy.
			inline, locations = append(inline, a), append(locations, loc)
			a.Location = &eventsv1.Attachment_BytesRef{BytesRef: attachment.Name(PlatformName, s.cfg.Account, ev.GetEventId(), i)}
		}
	}
	err := s.rn().Check(ev)
	for i, a := range inline {
		a.Location = locations[i]
	}
	if err != nil {
		s.rn().Reject(r.Context(), "api request cannot be published", err)
		s.writeDeliverError(w, r, t, fmt.Errorf("%w: %v", platform.ErrRejected, err))
		return false
	}
	return true
}

// responseSession is the conversation a Responses request continues
// ("" for none) and, with previous_response_id, the record of that
// response. It answers the request itself (400, 503) and returns false
// when the request names none it can continue.
func (s *Service) responseSession(w http.ResponseWriter, r *http.Request, identity string, req *openai.Responses) (string, *storedResponse, bool) {
	header, ok := sessionOf(w, r)
	if !ok {
		return "", nil, false
	}
	session, param := header, HeaderSession
	var previous *storedResponse
	switch {
	case req.Conversation != "":
		if !sessionIDPattern.MatchString(req.Conversation) {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_id", "conversation",
				"The conversation must be named by 1-128 characters of letters, digits, '.', '_' or '-'.")
			return "", nil, false
		}
		session, param = req.Conversation, "conversation"
	case req.PreviousResponseID != "":
		rec, found, err := s.responses.get(r.Context(), req.PreviousResponseID, identity)
		if err != nil {
			s.log.WarnContext(r.Context(), "read api response failed", "err", err)
			writeUnavailable(w)
			return "", nil, false
		}
		if !found {
			// 400 as OpenAI answers it: clients catch it to send the
			// conversation again.
			writeError(w, http.StatusBadRequest, "invalid_request_error", "previous_response_not_found", "previous_response_id",
				fmt.Sprintf("Previous response with id '%s' not found.", openai.Clip(req.PreviousResponseID, 64)))
			return "", nil, false
		}
		session, param, previous = rec.Session, "previous_response_id", &rec
	}
	if header != "" && session != header {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", param,
			fmt.Sprintf("The %s names another conversation than the %s header; send one of them.", param, HeaderSession))
		return "", nil, false
	}
	return session, previous, true
}

// continuedInstructions are the instructions of the response a request
// without instructions of its own continues, as Hermes carries them
// forward: those of the response it names (previous), or else those of
// the latest response kept of the conversation it names (conversation,
// or X-Session-Id, which names one the same way), as Hermes resolves a
// conversation to its latest response stored; "" for none. A request that sent
// a conversation_history continues no response: Hermes then reads none.
// A retry of a request (its Idempotency-Key) takes those of its first
// attempt. It answers the request itself (503) and returns false when
// the response store cannot be read.
func (s *Service) continuedInstructions(w http.ResponseWriter, r *http.Request, identity, session string,
	previous *storedResponse, historySent bool) (string, bool) {
	switch {
	case previous != nil:
		return previous.Instructions, true
	case session == "" || historySent:
		return "", true
	}
	ctx := r.Context()
	if key := r.Header.Get(HeaderIdempotencyKey); key != "" {
		// A retry carries what its first attempt carried, which its
		// response kept, whatever the conversation's latest is now.
		id := "resp_" + strings.TrimPrefix(keyedID(identity, session, key), keyedPrefix)
		rec, found, err := s.responses.get(ctx, id, identity)
		if err != nil {
			s.log.WarnContext(ctx, "read api response failed", "err", err)
			writeUnavailable(w)
			return "", false
		}
		if found {
			return rec.Instructions, true
		}
	}
	head, _, err := s.responses.headRecord(ctx, identity, session)
	var rec storedResponse
	found := false
	if err == nil && head.Response != "" {
		rec, found, err = s.responses.get(ctx, head.Response, identity)
	}
	if err == nil && !found && head.Kept != "" && head.Kept != head.Response {
		// The latest response was not kept (store: false), or not yet
		// (an attempt of this request): the one kept before it.
		rec, found, err = s.responses.get(ctx, head.Kept, identity)
	}
	if err != nil {
		s.log.WarnContext(ctx, "read api conversation's latest response failed", "err", err)
		writeUnavailable(w)
		return "", false
	}
	if !found {
		// A new conversation, or its latest response kept deleted or
		// expired: nothing to carry.
		return "", true
	}
	return rec.Instructions, true
}

// headClaim is a conversation's head this request moved to its response
// (from the response it continues, or from none), to give back if the
// request goes no further.
type headClaim struct {
	owner, session string
	from, to       string
}

// place decides the conversation the request runs in and records its
// response as the conversation's latest (head). A request with a session
// of its own (conversation, X-Session-Id) runs there. One continuing a
// response (previous) runs in that response's conversation when the
// response is still its head, and takes the head over — the first of
// two requests continuing one response does, the other branches off —
// or when the head is this response already (an earlier attempt of the
// request took it). Otherwise its conversation went on since: the
// request runs in a new conversation named after its response, which
// the router opens as a copy of the old one up to the answer of the
// response continued (fork_from); a retry of the request names the same
// one, which is opened once. It answers the request itself (409, 503)
// and returns false when the request cannot be placed; the claim is nil
// unless the request moved a head from the response it continues.
func (s *Service) place(w http.ResponseWriter, r *http.Request, identity, session string, previous *storedResponse, store bool, t *turn) (*headClaim, bool) {
	ctx := r.Context()
	id := "resp_" + t.suffix()
	if previous == nil {
		if session != "" {
			// The latest response of the conversation now. Not reading the
			// head first keeps the named conversation's path at one write
			// when the response is kept; a head that cannot be read or
			// written only means that a request continuing an earlier
			// response may not branch off, or that a later request carries
			// no instructions.
			next := conversationHead{Response: id, Kept: id}
			if !store {
				// The latest kept stays the one before.
				prior, _, err := s.responses.headRecord(ctx, identity, session)
				if err != nil {
					s.log.WarnContext(ctx, "read api conversation head failed", "err", err)
				}
				next.Kept = prior.Kept
				if next.Kept == "" && prior.Response != id {
					next.Kept = prior.Response // a record without Kept
				}
			}
			if err := s.responses.setHead(ctx, identity, session, next); err != nil {
				s.log.WarnContext(ctx, "record api conversation head failed", "err", err)
			}
		}
		return nil, true
	}
	for range 8 {
		head, rev, err := s.responses.head(ctx, identity, previous.Session)
		if err != nil {
			s.log.WarnContext(ctx, "read api conversation head failed", "err", err)
			writeUnavailable(w)
			return nil, false
		}
		switch head {
		case id:
			return nil, true
		case "", previous.Response.ID:
			// The response continued is kept: the latest kept if this
			// one is not.
			next := conversationHead{Response: id, Kept: id}
			if !store {
				next.Kept = previous.Response.ID
			}
			moved, err := s.responses.advanceTo(ctx, identity, previous.Session, rev, next)
			if err != nil {
				s.log.WarnContext(ctx, "record api conversation head failed", "err", err)
				writeUnavailable(w)
				return nil, false
			}
			if moved {
				continue // another request continued the conversation meanwhile
			}
			return &headClaim{owner: identity, session: previous.Session, from: head, to: id}, true
		}
		if previous.Turn == "" {
			writeError(w, http.StatusConflict, "invalid_request_error", "previous_response_incomplete", "previous_response_id",
				fmt.Sprintf("Response '%s' has no complete answer, and its conversation has gone on since: it cannot be continued "+
					"from there (yet). Continue from a completed response, or from the conversation's latest.", previous.Response.ID))
			return nil, false
		}
		moveTo(t, identity, id, previous)
		return nil, true
	}
	s.log.WarnContext(ctx, "api conversation head keeps moving", "chat_id", previous.Session)
	writeUnavailable(w)
	return nil, false
}

// moveTo makes the turn's message go to the client identity's
// conversation session instead; one other than that of the response it
// continues (previous) is opened as a copy of that one up to the
// response's answer.
func moveTo(t *turn, identity, session string, previous *storedResponse) {
	t.session = session
	t.ev.Source.ChatId = chatIDOf(identity, session)
	t.ev.ClientSessionId = session
	t.ev.ForkFrom = nil
	if previous != nil && session != previous.Session {
		t.ev.ForkFrom = &eventsv1.ForkFrom{SessionKey: previous.SessionKey, TurnId: previous.Turn}
	}
}

// giveBackHead moves a head the request claimed back to where it was,
// unless another request moved it since: the request's message did not
// go out.
func (s *Service) giveBackHead(ctx context.Context, h *headClaim) {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	head, rev, err := s.responses.head(ctx, h.owner, h.session)
	if err == nil && head == h.to {
		if h.from == "" {
			err = s.responses.dropHead(ctx, h.owner, h.session, rev)
		} else {
			_, err = s.responses.advance(ctx, h.owner, h.session, rev, h.from)
		}
	}
	if err != nil {
		s.log.WarnContext(ctx, "give back api conversation head failed", "err", err)
	}
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
// longer kept, and no longer continued; a retry of its request with the
// same Idempotency-Key does not make it again (409). Its conversation
// stays: a response chained on it before, and X-Session-Id, continue it.
func (s *Service) deleteResponse(w http.ResponseWriter, r *http.Request) {
	rec, ok := s.ownResponse(w, r)
	if !ok {
		return
	}
	if err := s.responses.bury(r.Context(), rec); err != nil {
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
	// rec is the record as stored at rev.
	rec     storedResponse
	rev     uint64
	created bool // by this request
}

// keep records a response being answered, unless an earlier attempt of
// the request did: a retry with another request under the same key
// (refused with 422) must not overwrite the first one's. It answers the
// request itself (409, 413, 503) and returns false when it cannot.
func (s *Service) keep(w http.ResponseWriter, r *http.Request, rec storedResponse) (*kept, bool) {
	stored, rev, created, err := s.responses.begin(r.Context(), rec)
	switch {
	case errors.Is(err, errResponseDeleted):
		writeError(w, http.StatusConflict, "invalid_request_error", "response_deleted", HeaderIdempotencyKey,
			"The response of this Idempotency-Key was deleted; send the request with a new key.")
		return nil, false
	case tooLarge(err):
		s.log.InfoContext(r.Context(), "api response too large to record", "err", err)
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "",
			"The response's instructions and metadata are too large to keep; send them shorter, or the request with store: false.")
		return nil, false
	case err != nil:
		s.log.WarnContext(r.Context(), "record api response failed", "err", err)
		writeUnavailable(w)
		return nil, false
	}
	return &kept{rec: stored, rev: rev, created: created}, true
}

// resume is the kept response as an attempt that did not write it goes
// on with it: in progress again, its answer to come.
func (k *kept) resume(messageID string) *responseObject {
	o := *k.rec.Response
	o.Status, o.CompletedAt, o.Error, o.IncompleteDetails, o.Usage = "in_progress", nil, nil, nil, nil
	o.Output, o.messageID = []outputMessage{}, messageID
	return &o
}

// finish writes the response's final state, and where its answer ended
// (at: known when the answer came), over its record, if it is kept
// (store), even when the client has left. A record the client deleted
// meanwhile stays deleted, and one holding another attempt's final
// answer keeps it. Failing, the record stays as it was: GET shows it
// so, and previous_response_id still continues its conversation.
func (s *Service) finish(ctx context.Context, k *kept, o *responseObject, at answerPoint) {
	if k == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.responses.end(ctx, k.rec, k.rev, o, at); err != nil {
		s.log.WarnContext(ctx, "record api response end failed", "err", err)
	}
}

// forget deletes the record of a response that was never asked.
func (s *Service) forget(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.responses.remove(ctx, id); err != nil {
		s.log.WarnContext(ctx, "forget api response failed", "err", err)
	}
}

// streamResponse writes the Responses stream events as the reply
// arrives: response.created and response.in_progress; with the first
// text the message item and its output_text part (output_item.added,
// content_part.added), each piece of text (output_text.delta); then the
// text, the part and the item done, and response.completed — or
// response.failed for a failed turn, response.incomplete when the wait
// ended first, after closing the item as incomplete if it was opened.
// Each tool call the turn makes is a function_call item of its own,
// added when the call starts and done when it ends (tool). Every event
// has its sequence_number.
func (s *Service) streamResponse(ctx context.Context, w http.ResponseWriter, r *http.Request, t *turn, o *responseObject, k *kept) {
	e := &responseEvents{out: startSSE(w, t.timed()), o: o}
	e.response("response.created")
	e.response("response.in_progress")
	end := relay(ctx, t.wt, s.cfg.ReplyTimeout, e.delta, e.tool, e.out.keepalive)
	e.closeCalls()
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
		o.Output = e.outputWith(o.Output)
		s.finish(r.Context(), k, o, answerPoint{})
		e.response("response.incomplete")
	case end.errorCode != "":
		record := o
		if end.changed {
			// The stream showed part of another answer, but the turn
			// answered: the response kept is that answer, as a retry
			// with the request's Idempotency-Key gets it.
			answered := *o
			answered.complete(end.answer, end.final.usage)
			answered.Output = e.outputWith(answered.Output)
			record = &answered
		}
		o.fail(end.errorCode, end.errorText)
		if e.opened {
			// What was shown before the turn failed: an unfinished item.
			e.itemDone("incomplete", end.text)
			o.Output = []outputMessage{o.message("incomplete", end.text)}
		}
		o.Output = e.outputWith(o.Output)
		s.finish(r.Context(), k, record, end.final.at)
		e.response("response.failed")
	default:
		e.itemDone("completed", end.text)
		o.complete(end.text, end.final.usage)
		o.Output = e.outputWith(o.Output)
		s.finish(r.Context(), k, o, end.final.at)
		e.response("response.completed")
	}
	if timing != "" {
		w.Header().Set(HeaderServerTiming, timing)
	}
}

// responseEvents writes the events of one streamed response; with out
// nil (a response that does not stream), it only lists the tool calls'
// items for the response's output.
type responseEvents struct {
	out    *sse
	o      *responseObject
	seq    int
	opened bool // the message item was added
	// index is the message item's output_index, next the next item's:
	// the items are numbered as they are added, tool calls' included.
	index, next int
	calls       toolCalls
	// tools are the items of the tool calls and their results, as they
	// ended, for the response's output (outputWith); toolBytes is their
	// size, full once it would pass toolItemsMax.
	tools     []toolItem
	toolBytes int
	toolsFull bool
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
	e.index = e.next
	e.next++
	e.out.send("response.output_item.added", itemEvent{eventHead: e.head("response.output_item.added"), OutputIndex: e.index,
		Item: outputMessage{ID: e.o.messageID, Type: "message", Status: "in_progress", Role: "assistant", Content: []outputText{}}})
	e.out.send("response.content_part.added", partEvent{eventHead: e.head("response.content_part.added"),
		ItemID: e.o.messageID, OutputIndex: e.index, Part: newOutputText("")})
}

// delta shows a piece of the answer.
func (e *responseEvents) delta(text string) {
	if !e.opened {
		e.open()
	}
	e.out.send("response.output_text.delta", textDeltaEvent{eventHead: e.head("response.output_text.delta"),
		ItemID: e.o.messageID, OutputIndex: e.index, Delta: text, Logprobs: []struct{}{}})
}

// itemDone ends the text, its part and the message item (status).
func (e *responseEvents) itemDone(status, text string) {
	if !e.opened {
		e.open()
	}
	e.out.send("response.output_text.done", textDoneEvent{eventHead: e.head("response.output_text.done"),
		ItemID: e.o.messageID, OutputIndex: e.index, Text: text, Logprobs: []struct{}{}})
	e.out.send("response.content_part.done", partEvent{eventHead: e.head("response.content_part.done"),
		ItemID: e.o.messageID, OutputIndex: e.index, Part: newOutputText(text)})
	e.out.send("response.output_item.done", itemEvent{eventHead: e.head("response.output_item.done"), OutputIndex: e.index,
		Item: e.o.message(status, text)})
}

// Stream events. The answer is one message item with one output_text
// part (content_index 0); its output_index is 0 unless tool calls'
// items came before it.
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

// outputMessage is an output item of a response: the answer's message,
// or — as Hermes lists them — a tool call's function_call item and its
// result's function_call_output item. Each type is written with its own
// fields (MarshalJSON); a kept response reads back with all of them.
type outputMessage struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Status  string       `json:"status"`
	Role    string       `json:"role,omitempty"`
	Content []outputText `json:"content,omitempty"`
	// A function_call's.
	Name      string `json:"name,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	// A function_call_output's (and CallID).
	Output []outputPart `json:"output,omitempty"`
}

// outputPart is a part of a function_call_output's output, as Hermes's
// stream writes the result: one input_text part.
type outputPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (m outputMessage) MarshalJSON() ([]byte, error) {
	switch m.Type {
	case "function_call":
		return json.Marshal(struct {
			ID        string `json:"id"`
			Type      string `json:"type"`
			Status    string `json:"status"`
			Name      string `json:"name"`
			CallID    string `json:"call_id"`
			Arguments string `json:"arguments"`
		}{m.ID, m.Type, m.Status, m.Name, m.CallID, m.Arguments})
	case "function_call_output":
		return json.Marshal(struct {
			ID     string       `json:"id"`
			Type   string       `json:"type"`
			CallID string       `json:"call_id"`
			Output []outputPart `json:"output"`
			Status string       `json:"status"`
		}{m.ID, m.Type, m.CallID, m.Output, m.Status})
	}
	content := m.Content
	if content == nil {
		content = []outputText{}
	}
	return json.Marshal(struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Status  string       `json:"status"`
		Role    string       `json:"role"`
		Content []outputText `json:"content"`
	}{m.ID, m.Type, m.Status, m.Role, content})
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
		Model: s.modelOf(req), Output: []outputMessage{}, Store: req.Store, ParallelToolCalls: true, ToolChoice: "auto",
		Tools: []struct{}{}, Truncation: req.Truncation, Metadata: req.Metadata, messageID: "msg_" + t.suffix(),
	}
	o.Text.Format.Type = "text"
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
