package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/switchboard-chat/switchboard/pkg/loopback"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/timestamppb"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// Session headers: ours and Hermes's.
const (
	HeaderSession       = "X-Session-Id"
	HeaderHermesSession = "X-Hermes-Session-Id"
)

// HeaderIdempotencyKey makes retries of a request one message.
const HeaderIdempotencyKey = "Idempotency-Key"

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9._\-]{1,128}$`)

func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.authed(s.chatCompletions))
	mux.HandleFunc("GET /v1/models", s.authed(s.models))
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "", fmt.Sprintf("Unknown request URL: %s %s", r.Method, r.URL.Path))
	})
	if s.cfg.WebChat {
		mux.Handle("/", webChat())
	}
	return s.secure(mux)
}

// secure adds security headers and CORS for configured origins only.
func (s *Service) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if s.cfg.Keyless() && !loopback.Host(r.Host) {
			// A keyless gateway listens on loopback only; a request naming
			// another host reached it through a rebound DNS name, from a
			// web page that must not read the answers.
			writeError(w, http.StatusForbidden, "invalid_request_error", "host_not_allowed", "",
				"This gateway has no API key and answers only requests addressed to localhost.")
			return
		}
		origin := r.Header.Get("Origin")
		if origin != "" && !s.allowedOrigin(origin) && !sameOrigin(origin, r.Host) && unsafeMethod(r.Method) {
			// A browser on another site: CORS keeps it from reading the
			// answer, but the request would still run a turn (a "simple"
			// POST needs no preflight).
			writeError(w, http.StatusForbidden, "invalid_request_error", "origin_not_allowed", "",
				"Requests from this origin are not allowed; add it to gateways.api.cors_origins.")
			return
		}
		if origin != "" && s.allowedOrigin(origin) {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", HeaderSession+", "+HeaderHermesSession)
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, "+HeaderSession+", "+HeaderHermesSession)
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		} else if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Service) allowedOrigin(origin string) bool {
	return slices.Contains(s.cfg.CORSOrigins, origin)
}

// sameOrigin reports whether origin is this server's own, as the request
// addressed it (the web chat's own requests).
func sameOrigin(origin, host string) bool {
	return origin == "http://"+host || origin == "https://"+host
}

// unsafeMethod: a method that may change state.
func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

type ctxKey struct{}

// authed checks the bearer key and the per-key rate limit.
func (s *Service) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		identity := "anonymous"
		if !s.cfg.Keyless() {
			var ok bool
			if identity, ok = s.identify(r.Header.Get("Authorization")); !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="switchboard"`)
				writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "", "Incorrect API key provided.")
				return
			}
		} else if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			identity = "anonymous-" + host
		}
		if ok, after := s.limiter.allow(identity); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter(after)))
			writeError(w, http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "", "Rate limit reached for this API key; retry later.")
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, identity)))
	}
}

// retryAfter is a wait in whole seconds for the Retry-After header,
// rounded up and at least 1: a wait of a few nanoseconds is still "try
// again in a second", never "0".
func retryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// namedPrefix starts the identity of a named key ("key:<name>"); the
// single key's identity is "key-<hash>".
const namedPrefix = "key:"

// identify returns the identity of the key an Authorization header
// carries: "key-<8 hex of its hash>" for gateways.api.key, "key:<name>"
// for a named key. Every key is compared, in constant time, whichever
// matches.
func (s *Service) identify(authorization string) (string, bool) {
	identity := ""
	if keyMatches(authorization, s.cfg.Key) {
		sum := sha256.Sum256([]byte(s.cfg.Key))
		identity = "key-" + hex.EncodeToString(sum[:4])
	}
	for name, key := range s.cfg.Keys {
		if keyMatches(authorization, key) {
			identity = namedPrefix + name
		}
	}
	return identity, identity != ""
}

// keyMatches reports whether an Authorization header carries key as a
// bearer token (constant time).
func keyMatches(authorization, key string) bool {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	return ok && key != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), []byte(key)) == 1
}

// sessionHeader returns the session id a request names (X-Session-Id, else
// X-Hermes-Session-Id; "" for none); false when it is not a plain token.
func sessionHeader(h http.Header) (string, bool) {
	session := h.Get(HeaderSession)
	if session == "" {
		session = h.Get(HeaderHermesSession)
	}
	return session, session == "" || sessionIDPattern.MatchString(session)
}

