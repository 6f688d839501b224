package platform

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A send that takes several platform calls (Telegram posts each
// attachment as a message of its own) is not atomic: when a later call
// fails, delivery retries the whole send under the same idempotency key.
// The parts an attempt sent are recorded, beside the send's receipt, so
// that the retry skips them instead of posting them again. A record that
// could not be stored (NATS unavailable at that moment) is held by its
// replica as a receipt is (heldReceipts): the send's reservation then
// stays behind when the send fails, so that a retry reaching another
// replica asks this one, and gets the parts sent already.

type partsKey struct{}

// partSuffix, and the part's number, follow the send's receipt key in a
// part record's key.
const partSuffix = ".part"

// parts records the parts of one send in the receipts bucket.
type parts struct {
	r   *Runner
	key string // the send's receipt key
	// until is the end of the send's reservation's lifetime: a record
	// not stored is held so long.
	until time.Time
	// known are the parts an earlier attempt on another replica sent,
	// as that replica answered (its records held there, not stored).
	known map[int]string
}

func withParts(ctx context.Context, p parts) context.Context {
	return context.WithValue(ctx, partsKey{}, p)
}

func partKey(receiptKey string, i int) string { return receiptKey + partSuffix + strconv.Itoa(i) }

// SentPart returns the platform message id of part i of the send being
// performed with ctx, when an earlier attempt sent it. Sends without an
// idempotency key, and platforms that keep no receipts, record nothing.
func SentPart(ctx context.Context, i int) (string, bool) {
	p, ok := ctx.Value(partsKey{}).(parts)
	if !ok {
		return "", false
	}
	key := partKey(p.key, i)
	if id := p.r.held.get(key); id != nil {
		// Held as long as this attempt's reservation, which a retry
		// after it asks about.
		p.r.holdEntry(key, id, p.until)
		return string(id), true
	}
	if id, ok := p.known[i]; ok {
		return id, true
	}
	e, err := p.r.receipts.Get(ctx, key)
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
	p.record(context.WithoutCancel(ctx), i, id)
}

// record stores part i's record, or holds it when the store fails.
func (p parts) record(ctx context.Context, i int, id string) {
	key := partKey(p.key, i)
	if err := p.r.storeEntry(ctx, key, []byte(id)); err != nil {
		p.r.log.Warn("record sent part failed; held and stored again in the background", "part", i, "err", err)
		p.r.holdEntry(key, []byte(id), p.until)
	}
}

// recordKnown records the parts another replica held (known) here too,
// stored or held: the reservation names this replica now, so a retry
// after this attempt asks it, not the replica that knew them.
func (p parts) recordKnown(ctx context.Context) {
	for i, id := range p.known {
		p.record(ctx, i, id)
	}
}
