package email

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/mail"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-message"
	gomail "github.com/emersion/go-message/mail"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// thread is what an answer to an inbound message needs of it.
type thread struct {
	Subject    string   `json:"subject"`
	MessageID  string   `json:"message_id"`
	References []string `json:"references"`
}

// putThread keeps m's subject and references for the answers, under its
// sender and Message-ID (when it has one) and as its sender's latest (for
// a send that answers no message, as Hermes keeps a thread per address,
// and for the answer to a mail without a Message-ID). The sender is part
// of the key: anyone can write a Message-ID, and another's mail that
// reuses it (a duplicate, not published) must not give the answer to the
// first its subject and references.
func (p *Platform) putThread(ctx context.Context, m *inbound) error {
	st, err := p.open(ctx)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(thread{Subject: m.Subject, MessageID: m.MessageID, References: m.References})
	keys := []string{kvKey(p.cfg.Address, "chat", m.From)}
	if m.MessageID != "" {
		keys = append(keys, kvKey(p.cfg.Address, "msg", m.From, m.MessageID))
	}
	for _, k := range keys {
		if _, err := st.threads.Put(ctx, k, b); err != nil {
			return fmt.Errorf("keep email thread: %w", err)
		}
	}
	return nil
}

// threadOf is the thread an answer to messageID of chat (or, without
// one, the latest message of chat) belongs to; ok is false when none is
// known.
func (p *Platform) threadOf(ctx context.Context, chat, messageID string) (thread, bool, error) {
	st, err := p.open(ctx)
	if err != nil {
		return thread{}, false, err
	}
	chat = strings.ToLower(chat) // inbound addresses are kept in lower case
	key := kvKey(p.cfg.Address, "chat", chat)
	if messageID != "" {
		key = kvKey(p.cfg.Address, "msg", chat, messageID)
	}
	e, err := st.threads.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return thread{}, false, nil
	}
	if err != nil {
		return thread{}, false, fmt.Errorf("read email thread: %w", err)
	}
	var t thread
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return thread{}, false, nil
	}
	return t, true, nil
}

// maxAttachmentBytes bounds one outbound attachment (most servers refuse
// a message over 25 MB).
const maxAttachmentBytes = 20 << 20

// Send mails the text (Markdown rendered as plain text) and attachments
// to the chat's address, threaded under the message it answers:
// "Re: <subject>", In-Reply-To and References. The platform message id is
// the mail's Message-ID, made from the idempotency key, so a retry after
// an SMTP answer that was lost carries the same id.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	to, err := mail.ParseAddress(req.GetTarget().GetChatId())
	if err != nil || to.Name != "" {
		return "", platform.Permanent(errors.New("email: the chat id is not an address"))
	}
	text := req.GetText()
	if req.GetFormat() != deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		text = markup.Plain.Convert(text)
	}
	var files []file
	for i, a := range req.GetAttachments() {
		f, link, err := p.attachmentFile(ctx, a)
		if err != nil {
			return "", fmt.Errorf("email attachment %d: %w", i, err)
		}
		if link != "" {
			// Hermes links what it does not download: "Image: <url>".
			text = strings.TrimSpace(text + "\n\nImage: " + link)
			continue
		}
		files = append(files, f)
	}
	if strings.TrimSpace(text) == "" && len(files) == 0 {
		return "", platform.Permanent(errors.New("email: empty message"))
	}
	replyTo := req.GetTarget().GetReplyToMessageId()
	th, found, err := p.threadOf(ctx, to.Address, replyTo)
	if err != nil {
		return "", err
	}
	// The default only for a chat with no mail kept, as Hermes's
	// ctx.get("subject", "Hermes Agent"): a mail's empty Subject is
	// answered "Re: ", as Hermes answers it.
	subject := th.Subject
	if !found {
		subject = p.cfg.DefaultSubject
	}
	if !isReply(subject) {
		subject = "Re: " + subject
	}
	refs := th.References
	if !found && replyTo != "" {
		if id := msgID(replyTo); id != "" {
			refs = []string{id}
		}
	}
	id := p.messageID(req.GetIdempotencyKey())
	raw, err := compose(p.cfg.Address, to.Address, subject, id, refs, text, files, time.Now())
	if err != nil {
		return "", platform.Permanent(fmt.Errorf("email: compose: %w", err))
	}
	if err := p.submit(ctx, to.Address, raw); err != nil {
		err = classify(err)
		var se *platform.SendError
		if errors.As(err, &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			sentTotal.WithLabelValues("permanent").Inc()
		} else {
			sentTotal.WithLabelValues("retryable").Inc()
		}
		return "", err
	}
	sentTotal.WithLabelValues("ok").Inc()
	p.log.Info("email: sent", "message_id", id, "references", len(refs))
	return id, nil
}

