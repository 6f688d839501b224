package platform

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// A send's attempts may need to tell each other what happened (when the
// first began, that an attempt ended without knowing whether the platform
// sent the message). Marks are small named values kept beside the send's
// receipt, for as long as it, and shared by every replica.

func (p parts) markKey(name string) string { return p.key + ".mark." + name }

// SendMark records value under name for the send being performed with
// ctx unless an attempt of the send recorded one already, and returns
// the value kept: the first attempt's. ok is false when the send keeps
// no records (no idempotency key, or no receipts); value is returned
// then.
func SendMark(ctx context.Context, name, value string) (kept string, ok bool) {
	p, found := ctx.Value(partsKey{}).(parts)
	if !found {
		return value, false
	}
	_, err := p.r.receipts.Create(context.WithoutCancel(ctx), p.markKey(name), []byte(value))
	if err == nil {
		return value, true
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		if e, gerr := p.r.receipts.Get(ctx, p.markKey(name)); gerr == nil {
			return string(e.Value()), true
		}
	}
	p.r.log.Warn("record send mark failed", "mark", name, "err", err)
	return value, false
}

// SetSendMark records value under name for the send being performed
// with ctx, replacing what an earlier attempt recorded: a mark about the
// latest attempt (when it ended), where SendMark keeps the first's.
func SetSendMark(ctx context.Context, name, value string) {
	p, found := ctx.Value(partsKey{}).(parts)
	if !found {
		return
	}
	if _, err := p.r.receipts.Put(context.WithoutCancel(ctx), p.markKey(name), []byte(value)); err != nil {
		p.r.log.Warn("record send mark failed", "mark", name, "err", err)
	}
}

// SendMarked returns the value an attempt of the send being performed
// with ctx recorded under name.
func SendMarked(ctx context.Context, name string) (string, bool) {
	p, found := ctx.Value(partsKey{}).(parts)
	if !found {
		return "", false
	}
	e, err := p.r.receipts.Get(ctx, p.markKey(name))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			p.r.log.Warn("send mark lookup failed", "mark", name, "err", err)
		}
		return "", false
	}
	return string(e.Value()), true
}

// A platform whose later reports of a message carry data the send gave
// it (WhatsApp's biz_opaque_callback_data comes back in the message's
// sent, delivered and read statuses) can tell a retry what an attempt
// that ended without an answer did: each message of the send carries
// SendTag, the replica that receives the report records it with the
// Conn's ReportSent (SendReporter), and the retry reads SentReport
// before it posts.

// SendTag returns the tag of part part of the send being performed with
// ctx (a text 0, further messages 1, 2, …); ok is false when the send
// keeps no records (no idempotency key, or no receipts).
func SendTag(ctx context.Context, part int) (tag string, ok bool) {
	p, found := ctx.Value(partsKey{}).(parts)
	if !found {
		return "", false
	}
	return p.key + "/" + strconv.Itoa(part), true
}

// SentReport returns the platform message id a report recorded for part
// part of the send being performed with ctx.
func SentReport(ctx context.Context, part int) (string, bool) {
	return SendMarked(ctx, reportMark(part))
}

func reportMark(part int) string { return "reported" + strconv.Itoa(part) }

// SendReporter is implemented by the Runner's Conn.
type SendReporter interface {
	// ReportSent records that the platform reported the message of the
	// send part tagged tag (SendTag) as sent under id. A tag that is no
	// send tag of this gateway is ignored.
	ReportSent(ctx context.Context, tag, id string)
}

// ReportSent is SendReporter.ReportSent.
func (c *conn) ReportSent(ctx context.Context, tag, id string) {
	key, part, ok := parseSendTag(c.r.name, tag)
	if !ok || id == "" {
		return
	}
	p := parts{r: c.r, key: key}
	_, err := c.r.receipts.Create(context.WithoutCancel(ctx), p.markKey(reportMark(part)), []byte(id))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		c.r.log.Warn("record sent report failed", "err", err)
	}
}

// parseSendTag splits a tag SendTag made on platform name into the
// send's receipt key and the part; anything else (the tag comes back
// from outside) is refused.
func parseSendTag(name, tag string) (key string, part int, ok bool) {
	key, n, found := strings.Cut(tag, "/")
	hash, isOurs := strings.CutPrefix(key, name+".")
	if !found || !isOurs || len(hash) != 40 || strings.Trim(hash, "0123456789abcdef") != "" || len(n) > 4 {
		return "", 0, false
	}
	part, err := strconv.Atoi(n)
	if err != nil || part < 0 || strconv.Itoa(part) != n {
		return "", 0, false
	}
	return key, part, true
}
