package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// The Responses API's responses are kept in a KV bucket, one record per
// response id: whose it is (the client identity), the conversation it
// belongs to (what previous_response_id continues) and the response as
// GET /v1/responses/{id} answers it. A record is written when the
// request is accepted (in progress: a request chaining on it continues
// its conversation even before the answer) and again when it ends; it
// lives gateways.api.response_ttl after its last write. Every replica
// reads the same records.

// BucketResponses is the KV bucket (before the topology prefix) of the
// Responses API's responses.
const BucketResponses = "GATEWAY_API_RESPONSES"

// defaultResponseTTL is how long a response is kept after its last
// write: 30 days, as OpenAI keeps them.
const defaultResponseTTL = 30 * 24 * time.Hour

// responseIDPattern is what a response id looks like (resp_ and the
// request id's random or hashed part); anything else is no response.
var responseIDPattern = regexp.MustCompile(`^resp_[A-Za-z0-9_]{1,100}$`)

// storedResponse is the record of a response.
type storedResponse struct {
	// Owner is the identity of the client that created it: no other
	// client can read, continue or delete it.
	Owner string `json:"owner"`
	// Session is the conversation it belongs to, as X-Session-Id names it.
	Session  string          `json:"session"`
	Response *responseObject `json:"response"`
}

type responseStore struct {
	kv *kvBucket
}

func newResponseStore(b *bus.Bus, ttl time.Duration) *responseStore {
	return &responseStore{kv: &kvBucket{bus: b, cfg: jetstream.KeyValueConfig{
		Bucket: BucketResponses, Description: "responses of the API's Responses endpoint", TTL: ttl, History: 1,
	}}}
}

// get returns the response id of owner; found is false when there is
// none (never created, deleted, expired, or another client's).
func (rs *responseStore) get(ctx context.Context, id, owner string) (rec storedResponse, found bool, err error) {
	if !responseIDPattern.MatchString(id) {
		return storedResponse{}, false, nil
	}
	kv, err := rs.kv.open(ctx)
	if err != nil {
		return storedResponse{}, false, err
	}
	e, err := kv.Get(ctx, kvKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return storedResponse{}, false, nil
	}
	if err != nil {
		return storedResponse{}, false, fmt.Errorf("read response record: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return storedResponse{}, false, fmt.Errorf("decode response record: %w", err)
	}
	if rec.Owner != owner || rec.Response == nil || rec.Response.ID != id {
		return storedResponse{}, false, nil
	}
	return rec, true, nil
}

// begin writes rec unless a record of its id exists (an earlier
// attempt's, with the same Idempotency-Key), which it leaves as it is.
// It returns the revision to update and whether this call wrote it.
func (rs *responseStore) begin(ctx context.Context, rec storedResponse) (rev uint64, created bool, err error) {
	kv, err := rs.kv.open(ctx)
	if err != nil {
		return 0, false, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, false, fmt.Errorf("encode response record: %w", err)
	}
	key := kvKey(rec.Response.ID)
	rev, err = kv.Create(ctx, key, data)
	if err == nil {
		return rev, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return 0, false, fmt.Errorf("write response record: %w", err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) { // deleted between the two calls
		return rs.begin(ctx, rec)
	}
	if err != nil {
		return 0, false, fmt.Errorf("read response record: %w", err)
	}
	return e.Revision(), false, nil
}

// update writes rec over revision rev. A record deleted or written again
// since (another attempt of a request with an Idempotency-Key) is left
// as it is: stale reports it.
func (rs *responseStore) update(ctx context.Context, rec storedResponse, rev uint64) (stale bool, err error) {
	kv, err := rs.kv.open(ctx)
	if err != nil {
		return false, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return false, fmt.Errorf("encode response record: %w", err)
	}
	_, err = kv.Update(ctx, kvKey(rec.Response.ID), data, rev)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("write response record: %w", err)
	}
	return false, nil
}

// remove deletes the record of id.
func (rs *responseStore) remove(ctx context.Context, id string) error {
	kv, err := rs.kv.open(ctx)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, kvKey(id)); err != nil {
		return fmt.Errorf("delete response record: %w", err)
	}
	return nil
}
