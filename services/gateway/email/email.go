// Package email is the email gateway (`switchboard gateway email`), as
// Hermes's email adapter: it reads a mailbox over IMAP and answers over
// SMTP. It is built on the platform kit: one replica per address reads
// the mailbox (the kit's lease), every replica serves sends.
//
// A sender's address is the chat, a direct chat as in Hermes, so session
// keys carry over (agent:main:email:dm:alice@example.com); the subject is
// the chat topic and, unless it is a reply's ("Re: …"), the first line of
// the text ("[Subject: …]"). A message is named by its Message-ID, which
// is its event id: a message read twice is published once.
//
// What the gateway has read is a UID watermark per mailbox and UIDVALIDITY
// kept in a NATS KV bucket, advanced after each message is published (or
// skipped): a restart or a lease handover goes on from it, so no message
// is answered twice (the kit's seen record catches one published just
// before a crash) and none that arrived meanwhile is lost. A message is
// also flagged \Seen once handled, as Hermes's fetch leaves it. The
// first start takes only mail that arrives from then on, as Hermes does.
package email

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// TLS modes of the IMAP and SMTP connections.
const (
	// TLSAuto: implicit TLS on the IMAPS and SMTPS ports (993, 465),
	// STARTTLS on any other.
	TLSAuto = "auto"
	// TLSImplicit: TLS from the first byte.
	TLSImplicit = "tls"
	// TLSStartTLS: plain text upgraded with STARTTLS, which must succeed.
	TLSStartTLS = "starttls"
	// TLSNone: plain text, credentials included: only for a relay on the
	// same host or a test server.
	TLSNone = "none"
)

// Config is the gateways.email section.
type Config struct {
	// Address (EMAIL_ADDRESS) is the agent's address: the IMAP and SMTP
	// login, the From of its mail and the account of its events.
	Address string `koanf:"address"`
	// Password (EMAIL_PASSWORD) or an app password.
	Password string `koanf:"password"`
	// IMAPHost and IMAPPort (EMAIL_IMAP_HOST, EMAIL_IMAP_PORT, default
	// 993) of the mailbox.
	IMAPHost string `koanf:"imap_host"`
	IMAPPort int    `koanf:"imap_port"`
	// IMAPTLS is TLSAuto (default), TLSImplicit, TLSStartTLS or TLSNone.
	IMAPTLS string `koanf:"imap_tls"`
	// SMTPHost and SMTPPort (EMAIL_SMTP_HOST, EMAIL_SMTP_PORT, default
	// 587) of the submission server.
	SMTPHost string `koanf:"smtp_host"`
	SMTPPort int    `koanf:"smtp_port"`
	// SMTPTLS is TLSAuto (default), TLSImplicit, TLSStartTLS or TLSNone.
	SMTPTLS string `koanf:"smtp_tls"`
	// Mailbox that is read (default INBOX).
	Mailbox string `koanf:"mailbox"`
	// PollInterval (EMAIL_POLL_INTERVAL, seconds or a duration; default
	// 15 s, as Hermes) between mailbox checks when the server has no
	// IDLE; with IDLE the server says when mail arrives.
	PollInterval Interval `koanf:"poll_interval"`
	// IdleRefresh bounds one IDLE (default 10 min): the mailbox is
	// searched again even when the server said nothing.
	IdleRefresh time.Duration `koanf:"idle_refresh"`
	// SkipAttachments (Hermes's platforms.email.skip_attachments) drops
	// every attachment of inbound mail.
	SkipAttachments bool `koanf:"skip_attachments"`
	// MaxMessageBytes bounds what is read of one inbound message
	// (default 25 MiB): of a larger one, its first MaxMessageBytes (the
	// text, the attachments that fit), with a note to the agent that
	// the rest is missing.
	MaxMessageBytes int64 `koanf:"max_message_bytes"`
	// DefaultSubject of mail sent to an address with no message to
	// answer (Hermes's "Hermes Agent"; the answer says "Re: …").
	DefaultSubject string `koanf:"default_subject"`
	// ThreadTTL is how long the subject and references of an inbound
	// message are kept for its answers (default 30 days).
	ThreadTTL time.Duration `koanf:"thread_ttl"`
	// Timeout bounds one IMAP or SMTP exchange (default 60 s).
	Timeout time.Duration `koanf:"timeout"`
	// LeaseTTL of the active/standby lease on reading the mailbox.
	LeaseTTL time.Duration `koanf:"lease_ttl"`
	// RequireAuthenticatedSender (EMAIL_REQUIRE_AUTHENTICATED_SENDER;
	// Hermes's platforms.email.require_authenticated_sender) accepts a
	// mail only when the Authentication-Results header of the server
	// named AuthservID says its From domain passed one of
	// AuthenticatedBy; any other is skipped, never answered. Off by
	// default: allowlists then trust the From header as written.
	RequireAuthenticatedSender bool `koanf:"require_authenticated_sender"`
	// AuthservID (EMAIL_AUTHSERV_ID, as Hermes) is the authserv-id the
	// operator's receiving server stamps its Authentication-Results
	// with (its host name: mx.google.com, mx.example.com): only its
	// header is believed, as a sender can write any other.
	AuthservID string `koanf:"authserv_id"`
	// AuthenticatedBy are the methods that authenticate a sender:
	// AuthDMARC (default), AuthSPF, AuthDKIM (each aligned with the
	// From domain).
	AuthenticatedBy []string `koanf:"authenticated_by"`
}

