package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// The request path every endpoint that asks the agent shares (chat
// completions, the Responses API): read the body, build the message
// (prepare), publish it or follow an earlier attempt's (publish), wait
// for the answer (collect, or relay for a stream) and answer errors the
// same way.

// readBody reads a request body within the size limit. It answers the
// request itself (413, 400) and returns false when it cannot.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := platform.ReadBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.rn().Reject(r.Context(), "request body too large", err)
			// As Hermes's body_limit_middleware answers it
			// (gateway/platforms/api_server.py).
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "body_too_large", "", "Request body too large.")
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "Could not read the request body.")
		return nil, false
	}
	return body, true
}

// rejectInvalid answers a request body the parser refused (400).
func (s *Service) rejectInvalid(w http.ResponseWriter, r *http.Request, what string, err error) {
	var inv *openai.InvalidError
	param, code := "", "invalid_request"
	if errors.As(err, &inv) {
		param = inv.Param
		if inv.Code != "" {
			code = inv.Code
		}
	}
	s.rn().Reject(r.Context(), what, err)
	writeError(w, http.StatusBadRequest, "invalid_request_error", code, param, err.Error())
}

// sessionOf returns the session the request's header names ("" for
// none). It answers the request (400) and returns false when the header
// is not a plain token.
func sessionOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	session, ok := sessionHeader(r.Header)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_id", HeaderSession, "The session id must be 1-128 characters of letters, digits, '.', '_' or '-'.")
	}
	return session, ok
}

// identityOf is the client a request authenticated as (authed).
func identityOf(r *http.Request) string {
	identity, _ := r.Context().Value(ctxKey{}).(string)
	return identity
}

// message is what an API request asks the agent, whichever endpoint it
// came to.
type message struct {
	input openai.Input
	// session is the conversation the client named; "" for a stateless
	// request, which carries its conversation as context.
	session string
	// user is the sender's name (the request's user field).
	user   string
	stream bool
	// listsToolCalls: the answer lists the turn's tool calls (a
	// Responses request), so its turn publishes their steps even when
	// it publishes no other progress.
	listsToolCalls bool
	// param names the input in the request, for errors.
	param    string
	received time.Time
}

// turn is one API request's message on its way: built by prepare,
// published by publish, its answer collected or relayed.
type turn struct {
	// id is the request id, the event's and the message's: fresh
	// (req_<replica>_<random>), or the same for every attempt of a
	// request with an Idempotency-Key (idem_<hash>).
	id    string
	keyed bool
	// session is the conversation the answer names (X-Session-Id): the
	// client's, or the request id for a stateless request.
	session string
	// scope is the memory scope X-Hermes-Session-Key named ("": none).
	scope string
	param string
	ev    *eventsv1.MessageReceived
	wt    *waiter
	// received is when the request was read; published when this
	// request published its message (zero for a keyed one, which an
	// earlier attempt may have published).
	received, published time.Time
	cleanup             []func()
}

// close stops waiting for the answer.
func (t *turn) close() {
	for i := len(t.cleanup) - 1; i >= 0; i-- {
		t.cleanup[i]()
	}
}

// suffix is the request id without its kind: what the ids of the
// answer's objects (chatcmpl-…, resp_…) are made of, so that every
// attempt of a keyed request gets the same.
func (t *turn) suffix() string {
	return strings.TrimPrefix(strings.TrimPrefix(t.id, "req_"), keyedPrefix)
}

// timed reports whether the answer can say where its time went: only a
// request that published its message knows when it did.
func (t *turn) timed() bool { return !t.published.IsZero() }

// serverTiming renders the Server-Timing of an answer with hops.
func (t *turn) serverTiming(hops *deliveryv1.HopTimes) string {
	return serverTiming(t.received, t.published, time.Now(), hops)
}

