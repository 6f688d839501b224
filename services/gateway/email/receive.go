package email

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// cursor is how far a mailbox was read: every message with a UID up to
// UID (under UIDValidity) is handled, as of At.
type cursor struct {
	UIDValidity uint32    `json:"uid_validity"`
	UID         uint32    `json:"uid"`
	At          time.Time `json:"at,omitzero"`
}

// renumberedWindow bounds how far back the unseen mail read again after a
// UIDVALIDITY change goes when the cursor does not say when it was last
// written (one written before it did): the seen record's lifetime.
const renumberedWindow = 7 * 24 * time.Hour

// tlsMode is the TLS of a connection to port under mode.
func tlsMode(mode string, port, implicitPort int) string {
	if mode == "" || mode == TLSAuto {
		if port == implicitPort {
			return TLSImplicit
		}
		return TLSStartTLS
	}
	return mode
}

// session is one IMAP connection with its mailbox selected.
type session struct {
	c       *imapclient.Client
	timeout time.Duration
	// notify is signalled when the server reports new mail.
	notify chan struct{}
}

// do runs one exchange, closing the connection when it takes longer
// than the timeout (imapclient's commands take no context).
func (s *session) do(f func() error) error {
	t := time.AfterFunc(s.timeout, func() { _ = s.c.Close() })
	defer t.Stop()
	return f()
}

