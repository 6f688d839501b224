package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/loopback"
	"github.com/switchboard-chat/switchboard/pkg/secret"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// Session headers: ours and Hermes's.
const (
	HeaderSession       = "X-Session-Id"
	HeaderHermesSession = "X-Hermes-Session-Id"
)

// HeaderSessionKey is Hermes's X-Hermes-Session-Key: a stable id of the
// client's channel that scopes the agent's long-term memory, across the
// conversations (sessions) the channel has.
const HeaderSessionKey = "X-Hermes-Session-Key"

// maxSessionKey bounds X-Hermes-Session-Key, as Hermes does.
const maxSessionKey = 256

// HeaderIdempotencyKey makes retries of a request one message.
const HeaderIdempotencyKey = "Idempotency-Key"

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

var sessionIDPattern = regexp.MustCompile(`^[A-Za-z0-9._\-]{1,128}$`)

func (s *Service) routes() http.Handler {
	return s.secure(s.table().mux)
}

// table is the API's routes.
func (s *Service) table() *routeTable {
	mux := newRouteTable()
	mux.HandleFunc("POST /v1/chat/completions", s.authed(s.chatCompletions))
	mux.HandleFunc("POST /v1/responses", s.authed(s.createResponse))
	mux.HandleFunc("GET /v1/responses/{id}", s.authed(s.getResponse))
	mux.HandleFunc("DELETE /v1/responses/{id}", s.authed(s.deleteResponse))
	mux.HandleFunc("GET /v1/models", s.authed(s.models))
	mux.HandleFunc("GET /v1/models/{model}", s.authed(s.model))
	s.runRoutes(mux)
	s.jobRoutes(mux)
	mux.HandleFunc("GET /v1/media/{id}", s.getMedia)
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/health", s.health) // Hermes's alias
	mux.answerOtherMethods()
	mux.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "", fmt.Sprintf("Unknown request URL: %s %s", r.Method, r.URL.Path))
	})
	if s.cfg.WebChat {
		mux.mux.Handle("/", webChat())
	}
	return mux
}

// routeTable is the API's ServeMux, which also keeps the methods each
// path is served with, to answer a path asked with another method.
type routeTable struct {
	mux     *http.ServeMux
	methods map[string][]string // path pattern → its methods
	paths   []string            // in the order registered
}

func newRouteTable() *routeTable {
	return &routeTable{mux: http.NewServeMux(), methods: map[string][]string{}}
}

// HandleFunc registers h for pattern, "<METHOD> <path>".
func (t *routeTable) HandleFunc(pattern string, h http.HandlerFunc) {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		panic("route " + pattern + " has no method") // a programming error, caught by every test
	}
	t.mux.HandleFunc(pattern, h)
	if _, seen := t.methods[path]; !seen {
		t.paths = append(t.paths, path)
	}
	t.methods[path] = append(t.methods[path], method)
}

// answerOtherMethods answers each registered path asked with a method it
// is not served with 405, its methods in Allow and OpenAI's error body,
// as the platform does (a GET on /v1/chat/completions), where the
// catch-alls (/v1/, the web chat's /) would answer 404 or the web chat's
// own 405. A method-less pattern is less specific than the path's own,
// so those still win.
func (t *routeTable) answerOtherMethods() {
	for _, path := range t.paths {
		allow := allowOf(t.methods[path])
		t.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			writeMethodNotAllowed(w, r, allow)
		})
	}
}

// allowOf is the Allow header of a path served with methods: HEAD with
// GET (the ServeMux serves a GET route's HEAD), in a fixed order.
func allowOf(methods []string) string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if slices.Contains(methods, m) || (m == http.MethodHead && slices.Contains(methods, http.MethodGet)) {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// writeMethodNotAllowed answers a request whose path is served with
// other methods (allow).
func writeMethodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "",
		fmt.Sprintf("Method %s is not allowed for %s; use %s.", openai.Clip(r.Method, 16), openai.Clip(r.URL.Path, 256), allow))
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
			h.Set("Access-Control-Expose-Headers", exposeHeaders)
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE, OPTIONS")
				h.Set("Access-Control-Allow-Headers", allowHeaders(r.Header.Get("Access-Control-Request-Headers")))
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