// prepare builds the message of a request. It answers the request (400)
// and returns false when its headers cannot be used.
func (s *Service) prepare(w http.ResponseWriter, r *http.Request, m message) (*turn, bool) {
	idemKey := r.Header.Get(HeaderIdempotencyKey)
	if len(idemKey) > maxIdempotencyKey {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_idempotency_key", HeaderIdempotencyKey,
			fmt.Sprintf("The Idempotency-Key must be at most %d bytes.", maxIdempotencyKey))
		return nil, false
	}
	scope, ok := s.memoryScope(w, r)
	if !ok {
		return nil, false
	}
	identity := identityOf(r)
	t := &turn{id: s.newRequestID(), session: m.session, scope: scope, param: m.param, wt: newWaiter(), received: m.received}
	if idemKey != "" {
		// Every attempt with this key is the same message, on any replica.
		t.id, t.keyed = keyedID(identity, m.session, idemKey), true
	}
	if t.session == "" {
		t.session = t.id
	}
	t.ev = &eventsv1.MessageReceived{
		EventId:   t.id,
		MessageId: t.id,
		Source: &eventsv1.SessionSource{
			Platform: PlatformName, Account: s.cfg.Account, ChatId: chatIDOf(identity, t.session), ChatType: "dm",
			UserId: identity, UserName: m.user, UserIdAlt: scope,
		},
		Text:                   m.input.Text,
		Attachments:            m.input.Attachments,
		Context:                m.input.Context,
		SentAt:                 timestamppb.Now(),
		TransportAuthenticated: true,
		ClientSessionId:        m.session,
		// A plain request waits for the whole answer: no typing, no
		// streamed text. A keyed one may be followed by a streaming retry.
		AnswerOnly:     !m.stream && !t.keyed,
		ListsToolCalls: m.listsToolCalls,
	}
	return t, true
}

// chatIDOf is the chat id of the client identity's conversation session.
func chatIDOf(identity, session string) string {
	if name, ok := strings.CutPrefix(identity, namedPrefix); ok {
		// A named key's sessions are its own: another key naming the same
		// session gets another conversation.
		return name + "." + session
	}
	// The single key's (and a keyless client's) chat is the session id
	// itself, as in Hermes, except for an id that reads as a named key's
	// chat ("<key name>.<session>"): X-Session-Id "alice.s" would
	// otherwise be named key alice's session "s", and the single key's
	// holder would read that conversation's history and put text before
	// its next turn (which runs with alice's memory). Such an id gets a
	// "~" before it, a character neither a key name nor a session id has.
	if prefix, _, ok := strings.Cut(session, "."); ok && keyName.MatchString(prefix) {
		return "~" + session
	}
	return session
}

// publish publishes the turn's message — or, with an Idempotency-Key,
// follows the answer of the message, published unless an earlier
// attempt's answer is complete — and names the conversation in the
// answer's headers. fingerprint identifies what the request asks (a key
// reused for another request is refused). It answers the request itself
// and returns false when the message cannot be accepted.
func (s *Service) publish(w http.ResponseWriter, r *http.Request, t *turn, fingerprint string) bool {
	if t.keyed {
		stop, ok := s.acceptKeyed(w, r, t, fingerprint)
		t.cleanup = append(t.cleanup, stop)
		if !ok {
			return false
		}
		s.following.add(t.id, t.wt)
		t.cleanup = append(t.cleanup, func() { s.following.remove(t.id, t.wt) })
	} else {
		s.waiting.add(t.id, t.wt)
		t.cleanup = append(t.cleanup, func() { s.waiting.remove(t.id, t.wt) })
		// A fresh request id: nothing to look up in the seen record.
		if _, err := s.rn().DeliverFresh(r.Context(), t.ev); err != nil {
			s.writeDeliverError(w, r, t, err)
			return false
		}
		t.published = time.Now()
		if t.session == t.id {
			t.cleanup = append(t.cleanup, func() { s.abandoned(r, t) })
		}
	}
	// Both names, as Hermes always answers with its own: a client that
	// sends either back continues this conversation.
	w.Header().Set(HeaderSession, t.session)
	w.Header().Set(HeaderHermesSession, t.session)
	t.echoScope(w)
	return true
}

// echoScope names the memory scope in the answer, as Hermes does.
func (t *turn) echoScope(w http.ResponseWriter) {
	if t.scope != "" {
		w.Header().Set(HeaderSessionKey, t.scope)
	}
}

// abandoned stops the turn of a request whose client went away before
// its answer came, as Hermes interrupts the agent of a client that
// disconnects: the request's conversation gets /stop, which stops its
// turn or drops its message if it waits. Only a stateless request's
// conversation is its own (a shared one's /stop would reach the other
// requests' messages), and a request with an Idempotency-Key is left to
// run: a retry takes its answer. Best effort: a lost /stop lets the turn
// finish, its answer unread.
func (s *Service) abandoned(r *http.Request, t *turn) {
	if r.Context().Err() == nil || t.wt.answered.Load() || s.shuttingDown() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	id := t.id + "_stop"
	stop := &eventsv1.MessageReceived{EventId: id, MessageId: id, Source: t.ev.GetSource(), Text: "/stop", SentAt: timestamppb.Now(),
		TransportAuthenticated: true, ClientSessionId: t.ev.GetClientSessionId(), AnswerOnly: true}
	if _, err := s.rn().DeliverFresh(ctx, stop); err != nil {
		s.log.WarnContext(ctx, "stop the turn of a request whose client left", "request", t.id, "err", err)
		return
	}
	abandonedRequests.Inc()
}

