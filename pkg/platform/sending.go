package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// sendingAskTimeout bounds the question to the replica whose reservation
// a send found (whether it is still sending the key). Unanswered, the
// replica counts as alive: the send waits out the reservation.
const sendingAskTimeout = time.Second

// goneGrace is how long after a first "no responders" the replica that
// reserved a key is asked again before it counts as gone: a replica only
// reconnecting gets the same answer (bus.GoneGrace), its send goes on at
// the platform meanwhile, and taking its key over would post the message
// twice.
const goneGrace = bus.GoneGrace

// inProgress is the receipts bucket's value for a key whose send is under
// way: not a protobuf SendReceipt (field number 0 is invalid). The entry's
// header names the replica sending it (headerReservedBy); a release
// before wrote the name after the value instead, and one before that
// wrote no name.
var inProgress = []byte{0, 'i', 'n', '-', 'p', 'r', 'o', 'g', 'r', 'e', 's', 's'}

// headerReservedBy, on a reservation's entry in the receipts bucket,
// names the replica that wrote it (its instance). The value stays
// inProgress alone: a replica of a release before names takes only that
// exact value for a send under way and sends past any other entry that
// is no receipt, so in a rolling upgrade a retry reaching one of them
// would post the message a second time.
const headerReservedBy = "Switchboard-Reserved-By"

// reservedBy reports whether v is an in-progress value and, if so, the
// instance it names after inProgress ("" for none).
func reservedBy(v []byte) (instance string, ok bool) {
	if !bytes.HasPrefix(v, inProgress) {
		return "", false
	}
	return string(v[len(inProgress):]), true
}

// holderOf is the instance that wrote the reservation e: named in its
// value (a release before) or in its header; "" when neither names one
// or the header cannot be read (its holder is then waited out).
func (r *Runner) holderOf(ctx context.Context, e jetstream.KeyValueEntry) string {
	if name, _ := reservedBy(e.Value()); name != "" {
		return name
	}
	m, err := r.receiptsStream.GetMsg(ctx, e.Revision())
	if err != nil {
		r.log.Debug("read a reservation's holder", "err", err)
		return ""
	}
	return m.Header.Get(headerReservedBy)
}

// receiptSubject is the receipts bucket's subject of key: the bucket's
// own ("$KV.<bucket>.<key>"; this bus has no JetStream API prefix).
func (r *Runner) receiptSubject(key string) string {
	return "$KV." + r.bucket(BucketReceipts) + "." + key
}

// writeReservation writes this replica's reservation of key over the
// key's revision last (0: none), named in its header: the bucket's
// Update (or Create, at 0) with the header the bucket's calls do not
// write.
func (r *Runner) writeReservation(ctx context.Context, key string, last uint64) (uint64, error) {
	m := nats.NewMsg(r.receiptSubject(key))
	m.Data = inProgress
	m.Header.Set(headerReservedBy, r.opts.Instance)
	ack, err := r.bus.JetStream().PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(last))
	if err != nil {
		return 0, fmt.Errorf("reserve %s: %w", key, err)
	}
	return ack.Sequence, nil
}

// createReservation is writeReservation of a key with no entry, or whose
// entry was deleted (a failed send frees its key so), as the bucket's
// Create: jetstream.ErrKeyExists when another request wrote it first.
func (r *Runner) createReservation(ctx context.Context, key string) (uint64, error) {
	rev, err := r.writeReservation(ctx, key, 0)
	if !wrongRevision(err) {
		return rev, err
	}
	last, lerr := r.receiptsStream.GetLastMsgForSubject(ctx, r.receiptSubject(key))
	if lerr == nil && deletedEntry(last) {
		if rev, err = r.writeReservation(ctx, key, last.Sequence); !wrongRevision(err) {
			return rev, err
		}
	}
	return 0, jetstream.ErrKeyExists
}

// wrongRevision reports whether err is the server's refusal of a write
// over a revision that is not the key's last.
func wrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// deletedEntry reports whether m marks its key deleted, as the bucket's
// Get reads it: the bucket's Delete or Purge, or a marker the server
// wrote.
func deletedEntry(m *jetstream.RawStreamMsg) bool {
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	switch m.Header.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}

// sendingKeys counts this replica's requests for each receipt key that
// are between their reservation's lookup and their send's end. A request
// is counted before it looks the reservation up, so a reservation this
// replica wrote is never seen unclaimed by another request of its own.
type sendingKeys struct {
	mu   sync.Mutex
	keys map[string]int
}

// add counts one request for key and returns the func that uncounts it.
func (s *sendingKeys) add(key string) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[string]int{}
	}
	s.keys[key]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.keys[key]--; s.keys[key] <= 0 {
			delete(s.keys, key)
		}
	}
}