func (s *Service) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	status, code := "ok", http.StatusOK
	if err := s.rn().Ready(r.Context()); err != nil {
		status, code = "unavailable", http.StatusServiceUnavailable
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": status, "platform": PlatformName})
}

func (s *Service) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(modelList{Object: "list", Data: []model{{ID: s.cfg.Model, Object: "model", Created: 1700000000, OwnedBy: "switchboard"}}})
}

func (s *Service) chatCompletions(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.rn().Reject(r.Context(), "request body too large", err)
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "", fmt.Sprintf("Request body exceeds %d bytes.", s.cfg.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "Could not read the request body.")
		return
	}
	req, err := openai.Parse(body)
	if err != nil {
		var inv *openai.InvalidError
		errors.As(err, &inv)
		param := ""
		if inv != nil {
			param = inv.Param
		}
		s.rn().Reject(r.Context(), "invalid chat completion request", err)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", param, err.Error())
		return
	}
	session, ok := sessionHeader(r.Header)
	if !ok {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_id", HeaderSession, "The session id must be 1-128 characters of letters, digits, '.', '_' or '-'.")
		return
	}

	idemKey := r.Header.Get(HeaderIdempotencyKey)
	if len(idemKey) > maxIdempotencyKey {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_idempotency_key", HeaderIdempotencyKey,
			fmt.Sprintf("The Idempotency-Key must be at most %d bytes.", maxIdempotencyKey))
		return
	}
	identity, _ := r.Context().Value(ctxKey{}).(string)
	reqID := s.newRequestID()
	if idemKey != "" {
		// Every attempt with this key is the same message, on any replica.
		reqID = keyedID(identity, session, idemKey)
	}
	chatID := session
	if chatID == "" {
		chatID = reqID
	}
	replySession := chatID
	if name, ok := strings.CutPrefix(identity, namedPrefix); ok {
		// A named key's sessions are its own: another key naming the same
		// X-Session-Id gets another conversation.
		chatID = name + "." + chatID
	}
	ev := &eventsv1.MessageReceived{
		EventId:   reqID,
		MessageId: reqID,
		Source: &eventsv1.SessionSource{
			Platform: PlatformName, Account: s.cfg.Account, ChatId: chatID, ChatType: "dm",
			UserId: identity, UserName: req.User,
		},
		Text:                   req.Text,
		Attachments:            req.Attachments,
		SentAt:                 timestamppb.Now(),
		TransportAuthenticated: true,
		ClientSessionId:        session,
		// A plain request waits for the whole answer: no typing, no
		// streamed text. A keyed one may be followed by a streaming retry.
		AnswerOnly: !req.Stream && idemKey == "",
	}
	if session == "" {
		ev.Context = req.Context
	}

	wt := newWaiter()
	var published time.Time // of a fresh request: a keyed one may have been published before
	if idemKey == "" {
		s.waiting.add(reqID, wt)
		defer s.waiting.remove(reqID, wt)
		// A fresh request id: nothing to look up in the seen record.
		if _, err := s.rn().DeliverFresh(r.Context(), ev); err != nil {
			s.writeDeliverError(w, r, err)
			return
		}
		published = time.Now()
	} else {
		stop, ok := s.acceptKeyed(w, r, ev, wt, fingerprint(req.Text, req.Attachments, req.Context))
		defer stop()
		if !ok {
			return
		}
		s.following.add(reqID, wt)
		defer s.following.remove(reqID, wt)
	}
	// Both names, as Hermes always answers with its own: a client that
	// sends either back continues this conversation.
	w.Header().Set(HeaderSession, replySession)
	w.Header().Set(HeaderHermesSession, replySession)
	modelName := req.Model
	if modelName == "" {
		modelName = s.cfg.Model
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReplyTimeout)
	defer cancel()
	id := "chatcmpl-" + strings.TrimPrefix(strings.TrimPrefix(reqID, "req_"), keyedPrefix)
	if req.Stream {
		var timing func(*deliveryv1.HopTimes) string
		if !published.IsZero() {
			timing = func(h *deliveryv1.HopTimes) string { return serverTiming(received, published, time.Now(), h) }
		}
		s.stream(ctx, w, wt, id, modelName, req.IncludeUsage, timing)
		return
	}
	ans, err := collect(ctx, wt)
	if err != nil {
		s.writeWaitError(w, r, err)
		return
	}
	if !published.IsZero() {
		w.Header().Set(HeaderServerTiming, serverTiming(received, published, time.Now(), ans.hops))
	}
	text := ans.text
	if ans.errorCode != "" {
		writeTurnError(w, ans.errorCode, text)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(completion{
		ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: modelName,
		Choices: []completionChoice{{Message: completionMessage{Role: "assistant", Content: text}, FinishReason: "stop"}},
		Usage:   usageOf(ans.usage),
	})
}

