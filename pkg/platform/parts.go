package platform

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// A send that takes several platform calls (Telegram posts each
// attachment as a message of its own) is not atomic: when a later call
// fails, delivery retries the whole send under the same idempotency key.
// The parts an attempt sent are recorded, beside the send's receipt, so
// that the retry skips them instead of posting them again.

type partsKey struct{}

// parts records the parts of one send in the receipts bucket.
type parts struct {
	r   *Runner
	key string // the send's receipt key
}

func withParts(ctx context.Context, r *Runner, receiptKey string) context.Context {
	return context.WithValue(ctx, partsKey{}, parts{r: r, key: receiptKey})
}

func (p parts) partKey(i int) string { return p.key + ".part" + strconv.Itoa(i) }

// SentPart returns the platform message id of part i of the send being
// performed with ctx, when an earlier attempt sent it. Sends without an
// idempotency key, and platforms that keep no receipts, record nothing.
func SentPart(ctx context.Context, i int) (string, bool) {
	p, ok := ctx.Value(partsKey{}).(parts)
	if !ok {
		return "", false
	}
	e, err := p.r.receipts.Get(ctx, p.partKey(i))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			p.r.log.Warn("sent part lookup failed", "part", i, "err", err)
		}
		return "", false
	}
	return string(e.Value()), true
}

// RecordPart records that part i of the send being performed with ctx went
// out as the platform message id.
func RecordPart(ctx context.Context, i int, id string) {
	p, ok := ctx.Value(partsKey{}).(parts)
	if !ok {
		return
	}
	if _, err := p.r.receipts.Put(context.WithoutCancel(ctx), p.partKey(i), []byte(id)); err != nil {
		p.r.log.Warn("record sent part failed", "part", i, "err", err)
	}
}