func (s *Service) writeDeliverError(w http.ResponseWriter, r *http.Request, t *turn, err error) {
	if errors.Is(err, platform.ErrRejected) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", t.param, "The request was rejected: "+err.Error())
		return
	}
	s.log.WarnContext(r.Context(), "publish api request failed", "err", err)
	writeUnavailable(w)
}

// writeUnavailable answers a request the bus cannot take now; nothing
// was published, a retry is safe.
func writeUnavailable(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, "server_error", "bus_unavailable", "", "The gateway could not accept the request; retry later.")
}

// acceptKeyed accepts a request with an Idempotency-Key. It follows the
// request's stored answer (live updates, and a slow poll in case one is
// missed), records the request unless an earlier attempt did, and
// publishes the message unless the answer is complete already — a copy
// an earlier attempt published is dropped by the gateway's seen bucket,
// the bus dedupe window and the router. It writes the error response and
// returns false when the request cannot be accepted; stop ends following.
func (s *Service) acceptKeyed(w http.ResponseWriter, r *http.Request, t *turn, request string) (stop func(), ok bool) {
	ctx := r.Context()
	id := t.id
	f := newFollower(t.wt)
	unsubscribe, err := s.answers.follow(id, f)
	if err != nil {
		s.log.WarnContext(ctx, "follow api answer failed", "err", err)
		writeUnavailable(w)
		return func() {}, false
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	stop = func() { stopPoll(); unsubscribe() }
	rec, created, err := s.answers.begin(ctx, id, request)
	if err != nil {
		s.log.WarnContext(ctx, "record api request failed", "err", err)
		writeUnavailable(w)
		return stop, false
	}
	if rec.Request != "" && rec.Request != request {
		writeError(w, http.StatusUnprocessableEntity, "invalid_request_error", "idempotency_key_reused", HeaderIdempotencyKey,
			"This Idempotency-Key was used for a different request.")
		return stop, false
	}
	f.apply(rec)
	if rec.Final {
		f.decide(false)
		return stop, true
	}
	acc, err := s.rn().Deliver(ctx, t.ev)
	if err != nil {
		s.writeDeliverError(w, r, t, err)
		return stop, false
	}
	if created && acc.Duplicate && !acc.FirstSeen.IsZero() && time.Since(acc.FirstSeen) > s.cfg.IdempotencyTTL {
		// Handled long ago; its answer is no longer kept.
		if err := s.answers.forget(ctx, id); err != nil {
			s.log.WarnContext(ctx, "forget api request failed", "err", err)
		}
		writeError(w, http.StatusConflict, "invalid_request_error", "idempotency_key_expired", HeaderIdempotencyKey,
			"This Idempotency-Key was used more than the idempotency TTL ago and its answer is no longer kept; use a new key.")
		return stop, false
	}
	// Only the attempt that published the message streams its deltas.
	f.decide(!acc.Duplicate)
	go s.pollAnswer(pollCtx, id, f)
	return stop, true
}

// answerPoll is how often a keyed request reads its stored answer, in
// case a live update did not reach it.
const answerPoll = 3 * time.Second

// pollComponent is the switchboard_panics_total component of a panic in
// a keyed request's answer poller.
const pollComponent = "gateway_api_poll"

// pollAnswer reads the stored answer of request id every answerPoll until
// f has its final. A panic in one read is recovered, logged and counted
// (switchboard_panics_total{component="gateway_api_poll"}) and ends the
// polling, not the process (this goroutine is no handler's): the request
// still follows the live updates, or ends at its reply timeout.
func (s *Service) pollAnswer(ctx context.Context, id string, f *follower) {
	t := time.NewTicker(answerPoll)
	defer t.Stop()
	for !f.finished() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := panics.Recover(s.log, pollComponent, func() error {
			if rec, ok, err := s.answers.get(ctx, id); err == nil && ok {
				f.apply(rec)
			}
			return nil
		}, "platform", PlatformName, "request", id)
		if err != nil {
			return
		}
	}
}

