package email

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	gomail "github.com/emersion/go-message/mail"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/email/mailfake"
)

const (
	agent    = "agent@example.com"
	password = "app-password"
)

// gw is a running gateway on a real NATS server, reading and sending
// through in-process IMAP and SMTP servers.
type gw struct {
	f   *mailfake.Fake
	b   *bus.Bus
	s   *Service
	ctx context.Context
	evs chan *eventsv1.MessageReceived
}

func newFake(t *testing.T, idle bool) *mailfake.Fake {
	t.Helper()
	f, err := mailfake.New(mailfake.Options{Address: agent, Password: password, Idle: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// start runs a gateway against f and waits for it to read the mailbox.
func start(t *testing.T, f *mailfake.Fake, opts platform.Options) *gw {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	g.s, _ = runGateway(t, b, f, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	g.ctx = ctx
	return g
}

func testConfig(f *mailfake.Fake) Config {
	cfg := DefaultConfig()
	cfg.Address, cfg.Password = agent, password
	cfg.IMAPHost, cfg.IMAPPort, cfg.IMAPTLS = f.IMAPHost, f.IMAPPort, TLSNone
	cfg.SMTPHost, cfg.SMTPPort, cfg.SMTPTLS = f.SMTPHost, f.SMTPPort, TLSNone
	cfg.PollInterval = Interval(100 * time.Millisecond)
	cfg.Timeout = 10 * time.Second
	return cfg
}

// runGateway starts a gateway on b and waits until it reads the
// mailbox; stop (also at the end of the test) stops it and waits.
func runGateway(t *testing.T, b *bus.Bus, f *mailfake.Fake, opts platform.Options, tune ...func(*Config)) (*Service, func()) {
	t.Helper()
	opts.Backoff = platform.Schedule(20 * time.Millisecond)
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = time.Second
	}
	cfg := testConfig(f)
	for _, fn := range tune {
		fn(&cfg)
	}
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: opts})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		platformtest.DeleteBuckets(b)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, n := range []string{BucketCursors, BucketThreads} {
			_ = b.JetStream().DeleteKeyValue(ctx, b.Topology().Stream(n))
		}
	})
	platformtest.WaitFor(t, "the gateway to read the mailbox", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected
	})
	return s, stop
}

func (g *gw) next(t *testing.T) *eventsv1.MessageReceived {
	t.Helper()
	return platformtest.NextEvent(t, g.evs)
}

func (g *gw) none(t *testing.T, within time.Duration) {
	t.Helper()
	platformtest.NoEvent(t, g.evs, within)
}

func (g *gw) deliver(t *testing.T, lines ...string) uint32 {
	t.Helper()
	uid, err := g.f.Deliver(mailText(lines...))
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

func (g *gw) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	r := &deliveryv1.SendReceipt{}
	if err := g.b.Request(g.ctx, g.b.Topology().SendSubject("email"), req, r); err != nil {
		t.Fatalf("send request: %v", err)
	}
	return r
}

func answer(ev *eventsv1.MessageReceived, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: text, TurnId: "turn-" + ev.GetEventId(),
		IdempotencyKey: "k-" + ev.GetEventId() + "-" + text,
		Target:         &deliveryv1.Target{Platform: "email", Account: agent, ChatId: ev.GetSource().GetChatId(), ReplyToMessageId: ev.GetMessageId()}}
}

// readMail parses a sent mail: its header and its parts (text first).
func readMail(t *testing.T, raw []byte) (gomail.Header, string, map[string][]byte) {
	t.Helper()
	r, err := gomail.CreateReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("sent mail does not parse: %v\n%s", err, raw)
	}
	var text string
	files := map[string][]byte{}
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p.Body)
		switch h := p.Header.(type) {
		case *gomail.InlineHeader:
			text = string(b)
		case *gomail.AttachmentHeader:
			name, _ := h.Filename()
			files[name] = b
		}
	}
	return r.Header, text, files
}

func waitSent(t *testing.T, f *mailfake.Fake, n int) []mailfake.Mail {
	t.Helper()
	platformtest.WaitFor(t, "the mail to be sent", func() bool { return len(f.Sent()) >= n })
	return f.Sent()
}

