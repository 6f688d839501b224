// Package api is the OpenAI-compatible API gateway (`switchboard gateway
// api`) and the web chat it serves. A chat completion or Responses API
// request is a platform message like any other: it is published as
// MessageReceived (platform api) and waits for the turn's reply, which
// delivery sends to gateway.api.send — text deltas as
// SEND_OP_STREAM_DELTA, the answer as final sends — matched to the
// waiting request by input_message_ids.
package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/config"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/loopback"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// PlatformName is the platform name of API events and sends.
const PlatformName = "api"

// Config is the `gateways.api` section.
type Config struct {
	// Addr to listen on (default 127.0.0.1:8642).
	Addr string `koanf:"addr"`
	// Key is the bearer token clients send (env API_SERVER_KEY).
	Key string `koanf:"key"`
	// Keys are named bearer tokens, one per client or team: each name is
	// a user of its own (memories, past conversations, rate limit) with
	// sessions of its own, where every holder of Key is one user.
	Keys map[string]string `koanf:"keys"`
	// Insecure allows running without a key, only on a loopback address.
	Insecure bool `koanf:"insecure"`
	// Account names this API endpoint in session keys (default "default").
	Account string `koanf:"account"`
	// Model is the model id /v1/models lists and responses carry.
	Model string `koanf:"model"`
	// ReplyTimeout bounds how long a request waits for its turn's whole
	// answer; a streamed one's, how long it waits for the next piece of
	// it (a stream still showing text is not cut).
	ReplyTimeout time.Duration `koanf:"reply_timeout"`
	// ShutdownGrace is how long, at SIGTERM, requests waiting for their
	// answer may still get it (keep it below the pod's termination grace).
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// IdempotencyTTL is how long the answer to a request with an
	// Idempotency-Key is kept for its retries (default 24 h).
	IdempotencyTTL time.Duration `koanf:"idempotency_ttl"`
	// ResponseTTL is how long a Responses API response is kept after its
	// last write, for GET /v1/responses/{id} and previous_response_id
	// (default 30 days, as OpenAI keeps them).
	ResponseTTL time.Duration `koanf:"response_ttl"`
	// RunTTL is how long a run (/v1/runs) and its events are kept after
	// their last write (default 1 h, as Hermes keeps a finished run).
	RunTTL time.Duration `koanf:"run_ttl"`
	// RunsMaxBytes bounds the runs kept (default 64 MiB): when the bucket
	// is full, the least recently written make room.
	RunsMaxBytes int64 `koanf:"runs_max_bytes"`
	// MaxConcurrentRuns is how many runs may go on at once across the
	// replicas (default 10, as Hermes; 0: no limit): one more is refused
	// (429).
	MaxConcurrentRuns int `koanf:"max_concurrent_runs"`
	// ResponsesMaxBytes bounds the responses kept (default 256 MiB): when
	// the bucket is full, the least recently written responses make room,
	// as if they had expired.
	ResponsesMaxBytes int64 `koanf:"responses_max_bytes"`
	// MaxBodyBytes bounds a request body (413 beyond).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// BodyTimeout bounds how long a request's body may take to arrive
	// after its headers (default 1 min); the wait for the answer is not
	// counted.
	BodyTimeout time.Duration `koanf:"body_timeout"`
	// RateLimit is requests per second per API key (0 disables), with
	// bursts of RateBurst.
	RateLimit float64 `koanf:"rate_limit"`
	RateBurst int     `koanf:"rate_burst"`
	// CORSOrigins are the browser origins allowed to call the API; none
	// by default (the web chat is same-origin).
	CORSOrigins []string `koanf:"cors_origins"`
	// WebChat serves the chat page at / (default true).
	WebChat bool `koanf:"web_chat"`
	// Jobs serves Hermes's jobs API (/api/jobs), the client's cron jobs in
	// Postgres (default true; off: the gateway opens no database and the
	// endpoints answer 503).
	Jobs bool `koanf:"jobs"`
	// PublicURL is the address clients reach the gateway at
	// (https://agent.example.com), which the links to the files an
	// answer sends start with; empty, the links are paths
	// (/v1/media/<id>) on the gateway's own address.
	PublicURL string `koanf:"public_url"`
	// MediaTTL is how long a link to a file an answer sends works
	// (default 24 h, as long as the attachment store keeps the file).
	MediaTTL time.Duration `koanf:"media_ttl"`
	// MediaMaxBytes bounds a file GET /v1/media/{id} serves (default
	// 20 MiB, the attachment store's bound).
	MediaMaxBytes int64 `koanf:"media_max_bytes"`
	// MediaLinksMaxBytes bounds the links kept (default 16 MiB, tens of
	// thousands): when the bucket is full, the oldest links are dropped
	// before media_ttl (logged, and counted).
	MediaLinksMaxBytes int64 `koanf:"media_links_max_bytes"`
	// MediaStallTimeout bounds how long a download of a kept file waits
	// for its client to take the next chunk (default 30 s): a client that
	// stops reading has its download ended, and the store's chunk pulls
	// with it.
	MediaStallTimeout time.Duration `koanf:"media_stall_timeout"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Addr: "127.0.0.1:8642", Account: "default", Model: "switchboard",
		ReplyTimeout: 5 * time.Minute, ShutdownGrace: 10 * time.Second, IdempotencyTTL: 24 * time.Hour,
		ResponseTTL: defaultResponseTTL, ResponsesMaxBytes: defaultResponsesMaxBytes, MaxBodyBytes: 4 << 20,
		BodyTimeout: defaultBodyTimeout, RunTTL: defaultRunTTL, RunsMaxBytes: defaultRunsMaxBytes, MaxConcurrentRuns: defaultMaxConcurrentRuns,
		RateLimit: 5, RateBurst: 20, WebChat: true, Jobs: true,
		MediaTTL: defaultMediaTTL, MediaMaxBytes: defaultMediaMaxBytes, MediaLinksMaxBytes: defaultMediaLinksMaxBytes,
		MediaStallTimeout: defaultMediaStallTimeout,
	}
}

// Keyless reports whether the API takes requests without a key.
func (c Config) Keyless() bool { return c.Key == "" && len(c.Keys) == 0 }

// keyName is what a named key may be called: it names a user and a
// namespace of sessions.
var keyName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// minNamedKey is the shortest named key accepted: a guessable key would
// give its holder another client's conversations.
const minNamedKey = 24

// Validate refuses a configuration that would expose the agent without a key.
func (c Config) Validate() error {
	if c.Addr == "" {
		return config.Invalid("gateways.api.addr", c.Addr, "host:port")
	}
	seen := map[string]string{c.Key: "key"}
	for name, key := range c.Keys {
		field := "gateways.api.keys." + name
		switch {
		case !keyName.MatchString(name):
			return config.Invalid(field, "", "a name of lowercase letters, digits, - and _ (at most 32)")
		case len(key) < minNamedKey:
			return config.Invalid(field, "", fmt.Sprintf("a key of at least %d characters", minNamedKey))
		case seen[key] != "":
			return config.Invalid(field, "", "a key no other name (or gateways.api.key) has")
		}
		seen[key] = name
	}
	if c.Keyless() {
		if !c.Insecure {
			return config.Invalid("gateways.api.key", "", "an API key (API_SERVER_KEY), or gateways.api.insecure: true on a loopback address")
		}
		if !loopback.Addr(c.Addr) {
			return config.Invalid("gateways.api.addr", c.Addr, "a loopback address when running without an API key")
		}
	}
	if c.ReplyTimeout <= 0 {
		return config.Invalid("gateways.api.reply_timeout", c.ReplyTimeout, "a positive duration")
	}
	if c.BodyTimeout < 0 {
		return config.Invalid("gateways.api.body_timeout", c.BodyTimeout, "a positive duration")
	}
	if c.ShutdownGrace < 0 {
		return config.Invalid("gateways.api.shutdown_grace", c.ShutdownGrace, "a duration of 0 or more")
	}
	if c.IdempotencyTTL < 0 {
		return config.Invalid("gateways.api.idempotency_ttl", c.IdempotencyTTL, "a positive duration")
	}
	if c.ResponseTTL < 0 {
		return config.Invalid("gateways.api.response_ttl", c.ResponseTTL, "a positive duration")
	}
	if c.ResponseTTL != 0 && c.ResponseTTL < c.ReplyTimeout {
		// A response is written when its request is accepted and again
		// when it ends, up to reply_timeout later: by then it would be gone.
		return config.Invalid("gateways.api.response_ttl", c.ResponseTTL,
			fmt.Sprintf("a duration of at least gateways.api.reply_timeout (%s), or responses vanish before their answer", c.ReplyTimeout))
	}
	if c.ResponsesMaxBytes != 0 && c.ResponsesMaxBytes < minResponsesMaxBytes {
		return config.Invalid("gateways.api.responses_max_bytes", c.ResponsesMaxBytes,
			fmt.Sprintf("at least %d bytes (a response can be as large as a NATS message)", minResponsesMaxBytes))
	}
	if c.RunTTL < 0 {
		return config.Invalid("gateways.api.run_ttl", c.RunTTL, "a positive duration")
	}
	if c.RunsMaxBytes != 0 && c.RunsMaxBytes < minResponsesMaxBytes {
		return config.Invalid("gateways.api.runs_max_bytes", c.RunsMaxBytes,
			fmt.Sprintf("at least %d bytes (a run's record can be as large as a NATS message)", minResponsesMaxBytes))
	}
	if c.MaxConcurrentRuns < 0 {
		return config.Invalid("gateways.api.max_concurrent_runs", c.MaxConcurrentRuns, "0 (no limit) or more")
	}
	return c.validateMedia()
}

// Deps are the service's clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner options (tests inject a fast backoff).
	RunnerOptions platform.Options
	// Jobs is the cron job store of the jobs API (/api/jobs); nil: the
	// endpoints answer 503.
	Jobs CronJobs
	// JobTargets are the chats a job made over the API may post in
	// besides home channels: agent.send_message_targets.
	JobTargets []string
}

// Service is the API gateway: a Platform run by a platform.Runner.
type Service struct {
	cfg      Config
	log      *slog.Logger
	bus      *bus.Bus
	runner   *platform.Runner
	instance string
	handler  http.Handler
	limiter  *keyLimiter
	// linkLimiter limits the signed requests of each link to a kept
	// file: apart from the keys' limiter, whose map a stranger's
	// requests would otherwise fill, and clear.
	linkLimiter *keyLimiter
	waiting     waiters
	answers     *answers
	// responses keeps the Responses API's responses.
	responses *responseStore
	// runs keeps the runs of /v1/runs and their events.
	runs *runStore
	// media are the links to the files answers send from the attachment
	// store, which files reads (keptmedia.go).
	media *mediaLinkStore
	files *attachment.Store
	// slots are the slots of the runs that go on at once.
	slots *runSlots
	// jobs is the cron job store of /api/jobs (nil: none).
	jobs       CronJobs
	jobTargets []string
	// following lists the accepted requests with an Idempotency-Key,
	// which follow their stored answer rather than wait in waiting.
	following waiters

	mu       sync.Mutex
	addr     string       // resolved after the first listen
	ln       net.Listener // current listener
	baseCtx  context.Context
	listened chan struct{}
	connects atomic.Int64
	// runnerFn lets a test run the platform under its own runner.
	runnerFn func() *platform.Runner
}

func (s *Service) rn() *platform.Runner {
	if s.runnerFn != nil {
		return s.runnerFn()
	}
	return s.runner
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Bus == nil {
		return nil, errors.New("api gateway: bus is required")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if cfg.Account == "" {
		cfg.Account = "default"
	}
	if cfg.Model == "" {
		cfg.Model = "switchboard"
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 4 << 20
	}
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = defaultBodyTimeout
	}
	if cfg.IdempotencyTTL == 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.ResponseTTL == 0 {
		cfg.ResponseTTL = defaultResponseTTL
	}
	if cfg.ResponsesMaxBytes == 0 {
		cfg.ResponsesMaxBytes = defaultResponsesMaxBytes
	}
	cfg.CORSOrigins = trimOrigins(cfg.CORSOrigins)
	s := &Service{
		cfg: cfg, log: deps.Log.With("service", "gateway-api"), bus: deps.Bus,
		instance: randomHex(4), addr: cfg.Addr, listened: make(chan struct{}),
		limiter: newKeyLimiter(cfg.RateLimit, cfg.RateBurst), linkLimiter: newKeyLimiter(cfg.RateLimit, cfg.RateBurst),
		jobs: deps.Jobs, jobTargets: deps.JobTargets,
	}
	s.answers = newAnswers(deps.Bus, s.log, cfg.IdempotencyTTL)
	s.responses = newResponseStore(deps.Bus, cfg.ResponseTTL, cfg.ResponsesMaxBytes)
	s.runs = newRunStore(deps.Bus, cmp.Or(cfg.RunTTL, defaultRunTTL), cmp.Or(cfg.RunsMaxBytes, defaultRunsMaxBytes))
	s.slots = newRunSlots(deps.Bus, cfg.MaxConcurrentRuns, s.runs.ended)
	s.media = newMediaLinkStore(deps.Bus, s.log, cmp.Or(cfg.MediaTTL, defaultMediaTTL), cmp.Or(cfg.MediaLinksMaxBytes, defaultMediaLinksMaxBytes))
	s.files = attachment.Open(deps.Bus.JetStream(), deps.Bus.Topology(), deps.RunnerOptions.Attachments)
	// Every request is a server span: the root of the message's trace,
	// carried on by the inbound publish.
	s.handler = traced(s.routes())
	opts := deps.RunnerOptions
	if opts.Log == nil {
		opts.Log = deps.Log
	}
	r, err := platform.NewRunner(s, deps.Bus, opts)
	if err != nil {
		return nil, err
	}
	s.runner = r
	return s, nil
}

// trimOrigins is the configured origins without the spaces around them,
// as Hermes reads API_SERVER_CORS_ORIGINS: the comma-separated variable
// ("https://a.example, https://b.example") splits into the list as it
// is written, and an origin with a space before it matched no browser's.
func trimOrigins(origins []string) []string {
	var out []string
	for _, o := range origins {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// Runner is the platform runner (readiness, state).
func (s *Service) Runner() *platform.Runner { return s.runner }

// Ready is the readiness check.
func (s *Service) Ready(ctx context.Context) error { return s.runner.Ready(ctx) }

// traced makes every request to h a server span named by its route
// (spanName). opts are a test's (its tracer provider).
func traced(h http.Handler, opts ...otelhttp.Option) http.Handler {
	return otelhttp.NewHandler(h, "gateway.api", append([]otelhttp.Option{otelhttp.WithSpanNameFormatter(spanName)}, opts...)...)
}

// spanName names a request's span "gateway.api <method> <route>", the
// route being the pattern the ServeMux served it with
// ("/v1/responses/{id}"), as OpenTelemetry's HTTP conventions name server
// spans: the path itself holds response, run, job and media ids, which
// made every such request a span name of its own (the exporter shows
// them as pseudonyms, one per id). otelhttp names the span before the
// request is routed, when only the method is known, and again after
// the handler with the pattern the ServeMux set on the request; a
// request no route took keeps the method alone.
func spanName(_ string, r *http.Request) string {
	if r.Pattern == "" {
		return "gateway.api " + r.Method
	}
	route := r.Pattern
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path // "GET /v1/models": the method is the request's own (HEAD for a GET route)
	}
	return "gateway.api " + r.Method + " " + route
}

// Handler is the HTTP handler (for tests that serve it themselves).
func (s *Service) Handler() http.Handler { return s.handler }

// Addr is the listening address once the first listen succeeded.
func (s *Service) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Listening is closed once the gateway first listens.
func (s *Service) Listening() <-chan struct{} { return s.listened }

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := s.answers.bucket(ctx); err != nil {
		return err
	}
	if _, err := s.responses.bucket(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.baseCtx = base
	s.mu.Unlock()
	sub, err := s.bus.Conn().Subscribe(s.replicaSubject(s.instance), s.serveForwarded)
	if err != nil {
		return fmt.Errorf("subscribe replica subject: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// At SIGTERM the HTTP server stops taking requests and gives those
	// waiting for an answer its shutdown grace (platform.ServeHTTP); the
	// runner still serves sends meanwhile, as it drains them only after
	// the connection ends. Whatever still waits then ends with 503 (the
	// deferred cancel).
	return s.runner.Run(ctx)
}

// Platform implementation.

func (s *Service) Name() string    { return PlatformName }
func (s *Service) Account() string { return s.cfg.Account }
func (s *Service) Capabilities() platform.Capabilities {
	return platform.Capabilities{MaxLength: 0, Measure: platform.MeasureRunes, CanSend: true, CanTyping: true, StreamsNatively: true, CommandPrefix: "/"}
}

// Connect listens and serves HTTP until ctx ends or the listener fails.
func (s *Service) Connect(ctx context.Context, conn platform.Conn) error {
	addr := s.Addr()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.mu.Lock()
	first := s.ln == nil && s.addr == s.cfg.Addr
	s.addr, s.ln = ln.Addr().String(), ln
	base := s.baseCtx
	s.mu.Unlock()
	if base == nil {
		base = ctx
	}
	if first {
		select {
		case <-s.listened:
		default:
			close(s.listened)
		}
	}
	srv := &http.Server{
		// A request whose handling panics is answered 500, as a failed
		// request: the client decides whether to try again.
		Handler:           platform.RecoverHTTP(bodyDeadline(s.handler, s.cfg.BodyTimeout), s.log, PlatformName, http.StatusInternalServerError, nil),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.connects.Add(1)
	conn.Connected()
	s.log.Info("api gateway listening", "addr", ln.Addr().String())
	return platform.ServeHTTP(ctx, srv, ln, s.cfg.ShutdownGrace)
}

// dropListener closes the current listener (tests: the connection drops).
func (s *Service) dropListener() {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}

// IdempotentSends: a reply chunk sent twice is taken once — by the
// waiting request (gone after its final) or, for a keyed request, by its
// stored answer, which adds each send key once — so the runner keeps no
// receipts for this platform.
func (s *Service) IdempotentSends() bool { return true }

// Send hands a reply chunk to the waiting request (on this replica or,
// forwarded, on the replica that holds it). For a request with an
// Idempotency-Key the chunk is added to its stored answer first, which
// the request's attempts, on any replica, follow.
func (s *Service) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	req, err := s.linkKept(ctx, req)
	if err != nil {
		return "", err
	}
	if err := s.runSend(ctx, req); err != nil {
		return "", err
	}
	keyed, plain := splitIDs(req.GetInputMessageIds())
	for _, id := range keyed {
		p := answerPiece{Key: req.GetIdempotencyKey(), Text: req.GetText(), ErrorCode: req.GetErrorCode(), Media: mediaLinks(req.GetAttachments())}
		if req.GetFinal() {
			p.Turn, p.SessionKey, p.Usage = req.GetTurnId(), req.GetSessionKey(), usageRecord(req.GetUsage())
		}
		if err := s.answers.add(ctx, id, p, req.GetFinal()); err != nil {
			return "", err
		}
	}
	if err := s.route(ctx, plain, req, sendPiece(req)); err != nil {
		return "", err
	}
	return "msg_" + randomHex(12), nil
}

// sendPiece is the waiting request's piece of a send: a chunk of the
// answer, or of the explanation of a failed turn.
func sendPiece(req *deliveryv1.SendRequested) piece {
	p := piece{text: req.GetText(), final: req.GetFinal(), errorCode: req.GetErrorCode(), media: mediaLinks(req.GetAttachments())}
	if p.final {
		p.hops, p.usage = req.GetHopTimes(), req.GetUsage()
		p.at = answerPoint{turn: req.GetTurnId(), sessionKey: req.GetSessionKey()}
	}
	return p
}

// StreamDelta hands a text delta to the waiting request.
func (s *Service) StreamDelta(ctx context.Context, req *deliveryv1.SendRequested) error {
	if err := s.runSend(ctx, req); err != nil {
		return err
	}
	keyed, plain := splitIDs(req.GetInputMessageIds())
	for _, id := range keyed {
		s.answers.delta(id, req.GetText(), req.GetStreamRestart())
	}
	return s.route(ctx, plain, req, deltaPiece(req))
}

// deltaPiece is the waiting request's piece of a stream delta.
func deltaPiece(req *deliveryv1.SendRequested) piece {
	return piece{delta: req.GetText(), restart: req.GetStreamRestart()}
}

// splitIDs separates the ids of requests with an Idempotency-Key from
// the others; the messages of runs are neither (runSend).
func splitIDs(ids []string) (keyed, plain []string) {
	for _, id := range ids {
		if isRun(id) {
			continue
		}
		if isKeyed(id) {
			keyed = append(keyed, id)
		} else {
			plain = append(plain, id)
		}
	}
	return keyed, plain
}

func (s *Service) Edit(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

func (s *Service) Delete(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Typing is accepted and shows nothing: the stream itself shows progress.
func (s *Service) Typing(context.Context, *deliveryv1.SendRequested) error { return nil }

// route delivers p locally, or forwards the request to the replica named
// in the input message ids. Nobody waiting (the client left, the replica
// died) is not an error: there is no one to show the reply to.
func (s *Service) route(ctx context.Context, ids []string, req *deliveryv1.SendRequested, p piece) error {
	if len(ids) == 0 {
		return nil
	}
	if s.waiting.deliver(ids, p) {
		return nil
	}
	for _, id := range ids {
		inst, ok := instanceOf(id)
		if !ok || inst == s.instance {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		receipt := &deliveryv1.SendReceipt{}
		err := s.bus.Request(fctx, s.replicaSubject(inst), req, receipt)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) {
			s.log.Debug("reply for a request on a replica that is gone", "replica", inst)
			return nil
		}
		if err != nil {
			return fmt.Errorf("forward reply to replica %s: %w", inst, err)
		}
		if !receipt.GetOk() {
			return &platform.SendError{Class: receipt.GetErrorClass(), Err: errors.New(receipt.GetError())}
		}
		return nil
	}
	s.log.Debug("reply with no waiting request", "turn_id", req.GetTurnId())
	return nil
}

func (s *Service) replicaSubject(instance string) string {
	return s.bus.Topology().Subject("gateway." + PlatformName + ".replica." + instance)
}

// serveForwarded handles a reply another replica forwarded here.
func (s *Service) serveForwarded(m *nats.Msg) {
	req := &deliveryv1.SendRequested{}
	receipt := &deliveryv1.SendReceipt{Ok: true}
	if err := proto.Unmarshal(m.Data, req); err != nil {
		receipt = &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "malformed forwarded reply"}
	} else {
		p := sendPiece(req)
		switch req.GetOp() {
		case deliveryv1.SendOp_SEND_OP_STREAM_DELTA:
			p = deltaPiece(req)
		case deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS:
			p = toolPiece(req)
		}
		s.waiting.deliver(req.GetInputMessageIds(), p)
	}
	if err := bus.Reply(context.Background(), m, receipt); err != nil {
		s.log.Debug("answer forwarded reply", "err", err)
	}
}

// newRequestID makes a request id that names this replica:
// req_<instance>_<random>.
func (s *Service) newRequestID() string { return "req_" + s.instance + "_" + randomHex(12) }

func instanceOf(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "req_")
	if !ok {
		return "", false
	}
	inst, _, ok := strings.Cut(rest, "_")
	return inst, ok && inst != ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
