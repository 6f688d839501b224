// Package webhook is the webhook gateway (`switchboard gateway webhook`):
// POST /webhooks/<route> with a per-route secret, signature check, event
// filter and prompt template. An accepted delivery becomes an internal,
// transport-authenticated MessageReceived whose reply goes where the route
// says (another platform's chat, or nowhere); deliver_only routes send the
// rendered text without running the agent.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/config"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/webhook/internal/hook"
)

// PlatformName is the platform of webhook events.
const PlatformName = "webhook"

// Signature schemes (see hook).
const (
	SigGitHub   = hook.SigGitHub
	SigGitLab   = hook.SigGitLab
	SigGeneric  = hook.SigGeneric
	SigStandard = hook.SigStandard
	SigNone     = hook.SigNone
)

// Route configures one webhook endpoint; ReplyTarget is where its reply goes.
type (
	Route       = hook.Route
	ReplyTarget = hook.ReplyTarget
)

// Sign returns the GitHub-style signature header value of body.
func Sign(secret string, body []byte) string { return hook.Sign(secret, body) }

// SignStandard returns the Standard Webhooks webhook-signature value of a
// delivery with id sent at at.
func SignStandard(secret, id string, at time.Time, body []byte) string {
	return hook.SignStandard(secret, id, at, body)
}

// DefaultRateLimit is Hermes's default per-route limit, deliveries a
// minute.
const DefaultRateLimit = 30

// DefaultBodyDedupe is the default body_dedupe: a sender's retries of a
// delivery without an id come within minutes.
const DefaultBodyDedupe = 5 * time.Minute