// A mail in, a threaded answer out, with IDLE and with polling: the
// event names the sender's chat with the subject, the mail is flagged
// \Seen once published, the answer says "Re: <subject>" with
// In-Reply-To and References and carries the Markdown as plain text.
func TestMailAnsweredInThread(t *testing.T) {
	t.Parallel()
	for _, idle := range []bool{true, false} {
		t.Run(map[bool]string{true: "idle", false: "poll"}[idle], func(t *testing.T) {
			t.Parallel()
			f := newFake(t, idle)
			g := start(t, f, platform.Options{})
			uid := g.deliver(t, "From: Ann <ann@example.com>", "To: "+agent, "Subject: Lunch plans",
				"Message-ID: <m1@example.com>", "References: <m0@example.com>", "", "Where shall we eat?")
			ev := g.next(t)
			src := ev.GetSource()
			if ev.GetEventId() != "m1@example.com" || ev.GetMessageId() != "<m1@example.com>" || src.GetChatId() != "ann@example.com" ||
				src.GetChatType() != "dm" || src.GetUserName() != "Ann" || src.GetChatTopic() != "Lunch plans" ||
				ev.GetText() != "[Subject: Lunch plans]\n\nWhere shall we eat?" {
				t.Fatalf("event %v", ev)
			}
			platformtest.WaitFor(t, "the mail to be flagged seen", func() bool {
				seen, err := f.Seen()
				return err == nil && seen[uid]
			})
			if r := g.send(t, answer(ev, "**Thai**, at [Baan](https://baan.example).")); !r.GetOk() || !strings.HasPrefix(r.GetPlatformMessageId(), "<sb-") {
				t.Fatalf("receipt %v", r)
			}
			sent := waitSent(t, f, 1)
			if sent[0].From != agent || len(sent[0].To) != 1 || sent[0].To[0] != "ann@example.com" {
				t.Fatalf("envelope %s → %v", sent[0].From, sent[0].To)
			}
			// A submission server may refuse a name that is not a domain
			// (Postfix's reject_non_fqdn_helo_hostname).
			if h := sent[0].Helo; h == "localhost" || !strings.Contains(h, ".") {
				t.Fatalf("EHLO %q, want a fully qualified name", h)
			}
			h, text, _ := readMail(t, sent[0].Raw)
			subject, _ := h.Subject()
			inReplyTo, _ := h.MsgIDList("In-Reply-To")
			refs, _ := h.MsgIDList("References")
			if subject != "Re: Lunch plans" || strings.Join(inReplyTo, " ") != "m1@example.com" ||
				strings.Join(refs, " ") != "m0@example.com m1@example.com" {
				t.Fatalf("threading: subject %q, in-reply-to %v, references %v", subject, inReplyTo, refs)
			}
			if strings.TrimSpace(text) != "Thai, at Baan (https://baan.example)." {
				t.Fatalf("body %q", text)
			}
			// Edits do not exist on email.
			edit := answer(ev, "changed")
			edit.Op, edit.MessageId = deliveryv1.SendOp_SEND_OP_EDIT, "<sb-x@example.com>"
			if r := g.send(t, edit); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Fatalf("edit receipt %v", r)
			}
		})
	}
}

