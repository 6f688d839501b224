package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// The Responses API's responses are kept in a KV bucket, one record per
// response id: whose it is (the client identity), the conversation it
// belongs to (what previous_response_id continues), where in it its
// exchange ends (the turn that answered, from which a request may
// branch off), its instructions (which a request continuing it carries
// on) and the response as GET /v1/responses/{id} answers it. A record is
// written when the request is accepted (in progress: a request chaining
// on it continues its conversation even before the answer) and again
// when it ends; it lives gateways.api.response_ttl after its last
// write, and when the bucket holds gateways.api.responses_max_bytes the
// least recently written records make room, as if they had expired. A
// deleted response leaves a tombstone for as long, so that a retry of
// its request with the same Idempotency-Key cannot make it again. Every
// replica reads the same records. The bucket also keeps each
// conversation's head (below).

// BucketResponses is the KV bucket (before the topology prefix) of the
// Responses API's responses.
const BucketResponses = "GATEWAY_API_RESPONSES"

// defaultResponseTTL is how long a response is kept after its last
// write: 30 days, as OpenAI keeps them.
const defaultResponseTTL = 30 * 24 * time.Hour

// defaultResponsesMaxBytes bounds the bucket: 256 MiB, some thousands of
// responses of long answers.
const defaultResponsesMaxBytes = 256 << 20

// minResponsesMaxBytes is the least bound: one response as large as a
// NATS message (1 MiB by default).
const minResponsesMaxBytes = 1 << 20

// responseIDPattern is what a response id looks like (resp_ and the
// request id's random or hashed part); anything else is no response.
var responseIDPattern = regexp.MustCompile(`^resp_[A-Za-z0-9_]{1,100}$`)

// errResponseDeleted: the response of a retried request was deleted
// since an earlier attempt made it.
var errResponseDeleted = errors.New("response deleted")

// storedResponse is the record of a response.
type storedResponse struct {
	// Owner is the identity of the client that created it: no other
	// client can read, continue or delete it.
	Owner string `json:"owner"`
	// Session is the conversation it belongs to, as X-Session-Id names it.
	Session string `json:"session,omitempty"`
	// Turn and SessionKey are the turn that answered it and the session
	// key that turn ran under (set when it ends; empty while in progress
	// and when the request stopped waiting first): a request continuing
	// it after its conversation went on branches off there.
	Turn       string `json:"turn,omitempty"`
	SessionKey string `json:"session_key,omitempty"`
	// Instructions it was answered with: the request's own, or those it
	// carried on from the response it continued.
	Instructions string          `json:"instructions,omitempty"`
	Response     *responseObject `json:"response,omitempty"`
	// Deleted marks the tombstone of a deleted response.
	Deleted bool `json:"deleted,omitempty"`
}

// final reports whether the record holds a response's final answer
// (completed or failed), which no other attempt overwrites.
func (rec storedResponse) final() bool {
	return rec.Response != nil && (rec.Response.Status == "completed" || rec.Response.Status == "failed")
}

type responseStore struct {
	kv *kvBucket
}

func newResponseStore(b *bus.Bus, ttl time.Duration, maxBytes int64) *responseStore {
	return &responseStore{kv: &kvBucket{bus: b, discardOld: true, cfg: jetstream.KeyValueConfig{
		Bucket: BucketResponses, Description: "responses of the API's Responses endpoint", TTL: ttl, History: 1,
		MaxBytes: maxBytes,
	}}}
}

// bucket opens the KV bucket on first use.
func (rs *responseStore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	return rs.kv.open(ctx)
}

// get returns the response id of owner; found is false when there is
// none (never created, deleted, expired, or another client's).
func (rs *responseStore) get(ctx context.Context, id, owner string) (rec storedResponse, found bool, err error) {
	if !responseIDPattern.MatchString(id) {
		return storedResponse{}, false, nil
	}
	rec, _, found, err = rs.read(ctx, id)
	if err != nil || !found {
		return storedResponse{}, false, err
	}
	if rec.Deleted || rec.Owner != owner || rec.Response == nil || rec.Response.ID != id {
		return storedResponse{}, false, nil
	}
	return rec, true, nil
}