// Config is the `gateways.webhook` section.
type Config struct {
	// Addr to listen on (default 127.0.0.1:8643).
	Addr string `koanf:"addr"`
	// Account names this webhook endpoint in session keys.
	Account string `koanf:"account"`
	// MaxBodyBytes bounds a delivery (413 beyond; default 1 MiB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// RateLimit is how many signed deliveries each route takes in any
	// 60 seconds, per replica, unless the route sets its own (Hermes's
	// rate_limit, 30); 0 unlimited. Beyond it: 429 with Retry-After.
	RateLimit int `koanf:"rate_limit"`
	// BodyDedupe is how long a delivery without a delivery id header
	// counts as a sender's retry of an earlier one with the same body
	// (a 200 duplicate), unless the route sets its own; 0 never. Past it
	// the same body is a new delivery: a recurring alert whose text
	// does not change runs again (default 5 minutes).
	BodyDedupe time.Duration `koanf:"body_dedupe"`
	// Routes by name: POST /webhooks/<name>.
	Routes map[string]Route `koanf:"routes"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:8643", Account: "default", MaxBodyBytes: 1 << 20, RateLimit: DefaultRateLimit,
		BodyDedupe: DefaultBodyDedupe}
}

func (c Config) compile() (map[string]*hook.CompiledRoute, error) {
	if c.Addr == "" {
		return nil, config.Invalid("gateways.webhook.addr", c.Addr, "host:port")
	}
	if c.RateLimit < 0 {
		return nil, config.Invalid("gateways.webhook.rate_limit", c.RateLimit, "deliveries a minute, 0 for no limit")
	}
	if c.BodyDedupe < 0 || c.BodyDedupe > hook.MaxBodyDedupe {
		return nil, config.Invalid("gateways.webhook.body_dedupe", c.BodyDedupe, "a duration from 0 to "+hook.MaxBodyDedupe.String())
	}
	out := map[string]*hook.CompiledRoute{}
	names := make([]string, 0, len(c.Routes))
	for n := range c.Routes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		r, err := hook.Compile(name, c.Routes[name], "gateways.webhook.routes.")
		if err != nil {
			return nil, err
		}
		out[name] = r
	}
	return out, nil
}

// rateLimits is each route's limit: its own, else the gateway's.
func (c Config) rateLimits(routes map[string]*hook.CompiledRoute) map[string]int {
	out := make(map[string]int, len(routes))
	for name, r := range routes {
		out[name] = c.RateLimit
		if r.RateLimit != nil {
			out[name] = *r.RateLimit
		}
	}
	return out
}

// bodyWindows is each route's body_dedupe: its own, else the gateway's.
func (c Config) bodyWindows(routes map[string]*hook.CompiledRoute) map[string]time.Duration {
	out := make(map[string]time.Duration, len(routes))
	for name, r := range routes {
		out[name] = c.BodyDedupe
		if r.BodyDedupe != nil {
			out[name] = *r.BodyDedupe
		}
	}
	return out
}

// Validate checks the configuration.
func (c Config) Validate() error {
	_, err := c.compile()
	return err
}

// Deps are the service's clients.
type Deps struct {
	Log           *slog.Logger
	Bus           *bus.Bus
	RunnerOptions platform.Options
}

// Service is the webhook gateway.
type Service struct {
	cfg    Config
	log    *slog.Logger
	routes map[string]*hook.CompiledRoute
	runner *platform.Runner
	limit  *limiter
	bodies *bodies
	now    func() time.Time // the clock of signatures and rate limits

	mu       sync.Mutex
	addr     string
	ln       net.Listener
	listened chan struct{}
	connects atomic.Int64
	runnerFn func() *platform.Runner
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	routes, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	if deps.Bus == nil {
		return nil, errors.New("webhook gateway: bus is required")
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	if cfg.Account == "" {
		cfg.Account = "default"
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	s := &Service{cfg: cfg, log: deps.Log.With("service", "gateway-webhook"), routes: routes, addr: cfg.Addr, listened: make(chan struct{}),
		limit: newLimiter(cfg.rateLimits(routes)), bodies: newBodies(deps.Bus, cfg.bodyWindows(routes)), now: time.Now}
	opts := deps.RunnerOptions
	if opts.Log == nil {
		opts.Log = deps.Log
	}
	s.runner, err = platform.NewRunner(s, deps.Bus, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Service) rn() *platform.Runner {
	if s.runnerFn != nil {
		return s.runnerFn()
	}
	return s.runner
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error { return s.runner.Run(ctx) }

// Ready is the readiness check.
func (s *Service) Ready(ctx context.Context) error { return s.runner.Ready(ctx) }

// Addr is the listening address after the first listen.
func (s *Service) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Listening is closed once the gateway first listens.
func (s *Service) Listening() <-chan struct{} { return s.listened }

func (s *Service) Name() string    { return PlatformName }
func (s *Service) Account() string { return s.cfg.Account }

// Capabilities: webhooks are inbound only.
func (s *Service) Capabilities() platform.Capabilities {
	return platform.Capabilities{}
}

func (s *Service) Send(context.Context, *deliveryv1.SendRequested) (string, error) {
	return "", platform.ErrUnsupported
}
func (s *Service) Edit(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}
func (s *Service) Delete(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}
func (s *Service) Typing(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Connect listens and serves until ctx ends or the listener fails.
func (s *Service) Connect(ctx context.Context, conn platform.Conn) error {
	if err := s.bodies.open(ctx); err != nil {
		return err
	}
	addr := s.Addr()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	s.mu.Lock()
	s.addr, s.ln = ln.Addr().String(), ln
	s.mu.Unlock()
	select {
	case <-s.listened:
	default:
		close(s.listened)
	}
	srv := &http.Server{
		// A request whose handling panics is answered 500: its sender
		// (GitHub, GitLab) does not retry by itself, and learns it failed.
		Handler:           otelhttp.NewHandler(platform.RecoverHTTP(s.Handler(), s.log, PlatformName, http.StatusInternalServerError, conn), "gateway.webhook"),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A request in flight when the gateway stops finishes within
		// ServeHTTP's grace: its sender (GitHub, GitLab) does not retry
		// on its own, so ending it with a 503 would lose the event.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.connects.Add(1)
	conn.Connected()
	s.log.Info("webhook gateway listening", "addr", ln.Addr().String(), "routes", len(s.routes))
	return platform.ServeHTTP(ctx, srv, ln, 10*time.Second)
}

func (s *Service) dropListener() {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}