// replyContext bounds the wait for a whole answer
// (gateways.api.reply_timeout). A stream's wait has no total bound: it
// ends when the reply says nothing for that long (relay).
func (s *Service) replyContext(r *http.Request, stream bool) (context.Context, context.CancelFunc) {
	if stream {
		return context.WithCancel(r.Context())
	}
	return context.WithTimeout(r.Context(), s.cfg.ReplyTimeout)
}

// waitEnd is why a request stopped waiting before its answer came, as
// the API tells it.
type waitEnd struct {
	status int
	code   string
	msg    string
}

func (s *Service) waitEndOf(r *http.Request, err error) waitEnd {
	switch {
	case r.Context().Err() != nil && s.shuttingDown():
		return waitEnd{http.StatusServiceUnavailable, "shutting_down", "The gateway is shutting down; retry the request."}
	case errors.Is(err, context.DeadlineExceeded):
		return waitEnd{http.StatusGatewayTimeout, "timeout", "The agent did not answer in time."}
	default:
		return waitEnd{http.StatusServiceUnavailable, "unavailable", "The request ended before the agent answered."}
	}
}

// writeWaitError answers a request of t that stopped waiting for its
// answer.
func (s *Service) writeWaitError(w http.ResponseWriter, r *http.Request, t *turn, err error) {
	e := s.waitEndOf(r, err)
	t.noRetry(w)
	writeError(w, e.status, "server_error", e.code, "", e.msg)
}

// noRetry tells the client not to send the request again on its own
// (X-Should-Retry: false, which the OpenAI SDKs honour before retrying a
// 5xx, twice by default): its message went out and its turn goes on, so
// a retry would be another message, the turn run again, tools and all.
// A keyed request's retry follows the same answer: it may come.
func (t *turn) noRetry(w http.ResponseWriter) {
	if !t.keyed {
		w.Header().Set("X-Should-Retry", "false")
	}
}

func (s *Service) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseCtx != nil && s.baseCtx.Err() != nil
}

// collect waits for the final send and returns the answer (the text of
// every send chunk, in order) and, when the turn failed and the text
// explains why, its error code. tool, when set, takes each step of the
// turn's tool calls as it comes.
func collect(ctx context.Context, wt *waiter, tool func(*deliveryv1.ToolStep)) (reply, error) {
	var b strings.Builder
	var ans reply
	var media []string
	for {
		for _, p := range wt.take() {
			if p.tool != nil && tool != nil {
				tool(p.tool)
			}
			if p.delta != "" || p.tool != nil || p.alive {
				continue
			}
			if p.errorCode != "" && ans.errorCode == "" {
				// Only the explanation answers a failed turn.
				b.Reset()
				ans.errorCode = p.errorCode
			}
			b.WriteString(p.text)
			if p.media != "" {
				media = append(media, p.media)
			}
			if p.final {
				ans.text, ans.hops, ans.usage, ans.at = b.String(), p.hops, p.usage, p.at
				if ans.errorCode == "" {
					ans.text = withMedia(ans.text, media)
				}
				return ans, nil
			}
		}
		select {
		case <-ctx.Done():
			return reply{}, ctx.Err()
		case <-wt.notify:
		}
	}
}

// ending is how a streamed reply ended.
type ending struct {
	// final is the reply's final piece (hops, usage); nil when the wait
	// ended first.
	final *piece
	// text is what was shown: the whole answer when it completed.
	text string
	// errorCode and errorText explain a failed turn, or an answer that is
	// not what was streamed ("interrupted").
	errorCode, errorText string
	// err is why the wait ended before the final piece.
	err error
	// changed: the answer is not what was streamed (errorCode
	// interrupted, errorText streamInterrupted), and whole in the
	// request's kept answer, which a retry with its Idempotency-Key gets.
	changed bool
	// answer, when changed, is that whole answer: the text of the
	// answer's sends with the links to their media, as a request that
	// does not stream gets it (collect).
	answer string
}

// streamInterrupted explains an answer that is not what was streamed.
const streamInterrupted = "The answer was interrupted while it streamed; send the request again (with the same Idempotency-Key to get the answer without running it again)."

// keepaliveEvery is how often a stream without news says it is alive.
const keepaliveEvery = 15 * time.Second

