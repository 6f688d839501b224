// Package mailfake runs a mail provider in process for tests: an IMAP
// server (go-imap's in-memory server, with or without IDLE) holding the
// agent's mailbox, and an SMTP submission server that keeps what it is
// sent, and refuses mail with a chosen reply code when told to. Both
// speak the real protocols in plain text on 127.0.0.1.
package mailfake

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Options shape a fake.
type Options struct {
	// Address and Password of the agent's account (both servers).
	Address, Password string
	// SMTPPassword, when set, is the one the SMTP server takes instead
	// of Password (a fake whose SMTP login is refused while IMAP's
	// works).
	SMTPPassword string
	// Idle: the IMAP server offers IDLE; without it clients poll.
	Idle bool
}

// Mail is one message the SMTP server accepted.
type Mail struct {
	From string
	To   []string
	Raw  []byte
	// Helo is the name the client gave in EHLO (or HELO).
	Helo string
}

// Fake is a running IMAP and SMTP server pair.
type Fake struct {
	opts     Options
	user     *imapmemserver.User
	imap     *imapserver.Server
	imapLn   net.Listener
	smtp     *smtp.Server
	smtpLn   net.Listener
	IMAPHost string
	IMAPPort int
	SMTPHost string
	SMTPPort int

	// stallIdle: an IDLE the client ends gets no answer, as from a
	// server gone silent; closed releases it.
	stallIdle atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	// idlePolled, when set, runs each time an IDLE has reported the
	// changes pending (the fake's tests make one right then).
	idlePolled atomic.Pointer[func()]

	mu       sync.Mutex
	sent     []Mail
	failures []int // reply codes for the next DATA commands
	attempts int
	notify   chan struct{}
}

// New starts both servers; Close stops them.
func New(opts Options) (*Fake, error) {
	f := &Fake{opts: opts, notify: make(chan struct{}, 1), closed: make(chan struct{})}
	mem := imapmemserver.New()
	f.user = imapmemserver.NewUser(opts.Address, opts.Password)
	if err := f.user.Create("INBOX", nil); err != nil {
		return nil, err
	}
	mem.AddUser(f.user)
	caps := imap.CapSet{imap.CapIMAP4rev1: {}}
	if opts.Idle {
		caps[imap.CapIdle] = struct{}{}
	}
	f.imap = imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return pollingIdle{Session: mem.NewSession(), f: f}, nil, nil
		},
		Caps:         caps,
		InsecureAuth: true,
		Logger:       log.New(io.Discard, "", 0),
	})
	var err error
	if f.imapLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	go func() { _ = f.imap.Serve(f.imapLn) }()
	f.smtp = smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &session{f: f, conn: c}, nil }))
	f.smtp.Domain = "localhost"
	f.smtp.AllowInsecureAuth = true
	f.smtp.ReadTimeout, f.smtp.WriteTimeout = 10*time.Second, 10*time.Second
	f.smtp.ErrorLog = log.New(io.Discard, "", 0)
	if f.smtpLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		_ = f.imap.Close()
		return nil, err
	}
	go func() { _ = f.smtp.Serve(f.smtpLn) }()
	f.IMAPHost, f.IMAPPort = hostPort(f.imapLn.Addr())
	f.SMTPHost, f.SMTPPort = hostPort(f.smtpLn.Addr())
	return f, nil
}

func hostPort(a net.Addr) (string, int) {
	h, p, _ := net.SplitHostPort(a.String())
	n, _ := strconv.Atoi(p)
	return h, n
}

// idlePoll is how often an IDLE looks for changes to report.
const idlePoll = 5 * time.Millisecond

// pollingIdle reports during IDLE every change the client has not yet
// been told of: those pending when it starts, as real servers (Dovecot,
// Gmail) do, and those that come after. go-imap's memory server keeps a
// change made while no IDLE listens until the next change, and its IDLE
// listens only from a moment after it starts: a message delivered between
// a client's SEARCH and its IDLE, or just as the IDLE started (after the
// pending changes were reported, before it listened), went unreported,
// and the client read it only at its next IDLE refresh. So the changes
// are looked for every idlePoll instead of waited for.
type pollingIdle struct {
	imapserver.Session
	f *Fake
}

