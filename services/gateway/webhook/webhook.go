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
	"text/template"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/config"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// PlatformName is the platform of webhook events.
const PlatformName = "webhook"

// Signature schemes.
const (
	SigGitHub  = "github"  // X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
	SigGitLab  = "gitlab"  // X-Gitlab-Token: the secret itself
	SigGeneric = "generic" // <header>: [sha256=]<hex HMAC-SHA256 of the body>
	SigNone    = "none"    // no check; only with insecure: true
)

// Config is the `gateways.webhook` section.
type Config struct {
	// Addr to listen on (default 127.0.0.1:8644).
	Addr string `koanf:"addr"`
	// Account names this webhook endpoint in session keys.
	Account string `koanf:"account"`
	// MaxBodyBytes bounds a delivery (413 beyond; default 1 MiB).
	MaxBodyBytes int64 `koanf:"max_body_bytes"`
	// Routes by name: POST /webhooks/<name>.
	Routes map[string]Route `koanf:"routes"`
}

// Route configures one webhook endpoint.
type Route struct {
	// Secret for the signature (HMAC key, or GitLab's token).
	Secret string `koanf:"secret"`
	// Signature scheme: github (default), gitlab, generic or none.
	Signature string `koanf:"signature"`
	// Header carrying a generic signature (default X-Webhook-Signature).
	Header string `koanf:"header"`
	// Events to accept ("push", "issues", "issues.opened"); empty: all.
	Events []string `koanf:"events"`
	// Prompt is a Go text/template over the JSON payload; functions
	// route, event, json and truncate are available.
	Prompt string `koanf:"prompt"`
	// Reply is where the answer goes; an empty platform means nowhere.
	Reply ReplyTarget `koanf:"reply"`
	// DeliverOnly sends the rendered prompt to Reply without the agent.
	DeliverOnly bool `koanf:"deliver_only"`
	// Insecure allows signature: none.
	Insecure bool `koanf:"insecure"`
}

// ReplyTarget is a chat on another platform.
type ReplyTarget struct {
	Platform string `koanf:"platform"`
	Account  string `koanf:"account"`
	ChatID   string `koanf:"chat_id"`
	ThreadID string `koanf:"thread_id"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Addr: "127.0.0.1:8644", Account: "default", MaxBodyBytes: 1 << 20}
}

// defaultPrompt renders an event for the agent when a route has no template.
const defaultPrompt = `Webhook {{route}} received event {{event}}:
{{json . | truncate 8000}}`

// compiledRoute is a validated route.
type compiledRoute struct {
	name string
	Route
	tmpl *template.Template
}

func (c Config) compile() (map[string]*compiledRoute, error) {
	if c.Addr == "" {
		return nil, config.Invalid("gateways.webhook.addr", c.Addr, "host:port")
	}
	out := map[string]*compiledRoute{}
	names := make([]string, 0, len(c.Routes))
	for n := range c.Routes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		r := c.Routes[name]
		key := "gateways.webhook.routes." + name
		if !routeName.MatchString(name) {
			return nil, config.Invalid(key, name, "a route name of letters, digits, '-' or '_'")
		}
		if r.Signature == "" {
			r.Signature = SigGitHub
		}
		switch r.Signature {
		case SigGitHub, SigGitLab, SigGeneric:
			if r.Secret == "" {
				return nil, config.Invalid(key+".secret", "", "a secret for "+r.Signature+" signatures")
			}
		case SigNone:
			if !r.Insecure {
				return nil, config.Invalid(key+".signature", r.Signature, "a signature scheme, or insecure: true")
			}
		default:
			return nil, config.Invalid(key+".signature", r.Signature, "github, gitlab, generic or none")
		}
		if r.Header == "" {
			r.Header = "X-Webhook-Signature"
		}
		if r.DeliverOnly && r.Reply.Platform == "" {
			return nil, config.Invalid(key+".reply.platform", "", "a reply target for a deliver_only route")
		}
		if r.Reply.Platform != "" && r.Reply.ChatID == "" {
			return nil, config.Invalid(key+".reply.chat_id", "", "the chat to reply to")
		}
		prompt := r.Prompt
		if prompt == "" {
			prompt = defaultPrompt
		}
		tmpl, err := template.New(name).Option("missingkey=zero").Funcs(templateFuncs(name, "")).Parse(prompt)
		if err != nil {
			return nil, config.Invalid(key+".prompt", "(template)", "a valid Go template: "+err.Error())
		}
		out[name] = &compiledRoute{name: name, Route: r, tmpl: tmpl}
	}
	return out, nil
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
	routes map[string]*compiledRoute
	runner *platform.Runner

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
	s := &Service{cfg: cfg, log: deps.Log.With("service", "gateway-webhook"), routes: routes, addr: cfg.Addr, listened: make(chan struct{})}
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
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.connects.Add(1)
	conn.Connected()
	s.log.Info("webhook gateway listening", "addr", ln.Addr().String(), "routes", len(s.routes))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	}
}

func (s *Service) dropListener() {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
}