// DefaultConfig has Hermes's ports, poll interval and default subject.
func DefaultConfig() Config {
	return Config{IMAPPort: 993, SMTPPort: 587, IMAPTLS: TLSAuto, SMTPTLS: TLSAuto, Mailbox: "INBOX",
		PollInterval: Interval(15 * time.Second), IdleRefresh: 10 * time.Minute, MaxMessageBytes: 25 << 20,
		DefaultSubject: "Hermes Agent", ThreadTTL: 30 * 24 * time.Hour, Timeout: time.Minute, LeaseTTL: 10 * time.Second}
}

// Interval is a duration that also reads a bare number as seconds
// (EMAIL_POLL_INTERVAL=15, as Hermes has it).
type Interval time.Duration

// UnmarshalText reads "15" as 15 s, else a Go duration ("15s", "1m").
func (i *Interval) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if d, err := time.ParseDuration(s + "s"); err == nil && !strings.ContainsAny(s, "hmsuµn") {
		*i = Interval(d)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("interval %q: seconds or a duration", s)
	}
	*i = Interval(d)
	return nil
}

// Enabled reports whether dev should start the gateway.
func (c Config) Enabled() bool { return c.Address != "" && c.IMAPHost != "" && c.SMTPHost != "" }

// Validate checks the section.
func (c Config) Validate() error {
	if !c.Enabled() {
		return errors.New("email: address (EMAIL_ADDRESS), imap_host (EMAIL_IMAP_HOST) and smtp_host (EMAIL_SMTP_HOST) are required")
	}
	a, err := mail.ParseAddress(c.Address)
	if err != nil || a.Name != "" || !strings.Contains(a.Address, "@") {
		return fmt.Errorf("email: address %q is not a bare address (agent@example.com)", c.Address)
	}
	for _, p := range []struct {
		name string
		port int
		tls  string
	}{{"imap", c.IMAPPort, c.IMAPTLS}, {"smtp", c.SMTPPort, c.SMTPTLS}} {
		if p.port < 0 || p.port > 65535 {
			return fmt.Errorf("email: %s_port %d is not a port", p.name, p.port)
		}
		switch p.tls {
		case "", TLSAuto, TLSImplicit, TLSStartTLS, TLSNone:
		default:
			return fmt.Errorf("email: %s_tls %q is not auto, tls, starttls or none", p.name, p.tls)
		}
	}
	if c.RequireAuthenticatedSender && strings.TrimSpace(c.AuthservID) == "" {
		return errors.New("email: require_authenticated_sender needs authserv_id (EMAIL_AUTHSERV_ID): the host name the receiving server stamps Authentication-Results with")
	}
	for _, m := range c.AuthenticatedBy {
		switch strings.ToLower(strings.TrimSpace(m)) {
		case AuthDMARC, AuthSPF, AuthDKIM:
		default:
			return fmt.Errorf("email: authenticated_by %q is not dmarc, spf or dkim", m)
		}
	}
	if c.PollInterval < 0 || (c.PollInterval > 0 && time.Duration(c.PollInterval) < 100*time.Millisecond) {
		return fmt.Errorf("email: poll_interval %s is under 100ms", time.Duration(c.PollInterval))
	}
	return nil
}