func (s *Service) writeDeliverError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, platform.ErrRejected) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", "messages", "The request was rejected: "+err.Error())
		return
	}
	s.log.WarnContext(r.Context(), "publish api request failed", "err", err)
	writeError(w, http.StatusServiceUnavailable, "server_error", "bus_unavailable", "", "The gateway could not accept the request; retry later.")
}

// acceptKeyed accepts a request with an Idempotency-Key. It follows the
// request's stored answer (live updates, and a slow poll in case one is
// missed), records the request unless an earlier attempt did, and
// publishes the message unless the answer is complete already — a copy
// an earlier attempt published is dropped by the gateway's seen bucket,
// the bus dedupe window and the router. It writes the error response and
// returns false when the request cannot be accepted; stop ends following.
func (s *Service) acceptKeyed(w http.ResponseWriter, r *http.Request, ev *eventsv1.MessageReceived, wt *waiter, request string) (stop func(), ok bool) {
	ctx := r.Context()
	id := ev.GetMessageId()
	f := newFollower(wt)
	unsubscribe, err := s.answers.follow(id, f)
	if err != nil {
		s.log.WarnContext(ctx, "follow api answer failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "server_error", "bus_unavailable", "", "The gateway could not accept the request; retry later.")
		return func() {}, false
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	stop = func() { stopPoll(); unsubscribe() }
	rec, created, err := s.answers.begin(ctx, id, request)
	if err != nil {
		s.log.WarnContext(ctx, "record api request failed", "err", err)
		writeError(w, http.StatusServiceUnavailable, "server_error", "bus_unavailable", "", "The gateway could not accept the request; retry later.")
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
	acc, err := s.rn().Deliver(ctx, ev)
	if err != nil {
		s.writeDeliverError(w, r, err)
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

func (s *Service) pollAnswer(ctx context.Context, id string, f *follower) {
	t := time.NewTicker(answerPoll)
	defer t.Stop()
	for !f.finished() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rec, ok, err := s.answers.get(ctx, id); err == nil && ok {
			f.apply(rec)
		}
	}
}

func (s *Service) writeWaitError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case r.Context().Err() != nil && s.shuttingDown():
		writeError(w, http.StatusServiceUnavailable, "server_error", "shutting_down", "", "The gateway is shutting down; retry the request.")
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, "server_error", "timeout", "", "The agent did not answer in time.")
	default:
		writeError(w, http.StatusServiceUnavailable, "server_error", "unavailable", "", "The request ended before the agent answered.")
	}
}

func (s *Service) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baseCtx != nil && s.baseCtx.Err() != nil
}