// An inbound picture is kept in the attachment store, an outbound one
// is a MIME part of the answer.
func TestAttachments(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	g := start(t, f, platform.Options{Attachments: attachment.Config{Enabled: true, MaxBytes: 1 << 20, TTL: time.Hour}})
	png := platformtest.NoisePNG(t, 8, 8)
	g.deliver(t, "From: bob@example.com", "Subject: Re: pictures", "Message-ID: <p1@example.com>",
		"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Here it is.",
		"--XX", "Content-Type: image/png", "Content-Disposition: attachment; filename=\"dot.png\"",
		"Content-Transfer-Encoding: base64", "", base64.StdEncoding.EncodeToString(png), "--XX--", "")
	ev := g.next(t)
	if ev.GetText() != "Here it is." || len(ev.GetAttachments()) != 1 {
		t.Fatalf("event %v", ev)
	}
	a := ev.GetAttachments()[0]
	if a.GetBytesRef() == "" || a.GetFileName() != "dot.png" || a.GetMimeType() != "image/png" || a.GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE {
		t.Fatalf("attachment %v, want it kept", a)
	}
	store := attachment.Open(g.b.JetStream(), g.b.Topology(), attachment.Config{Enabled: true, MaxBytes: 1 << 20, TTL: time.Hour})
	if data, _, err := store.Get(g.ctx, a.GetBytesRef(), 1<<20); err != nil || !bytes.Equal(data, png) {
		t.Fatalf("kept bytes differ (%v)", err)
	}

	req := answer(ev, "A report for you.")
	req.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "report.txt",
		Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64," + base64.StdEncoding.EncodeToString([]byte("numbers"))}}}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	h, text, files := readMail(t, waitSent(t, f, 1)[0].Raw)
	subject, _ := h.Subject()
	if subject != "Re: pictures" || strings.TrimSpace(text) != "A report for you." || string(files["report.txt"]) != "numbers" {
		t.Fatalf("mail: subject %q, text %q, files %q", subject, text, files)
	}
}

// Automated mail, the agent's own and a malformed message are skipped
// (and flagged handled); the mail behind them is read.
func TestSkippedMail(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	g := start(t, f, platform.Options{})
	skippedUIDs := []uint32{
		g.deliver(t, "From: GitHub <noreply@github.com>", "Subject: CI", "Message-ID: <a1@github.com>", "", "failed"),
		g.deliver(t, "From: cal@example.com", "Auto-Submitted: auto-replied", "Subject: Out of office", "Message-ID: <a2@example.com>", "", "away"),
		g.deliver(t, "From: "+agent, "Subject: Re: x", "Message-ID: <a3@example.com>", "", "my own"),
		g.deliver(t, "Subject: no sender", "", "???"),
	}
	uid := g.deliver(t, "From: dan@example.com", "Subject: Re: hello", "Message-ID: <a4@example.com>", "", "a person")
	ev := g.next(t)
	if ev.GetEventId() != "a4@example.com" {
		t.Fatalf("event %v, want dan's only", ev)
	}
	g.none(t, 300*time.Millisecond)
	// A mail is flagged \Seen after it is published (handle): its event
	// on the bus does not mean its flag is set. The skipped ones before
	// it are flagged before dan's is read.
	platformtest.WaitFor(t, "dan's mail flagged \\Seen", func() bool {
		seen, err := f.Seen()
		return err == nil && seen[uid]
	})
	seen, err := f.Seen()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range append(skippedUIDs, uid) {
		if !seen[u] {
			t.Errorf("uid %d not flagged \\Seen", u)
		}
	}
}

// The first start leaves the mail already there alone (as Hermes); a
// restart answers no mail twice and reads what arrived while no gateway
// ran; a message read again after a crash (its cursor not moved) is
// published once.
func TestRestartLosesAndRepeatsNothing(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	old, err := f.Deliver(mailText("From: old@example.com", "Subject: Re: old", "Message-ID: <o1@example.com>", "", "before"))
	if err != nil {
		t.Fatal(err)
	}
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	g := &gw{f: f, b: b, evs: evs}
	_, stop := runGateway(t, b, f, platform.Options{})
	g.deliver(t, "From: ann@example.com", "Subject: Re: one", "Message-ID: <r1@example.com>", "", "one")
	if ev := g.next(t); ev.GetEventId() != "r1@example.com" {
		t.Fatalf("event %v, want r1 (the mail already there left alone)", ev)
	}
	stop()
	g.deliver(t, "From: ann@example.com", "Subject: Re: two", "Message-ID: <r2@example.com>", "", "two")
	_, stop = runGateway(t, b, f, platform.Options{})
	if ev := g.next(t); ev.GetEventId() != "r2@example.com" {
		t.Fatalf("event %v, want r2 (sent while down)", ev)
	}
	g.none(t, 500*time.Millisecond)
	stop()
	if seen, _ := f.Seen(); seen[old] {
		t.Errorf("the mail there before the first start was flagged \\Seen")
	}

	// A crash after the publish and before the cursor moved: the next
	// reader takes the message again, and the kit's seen record stops it.
	ctx := context.Background()
	p := &Platform{cfg: testConfig(f).withDefaults(), bus: b}
	st, err := p.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, rev, err := p.loadCursor(ctx, st)
	if err != nil || rev == 0 {
		t.Fatalf("cursor %v rev %d: %v", cur, rev, err)
	}
	cur.UID--
	if _, err := p.storeCursor(ctx, st, cur, rev); err != nil {
		t.Fatal(err)
	}
	s, _ := runGateway(t, b, f, platform.Options{})
	g.deliver(t, "From: ann@example.com", "Subject: Re: three", "Message-ID: <r3@example.com>", "", "three")
	if ev := g.next(t); ev.GetEventId() != "r3@example.com" {
		t.Fatalf("event %v, want r3 only (r2 read again is a duplicate)", ev)
	}
	g.none(t, 300*time.Millisecond)
	if ok, err := s.Runner().Seen(ctx, "r2@example.com"); !ok || err != nil {
		t.Fatalf("r2 not in the seen record (%v)", err)
	}
}