// dial connects and logs in.
func (p *Platform) dial() (*session, error) {
	s := &session{timeout: p.cfg.Timeout, notify: make(chan struct{}, 1)}
	opts := &imapclient.Options{
		TLSConfig: &tls.Config{ServerName: p.cfg.IMAPHost, MinVersion: tls.VersionTLS12},
		Dialer:    &net.Dialer{Timeout: p.cfg.Timeout},
		UnilateralDataHandler: &imapclient.UnilateralDataHandler{
			Mailbox: func(d *imapclient.UnilateralDataMailbox) {
				if d.NumMessages != nil {
					select {
					case s.notify <- struct{}{}:
					default:
					}
				}
			},
		},
	}
	addr := net.JoinHostPort(p.cfg.IMAPHost, strconv.Itoa(p.cfg.IMAPPort))
	var err error
	switch tlsMode(p.cfg.IMAPTLS, p.cfg.IMAPPort, 993) {
	case TLSImplicit:
		s.c, err = imapclient.DialTLS(addr, opts)
	case TLSNone:
		s.c, err = imapclient.DialInsecure(addr, opts)
	default:
		s.c, err = imapclient.DialStartTLS(addr, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("imap dial %s: %w", addr, err)
	}
	err = s.do(func() error { return s.c.Login(p.cfg.Address, p.cfg.Password).Wait() })
	if err != nil {
		_ = s.c.Close()
		return nil, p.imapLoginError(err)
	}
	return s, nil
}

// Connect reads the mailbox until ctx ends or the connection fails: new
// messages by UID, then IDLE until the server reports more (or polling
// at the interval when it has no IDLE).
func (p *Platform) Connect(ctx context.Context, conn platform.Conn) error {
	st, err := p.open(ctx)
	if err != nil {
		return err
	}
	s, err := p.dial()
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			_ = s.c.Close()
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
		_ = s.c.Close()
	}()
	err = p.read(ctx, s, st, conn)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (p *Platform) read(ctx context.Context, s *session, st buckets, conn platform.Conn) error {
	var sel *imap.SelectData
	err := s.do(func() (err error) {
		sel, err = s.c.Select(p.cfg.Mailbox, nil).Wait()
		return err
	})
	if err != nil {
		return fmt.Errorf("imap select %s: %w", p.cfg.Mailbox, err)
	}
	cur, rev, err := p.loadCursor(ctx, st)
	if err != nil {
		return err
	}
	if rev == 0 || cur.UIDValidity != sel.UIDValidity {
		cur, rev, err = p.startCursor(ctx, s, st, sel, cur, rev, conn)
		if err != nil {
			return err
		}
	}
	conn.Connected()
	idle := s.c.Caps().Has(imap.CapIdle) || s.c.Caps().Has(imap.CapIMAP4rev2)
	p.log.Info("email: reading the mailbox", "mailbox", p.cfg.Mailbox, "idle", idle, "after_uid", cur.UID)
	for {
		var err error
		cur, rev, err = p.drain(ctx, s, st, cur, rev, conn)
		if err != nil {
			return err
		}
		if idle {
			err = p.idle(ctx, s)
		} else {
			err = p.wait(ctx, s)
		}
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// idle waits with IDLE until the server reports new mail, IdleRefresh
// passes or ctx ends.
func (p *Platform) idle(ctx context.Context, s *session) error {
	var cmd *imapclient.IdleCommand
	err := s.do(func() (err error) {
		cmd, err = s.c.Idle()
		return err
	})
	if err != nil {
		return fmt.Errorf("imap idle: %w", err)
	}
	t := time.NewTimer(p.cfg.IdleRefresh)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-s.notify:
	case <-t.C:
	case <-s.c.Closed():
	}
	if err := s.do(cmd.Close); err != nil && ctx.Err() == nil {
		return fmt.Errorf("imap idle done: %w", err)
	}
	// The server's answer to DONE is bounded too: over a connection that
	// died without a reset it never comes, and the reader would wait for
	// the kernel to give up on it (a quarter of an hour).
	if err := s.do(cmd.Wait); err != nil && ctx.Err() == nil {
		return fmt.Errorf("imap idle: %w", err)
	}
	return nil
}

// wait sleeps the poll interval, then asks the server for news (NOOP).
func (p *Platform) wait(ctx context.Context, s *session) error {
	t := time.NewTimer(time.Duration(p.cfg.PollInterval))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-s.c.Closed():
		return errors.New("imap connection closed")
	case <-t.C:
	}
	if err := s.do(func() error { return s.c.Noop().Wait() }); err != nil {
		return fmt.Errorf("imap noop: %w", err)
	}
	return nil
}

// startCursor places the cursor of a mailbox read for the first time,
// or whose UIDVALIDITY changed (its UIDs were renumbered). The first
// time, mail already there is left alone, as Hermes leaves it: reading
// starts with the next message. After a renumbering, the messages not
// yet \Seen that arrived since the cursor was last written (a day's
// margin: SEARCH SINCE has a day's resolution, in the server's time
// zone) are read (one already published is a duplicate the seen record
// catches), then the cursor goes past the last message. Older unseen mail
// is what the first start left alone, or what a person left unread: not
// answered months late.
func (p *Platform) startCursor(ctx context.Context, s *session, st buckets, sel *imap.SelectData, old cursor, rev uint64,
	conn platform.Conn) (cursor, uint64, error) {
	last, err := p.lastUID(s, sel)
	if err != nil {
		return cursor{}, 0, err
	}
	if rev != 0 {
		p.log.Warn("email: the mailbox's UIDVALIDITY changed; reading its unseen mail again",
			"mailbox", p.cfg.Mailbox, "old", old.UIDValidity, "new", sel.UIDValidity)
		var unseen []imap.UID
		err := s.do(func() error {
			since := old.At
			if since.IsZero() {
				since = time.Now().Add(-renumberedWindow)
			}
			data, err := s.c.UIDSearch(&imap.SearchCriteria{NotFlag: []imap.Flag{imap.FlagSeen}, Since: since.Add(-24 * time.Hour)}, nil).Wait()
			if err == nil {
				unseen = data.AllUIDs()
			}
			return err
		})
		if err != nil {
			return cursor{}, 0, fmt.Errorf("imap search unseen: %w", err)
		}
		slices.Sort(unseen)
		cur := cursor{UIDValidity: sel.UIDValidity}
		for _, uid := range unseen {
			if uid > last {
				break
			}
			if err := p.handle(ctx, s, uid, conn); err != nil {
				return cursor{}, 0, err
			}
		}
		cur.UID = uint32(last)
		rev, err = p.storeCursor(ctx, st, cur, rev)
		return cur, rev, err
	}
	cur := cursor{UIDValidity: sel.UIDValidity, UID: uint32(last)}
	rev, err = p.storeCursor(ctx, st, cur, 0)
	if err != nil {
		return cursor{}, 0, err
	}
	p.log.Info("email: first read of the mailbox: the mail already there is left alone", "mailbox", p.cfg.Mailbox, "messages", sel.NumMessages)
	return cur, rev, nil
}

// lastUID is the highest UID the mailbox had when it was selected (0
// when empty): UIDNEXT less one, which a message delivered since (after
// the SELECT, before a SEARCH) is above; searching only when the server
// sent no UIDNEXT.
func (p *Platform) lastUID(s *session, sel *imap.SelectData) (imap.UID, error) {
	if sel.UIDNext > 0 {
		return sel.UIDNext - 1, nil
	}
	if sel.NumMessages == 0 {
		return 0, nil
	}
	var uids []imap.UID
	err := s.do(func() error {
		data, err := s.c.UIDSearch(&imap.SearchCriteria{}, nil).Wait()
		if err == nil {
			uids = data.AllUIDs()
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("imap search: %w", err)
	}
	if len(uids) == 0 {
		return 0, nil
	}
	return slices.Max(uids), nil
}

// drain handles every message above the cursor, in UID order, moving the
// cursor past each.
func (p *Platform) drain(ctx context.Context, s *session, st buckets, cur cursor, rev uint64, conn platform.Conn) (cursor, uint64, error) {
	var uids []imap.UID
	err := s.do(func() error {
		var set imap.UIDSet
		set.AddRange(imap.UID(cur.UID+1), 0)
		data, err := s.c.UIDSearch(&imap.SearchCriteria{UID: []imap.UIDSet{set}}, nil).Wait()
		if err == nil {
			uids = data.AllUIDs()
		}
		return err
	})
	if err != nil {
		return cur, rev, fmt.Errorf("imap search new mail: %w", err)
	}
	slices.Sort(uids)
	for _, uid := range uids {
		if uint32(uid) <= cur.UID {
			continue // "n:*" names the last message even when it is older
		}
		if ctx.Err() != nil {
			return cur, rev, nil
		}
		if err := p.handle(ctx, s, uid, conn); err != nil {
			return cur, rev, err
		}
		next := cursor{UIDValidity: cur.UIDValidity, UID: uint32(uid)}
		if rev, err = p.storeCursor(ctx, st, next, rev); err != nil {
			return cur, rev, err
		}
		cur = next
	}
	return cur, rev, nil
}

// handle reads one message and publishes it, unless it is skipped, then
// flags it \Seen. An error means it was not stored: it is read again.
func (p *Platform) handle(ctx context.Context, s *session, uid imap.UID, conn platform.Conn) error {
	var size int64
	var raw []byte
	err := s.do(func() error {
		msgs, err := s.c.Fetch(imap.UIDSetNum(uid), &imap.FetchOptions{UID: true, RFC822Size: true}).Collect()
		if err != nil || len(msgs) == 0 {
			return err
		}
		size = msgs[0].RFC822Size
		return nil
	})
	if err != nil {
		return fmt.Errorf("imap fetch size of %d: %w", uid, err)
	}
	log := p.log.With("uid", uint32(uid))
	section := &imap.FetchItemBodySection{Peek: true}
	cut := size > p.cfg.MaxMessageBytes
	if cut {
		// Its first MaxMessageBytes: the header and the text come first,
		// the attachments that make it large after them. The sender gets
		// an answer, and the agent is told what is missing.
		cutTotal.Inc()
		log.Info("email: message over max_message_bytes; reading its beginning", "bytes", size, "limit", p.cfg.MaxMessageBytes)
		section.Partial = &imap.SectionPartial{Size: p.cfg.MaxMessageBytes}
	}
	err = s.do(func() error {
		msgs, err := s.c.Fetch(imap.UIDSetNum(uid), &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{section}}).Collect()
		if err != nil {
			return err
		}
		if len(msgs) > 0 {
			raw = msgs[0].FindBodySection(section)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("imap fetch %d: %w", uid, err)
	}
	if raw == nil {
		log.Warn("email: message gone before it was read") // expunged meanwhile
		return nil
	}
	var note string
	if cut {
		note = fmt.Sprintf("[This email is %s; only its first %s were read: what came after, attachments included, is missing.]",
			attachment.Size(size), attachment.Size(p.cfg.MaxMessageBytes))
	}
	// A message whose handling panics is skipped (logged, counted) and
	// flagged and passed like a malformed one: read again, it would
	// panic again and hold back every message after it.
	var perr error
	platform.Receive(ctx, conn, log, "email", strconv.FormatUint(uint64(uid), 10), raw, func() { perr = p.publish(ctx, raw, note, conn, log) })
	if perr != nil {
		return perr
	}
	err = s.do(func() error {
		return s.c.Store(imap.UIDSetNum(uid), &imap.StoreFlags{Op: imap.StoreFlagsAdd, Silent: true, Flags: []imap.Flag{imap.FlagSeen}}, nil).Close()
	})
	if err != nil {
		if s.c.State() == imap.ConnStateLogout || errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("imap flag %d seen: %w", uid, err)
		}
		log.Warn("email: flagging a handled message \\Seen failed", "err", err)
	}
	return nil
}

// publish normalizes one raw message and hands it to the kit, or skips
// it: malformed, the agent's own, automated. A note (a message read in
// part) ends its text. An error means it was not stored.
func (p *Platform) publish(ctx context.Context, raw []byte, note string, conn platform.Conn, log *slog.Logger) error {
	maxPart := p.attachments.MaxBytes
	if maxPart <= 0 {
		maxPart = 20 << 20
	}
	m, err := parse(raw, maxPart, p.cfg.SkipAttachments)
	if err != nil {
		skipped.WithLabelValues("malformed").Inc()
		conn.Reject(ctx, "malformed email", err)
		return nil
	}
	switch {
	case m.From == p.cfg.Address:
		skipped.WithLabelValues("own").Inc()
		log.Debug("email: skipping the agent's own mail")
		return nil
	case m.Automated != "":
		skipped.WithLabelValues("automated").Inc()
		log.Info("email: skipping automated mail", "reason", m.Automated)
		return nil
	}
	if p.cfg.RequireAuthenticatedSender {
		_, domain, _ := strings.Cut(m.From, "@")
		if a := authenticate(m.AuthResults, p.cfg.AuthservID, p.cfg.AuthenticatedBy, domain); !a.OK {
			skipped.WithLabelValues("auth_" + a.Reason).Inc()
			log.Warn("email: skipping mail whose sender is not authenticated", "reason", a.Reason,
				"from_domain", domain, "authserv_id", p.cfg.AuthservID, "results", a.Verdict, "message_id", pseudonym.Personal(m.MessageID))
			return nil
		}
	}
	if note != "" {
		m.Text = strings.TrimSpace(m.Text + "\n\n" + note)
	}
	id := eventID(m, raw)
	if err := p.putThread(ctx, m); err != nil {
		return err
	}
	ev := event(m, id, p.cfg.Address, p.attachments.Enabled)
	p.keepAttachments(ctx, ev, log)
	if _, err := conn.Deliver(ctx, ev); err != nil && !errors.Is(err, platform.ErrRejected) {
		return fmt.Errorf("deliver email: %w", err)
	}
	return nil
}

// keepAttachments moves the attachments ev carries as data: URLs into
// the attachment store, under the names the kit gives them. One the store
// refuses (full, out of reach, over attachments.max_bytes) cannot be read
// again once the mail is flagged \Seen and the watermark passes it, so
// the agent is told in the text, as of a mail read in part, and it is
// counted and logged. (The mail is not read again for it: a store that
// is full stays full until old attachments expire, and one out of reach
// fails the publish too, which does read the mail again.)
func (p *Platform) keepAttachments(ctx context.Context, ev *eventsv1.MessageReceived, log *slog.Logger) {
	if p.store == nil {
		return
	}
	var notes []string
	for i, a := range ev.GetAttachments() {
		if !strings.HasPrefix(a.GetUrl(), "data:") {
			continue
		}
		data, _, _, err := attachment.ParseDataURL(a.GetUrl())
		if err == nil {
			var n int64
			name := attachment.Name(p.Name(), p.Account(), ev.GetEventId(), i)
			if n, err = p.store.Keep(ctx, name, a.GetMimeType(), bytes.NewReader(data)); err == nil {
				a.Location, a.SizeBytes = &eventsv1.Attachment_BytesRef{BytesRef: name}, n
				continue
			}
		}
		a.Location = nil
		why := "not kept"
		a.Unavailable = "it could not be kept"
		if errors.Is(err, attachment.ErrTooLarge) {
			why = "too large"
			a.Unavailable = fmt.Sprintf("it is too large (the limit is %s)", attachment.Size(p.store.Config().MaxBytes))
		}
		attachmentsLost.WithLabelValues(strings.ReplaceAll(why, " ", "_")).Inc()
		log.Warn("email: attachment not kept", "event_id", pseudonym.Personal(ev.GetEventId()), "index", i, "bytes", a.GetSizeBytes(), "err", err)
		notes = append(notes, fmt.Sprintf("[The attachment %q (%s, %s) could not be kept (%s): it cannot be read, and the sender would have to send it again.]",
			a.GetFileName(), a.GetMimeType(), attachment.Size(a.GetSizeBytes()), why))
	}
	if len(notes) > 0 {
		ev.Text = strings.TrimSpace(ev.GetText() + "\n\n" + strings.Join(notes, "\n"))
	}
}

// kvKey makes any string a valid, fixed-length KV key.
func kvKey(parts ...string) string {
	h := sha256.New()
	for _, s := range parts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:20])
}

func (p *Platform) cursorKey() string { return kvKey(p.cfg.Address, p.cfg.IMAPHost, p.cfg.Mailbox) }

// loadCursor reads the cursor; revision 0 when there is none.
func (p *Platform) loadCursor(ctx context.Context, st buckets) (cursor, uint64, error) {
	e, err := st.cursors.Get(ctx, p.cursorKey())
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return cursor{}, 0, nil
	}
	if err != nil {
		return cursor{}, 0, fmt.Errorf("read email cursor: %w", err)
	}
	var c cursor
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return cursor{}, 0, fmt.Errorf("email cursor: %w", err)
	}
	return c, e.Revision(), nil
}

// storeCursor writes the cursor over revision rev (0: creates it): a
// replica that lost the lease and still reads finds the revision moved
// and stops, rather than move it back.
func (p *Platform) storeCursor(ctx context.Context, st buckets, c cursor, rev uint64) (uint64, error) {
	return p.storeCursorAt(ctx, st, c, rev, time.Now())
}

// storeCursorAt is storeCursor as of at.
func (p *Platform) storeCursorAt(ctx context.Context, st buckets, c cursor, rev uint64, at time.Time) (uint64, error) {
	c.At = at.UTC().Truncate(time.Second)
	b, _ := json.Marshal(c)
	var next uint64
	var err error
	if rev == 0 {
		next, err = st.cursors.Create(ctx, p.cursorKey(), b)
	} else {
		next, err = st.cursors.Update(ctx, p.cursorKey(), b, rev)
	}
	if err != nil {
		return rev, fmt.Errorf("store email cursor: %w", err)
	}
	return next, nil
}