// withDefaults fills the zero values.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.IMAPPort == 0 {
		c.IMAPPort = d.IMAPPort
	}
	if c.SMTPPort == 0 {
		c.SMTPPort = d.SMTPPort
	}
	if c.IMAPTLS == "" {
		c.IMAPTLS = TLSAuto
	}
	if c.SMTPTLS == "" {
		c.SMTPTLS = TLSAuto
	}
	if c.Mailbox == "" {
		c.Mailbox = d.Mailbox
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.IdleRefresh <= 0 {
		c.IdleRefresh = d.IdleRefresh
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = d.MaxMessageBytes
	}
	if c.DefaultSubject == "" {
		c.DefaultSubject = d.DefaultSubject
	}
	if c.ThreadTTL <= 0 {
		c.ThreadTTL = d.ThreadTTL
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if len(c.AuthenticatedBy) == 0 {
		c.AuthenticatedBy = []string{AuthDMARC}
	}
	c.Address = strings.ToLower(strings.TrimSpace(c.Address))
	return c
}

// Deps are the shared clients.
type Deps struct {
	Log *slog.Logger
	Bus *bus.Bus
	// Runner tunes the kit (attachments, instance, backoff in tests).
	Runner platform.Options
}

// Service runs the email gateway.
type Service struct {
	platform.Service
	p *Platform
}

// New builds the gateway.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Bus == nil {
		return nil, errors.New("email: bus is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	opts := deps.Runner
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = cfg.LeaseTTL
	}
	if opts.Backoff == nil {
		opts.Backoff = platform.QuickBackoff
	}
	p := &Platform{cfg: cfg, log: log.With("platform", "email"), bus: deps.Bus, attachments: opts.Attachments}
	svc, err := platform.NewService(p, deps.Bus, log, opts)
	if err != nil {
		return nil, err
	}
	if opts.Attachments.Enabled {
		// Created as the kit creates it (same bounds): inbound
		// attachments are kept here before the mail is published.
		p.store = attachment.New(deps.Bus.JetStream(), deps.Bus.Topology(), opts.Attachments)
	}
	return &Service{Service: svc, p: p}, nil
}

// Platform is the email side of the kit.
type Platform struct {
	cfg         Config
	log         *slog.Logger
	bus         *bus.Bus
	attachments attachment.Config
	// store holds the attachments a send refers to by bytes_ref, and
	// keeps the inbound ones.
	store *attachment.Store
	// state: the read watermarks and the threads of inbound mail,
	// opened on first use.
	mu    sync.Mutex
	state buckets
}

func (p *Platform) Name() string    { return "email" }
func (p *Platform) Account() string { return p.cfg.Address }

// SingleConsumer: one replica reads the mailbox; two would read each
// message twice (the seen record would catch it, at the cost of a race).
func (p *Platform) SingleConsumer() bool { return true }

// maxText is Hermes's bound on one email body (Gmail-safe).
const maxText = 50000

// Capabilities: no edits, deletes or typing (mail is sent once).
func (p *Platform) Capabilities() platform.Capabilities {
	return platform.Capabilities{
		MaxLength: maxText, Measure: platform.MeasureRunes, CanSend: true, CommandPrefix: "/",
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT,
			eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO},
	}
}

// Bucket names (before the topology prefix).
const (
	BucketCursors = "EMAIL_CURSORS"
	BucketThreads = "EMAIL_THREADS"
)

type buckets struct {
	cursors jetstream.KeyValue
	threads jetstream.KeyValue
}

// open creates or opens the gateway's buckets.
func (p *Platform) open(ctx context.Context) (buckets, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state.cursors != nil && p.state.threads != nil {
		return p.state, nil
	}
	js, top := p.bus.JetStream(), p.bus.Topology()
	replicas := max(top.Replicas, 1)
	storage := top.Storage
	cursors, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: top.Stream(BucketCursors), Description: "email: the last UID handled per mailbox",
		History: 1, Replicas: replicas, Storage: storage,
	})
	if err != nil {
		return buckets{}, fmt.Errorf("email cursors bucket: %w", err)
	}
	threads, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: top.Stream(BucketThreads), Description: "email: subject and references of inbound mail, for the answers",
		History: 1, TTL: p.cfg.ThreadTTL, Replicas: replicas, Storage: storage,
	})
	if err != nil {
		return buckets{}, fmt.Errorf("email threads bucket: %w", err)
	}
	p.state = buckets{cursors: cursors, threads: threads}
	return p.state, nil
}

var (
	skipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_email_messages_skipped_total",
		Help: "Inbound mail read and not published, by reason (automated, own, malformed, auth_missing, auth_failed).",
	}, []string{"reason"})
	cutTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchboard_email_messages_cut_total",
		Help: "Inbound mail over max_message_bytes, published with only its beginning read.",
	})
	attachmentsLost = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_email_attachments_not_kept_total",
		Help: "Attachments of inbound mail the attachment store refused (not_kept: full or out of reach; too_large), published with a note to the agent.",
	}, []string{"reason"})
	sentTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchboard_email_sent_total",
		Help: "Mail sent over SMTP, by outcome (ok, retryable, permanent).",
	}, []string{"outcome"})
)