// A server that goes silent while the gateway ends an IDLE (a connection
// that died without a reset: NAT, a failover) holds the gateway no longer
// than the exchange timeout: it reconnects and reads the mail that came.
func TestSilentServerAfterIdle(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	runGateway(t, b, f, platform.Options{}, func(c *Config) { c.Timeout = 500 * time.Millisecond })
	f.StallIdle()
	// The EXISTS ends the IDLE; DONE gets no answer.
	g.deliver(t, "From: ann@example.com", "Subject: Re: hello", "Message-ID: <s1@example.com>", "", "anyone there?")
	if ev := g.next(t); ev.GetEventId() != "s1@example.com" {
		t.Fatalf("event %v, want s1", ev)
	}
}

// The first start leaves alone the mail there when the mailbox was
// selected, not what arrives a moment later, before the gateway looks
// for the last message.
func TestFirstStartKeepsMailAfterSelect(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	if _, err := f.Deliver(mailText("From: old@example.com", "Subject: Re: old", "", "before")); err != nil {
		t.Fatal(err)
	}
	p := &Platform{cfg: testConfig(f).withDefaults(), log: slog.New(slog.DiscardHandler)}
	s, err := p.dial()
	if err != nil {
		t.Fatal(err)
	}
	defer s.c.Close()
	sel, err := s.c.Select(p.cfg.Mailbox, nil).Wait()
	if err != nil {
		t.Fatal(err)
	}
	uid := deliverMail(t, f, "From: ann@example.com", "Subject: Re: new", "Message-ID: <f1@example.com>", "", "just now")
	last, err := p.lastUID(s, sel)
	if err != nil {
		t.Fatal(err)
	}
	if uint32(last) >= uid {
		t.Fatalf("watermark %d covers uid %d, delivered after the SELECT: it would never be read", last, uid)
	}
}

func deliverMail(t *testing.T, f *mailfake.Fake, lines ...string) uint32 {
	t.Helper()
	uid, err := f.Deliver(mailText(lines...))
	if err != nil {
		t.Fatal(err)
	}
	return uid
}

// A mail over max_message_bytes is read up to the bound, and the agent
// is told the rest is missing: the sender gets an answer, not silence.
func TestMailOverTheBoundIsReadInPart(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	runGateway(t, b, f, platform.Options{}, func(c *Config) { c.MaxMessageBytes = 4 << 10 })
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("video bytes "), 1000))
	uid := g.deliver(t, "From: ann@example.com", "Subject: Re: the video", "Message-ID: <big1@example.com>",
		"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Here is the video.",
		"--XX", "Content-Type: video/mp4", "Content-Disposition: attachment; filename=clip.mp4",
		"Content-Transfer-Encoding: base64", "", big, "--XX--", "")
	ev := g.next(t)
	if ev.GetEventId() != "big1@example.com" || !strings.HasPrefix(ev.GetText(), "Here is the video.\n\n[This email is ") ||
		!strings.Contains(ev.GetText(), "only its first 4.0 KB were read") || len(ev.GetAttachments()) != 0 {
		t.Fatalf("event %v", ev)
	}
	platformtest.WaitFor(t, "the mail to be flagged seen", func() bool {
		seen, err := f.Seen()
		return err == nil && seen[uid]
	})
}