// read returns the record of id as it is stored, a tombstone included,
// and its revision; found is false when there is none.
func (rs *responseStore) read(ctx context.Context, id string) (rec storedResponse, rev uint64, found bool, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return storedResponse{}, 0, false, err
	}
	e, err := kv.Get(ctx, kvKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return storedResponse{}, 0, false, nil
	}
	if err != nil {
		return storedResponse{}, 0, false, fmt.Errorf("read response record: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return storedResponse{}, 0, false, fmt.Errorf("decode response record: %w", err)
	}
	return rec, e.Revision(), true, nil
}

// begin writes rec unless a record of its id exists (an earlier
// attempt's, with the same Idempotency-Key), which it leaves as it is.
// It returns the record as stored, its revision and whether this call
// wrote it; errResponseDeleted when the response was deleted since.
func (rs *responseStore) begin(ctx context.Context, rec storedResponse) (stored storedResponse, rev uint64, created bool, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return storedResponse{}, 0, false, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return storedResponse{}, 0, false, fmt.Errorf("encode response record: %w", err)
	}
	id := rec.Response.ID
	rev, err = kv.Create(ctx, kvKey(id), data)
	if err == nil {
		// The record as written, apart from the response the request
		// goes on to change.
		snapshot := *rec.Response
		rec.Response = &snapshot
		return rec, rev, true, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return storedResponse{}, 0, false, fmt.Errorf("write response record: %w", err)
	}
	stored, rev, found, err := rs.read(ctx, id)
	switch {
	case err != nil:
		return storedResponse{}, 0, false, err
	case !found: // removed between the two calls
		return rs.begin(ctx, rec)
	case stored.Deleted:
		return storedResponse{}, 0, false, errResponseDeleted
	case stored.Response == nil || stored.Owner != rec.Owner:
		return storedResponse{}, 0, false, fmt.Errorf("response record %s is not the request's", id)
	}
	return stored, rev, false, nil
}

// end writes o, the final state of the response of rec (read at
// revision rev), and where its answer ended (at, when known), over its
// record. Another attempt of a request with an Idempotency-Key may have
// written the record since: it is read again, and o is written over it
// unless it holds a final answer already (completed or failed: the
// first stays) or was deleted.
func (rs *responseStore) end(ctx context.Context, rec storedResponse, rev uint64, o *responseObject, at answerPoint) error {
	for attempt := 0; ; attempt++ {
		if rec.Deleted || rec.Response == nil || rec.final() {
			return nil
		}
		next := rec
		next.Response = o
		if at.turn != "" {
			next.Turn, next.SessionKey = at.turn, at.sessionKey
		}
		stale, err := rs.updateBounded(ctx, next, rev)
		if err != nil || !stale {
			return err
		}
		if attempt == 10 {
			return fmt.Errorf("write response record: written %d times meanwhile", attempt+1)
		}
		var found bool
		if rec, rev, found, err = rs.read(ctx, o.ID); err != nil {
			return err
		}
		if !found {
			// Expired while its answer was written: a stream, which
			// reply_timeout does not bound, outlasted response_ttl since
			// the request's write. (A response whose message was never
			// published is removed, and never ended.) Kept as it ends.
			if created, err := rs.recreate(ctx, next); err != nil || created {
				return err
			}
			if rec, rev, found, err = rs.read(ctx, o.ID); err != nil || !found {
				return err
			}
		}
	}
}

// updateBounded is update, of a smaller record each time NATS refuses
// one for its size (bounded): a response that ended is never left to
// read as in progress.
func (rs *responseStore) updateBounded(ctx context.Context, rec storedResponse, rev uint64) (stale bool, err error) {
	for {
		stale, err = rs.update(ctx, rec, rev)
		if !tooLarge(err) {
			return stale, err
		}
		smaller, ok := bounded(rec)
		if !ok {
			return false, err
		}
		rec = smaller
	}
}

