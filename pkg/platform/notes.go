package platform

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// A platform may keep a small note about one of its messages that a later
// request needs and the platform cannot tell cheaply (how many follow-on
// messages a Google Chat message goes on in): in the receipts bucket,
// durable, shared by the gateway's replicas, and kept as long as a
// receipt (Options.ReceiptTTL) after its last write. A request the
// Runner performs can read and write notes; one performed without it
// (a platform called directly) cannot (ErrNoNotes).

type notesKey struct{}

func withNotes(ctx context.Context, r *Runner) context.Context {
	if r.receipts == nil {
		return ctx
	}
	return context.WithValue(ctx, notesKey{}, r)
}

// ErrNoNotes is the answer of ReadNote and WriteNote for a request
// performed without the Runner.
var ErrNoNotes = errors.New("no notes: not performed by the platform runner")

// ErrNoteChanged is WriteNote's answer when another request wrote the
// note since its revision was read.
var ErrNoteChanged = errors.New("note written by another request since it was read")

func (r *Runner) noteKey(name string) string { return r.name + ".note." + hashKey(name) }

// ReadNote returns the note name (the platform's own name for it, say a
// message's) and its revision, for WriteNote; nil and 0 when there is
// none.
func ReadNote(ctx context.Context, name string) ([]byte, uint64, error) {
	r, ok := ctx.Value(notesKey{}).(*Runner)
	if !ok {
		return nil, 0, ErrNoNotes
	}
	e, err := r.receipts.Get(ctx, r.noteKey(name))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, 0, nil
	case err != nil:
		return nil, 0, fmt.Errorf("read note: %w", err)
	}
	return e.Value(), e.Revision(), nil
}

// WriteNote writes the note name as value, over the revision rev that
// ReadNote (or the last WriteNote) returned, 0 for none, and returns its
// new revision: ErrNoteChanged when another request wrote it since.
func WriteNote(ctx context.Context, name string, value []byte, rev uint64) (uint64, error) {
	r, ok := ctx.Value(notesKey{}).(*Runner)
	if !ok {
		return 0, ErrNoNotes
	}
	key := r.noteKey(name)
	var err error
	var next uint64
	if rev == 0 {
		next, err = r.receipts.Create(ctx, key, value)
	} else {
		next, err = r.receipts.Update(ctx, key, value, rev)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return 0, ErrNoteChanged
	case err != nil:
		return 0, fmt.Errorf("write note: %w", err)
	}
	return next, nil
}
