package platform

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// maxHeldReceipts bounds the entries a replica holds (heldReceipts),
// receipts and part records together: a NATS outage as long as the send
// timeout, at full send concurrency, holds far fewer.
const maxHeldReceipts = 4096

// heldRetryEvery is the wait between two stores of a held entry, and
// the bound of each.
const heldRetryEvery = 500 * time.Millisecond

// heldReceipts are the receipts bucket's entries of sends made here
// whose store failed (NATS unavailable at that moment), by their key:
// receipts, by receipt key, and the part records of sends made in
// several platform calls (RecordPart), by part key. The send's
// reservation stays behind meanwhile and names this replica: a retry of
// the key reaching it, or another replica asking it about the key
// (serveSending), gets the receipt, or the parts sent already, where it
// got "not sending" and the message, or its parts, were posted a second
// time. An entry is held until its store succeeds (retried in the
// background, storeHeld) or its reservation's lifetime is over, when
// other replicas no longer ask.
type heldReceipts struct {
	mu sync.Mutex
	m  map[string]heldReceipt
	// kept are the reservations of failed sends kept for their part
	// records held, by receipt key (keepFor).
	kept map[string]keptReservation
	// stores are the background stores (storeHeld) running, one per key
	// held; stop is closed as the runner stops, for each to try once
	// more and end.
	stores   sync.WaitGroup
	stop     chan struct{}
	stopOnce sync.Once
}

// stopping is closed as the runner stops (finish).
func (h *heldReceipts) stopping() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		h.stop = make(chan struct{})
	}
	return h.stop
}

// finish has every background store try once more at once and waits
// for them to end: a held entry outlives its runner by one store at
// most, bounded by heldRetryEvery. Called once no send runs, so no
// store starts after it.
func (h *heldReceipts) finish() {
	stop := h.stopping()
	h.stopOnce.Do(func() { close(stop) })
	h.stores.Wait()
}

type heldReceipt struct {
	data  []byte // the entry: a receipt marshalled, or a part's message id
	until time.Time
}

// hold keeps data as key's entry until until (or later, when key is held
// already with a later until); ok is false when too many are held
// already. fresh reports whether key was not held before: its background
// store is to be started, where a key held already has one.
func (h *heldReceipts) hold(key string, data []byte, until time.Time) (ok, fresh bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldReceipt{}
	}
	e, held := h.m[key]
	if !held && len(h.m) >= maxHeldReceipts {
		return false, false
	}
	if held && e.until.After(until) {
		until = e.until
	}
	h.m[key] = heldReceipt{data: data, until: until}
	return true, !held
}

// get is key's entry held; nil for none.
func (h *heldReceipts) get(key string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[key]
	if !ok || time.Now().After(e.until) {
		return nil
	}
	return e.data
}

// receipt is key's receipt held, as a repeat of the key gets it
// (Duplicate set); nil for none.
func (h *heldReceipts) receipt(key string) *deliveryv1.SendReceipt {
	return duplicateOf(h.get(key))
}

// parts are the part records held of the send whose receipt key is key,
// by part (partKey); nil for none.
func (h *heldReceipts) parts(key string) map[int]string {
	if key == "" {
		return nil // a liveness question (a watched fetch's): no send's
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.partsLocked(key)
}

// partsLocked is parts, h.mu held.
func (h *heldReceipts) partsLocked(key string) map[int]string {
	var ps map[int]string
	h.eachPartLocked(key, func(_ string, i int, e heldReceipt) {
		if ps == nil {
			ps = map[int]string{}
		}
		ps[i] = string(e.data)
	})
	return ps
}

// eachPartLocked calls fn with each part record held of the send whose
// receipt key is key, by its key and part, but those whose time is
// over; h.mu held.
func (h *heldReceipts) eachPartLocked(key string, fn func(k string, i int, e heldReceipt)) {
	prefix := key + partSuffix
	now := time.Now()
	for k, e := range h.m {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok || now.After(e.until) {
			continue
		}
		i, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		fn(k, i, e)
	}
}

// keptReservation is a failed send's reservation kept for its part
// records held (keepFor).
type keptReservation struct {
	rev   uint64
	until time.Time
}

// keepFor reports whether part records of the send whose receipt key is
// key are held and, when they are, notes its reservation (rev) as kept
// for them until until: freed once the last of them is stored (freed).
// Both in one step with the records' stores' ends (stored): a record
// stored just before is not kept for, one stored just after frees it.
// The records are held until until too: the reservation names this
// replica so long, and a retry reaching another replica asks it about
// them. A record an earlier attempt held, which this one did not read
// again (SentPart: it failed before that part), was let go at the end
// of the earlier reservation, and a retry then asking was told "not
// sending" and posted the part again.
func (h *heldReceipts) keepFor(key string, rev uint64, until time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := false
	h.eachPartLocked(key, func(k string, _ int, e heldReceipt) {
		held = true
		if e.until.Before(until) {
			e.until = until
			h.m[k] = e
		}
	})
	if !held {
		return false
	}
	now := time.Now()
	for k, e := range h.kept {
		if now.After(e.until) {
			delete(h.kept, k) // its records let go, or no longer asked about
		}
	}
	if h.kept == nil {
		h.kept = map[string]keptReservation{}
	}
	if len(h.kept) < maxHeldReceipts {
		// Beyond, kept until taken over, as a receipt's reservation is.
		h.kept[key] = keptReservation{rev: rev, until: until}
	}
	return true
}

// freed is the reservation to free now that part record partKey was
// stored: the one kept for its send (keepFor), once no other record of
// that send is held; ok is false for none.
func (h *heldReceipts) freed(partKey string) (key string, rev uint64, ok bool) {
	i := strings.LastIndex(partKey, partSuffix)
	if i < 0 {
		return "", 0, false
	}
	if _, err := strconv.Atoi(partKey[i+len(partSuffix):]); err != nil {
		return "", 0, false
	}
	key = partKey[:i]
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.kept[key]
	if !ok || h.partsLocked(key) != nil {
		return "", 0, false
	}
	delete(h.kept, key)
	return key, k.rev, true
}

// next is key's entry to store now; false when there is none, or its
// time is over (it is let go then).
func (h *heldReceipts) next(key string) (heldReceipt, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[key]
	if ok && !time.Now().Before(e.until) {
		delete(h.m, key)
		return heldReceipt{}, false
	}
	return e, ok
}

// stored lets key go once data was stored as its entry; false when key
// holds other data since, to be stored in turn.
func (h *heldReceipts) stored(key string, data []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.m[key]; ok && string(e.data) != string(data) {
		return false
	}
	delete(h.m, key)
	return true
}

func (h *heldReceipts) drop(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, key)
}