// When the mailbox's UIDVALIDITY changed (a server migration renumbers
// it), the unseen mail that came since the gateway last read is read
// again, not the unseen mail of months ago that nobody answered.
func TestUIDValidityChangeReadsOnlyRecentUnseen(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	if _, err := f.DeliverAt(mailText("From: old@example.com", "Subject: Re: spring", "Message-ID: <u0@example.com>", "", "months ago"),
		time.Now().Add(-90*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	deliverMail(t, f, "From: ann@example.com", "Subject: Re: now", "Message-ID: <u1@example.com>", "", "while renumbered")
	b := bustest.New(t, bustest.EmbeddedURL(t))
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	// The watermark of a reader that was here an hour ago, under another
	// UIDVALIDITY.
	ctx := context.Background()
	p := &Platform{cfg: testConfig(f).withDefaults(), bus: b}
	st, err := p.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.storeCursorAt(ctx, st, cursor{UIDValidity: 0xfffffff0, UID: 7}, 0, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	runGateway(t, b, f, platform.Options{})
	if ev := g.next(t); ev.GetEventId() != "u1@example.com" {
		t.Fatalf("event %v, want u1 only (u0 is three months old)", ev)
	}
	g.none(t, 300*time.Millisecond)
}

// An answer to a mail without a Message-ID is threaded under that
// mail's subject, not the sender's previous one; a send to the address in
// another case finds the sender's latest subject all the same.
func TestAnswerToMailWithoutMessageID(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	g := start(t, f, platform.Options{})
	g.deliver(t, "From: ann@example.com", "Subject: Lunch", "Message-ID: <l1@example.com>", "", "where?")
	g.next(t)
	g.deliver(t, "From: ann@example.com", "Subject: Invoice 42", "", "is it paid?")
	ev := g.next(t)
	if ev.GetMessageId() != "" {
		t.Fatalf("event %v, want no message id", ev)
	}
	if r := g.send(t, answer(ev, "Yes.")); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	proactive := answer(ev, "A reminder.")
	proactive.Target.ChatId = "Ann@Example.com"
	if r := g.send(t, proactive); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	for i, m := range waitSent(t, f, 2) {
		h, _, _ := readMail(t, m.Raw)
		if s, _ := h.Subject(); s != "Re: Invoice 42" {
			t.Errorf("mail %d: subject %q, want Re: Invoice 42", i, s)
		}
	}
}

// A mail without a Subject is read as Hermes reads it, "(no subject)":
// the agent's text starts "[Subject: (no subject)]" and the answer is
// "Re: (no subject)". One whose Subject is there but empty or blank has
// an empty subject, as Python's email API reads it (msg.get's default
// is for a missing header): no subject in the text, and the answer
// "Re: ". Before, both were read as empty and answered "Re: Hermes
// Agent", the subject of a chat with no mail kept.
func TestMissingAndEmptySubject(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	g := start(t, f, platform.Options{})
	for i, tc := range []struct {
		name    string
		subject []string // the mail's Subject header (none: no header)
		text    string   // the event's text
		answer  string   // the answer's Subject line as sent
	}{
		{name: "no Subject", text: "[Subject: (no subject)]\n\nhello", answer: "Subject: Re: (no subject)"},
		{name: "an empty Subject", subject: []string{"Subject:"}, text: "hello", answer: "Subject: Re: "},
		{name: "a blank Subject", subject: []string{"Subject:   "}, text: "hello", answer: "Subject: Re: "},
		{name: "a Subject", subject: []string{"Subject: Lunch"}, text: "[Subject: Lunch]\n\nhello", answer: "Subject: Re: Lunch"},
		{name: "a reply's Subject", subject: []string{"Subject: Re: Lunch"}, text: "hello", answer: "Subject: Re: Lunch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := append([]string{fmt.Sprintf("From: s%d@example.com", i), fmt.Sprintf("Message-ID: <s%d@example.com>", i)}, tc.subject...)
			g.deliver(t, append(lines, "", "hello")...)
			ev := g.next(t)
			if ev.GetText() != tc.text {
				t.Errorf("event text %q, want %q", ev.GetText(), tc.text)
			}
			if r := g.send(t, answer(ev, "Hi.")); !r.GetOk() {
				t.Fatalf("receipt %v", r)
			}
			sent := waitSent(t, f, i+1)
			if got := subjectLine(sent[i].Raw); got != tc.answer {
				t.Errorf("answer's %q, want %q", got, tc.answer)
			}
		})
	}
}

// subjectLine is a sent mail's Subject header line as it was written.
func subjectLine(raw []byte) string {
	head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
	for _, l := range strings.Split(head, "\r\n") {
		if len(l) >= 8 && strings.EqualFold(l[:8], "subject:") {
			return l
		}
	}
	return ""
}

// An SMTP 4xx reply is retryable, a 5xx permanent; the retry with the
// same idempotency key sends the mail once.
func TestSMTPErrorClasses(t *testing.T) {
	t.Parallel()
	f := newFake(t, false)
	g := start(t, f, platform.Options{})
	ev := &eventsv1.MessageReceived{EventId: "x", MessageId: "<x@example.com>", Source: &eventsv1.SessionSource{ChatId: "eve@example.com"}}

	f.FailNext(451)
	req := answer(ev, "later")
	if r := g.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("451 receipt %v, want retryable", r)
	}
	if r := g.send(t, req); !r.GetOk() {
		t.Fatalf("retry receipt %v", r)
	}
	if r := g.send(t, req); !r.GetOk() || !r.GetDuplicate() {
		t.Fatalf("repeat receipt %v, want the first one back", r)
	}
	if n := len(waitSent(t, f, 1)); n != 1 || f.Attempts() != 2 {
		t.Fatalf("%d mails sent in %d attempts, want 1 in 2", n, f.Attempts())
	}
	h, _, _ := readMail(t, f.Sent()[0].Raw)
	if s, _ := h.Subject(); s != "Re: Hermes Agent" {
		t.Fatalf("subject %q for a message with no thread kept", s)
	}
	if refs, _ := h.MsgIDList("In-Reply-To"); strings.Join(refs, "") != "x@example.com" {
		t.Fatalf("in-reply-to %v", refs)
	}

	f.FailNext(550)
	if r := g.send(t, answer(ev, "never")); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("550 receipt %v, want permanent", r)
	}
	bad := answer(ev, "to nobody")
	bad.Target.ChatId = "not an address"
	if r := g.send(t, bad); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
		t.Fatalf("bad address receipt %v, want permanent", r)
	}

	// A server that is gone: a network error, retryable.
	f.Close()
	if r := g.send(t, answer(ev, "gone")); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE {
		t.Fatalf("no server receipt %v, want retryable", r)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	var i Interval
	for in, want := range map[string]time.Duration{"15": 15 * time.Second, "2.5": 2500 * time.Millisecond, "1m": time.Minute, "300ms": 300 * time.Millisecond} {
		if err := i.UnmarshalText([]byte(in)); err != nil || time.Duration(i) != want {
			t.Errorf("interval %q = %s, %v; want %s", in, time.Duration(i), err, want)
		}
	}
	ok := DefaultConfig()
	ok.Address, ok.IMAPHost, ok.SMTPHost = "agent@example.com", "imap.example.com", "smtp.example.com"
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no address":   func(c *Config) { c.Address = "" },
		"named":        func(c *Config) { c.Address = "Agent <agent@example.com>" },
		"bad tls":      func(c *Config) { c.SMTPTLS = "ssl" },
		"bad port":     func(c *Config) { c.IMAPPort = 70000 },
		"fast polling": func(c *Config) { c.PollInterval = Interval(time.Millisecond) },
		"authenticated senders without an authserv-id": func(c *Config) { c.RequireAuthenticatedSender = true },
		"unknown authentication method": func(c *Config) {
			c.RequireAuthenticatedSender, c.AuthservID, c.AuthenticatedBy = true, "mx.example.com", []string{"dmarc", "arc"}
		},
	} {
		c := ok
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	auth := ok
	auth.RequireAuthenticatedSender, auth.AuthservID, auth.AuthenticatedBy = true, "mx.example.com", []string{"DMARC", "spf", "dkim"}
	if err := auth.Validate(); err != nil {
		t.Errorf("authenticated senders refused: %v", err)
	}
	if got := ok.withDefaults().AuthenticatedBy; len(got) != 1 || got[0] != AuthDMARC {
		t.Errorf("authenticated_by defaults to %v, want [dmarc]", got)
	}
	for _, c := range []struct {
		mode     string
		port     int
		implicit int
		want     string
	}{{TLSAuto, 993, 993, TLSImplicit}, {"", 143, 993, TLSStartTLS}, {TLSAuto, 465, 465, TLSImplicit}, {TLSAuto, 587, 465, TLSStartTLS}, {TLSNone, 25, 465, TLSNone}} {
		if got := tlsMode(c.mode, c.port, c.implicit); got != c.want {
			t.Errorf("tlsMode(%q, %d) = %q, want %q", c.mode, c.port, got, c.want)
		}
	}
}