// collect waits for the final send and returns the answer (the text of
// every send chunk, in order) and, when the turn failed and the text
// explains why, its error code.
func collect(ctx context.Context, wt *waiter) (reply, error) {
	var b strings.Builder
	var ans reply
	for {
		for _, p := range wt.take() {
			if p.delta != "" {
				continue
			}
			if p.errorCode != "" && ans.errorCode == "" {
				// Only the explanation answers a failed turn.
				b.Reset()
				ans.errorCode = p.errorCode
			}
			b.WriteString(p.text)
			if p.final {
				ans.text, ans.hops, ans.usage = b.String(), p.hops, p.usage
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

// stream writes OpenAI chunks as reply pieces arrive, then data: [DONE].
// With timing, the response ends with a Server-Timing trailer rendered
// from the final piece's hop times.
func (s *Service) stream(ctx context.Context, w http.ResponseWriter, wt *waiter, id, modelName string, withUsage bool, timing func(*deliveryv1.HopTimes) string) {
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	var final *piece
	if timing != nil {
		h.Set("Trailer", HeaderServerTiming)
		defer func() {
			if final != nil {
				h.Set(HeaderServerTiming, timing(final.hops))
			}
		}()
	}
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	write := func(delta chunkDelta, finish *string) {
		data, _ := json.Marshal(chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
			Choices: []chunkChoice{{Delta: delta, FinishReason: finish}}})
		fmt.Fprintf(w, "data: %s\n\n", data)
		if flusher != nil {
			flusher.Flush()
		}
	}
	write(chunkDelta{Role: "assistant"}, nil)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	var streamed, sent, failure strings.Builder
	for {
		for _, p := range wt.take() {
			if p.errorCode != "" {
				// A failed turn: the stream ends with OpenAI's error event,
				// which the SDKs raise as an error.
				failure.WriteString(p.text)
				if p.final {
					final = &p
					data, _ := json.Marshal(turnErrorBody(p.errorCode, failure.String()))
					fmt.Fprintf(w, "data: %s\n\n", data)
					if flusher != nil {
						flusher.Flush()
					}
					return
				}
				continue
			}
			if p.delta != "" {
				streamed.WriteString(p.delta)
				write(chunkDelta{Content: p.delta}, nil)
				continue
			}
			sent.WriteString(p.text)
			// Send chunks carry the answer; stream what deltas did not.
			rest, continues := strings.CutPrefix(sent.String(), streamed.String())
			if continues && rest != "" {
				streamed.WriteString(rest)
				write(chunkDelta{Content: rest}, nil)
			}
			if p.final && !continues {
				// The answer is not what was streamed (the turn ran again
				// after its worker died mid-stream): the client holds a
				// part of another answer, which no chunk can take back. The
				// stream ends with an error; a retry with the same
				// Idempotency-Key gets the whole answer.
				final = &p
				data, _ := json.Marshal(turnErrorBody("interrupted", "The answer was interrupted while it streamed; send the request again (with the same Idempotency-Key to get the answer without running it again)."))
				fmt.Fprintf(w, "data: %s\n\n", data)
				if flusher != nil {
					flusher.Flush()
				}
				return
			}
			if p.final {
				final = &p
				stop := "stop"
				write(chunkDelta{}, &stop)
				if withUsage {
					u := usageOf(p.usage)
					data, _ := json.Marshal(chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
						Choices: []chunkChoice{}, Usage: &u})
					fmt.Fprintf(w, "data: %s\n\n", data)
				}
				fmt.Fprint(w, "data: [DONE]\n\n")
				if flusher != nil {
					flusher.Flush()
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// OpenAI's in-stream error event ends the stream: no [DONE].
				data, _ := json.Marshal(apiError{Error: apiErrorBody{Message: "The agent did not answer in time.", Type: "server_error", Code: ptr("timeout")}})
				fmt.Fprintf(w, "data: %s\n\n", data)
				if flusher != nil {
					flusher.Flush()
				}
			}
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			if flusher != nil {
				flusher.Flush()
			}
		case <-wt.notify:
		}
	}
}

func ptr(s string) *string { return &s }

// keyLimiter is a token bucket per API key (per replica).
type keyLimiter struct {
	rps   rate.Limit
	burst int
	mu    sync.Mutex
	m     map[string]*rate.Limiter
}

func newKeyLimiter(rps float64, burst int) *keyLimiter {
	if burst <= 0 {
		burst = 1
	}
	return &keyLimiter{rps: rate.Limit(rps), burst: burst, m: map[string]*rate.Limiter{}}
}

func (k *keyLimiter) allow(key string) (bool, time.Duration) {
	if k.rps <= 0 {
		return true, 0
	}
	k.mu.Lock()
	l, ok := k.m[key]
	if !ok {
		if len(k.m) > 10000 {
			clear(k.m)
		}
		l = rate.NewLimiter(k.rps, k.burst)
		k.m[key] = l
	}
	k.mu.Unlock()
	r := l.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return false, d
	}
	return true, 0
}