// messageID is "<sb-…@domain>": from the idempotency key when there is
// one, else random.
func (p *Platform) messageID(key string) string {
	var tail string
	if key != "" {
		sum := sha256.Sum256([]byte(p.cfg.Address + "\x00" + key))
		tail = hex.EncodeToString(sum[:12])
	} else {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		tail = hex.EncodeToString(b)
	}
	_, domain, _ := strings.Cut(p.cfg.Address, "@")
	return "<sb-" + tail + "@" + domain + ">"
}

// file is one outbound attachment.
type file struct {
	Name string
	MIME string
	Data []byte
}

// attachmentFile reads an attachment's bytes: a data: URL, or a kept
// attachment (bytes_ref). An http(s) URL is returned as a link for the
// text, as Hermes mails an image URL.
func (p *Platform) attachmentFile(ctx context.Context, a *eventsv1.Attachment) (file, string, error) {
	f := file{Name: a.GetFileName(), MIME: a.GetMimeType()}
	switch {
	case strings.HasPrefix(a.GetUrl(), "data:"):
		data, mt, _, err := attachment.ParseDataURL(a.GetUrl())
		if err != nil {
			return file{}, "", platform.Permanent(err)
		}
		f.Data = data
		if f.MIME == "" {
			f.MIME = mt
		}
	case a.GetBytesRef() != "":
		if p.store == nil {
			return file{}, "", platform.Permanent(errors.New("attachment store is off"))
		}
		data, kept, err := p.store.Get(ctx, a.GetBytesRef(), maxAttachmentBytes)
		if err != nil {
			return file{}, "", fmt.Errorf("read kept attachment: %w", err)
		}
		f.Data = data
		if f.MIME == "" {
			f.MIME = kept
		}
	case strings.HasPrefix(a.GetUrl(), "https://") || strings.HasPrefix(a.GetUrl(), "http://"):
		return file{}, a.GetUrl(), nil
	default:
		return file{}, "", platform.Permanent(errors.New("no data: URL, http(s) URL or kept bytes"))
	}
	if len(f.Data) > maxAttachmentBytes {
		return file{}, "", platform.Permanent(fmt.Errorf("attachment of %d bytes, at most %d", len(f.Data), maxAttachmentBytes))
	}
	if f.MIME == "" {
		f.MIME = "application/octet-stream"
	}
	f.Name = fileName(f.Name, f.MIME)
	return f, "", nil
}