// An attachment the store refuses (here: full) cannot be read again once
// the mail is flagged \Seen: the mail is published with a note saying
// so, the attachment marked unavailable, and it is counted.
func TestAttachmentNotKept(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	g := start(t, f, platform.Options{Attachments: attachment.Config{Enabled: true, MaxBytes: 1 << 20, StoreBytes: 64, TTL: time.Hour}})
	before := testutil.ToFloat64(attachmentsLost.WithLabelValues("not_kept"))
	pic := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, 256))
	uid := g.deliver(t, "From: ann@example.com", "Subject: Re: pictures", "Message-ID: <lost1@example.com>",
		"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Here it is.",
		"--XX", "Content-Type: image/png", "Content-Disposition: attachment; filename=\"big.png\"",
		"Content-Transfer-Encoding: base64", "", pic, "--XX--")
	ev := g.next(t)
	if !strings.HasPrefix(ev.GetText(), "Here it is.") || !strings.Contains(ev.GetText(), `[The attachment "big.png" (image/png, 1.0 KB) could not be kept (not kept)`) {
		t.Fatalf("text %q, want the note", ev.GetText())
	}
	if len(ev.GetAttachments()) != 1 || ev.GetAttachments()[0].GetUnavailable() != "it could not be kept" || ev.GetAttachments()[0].GetLocation() != nil {
		t.Fatalf("attachments %v, want one marked unavailable", ev.GetAttachments())
	}
	if d := testutil.ToFloat64(attachmentsLost.WithLabelValues("not_kept")) - before; d < 1 {
		t.Errorf("not kept counted %v", d)
	}
	platformtest.WaitFor(t, "the mail flagged \\Seen", func() bool {
		seen, err := f.Seen()
		return err == nil && seen[uid]
	})
}