// relay shows the reply of a streaming request as its pieces arrive —
// the text deltas, then what the answer's sends add to them — calls idle
// when there was no news for a while (keep-alives), and returns how the
// reply ended. The wait ends (context.DeadlineExceeded, the timeout a
// whole answer's wait ends with) when no piece came for quiet: a stream
// still showing text goes on however long its answer takes, as Hermes's
// does, while one whose turn went silent is not held open for ever.
//
// The answer is the last model call's text: in a turn that called tools
// after streaming text ("Let me check."), the later call's text streams
// after a break marked restart (Hermes's paragraph break), and the
// answer continues what streamed after that break, not the whole stream.
//
// The steps of the turn's tool calls go to tool as they come; they say
// the turn goes on, as its text does.
func relay(ctx context.Context, wt *waiter, quiet time.Duration, show func(string), tool func(*deliveryv1.ToolStep), idle func()) ending {
	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	silence := time.NewTimer(quiet)
	defer silence.Stop()
	// shown is everything the client was streamed; streamed is what the
	// answer must start with: what was streamed since the last restart.
	var shown, streamed, sent, failure strings.Builder
	// sends is the text of every send, as collect reads the answer.
	var sends strings.Builder
	// media are the links to the media the answer's sends carried, shown
	// after its text.
	var media []string
	for {
		pieces := wt.take()
		if len(pieces) > 0 {
			silence.Reset(quiet)
		}
		for _, p := range pieces {
			if p.alive {
				continue
			}
			if p.tool != nil {
				tool(p.tool)
				continue
			}
			if p.errorCode != "" {
				// A failed turn: its explanation ends the stream.
				failure.WriteString(p.text)
				if p.final {
					return ending{final: &p, text: shown.String(), errorCode: p.errorCode, errorText: failure.String()}
				}
				continue
			}
			if p.delta != "" {
				shown.WriteString(p.delta)
				show(p.delta)
				if p.restart {
					streamed.Reset()
					sent.Reset()
					continue
				}
				streamed.WriteString(p.delta)
				continue
			}
			if p.media != "" {
				media = append(media, p.media)
			}
			sent.WriteString(p.text)
			sends.WriteString(p.text)
			// Send chunks carry the answer; show what deltas did not.
			rest, continues := strings.CutPrefix(sent.String(), streamed.String())
			if continues && rest != "" {
				streamed.WriteString(rest)
				shown.WriteString(rest)
				show(rest)
			}
			if p.final && !continues {
				// The answer is not what was streamed (the turn ran again
				// after its worker died mid-stream): the client holds a
				// part of another answer, which nothing can take back. A
				// retry with the same Idempotency-Key gets the whole answer.
				return ending{final: &p, text: shown.String(), errorCode: "interrupted", errorText: streamInterrupted, changed: true,
					answer: withMedia(sends.String(), media)}
			}
			if p.final {
				if rest := strings.TrimPrefix(withMedia(shown.String(), media), shown.String()); rest != "" {
					shown.WriteString(rest)
					show(rest)
				}
				return ending{final: &p, text: shown.String()}
			}
		}
		select {
		case <-ctx.Done():
			return ending{text: shown.String(), err: ctx.Err()}
		case <-silence.C:
			return ending{text: shown.String(), err: context.DeadlineExceeded}
		case <-keepalive.C:
			idle()
		case <-wt.notify:
		}
	}
}

// sse is a response streamed as server-sent events.
type sse struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

// startSSE answers 200 with an event stream; with timed, one that ends
// with a Server-Timing trailer.
func startSSE(w http.ResponseWriter, timed bool) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	if timed {
		h.Set("Trailer", HeaderServerTiming)
	}
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, flusher: f}
}

// send writes one event, v as JSON, named when name is set.
func (e *sse) send(name string, v any) {
	data, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", data)
	e.flush()
}

// write writes raw stream text (data: [DONE], comments).
func (e *sse) write(text string) {
	fmt.Fprint(e.w, text)
	e.flush()
}

func (e *sse) keepalive() { e.write(": keepalive\n\n") }

// waitEndedComment precedes the in-stream error of a request that
// stopped waiting while its turn goes on, which shares its code
// (timeout) with a turn that failed: the web chat asks again for the
// one and shows the other. A comment, which the SDKs skip.
const waitEndedComment = ": wait ended\n\n"

// answerChangedComment precedes the in-stream error of a stream whose
// answer is not what it streamed (ending.changed), which shares its
// code (interrupted) with a turn /stop ended: the web chat asks again,
// with the message's Idempotency-Key, for the one (the whole answer
// comes) and shows the other. A comment, which the SDKs skip.
const answerChangedComment = ": answer changed\n\n"

func (e *sse) flush() {
	if e.flusher != nil {
		e.flusher.Flush()
	}
}