// bounded is the record of an ended response made smaller, a step at a
// time, after NATS refused it for its size (a NATS message, 1 MiB by
// default, holds a record): first with its tool calls' results cut out
// (their function_call_output items stay, with an empty output), then
// without the oldest half of its tool calls' items, a call's items
// together, until none are left (a few writes, however many calls: the
// message's text is what makes a record too large, the items are
// bounded by toolItemsMax), then without its instructions (a response
// continuing it then gets none of them), and at last, when its answer
// alone does not fit, failed (response_too_large) without output — its
// request got the answer. ok is false when nothing is left to drop.
// rec's response is not changed: the request still answers with it.
func bounded(rec storedResponse) (smaller storedResponse, ok bool) {
	o := *rec.Response
	rec.Response = &o
	var calls []string // the tool calls' ids, oldest first
	results := false   // a result is still kept
	for _, m := range o.Output {
		if m.Type != "message" && !slices.Contains(calls, m.CallID) {
			calls = append(calls, m.CallID)
		}
		results = results || m.Type == "function_call_output" && len(m.Output) > 0
	}
	switch {
	case results:
		o.Output = slices.Clone(o.Output)
		for i, m := range o.Output {
			if m.Type == "function_call_output" {
				o.Output[i].Output = []outputPart{}
			}
		}
	case len(calls) > 0:
		oldest := calls[:(len(calls)+1)/2]
		o.Output = slices.DeleteFunc(slices.Clone(o.Output), func(m outputMessage) bool {
			return m.Type != "message" && slices.Contains(oldest, m.CallID)
		})
	case rec.Instructions != "" || o.Instructions != nil:
		rec.Instructions, o.Instructions = "", nil
	case o.Status != "failed" || len(o.Output) > 0 || o.Error == nil || o.Error.Code != responseTooLarge:
		o.Status, o.CompletedAt, o.Output, o.IncompleteDetails = "failed", nil, []outputMessage{}, nil
		o.Error = &responseError{Code: responseTooLarge,
			Message: "The response was too large to keep: its answer was given to the request that asked for it, and is not kept."}
	default:
		return storedResponse{}, false
	}
	return rec, true
}

// responseTooLarge is the error code of a response kept without its
// answer, which was too large to keep (bounded).
const responseTooLarge = "response_too_large"

// recreate writes rec unless a record of its id was written meanwhile
// (created is then false), smaller each time NATS refuses it for its
// size, as updateBounded.
func (rs *responseStore) recreate(ctx context.Context, rec storedResponse) (created bool, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return false, err
	}
	for {
		data, err := json.Marshal(rec)
		if err != nil {
			return false, fmt.Errorf("encode response record: %w", err)
		}
		_, err = kv.Create(ctx, kvKey(rec.Response.ID), data)
		if !tooLarge(err) {
			return createdOf(err)
		}
		smaller, ok := bounded(rec)
		if !ok {
			return false, fmt.Errorf("write response record: %w", err)
		}
		rec = smaller
	}
}

// createdOf is what recreate reports for its write's error err.
func createdOf(err error) (created bool, _ error) {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("write response record: %w", err)
	}
	return true, nil
}

// update writes rec over revision rev. A record deleted or written again
// since is left as it is: stale reports it.
func (rs *responseStore) update(ctx context.Context, rec storedResponse, rev uint64) (stale bool, err error) {
	kv, err := rs.bucket(ctx)
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

// bury replaces the record of rec's response, deleted by its client,
// with a tombstone.
func (rs *responseStore) bury(ctx context.Context, rec storedResponse) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(storedResponse{Owner: rec.Owner, Deleted: true})
	if err != nil {
		return fmt.Errorf("encode response record: %w", err)
	}
	if _, err := kv.Put(ctx, kvKey(rec.Response.ID), data); err != nil {
		return fmt.Errorf("delete response record: %w", err)
	}
	return nil
}