// The subject and references an answer carries are those its
// recipient's mail had: a mail from someone else that reuses the
// Message-ID (one copied on the thread knows it) is a duplicate, and
// must not put its subject and references in the answer to the first.
func TestThreadIsTheRecipients(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	g := start(t, f, platform.Options{})
	g.deliver(t, "From: Ann <ann@example.com>", "To: "+agent, "Subject: Lunch plans",
		"Message-ID: <m1@example.com>", "", "Where shall we eat?")
	ev := g.next(t)
	uid := g.deliver(t, "From: mallory@example.net", "To: "+agent, "Subject: Urgent: your account is locked, call +1 555 0100",
		"Message-ID: <m1@example.com>", "References: <evil@example.net>", "", "x")
	platformtest.WaitFor(t, "the second mail to be handled", func() bool {
		seen, err := f.Seen()
		return err == nil && seen[uid]
	})
	g.none(t, 200*time.Millisecond)
	if r := g.send(t, answer(ev, "Thai.")); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	h, _, _ := readMail(t, waitSent(t, f, 1)[0].Raw)
	subject, _ := h.Subject()
	refs, _ := h.MsgIDList("References")
	if subject != "Re: Lunch plans" || strings.Join(refs, " ") != "m1@example.com" {
		t.Fatalf("answer to ann: subject %q, references %v; want Ann's thread", subject, refs)
	}
}
