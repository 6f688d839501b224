package platform

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// maxHeldReceipts bounds the receipts a replica holds (heldReceipts): a
// NATS outage as long as the send timeout, at full send concurrency,
// holds far fewer.
const maxHeldReceipts = 4096

// heldRetryEvery is the wait between two stores of a held receipt, and
// the bound of each.
const heldRetryEvery = 500 * time.Millisecond

// heldReceipts are the receipts of sends made here whose store in the
// receipts bucket failed (NATS unavailable at that moment), by receipt
// key. The key's reservation stays behind meanwhile and names this
// replica: a retry of the key reaching it, or another replica asking it
// about the key (serveSending), gets the receipt, where it got "not
// sending" and the message was posted a second time. A receipt is held
// until its store succeeds (retried in the background, storeHeld) or its
// reservation's lifetime is over, when other replicas no longer ask.
type heldReceipts struct {
	mu sync.Mutex
	m  map[string]heldReceipt
	// stores are the background stores (storeHeld) running; stop is
	// closed as the runner stops, for each to try once more and end.
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
// for them to end: a held receipt outlives its runner by one store at
// most, bounded by heldRetryEvery. Called once no send runs, so no
// store starts after it.
func (h *heldReceipts) finish() {
	stop := h.stopping()
	h.stopOnce.Do(func() { close(stop) })
	h.stores.Wait()
}

type heldReceipt struct {
	data  []byte // the receipt, marshalled
	until time.Time
}

// hold keeps data as key's receipt until until; false when too many are
// held already.
func (h *heldReceipts) hold(key string, data []byte, until time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldReceipt{}
	}
	if _, ok := h.m[key]; !ok && len(h.m) >= maxHeldReceipts {
		return false
	}
	h.m[key] = heldReceipt{data: data, until: until}
	return true
}

// get is key's receipt held, marshalled; nil for none.
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

// holdReceipt holds key's receipt (data), whose store failed, until
// until, and stores it again in the background until that succeeds or
// until has passed.
func (r *Runner) holdReceipt(key string, data []byte, until time.Time) {
	if !r.held.hold(key, data, until) {
		r.log.Warn("receipt not stored and not held: too many held", "held", maxHeldReceipts)
		return
	}
	r.held.stores.Add(1)
	go r.storeHeld(key, data, until)
}

// storeHeld stores key's held receipt (data) until it succeeds, until
// has passed or the runner stops (one more try then), and lets it go.
func (r *Runner) storeHeld(key string, data []byte, until time.Time) {
	defer r.held.stores.Done()
	defer r.held.drop(key)
	stop := r.held.stopping()
	for last := false; !last && time.Now().Before(until); {
		wait := time.NewTimer(min(heldRetryEvery, time.Until(until)))
		select {
		case <-wait.C:
		case <-stop:
			wait.Stop()
			last = true
		}
		ctx, cancel := context.WithTimeout(context.Background(), heldRetryEvery)
		err := r.storeReceipt(ctx, key, data)
		cancel()
		if err == nil {
			r.log.Info("held receipt stored")
			return
		}
		r.log.Debug("store held receipt", "err", err)
	}
	r.log.Warn("held receipt let go unstored: its reservation's lifetime is over or the gateway stopped")
}