// remove deletes the record of id, leaving no tombstone: the response
// of a request that was never asked.
func (rs *responseStore) remove(ctx context.Context, id string) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, kvKey(id)); err != nil {
		return fmt.Errorf("delete response record: %w", err)
	}
	return nil
}

// A conversation's head is the latest response begun in it: the one a
// request with previous_response_id continues without branching off.
// It is kept in the same bucket, one record per client identity and
// conversation (X-Session-Id name), written by every Responses request
// that runs in the conversation, and lives as long as a response. A
// conversation without one (none recorded yet, or expired) counts the
// response continued as its latest.

// conversationHead is the record of a conversation's head.
type conversationHead struct {
	Response string `json:"response"`
	// Kept is the conversation's latest response kept (Response itself
	// when it was, an earlier one after a request with store: false):
	// the one whose instructions a request without carries on, as
	// Hermes's conversation names its latest response stored. "" in a
	// record written before it was.
	Kept string `json:"kept,omitempty"`
}

// headKey is the KV key of the head of owner's conversation session
// (no response id holds a NUL).
func headKey(owner, session string) string {
	return kvKey("conversation\x00" + owner + "\x00" + session)
}

// head returns the head of owner's conversation session and the
// revision it was read at; rev is 0 when there is none.
func (rs *responseStore) head(ctx context.Context, owner, session string) (id string, rev uint64, err error) {
	h, rev, err := rs.headRecord(ctx, owner, session)
	return h.Response, rev, err
}

// headRecord returns the head record of owner's conversation session
// and the revision it was read at; rev is 0 when there is none.
func (rs *responseStore) headRecord(ctx context.Context, owner, session string) (h conversationHead, rev uint64, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return conversationHead{}, 0, err
	}
	e, err := kv.Get(ctx, headKey(owner, session))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return conversationHead{}, 0, nil
	}
	if err != nil {
		return conversationHead{}, 0, fmt.Errorf("read conversation head: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return conversationHead{}, 0, fmt.Errorf("decode conversation head: %w", err)
	}
	return h, e.Revision(), nil
}

// advance makes id, a kept response, the head of owner's conversation
// session if the head is still as read at rev (0: there was none);
// moved reports that it was written since, and nothing was written.
func (rs *responseStore) advance(ctx context.Context, owner, session string, rev uint64, id string) (moved bool, err error) {
	return rs.advanceTo(ctx, owner, session, rev, conversationHead{Response: id, Kept: id})
}

// advanceTo writes h as the head of owner's conversation session if the
// head is still as read at rev, as advance.
func (rs *responseStore) advanceTo(ctx context.Context, owner, session string, rev uint64, h conversationHead) (moved bool, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return false, err
	}
	data, _ := json.Marshal(h)
	if rev == 0 {
		_, err = kv.Create(ctx, headKey(owner, session), data)
	} else {
		_, err = kv.Update(ctx, headKey(owner, session), data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("write conversation head: %w", err)
	}
	return false, nil
}

// setHead makes h the head of owner's conversation session, whatever
// it was.
func (rs *responseStore) setHead(ctx context.Context, owner, session string, h conversationHead) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(h)
	if _, err := kv.Put(ctx, headKey(owner, session), data); err != nil {
		return fmt.Errorf("write conversation head: %w", err)
	}
	return nil
}

// dropHead removes the head of owner's conversation session if it is
// still as read at rev.
func (rs *responseStore) dropHead(ctx context.Context, owner, session string, rev uint64) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	err = kv.Delete(ctx, headKey(owner, session), jetstream.LastRevision(rev))
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return fmt.Errorf("delete conversation head: %w", err)
	}
	return nil
}

// tooLarge reports a record write NATS refused for its size.
func tooLarge(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum)
}