// exposeHeaders are the response headers a page on an allowed origin
// may read: the conversation's names, and what the OpenAI SDKs decide a
// retry by (a browser hides every header not listed, and the SDK would
// retry what the gateway said not to, or without waiting).
var exposeHeaders = HeaderSession + ", " + HeaderHermesSession + ", " + HeaderSessionKey + ", Retry-After, X-Should-Retry"

// corsHeaders are the request headers a preflight always allows.
var corsHeaders = "Authorization, Content-Type, Idempotency-Key, " + HeaderSession + ", " + HeaderHermesSession + ", " + HeaderSessionKey

// maxRequestedHeaders bounds the header names a preflight's answer
// repeats.
const maxRequestedHeaders = 2048

// allowHeaders is the Access-Control-Allow-Headers of an allowed
// origin's preflight: ours and every header it asks for. OpenAI's
// clients send headers of their own (X-Stainless-*, OpenAI-Organization,
// OpenAI-Project), and a browser sends no request whose headers its
// preflight did not allow; an allowed origin may send any, as the key
// still guards the request. Names that are not header tokens are left
// out.
func allowHeaders(requested string) string {
	if requested == "" || len(requested) > maxRequestedHeaders {
		return corsHeaders
	}
	out := corsHeaders
	for _, name := range strings.Split(requested, ",") {
		name = strings.TrimSpace(name)
		if name != "" && headerToken.MatchString(name) {
			out += ", " + name
		}
	}
	return out
}

// headerToken is what an HTTP header name may be.
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// allowedOrigin: origin is listed in gateways.api.cors_origins, or "*"
// is (any origin, as Hermes's API_SERVER_CORS_ORIGINS=*: the bearer key
// still guards every request).
func (s *Service) allowedOrigin(origin string) bool {
	return slices.Contains(s.cfg.CORSOrigins, origin) || slices.Contains(s.cfg.CORSOrigins, "*")
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
			writeRateLimited(w, after)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, identity)))
	}
}

// writeRateLimited answers a request over its rate limit, which frees
// up after the wait given.
func writeRateLimited(w http.ResponseWriter, after time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfter(after)))
	writeError(w, http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "", "Rate limit reached for this API key; retry later.")
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
// bearer token (constant time, length included).
func keyMatches(authorization, key string) bool {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	// The scheme is case-insensitive (RFC 9110): "bearer" is Bearer.
	return ok && strings.EqualFold(scheme, "Bearer") && key != "" &&
		secret.Equal(strings.TrimSpace(token), key)
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

// memoryScope reads X-Hermes-Session-Key as Hermes does: the memory
// scope the request names ("" for none), "api-server-<HMAC-SHA256 of the
// header under the client identity>". The agent keeps the memories and
// past conversations of requests with the header under that scope
// instead of the client's own (the message's user_id_alt), so one
// channel's memories never reach another's, and a client can name only
// scopes of its own: the same header under another API key is another
// scope. It needs an API key (403 on a keyless gateway, as Hermes); a
// header over 256 bytes or with a control character is a 400. It
// answers the request itself and returns false when the header is
// refused.
func (s *Service) memoryScope(w http.ResponseWriter, r *http.Request) (string, bool) {
	raw := strings.TrimSpace(r.Header.Get(HeaderSessionKey))
	switch {
	case raw == "":
		return "", true
	case s.cfg.Keyless():
		writeError(w, http.StatusForbidden, "invalid_request_error", "", "",
			"X-Hermes-Session-Key requires API key authentication. Configure API_SERVER_KEY to enable this feature.")
		return "", false
	case strings.ContainsAny(raw, "\r\n\x00"):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_key", HeaderSessionKey, "Invalid session key")
		return "", false
	case len(raw) > maxSessionKey:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_session_key", HeaderSessionKey, "Session key too long")
		return "", false
	}
	mac := hmac.New(sha256.New, []byte(identityOf(r)))
	mac.Write([]byte(raw))
	return "api-server-" + hex.EncodeToString(mac.Sum(nil)), true
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
	_ = json.NewEncoder(w).Encode(modelList{Object: "list", Data: []model{s.modelEntry()}})
}

// model serves GET /v1/models/{model} (OpenAI's models.retrieve): the
// one model, or OpenAI's 404 for any other.
func (s *Service) model(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if name != s.cfg.Model {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			fmt.Sprintf("The model '%s' does not exist.", openai.Clip(name, 64)))
		return
	}
	writeJSON(w, http.StatusOK, s.modelEntry())
}