// count is how many requests for key are counted.
func (s *sendingKeys) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key]
}

// Answers to a sending question. A replica of a release before
// receipts were held (heldReceipts) compares an answer with notSending
// only: sentReceipt, to it, is a replica alive and sending, which it
// waits out.
var (
	stillSending = []byte("1")
	notSending   = []byte("0")
	// sentReceipt, followed by the receipt (marshalled): sent, and the
	// receipt held here, not stored.
	sentReceipt = []byte("r")
	// sentParts, followed by the part records (JSON, part number to
	// platform message id): not sending; an attempt that failed sent
	// these parts, and their records are held here, not stored.
	sentParts = []byte("p")
)

// serveSending answers the other replicas' questions about this one's
// reservations (Topology.SendingSubject): whether the key asked about is
// being sent here now, or its receipt if it was sent and is held here,
// or the parts an attempt that failed sent, when their records are held
// here.
// It is unsubscribed after the sends in flight have ended; a replica
// killed mid-send no longer answers at all.
func (r *Runner) serveSending() (*nats.Subscription, error) {
	return r.bus.Conn().Subscribe(r.bus.Topology().SendingSubject(r.name, r.opts.Instance), func(m *nats.Msg) {
		key := string(m.Data)
		// Counted first: a send holds its receipt, or its parts, before
		// it is uncounted.
		sending := r.sending.count(key) > 0
		answer := notSending
		if held := r.held.get(key); held != nil {
			answer = append(append([]byte{}, sentReceipt...), held...)
		} else if sending {
			answer = stillSending
		} else if ps := r.held.parts(key); ps != nil {
			b, err := json.Marshal(ps)
			if err != nil {
				// Unanswered, the asking replica waits the reservation out.
				r.log.Warn("encode held part records", "err", err)
				return
			}
			answer = append(append([]byte{}, sentParts...), b...)
		}
		if err := m.Respond(answer); err != nil {
			r.log.Debug("answer sending question", "err", err)
		}
	})
}

// senderAlive reports whether the replica that reserved key may still be
// sending it, or the receipt of its send when it holds one (sent, its
// receipt not stored: heldReceipts), or, when it is not sending, the
// parts an attempt of its sent whose records it holds (known). A
// replica that is gone (nothing
// subscribed to its subject, still after goneGrace: NATS answers no
// responders at once, as it does after a kill -9 closed its connection)
// or that answers it is not sending the key is not; one that does not
// answer in time, or an unnamed reservation, may be.
func (r *Runner) senderAlive(ctx context.Context, key, instance string) (alive bool, sent *deliveryv1.SendReceipt, known map[int]string) {
	switch instance {
	case "":
		return true, nil, nil
	case r.opts.Instance:
		if sent := r.held.receipt(key); sent != nil {
			return true, sent, nil
		}
		// Counted, the asking request is one of them. Parts held here
		// the send finds itself (SentPart).
		return r.sending.count(key) > 1, nil, nil
	}
	answer, err := r.askSending(ctx, key, instance)
	if errors.Is(err, nats.ErrNoResponders) {
		// Gone, or reconnecting: asked again once a reconnect is over.
		if sleep(ctx, goneGrace); ctx.Err() != nil {
			return true, nil, nil
		}
		answer, err = r.askSending(ctx, key, instance)
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		r.log.Info("reservation of a gone replica taken over", "replica", instance)
		return false, nil, nil
	case err != nil:
		return true, nil, nil
	case bytes.HasPrefix(answer, sentReceipt):
		// A receipt that does not decode: alive, waited out.
		return true, duplicateOf(answer[len(sentReceipt):]), nil
	case bytes.HasPrefix(answer, sentParts):
		if err := json.Unmarshal(answer[len(sentParts):], &known); err != nil {
			// Parts that do not decode: alive, waited out, rather
			// than posted again.
			r.log.Warn("decode another replica's held part records", "replica", instance, "err", err)
			return true, nil, nil
		}
		if len(known) > maxHeldReceipts {
			// More than a replica holds: a confused one, whose parts
			// would each be recorded here before the send. Waited out.
			r.log.Warn("another replica's held part records are too many", "replica", instance, "parts", len(known))
			return true, nil, nil
		}
		return false, nil, known
	}
	return !bytes.Equal(answer, notSending), nil, nil
}

// askSending asks replica instance whether it is sending key now, within
// sendingAskTimeout.
func (r *Runner) askSending(ctx context.Context, key, instance string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, sendingAskTimeout)
	defer cancel()
	m, err := r.bus.Conn().RequestWithContext(ctx, r.bus.Topology().SendingSubject(r.name, instance), []byte(key))
	if err != nil {
		return nil, err
	}
	return m.Data, nil
}