// duplicateOf is the receipt data, marshalled, as a repeat of its key
// gets it; nil when data is none or no receipt.
func duplicateOf(data []byte) *deliveryv1.SendReceipt {
	if data == nil {
		return nil
	}
	rec := &deliveryv1.SendReceipt{}
	if proto.Unmarshal(data, rec) != nil {
		return nil
	}
	rec.Duplicate = true
	return rec
}

// holdEntry holds data as key's entry in the receipts bucket (a receipt
// or a part record), whose store failed, until until, and stores it
// again in the background until that succeeds or until has passed; false
// when too many are held already.
func (r *Runner) holdEntry(key string, data []byte, until time.Time) bool {
	ok, fresh := r.held.hold(key, data, until)
	if !ok {
		r.log.Warn("receipt or part record not stored and not held: too many held", "held", maxHeldReceipts)
		return false
	}
	if fresh {
		r.held.stores.Add(1)
		go r.storeHeld(key)
	}
	return true
}

// storeHeld stores key's held entry until it succeeds, the entry's until
// has passed or the runner stops (one more try then), and lets it go.
// The entry is let go in the same step as its end is found (next,
// stored): a hold of the key just after starts a store of its own, one
// just before is stored here, and neither is dropped unstored.
func (r *Runner) storeHeld(key string) {
	defer r.held.stores.Done()
	stop := r.held.stopping()
	for last := false; !last; {
		e, ok := r.held.next(key)
		if !ok {
			r.log.Warn("held receipt or part record let go unstored: its reservation's lifetime is over")
			return
		}
		wait := time.NewTimer(min(heldRetryEvery, time.Until(e.until)))
		select {
		case <-wait.C:
		case <-stop:
			wait.Stop()
			last = true
		}
		// Read again: a hold meanwhile may have given other data.
		if e, ok = r.held.next(key); !ok {
			r.log.Warn("held receipt or part record let go unstored: its reservation's lifetime is over")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), heldRetryEvery)
		err := r.storeEntry(ctx, key, e.data)
		cancel()
		if err == nil && r.held.stored(key, e.data) {
			r.log.Info("held receipt or part record stored")
			r.freeKept(key)
			return
		}
		if err != nil {
			r.log.Debug("store held receipt or part record", "err", err)
		}
	}
	// The runner stops, no send runs: no hold comes after this.
	r.held.drop(key)
	r.log.Warn("held receipt or part record let go unstored: the gateway stopped")
}

// freeKept frees the reservation a failed send kept for its part records
// held (keepFor) once the last of them, key, is stored: a retry then
// finds the key free, as after any failed send, where it asked this
// replica about it or, once this replica stopped, waited out the grace
// of a gone one (goneGrace). Freed only while it is still the key's
// entry: not over a retry's reservation or receipt.
func (r *Runner) freeKept(key string) {
	key, rev, ok := r.held.freed(key)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), heldRetryEvery)
	defer cancel()
	if err := r.receipts.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		r.log.Debug("release send reservation kept for part records", "err", err)
	}
}