func (s *Service) modelEntry() model {
	return model{ID: s.cfg.Model, Object: "model", Created: 1700000000, OwnedBy: "switchboard", Permission: []any{}, Root: s.cfg.Model}
}

func (s *Service) chatCompletions(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req, err := openai.Parse(body)
	if err != nil {
		s.rejectInvalid(w, r, "invalid chat completion request", err)
		return
	}
	session, ok := sessionOf(w, r)
	if !ok {
		return
	}
	in := req.Input
	if session != "" {
		// The server keeps the conversation: what the client sends along
		// is in it already, but for its system messages, which are the
		// request's own (the worker adds them to this turn's prompt).
		in.Context = systemOnly(in.Context)
	}
	t, ok := s.prepare(w, r, message{input: in, session: session, user: req.User, stream: req.Stream, param: "messages", received: received})
	if !ok {
		return
	}
	defer t.close()
	if !s.publish(w, r, t, fingerprint(req.Text, req.Attachments, req.Context)) {
		return
	}
	modelName := req.Model
	if modelName == "" {
		modelName = s.cfg.Model
	}
	ctx, cancel := s.replyContext(r, req.Stream)
	defer cancel()
	id := "chatcmpl-" + t.suffix()
	if req.Stream {
		s.stream(ctx, w, r, t, id, modelName, req.IncludeUsage)
		return
	}
	ans, err := collect(ctx, t.wt, nil) // as Hermes's: no tool calls listed
	if err != nil {
		s.writeWaitError(w, r, t, err)
		return
	}
	if t.timed() {
		w.Header().Set(HeaderServerTiming, t.serverTiming(ans.hops))
	}
	if ans.errorCode != "" {
		writeTurnError(w, ans.errorCode, ans.text)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(completion{
		ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: modelName,
		Choices: []completionChoice{{Message: completionMessage{Role: "assistant", Content: ans.text}, FinishReason: "stop"}},
		Usage:   usageOf(ans.usage),
	})
}

// stream writes OpenAI chunks as the reply arrives, then data: [DONE];
// a failed turn ends it with OpenAI's in-stream error event instead. The
// turn's tool calls show between the chunks as Hermes's
// hermes.tool.progress events (chatTools), except to an official OpenAI
// SDK (officialSDK). A request that published its
// message ends with a Server-Timing trailer.
func (s *Service) stream(ctx context.Context, w http.ResponseWriter, r *http.Request, t *turn, id, modelName string, withUsage bool) {
	out := startSSE(w, t.timed())
	created := time.Now().Unix()
	write := func(delta chunkDelta, finish *string) {
		out.send("", chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName,
			Choices: []chunkChoice{{Delta: delta, FinishReason: finish}}})
	}
	write(chunkDelta{Role: "assistant"}, nil)
	tools := chatTools(out, chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName}, !officialSDK(r))
	end := relay(ctx, t.wt, s.cfg.ReplyTimeout, func(text string) { write(chunkDelta{Content: text}, nil) }, tools, out.keepalive)
	switch {
	case end.err != nil:
		// OpenAI's in-stream error event ends the stream: no [DONE]. A
		// stream that just stopped (the gateway shutting down) would read
		// as a whole answer to the clients, which stop at the end of the
		// stream without error.
		e := s.waitEndOf(r, end.err)
		out.write(waitEndedComment)
		out.send("", errorBody("server_error", e.code, "", e.msg))
	case end.errorCode != "":
		// The SDKs raise it as an error.
		if end.changed {
			out.write(answerChangedComment)
		}
		out.send("", turnErrorBody(end.errorCode, end.errorText))
	default:
		stop := "stop"
		write(chunkDelta{}, &stop)
		if withUsage {
			u := usageOf(end.final.usage)
			out.send("", chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: modelName, Choices: []chunkChoice{}, Usage: &u})
		}
		out.write("data: [DONE]\n\n")
	}
	if end.final != nil && t.timed() {
		w.Header().Set(HeaderServerTiming, t.serverTiming(end.final.hops))
	}
}

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

// systemOnly is the system messages of ctx.
func systemOnly(ctx []*eventsv1.ContextMessage) []*eventsv1.ContextMessage {
	var out []*eventsv1.ContextMessage
	for _, c := range ctx {
		if c.GetRole() == "system" {
			out = append(out, c)
		}
	}
	return out
}
