package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// Hermes refuses a run beyond gateways.api.max_concurrent_runs (10)
// running at once. Here the runs of every replica count: a run holds one
// of max_concurrent_runs slots, a key of the KV bucket
// GATEWAY_API_RUN_SLOTS ("slot.<n>") whose value is the run id, from the
// moment it is accepted until it ends. A slot is taken with Create (one
// replica wins it) and given back when the run ends, on whichever
// replica records the end. A slot whose run can no longer give it back —
// its replica crashed, its end was never recorded — is taken over by the
// next run that finds every slot held: a slot is free when its run has
// ended or is no longer kept (run_ttl after its last write). So the
// count survives any replica's crash, at the price of a scan of the
// slots (and of their runs' records) when they all look held.
//
// The slots are a bucket of their own rather than keys of
// GATEWAY_API_RUNS: that bucket drops its least recently written keys
// when it is full and expires them after run_ttl, either of which would
// free a slot whose run still runs.

// BucketRunSlots is the KV bucket (before the topology prefix) of the
// concurrent runs' slots.
const BucketRunSlots = "GATEWAY_API_RUN_SLOTS"

// defaultMaxConcurrentRuns is Hermes's cap.
const defaultMaxConcurrentRuns = 10

// runSlots hands out the slots of concurrent runs.
type runSlots struct {
	kv  *kvBucket
	max int
	// ended reports whether run id has ended or is no longer kept: its
	// slot is free.
	ended func(ctx context.Context, id string) (bool, error)
}

func newRunSlots(b *bus.Bus, max int, ended func(ctx context.Context, id string) (bool, error)) *runSlots {
	return &runSlots{max: max, ended: ended, kv: &kvBucket{bus: b, cfg: jetstream.KeyValueConfig{
		Bucket: BucketRunSlots, Description: "slots of the API's concurrent runs (gateways.api.max_concurrent_runs): slot.<n> = run id",
		History: 1, MaxBytes: 1 << 20,
	}}}
}

func slotKey(n int) string { return "slot." + strconv.Itoa(n) }

// take gives run id a slot: its number (from 1), or 0 when every slot is
// held by a run that goes on. With no cap, every run gets slot 0 too
// (none is held).
func (rs *runSlots) take(ctx context.Context, id string) (int, error) {
	if rs.max <= 0 {
		return 0, nil
	}
	kv, err := rs.kv.open(ctx)
	if err != nil {
		return 0, err
	}
	// First a free slot; then, when all are held, one whose run ended.
	for n := range rs.max {
		if _, err := kv.Create(ctx, slotKey(n), []byte(id)); err == nil {
			return n + 1, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("take run slot: %w", err)
		}
	}
	for n := range rs.max {
		e, err := kv.Get(ctx, slotKey(n))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Given back since: take it as new.
			if _, err := kv.Create(ctx, slotKey(n), []byte(id)); err == nil {
				return n + 1, nil
			}
			continue
		case err != nil:
			return 0, fmt.Errorf("read run slot: %w", err)
		}
		holder := string(e.Value())
		if holder == id {
			return n + 1, nil
		}
		ended, err := rs.ended(ctx, holder)
		if err != nil {
			return 0, err
		}
		if !ended {
			continue
		}
		// Another replica may take it over at the same time: the
		// revision decides.
		if _, err := kv.Update(ctx, slotKey(n), []byte(id), e.Revision()); err == nil {
			return n + 1, nil
		}
		// Or its run's replica gave it back meanwhile (it records the
		// end, then deletes the slot): take it as new.
		if _, err := kv.Create(ctx, slotKey(n), []byte(id)); err == nil {
			return n + 1, nil
		}
	}
	return 0, nil
}

// give gives back slot n (from 1) of run id, if the run still holds it.
func (rs *runSlots) give(ctx context.Context, id string, n int) error {
	if n <= 0 {
		return nil
	}
	kv, err := rs.kv.open(ctx)
	if err != nil {
		return err
	}
	e, err := kv.Get(ctx, slotKey(n-1))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read run slot: %w", err)
	case string(e.Value()) != id:
		return nil // taken over by another run
	}
	if err := kv.Delete(ctx, slotKey(n-1), jetstream.LastRevision(e.Revision())); err != nil {
		// Taken over meanwhile (the revision moved) is no failure.
		if now, gerr := kv.Get(ctx, slotKey(n-1)); errors.Is(gerr, jetstream.ErrKeyNotFound) || (gerr == nil && string(now.Value()) != id) {
			return nil
		}
		return fmt.Errorf("give back run slot: %w", err)
	}
	return nil
}