func (s pollingIdle) Idle(w *imapserver.UpdateWriter, stop <-chan struct{}) error {
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	for done := false; !done; {
		if err := s.Session.Poll(w, true); err != nil {
			return err
		}
		if fn := s.f.idlePolled.Load(); fn != nil {
			(*fn)()
		}
		select {
		case <-stop:
			done = true
		case <-t.C:
		}
	}
	if s.f.stallIdle.Load() {
		<-s.f.closed // DONE is never answered
	}
	return nil
}

// StallIdle makes the server go silent when a client ends IDLE: its DONE
// is never answered, as over a connection that died without a reset.
func (f *Fake) StallIdle() { f.stallIdle.Store(true) }

// Close stops both servers.
func (f *Fake) Close() {
	f.closeOnce.Do(func() { close(f.closed) })
	_ = f.imap.Close()
	_ = f.smtp.Close()
}

// Deliver puts a raw message in the INBOX and returns its UID.
func (f *Fake) Deliver(raw []byte) (uint32, error) { return f.DeliverAt(raw, time.Time{}) }

// DeliverAt puts a raw message in the INBOX as received at t (its
// INTERNALDATE; zero: now) and returns its UID.
func (f *Fake) DeliverAt(raw []byte, t time.Time) (uint32, error) {
	data, err := f.user.Append("INBOX", bytes.NewReader(raw), &imap.AppendOptions{Time: t})
	if err != nil {
		return 0, err
	}
	return uint32(data.UID), nil
}

// Seen reports which messages of the INBOX carry \Seen, by UID (read
// over IMAP, as any client would).
func (f *Fake) Seen() (map[uint32]bool, error) {
	c, err := imapclient.DialInsecure(net.JoinHostPort(f.IMAPHost, strconv.Itoa(f.IMAPPort)), nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Login(f.opts.Address, f.opts.Password).Wait(); err != nil {
		return nil, err
	}
	if _, err := c.Select("INBOX", &imap.SelectOptions{ReadOnly: true}).Wait(); err != nil {
		return nil, err
	}
	var all imap.UIDSet
	all.AddRange(1, 0)
	msgs, err := c.Fetch(all, &imap.FetchOptions{UID: true, Flags: true}).Collect()
	if err != nil {
		return nil, err
	}
	seen := map[uint32]bool{}
	for _, m := range msgs {
		for _, fl := range m.Flags {
			if fl == imap.FlagSeen {
				seen[uint32(m.UID)] = true
			}
		}
		if !seen[uint32(m.UID)] {
			seen[uint32(m.UID)] = false
		}
	}
	return seen, nil
}

// FailNext makes the next DATA commands fail with these reply codes
// (451: try again later; 550: refused for good), one code each.
func (f *Fake) FailNext(codes ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, codes...)
}

// Sent is what the SMTP server accepted, in order.
func (f *Fake) Sent() []Mail {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Mail(nil), f.sent...)
}

// Attempts counts DATA commands, accepted or refused.
func (f *Fake) Attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// SentC is signalled after a mail is accepted.
func (f *Fake) SentC() <-chan struct{} { return f.notify }

// session is one SMTP connection.
type session struct {
	f      *Fake
	conn   *smtp.Conn
	authed bool
	from   string
	to     []string
}

func (s *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(_, user, pass string) error {
		want := s.f.opts.Password
		if s.f.opts.SMTPPassword != "" {
			want = s.f.opts.SMTPPassword
		}
		if user != s.f.opts.Address || pass != want {
			return smtp.ErrAuthFailed // 535 5.7.8
		}
		s.authed = true
		return nil
	}), nil
}

func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	if s.f.opts.Password != "" && !s.authed {
		return smtp.ErrAuthRequired
	}
	s.from = from
	return nil
}

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if len(f.failures) > 0 {
		code := f.failures[0]
		f.failures = f.failures[1:]
		return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 0, 0}, Message: fmt.Sprintf("fake refusal %d", code)}
	}
	f.sent = append(f.sent, Mail{From: s.from, To: append([]string(nil), s.to...), Raw: raw, Helo: s.conn.Hostname()})
	select {
	case f.notify <- struct{}{}:
	default:
	}
	return nil
}

func (s *session) Reset()        { s.from, s.to = "", nil }
func (s *session) Logout() error { return nil }
