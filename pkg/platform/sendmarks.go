package platform

import (
	"context"
	"errors"

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