// compose writes the mail: text/plain in UTF-8 alone, or with the
// attachments in multipart/mixed.
func compose(from, to, subject, id string, refs []string, text string, files []file, now time.Time) ([]byte, error) {
	var h gomail.Header
	h.SetDate(now)
	h.SetAddressList("From", []*gomail.Address{{Address: from}})
	h.SetAddressList("To", []*gomail.Address{{Address: to}})
	h.SetSubject(subject)
	h.SetMessageID(strings.Trim(id, "<>"))
	if len(refs) > 0 {
		h.SetMsgIDList("In-Reply-To", []string{strings.Trim(refs[len(refs)-1], "<>")})
		ids := make([]string, len(refs))
		for i, r := range refs {
			ids[i] = strings.Trim(r, "<>")
		}
		h.SetMsgIDList("References", ids)
	}
	// Mark the answer as one, so auto-responders do not answer it.
	h.Set("Auto-Submitted", "auto-replied")
	var buf bytes.Buffer
	textHeader := func(th *message.Header) {
		th.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
		th.Set("Content-Transfer-Encoding", "quoted-printable")
	}
	if len(files) == 0 {
		textHeader(&h.Header)
		w, err := message.CreateWriter(&buf, h.Header)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write([]byte(text)); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	w, err := gomail.CreateWriter(&buf, h)
	if err != nil {
		return nil, err
	}
	if text != "" {
		var ih gomail.InlineHeader
		textHeader(&ih.Header)
		tw, err := w.CreateSingleInline(ih)
		if err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(text)); err != nil {
			return nil, err
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		var ah gomail.AttachmentHeader
		mt, params, err := mime.ParseMediaType(f.MIME)
		if err != nil {
			// SetContentType would write an empty type.
			mt, params = "application/octet-stream", nil
		}
		ah.SetContentType(mt, params)
		ah.SetFilename(f.Name)
		aw, err := w.CreateAttachment(ah)
		if err != nil {
			return nil, err
		}
		if _, err := aw.Write(f.Data); err != nil {
			return nil, err
		}
		if err := aw.Close(); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// submit hands one mail to the SMTP server: a connection per mail, as
// Hermes opens one; STARTTLS or implicit TLS by port (TLSAuto), login
// when a password is set.
func (p *Platform) submit(ctx context.Context, to string, raw []byte) error {
	c, done, err := p.smtpDial(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := c.SendMail(p.cfg.Address, []string{to}, bytes.NewReader(raw)); err != nil {
		return fmt.Errorf("smtp send: %w", err)
	}
	_ = c.Quit()
	return nil
}

// smtpDial connects to the SMTP server, greets it and logs in (when a
// password is set); done closes the connection.
func (p *Platform) smtpDial(ctx context.Context) (c *smtp.Client, done func(), err error) {
	addr := net.JoinHostPort(p.cfg.SMTPHost, strconv.Itoa(p.cfg.SMTPPort))
	deadline := time.Now().Add(p.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	d := &net.Dialer{Deadline: deadline}
	tlsConf := &tls.Config{ServerName: p.cfg.SMTPHost, MinVersion: tls.VersionTLS12}
	mode := tlsMode(p.cfg.SMTPTLS, p.cfg.SMTPPort, 465)
	var conn net.Conn
	if mode == TLSImplicit {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tlsConf}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("smtp dial %s: %w", addr, err)
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	if mode == TLSStartTLS {
		c, err = smtp.NewClientStartTLS(conn, tlsConf)
		if err != nil {
			stop()
			_ = conn.Close()
			return nil, nil, fmt.Errorf("smtp starttls: %w", err)
		}
	} else {
		c = smtp.NewClient(conn)
	}
	done = func() {
		stop()
		_ = c.Close()
	}
	// go-smtp says "localhost" unless told; after STARTTLS the client
	// greets again, with this name.
	if err := c.Hello(p.helloName()); err != nil {
		done()
		return nil, nil, fmt.Errorf("smtp ehlo: %w", err)
	}
	if p.cfg.Password != "" {
		if err := c.Auth(sasl.NewPlainClient("", p.cfg.Address, p.cfg.Password)); err != nil {
			done()
			return nil, nil, fmt.Errorf("smtp auth: %w", err)
		}
	}
	return c, done, nil
}

// helloName is the name the gateway gives in EHLO: the host's name when
// it is fully qualified (as Hermes's smtplib sends socket.getfqdn()),
// else the domain of the agent's address. "localhost", go-smtp's default,
// or a bare container name are refused by submission servers that want a
// fully qualified name (Postfix's reject_non_fqdn_helo_hostname), and
// count against the mail in spam filters.
func (p *Platform) helloName() string {
	if h, err := os.Hostname(); err == nil && strings.Contains(strings.Trim(h, "."), ".") && !strings.ContainsAny(h, " \t\r\n") {
		return strings.Trim(h, ".")
	}
	_, domain, _ := strings.Cut(p.cfg.Address, "@")
	return domain
}

// classify maps an SMTP failure to delivery's classes: a 4xx reply is
// transient (retry), a 5xx permanent, anything else (network, TLS) a
// retry.
func classify(err error) error {
	var se *smtp.SMTPError
	if errors.As(err, &se) && se.Code >= 500 && se.Code < 600 {
		return platform.Permanent(err)
	}
	return err
}

// Edit is not offered: mail cannot be changed once sent.
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Delete is not offered.
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Typing does nothing: email has no typing indicator (Hermes's no-op).
func (p *Platform) Typing(context.Context, *deliveryv1.SendRequested) error { return nil }
