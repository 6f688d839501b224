package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// Runs (Hermes's /v1/runs) are kept in a KV bucket, so that any replica
// answers for any run: one record per run — whose it is, its chat, and
// its status as GET /v1/runs/{id} answers it — under the run's key, and
// each of its events under "<run key>.<event key>", written once
// (Create: an event delivery sends twice is kept once), in the order
// they happened. GET /v1/runs/{id}/events watches "<run key>.*": the
// events so far, then each new one, on whichever replica wrote it. A
// record and its events live gateways.api.run_ttl after their last
// write; when the bucket holds gateways.api.runs_max_bytes the least
// recently written make room.

// BucketRuns is the KV bucket (before the topology prefix) of the runs.
const BucketRuns = "GATEWAY_API_RUNS"

// defaultRunTTL is how long a run is kept after its last write: an hour,
// as Hermes keeps a finished run's status.
const defaultRunTTL = time.Hour

// defaultRunsMaxBytes bounds the bucket: 64 MiB.
const defaultRunsMaxBytes = 64 << 20

// Run statuses, Hermes's names.
const (
	runQueued    = "queued"
	runRunning   = "running"
	runApproval  = "waiting_for_approval"
	runStopping  = "stopping"
	runCompleted = "completed"
	runFailed    = "failed"
	runCancelled = "cancelled"
)

// terminal reports whether a run in status st has ended.
func terminal(st string) bool {
	return st == runCompleted || st == runFailed || st == runCancelled
}

// runIDPattern is a run id: run_ and 32 hex digits, as Hermes's.
var runIDPattern = regexp.MustCompile(`^run_[0-9a-f]{32}$`)

// A run's messages are the run's own (its id) and the commands the
// gateway sends in its session for it, whose ids name the run and what
// they are: <run id>_stop_<random>, <run id>_approval_<random>,
// <run id>_steer_<random>.
const (
	runStop     = "stop"
	runApproved = "approval"
	runSteered  = "steer"
)

// runMessage reads a message id of a run: the run id and, for a
// command sent for it, which.
func runMessage(id string) (run, command string, ok bool) {
	if len(id) < 36 || !runIDPattern.MatchString(id[:36]) {
		return "", "", false
	}
	run, rest := id[:36], id[36:]
	if rest == "" {
		return run, "", true
	}
	for _, c := range []string{runStop, runApproved, runSteered} {
		if after, found := strings.CutPrefix(rest, "_"+c+"_"); found && after != "" {
			return run, c, true
		}
	}
	return "", "", false
}

func isRun(id string) bool {
	_, _, ok := runMessage(id)
	return ok
}

// runRecord is the record of a run.
type runRecord struct {
	// Owner is the identity of the client that started it: no other
	// client sees or controls it.
	Owner string `json:"owner"`
	// Chat is the chat id of its messages, where /stop and /approve go.
	Chat string `json:"chat"`
	// Scope is the memory scope of its messages (X-Hermes-Session-Key).
	Scope string `json:"scope,omitempty"`
	// Request is the fingerprint of the request (with an Idempotency-Key).
	Request string    `json:"request,omitempty"`
	Status  runStatus `json:"status"`
	// Answer is the text of the answer's sends before its final one, and
	// Sent the idempotency keys of those sends (each is added once).
	Answer string   `json:"answer,omitempty"`
	Sent   []string `json:"sent,omitempty"`
	// Media are the links to the media of those sends (mediaLinks),
	// which the output shows after the answer's text.
	Media []string `json:"media,omitempty"`
	// Deltas is what the record knows of the run's text deltas, in a
	// size that does not grow with them (deltaTally).
	Deltas deltaTally `json:"deltas,omitzero"`
	// Streamed and Streams are the record of the release before: the
	// text the deltas carried since the last break and the idempotency
	// keys of every delta, which grew with the run. A record one of its
	// replicas wrote (during a rolling upgrade) is folded into Deltas
	// when it is next written (fold).
	Streamed string   `json:"streamed,omitempty"`
	Streams  []string `json:"streams,omitempty"`
	// Tail is what a completed run's output adds after the text its
	// deltas carried — the rest of the answer, which the worker leaves to
	// the final send, then the links to its media — streamed as its last
	// text delta, before its last event, by whoever writes that
	// (lastEvents). Its JSON name is the one records had when it held the
	// links alone.
	Tail string `json:"links,omitempty"`
	// Tools are the start times of the tool calls under way, by call id.
	Tools map[string]float64 `json:"tools,omitempty"`
	// Slot is the run's slot among the concurrent runs (from 1; 0: none),
	// given back when it ends.
	Slot int `json:"slot,omitempty"`
}

// runStatus is a run's status as GET /v1/runs/{id} answers it (Hermes's
// hermes.run object).
type runStatus struct {
	Object    string    `json:"object"`
	RunID     string    `json:"run_id"`
	Status    string    `json:"status"`
	CreatedAt float64   `json:"created_at"`
	UpdatedAt float64   `json:"updated_at"`
	SessionID string    `json:"session_id"`
	Model     string    `json:"model"`
	LastEvent string    `json:"last_event,omitempty"`
	Output    *string   `json:"output,omitempty"`
	Usage     *runUsage `json:"usage,omitempty"`
	Error     string    `json:"error,omitempty"`
	// Approval is the approval.request the run waits on.
	Approval *runEvent `json:"approval,omitempty"`
}

type runUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// runEvent is one event of GET /v1/runs/{id}/events: its name, the run,
// when, and the fields of its kind (Hermes's).
type runEvent struct {
	Event     string  `json:"event"`
	RunID     string  `json:"run_id"`
	Timestamp float64 `json:"timestamp"`
	// message.delta
	Delta string `json:"delta,omitempty"`
	// tool.started, tool.completed, approval.request
	Tool       string   `json:"tool,omitempty"`
	ToolCallID string   `json:"tool_call_id,omitempty"`
	Preview    *string  `json:"preview,omitempty"`
	Duration   *float64 `json:"duration,omitempty"`
	// Error is the tool's failure (tool.completed: a bool) or the run's
	// (run.failed: its message).
	Error any `json:"error,omitempty"`
	// approval.request
	Description string   `json:"description,omitempty"`
	Choices     []string `json:"choices,omitempty"`
	// approval.responded
	Choice   string `json:"choice,omitempty"`
	Resolved int    `json:"resolved,omitempty"`
	// run.steered
	Accepted bool `json:"accepted,omitempty"`
	// run.completed
	Output *string   `json:"output,omitempty"`
	Usage  *runUsage `json:"usage,omitempty"`
}

// ends reports whether e is a run's last event.
func (e runEvent) ends() bool {
	return strings.HasPrefix(e.Event, "run.") && terminal(strings.TrimPrefix(e.Event, "run."))
}

func unixNow() float64 { return float64(time.Now().UnixMicro()) / 1e6 }

type runStore struct {
	kv *kvBucket
}

func newRunStore(b *bus.Bus, ttl time.Duration, maxBytes int64) *runStore {
	return &runStore{kv: &kvBucket{bus: b, discardOld: true, cfg: jetstream.KeyValueConfig{
		Bucket: BucketRuns, Description: "runs of the API's /v1/runs and their events", TTL: ttl, History: 1, MaxBytes: maxBytes,
	}}}
}

func (rs *runStore) bucket(ctx context.Context) (jetstream.KeyValue, error) { return rs.kv.open(ctx) }

// eventKey is the KV key of one of run's events, from what identifies it.
func eventKey(run, event string) string {
	sum := sha256.Sum256([]byte(event))
	return kvKey(run) + "." + hex.EncodeToString(sum[:12])
}

// create writes the record of a new run, unless a record of its id
// exists (an earlier attempt with the same Idempotency-Key's), which it
// returns.
func (rs *runStore) create(ctx context.Context, rec runRecord) (stored runRecord, created bool, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return runRecord{}, false, err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return runRecord{}, false, fmt.Errorf("encode run record: %w", err)
	}
	if _, err := kv.Create(ctx, kvKey(rec.Status.RunID), data); err == nil {
		return rec, true, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return runRecord{}, false, fmt.Errorf("write run record: %w", err)
	}
	stored, _, found, err := rs.read(ctx, rec.Status.RunID)
	switch {
	case err != nil:
		return runRecord{}, false, err
	case !found: // removed between the two calls
		return rs.create(ctx, rec)
	}
	return stored, false, nil
}

// get returns the run id of owner; found is false when there is none
// (never created, expired, or another client's).
func (rs *runStore) get(ctx context.Context, id, owner string) (rec runRecord, found bool, err error) {
	if !runIDPattern.MatchString(id) {
		return runRecord{}, false, nil
	}
	rec, _, found, err = rs.read(ctx, id)
	if err != nil || !found || rec.Owner != owner {
		return runRecord{}, false, err
	}
	return rec, true, nil
}

func (rs *runStore) read(ctx context.Context, id string) (rec runRecord, rev uint64, found bool, err error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return runRecord{}, 0, false, err
	}
	e, err := kv.Get(ctx, kvKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return runRecord{}, 0, false, nil
	}
	if err != nil {
		return runRecord{}, 0, false, fmt.Errorf("read run record: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return runRecord{}, 0, false, fmt.Errorf("decode run record: %w", err)
	}
	return rec, e.Revision(), true, nil
}

// ended reports whether run id has ended or is no longer kept.
func (rs *runStore) ended(ctx context.Context, id string) (bool, error) {
	rec, _, found, err := rs.read(ctx, id)
	if err != nil {
		return false, err
	}
	return !found || terminal(rec.Status.Status), nil
}

// remove deletes the record of a run that was never started.
func (rs *runStore) remove(ctx context.Context, id string) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, kvKey(id)); err != nil {
		return fmt.Errorf("delete run record: %w", err)
	}
	return nil
}

// change applies fn to the record of run id and writes it, retrying when
// another replica wrote it meanwhile. fn reports whether it changed the
// record; a run with no record (expired) is left alone. It returns the
// record as fn left it.
func (rs *runStore) change(ctx context.Context, id string, fn func(*runRecord) bool) (runRecord, bool, error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return runRecord{}, false, err
	}
	for attempt := 0; ; attempt++ {
		rec, rev, found, err := rs.read(ctx, id)
		if err != nil || !found {
			return runRecord{}, false, err
		}
		if !fn(&rec) {
			return rec, true, nil
		}
		rec.Status.UpdatedAt = unixNow()
		data, err := json.Marshal(rec)
		if err != nil {
			return runRecord{}, false, fmt.Errorf("encode run record: %w", err)
		}
		_, err = kv.Update(ctx, kvKey(id), data, rev)
		if err == nil {
			return rec, true, nil
		}
		if (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)) && attempt < 10 {
			continue
		}
		return runRecord{}, false, fmt.Errorf("write run record: %w", err)
	}
}

// emit writes an event of run id under key, once: an event written
// before under that key is left as it was.
func (rs *runStore) emit(ctx context.Context, id, key string, ev runEvent) error {
	return rs.emitAt(ctx, id, eventKey(id, key), ev)
}

// emitAt is emit with the event's KV key (eventKey, deltaTally.eventKey).
func (rs *runStore) emitAt(ctx context.Context, id, at string, ev runEvent) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	ev.RunID = id
	if ev.Timestamp == 0 {
		ev.Timestamp = unixNow()
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode run event: %w", err)
	}
	if _, err := kv.Create(ctx, at, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("write run event: %w", err)
	}
	return nil
}

// deltaEvents returns the KV keys of the text deltas written so far for
// run id, whichever replica wrote them (not the last one, key "media").
func (rs *runStore) deltaEvents(ctx context.Context, id string) ([]string, error) {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, kvKey(id)+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch run events: %w", err)
	}
	defer func() { _ = w.Stop() }()
	last := eventKey(id, "media")
	var keys []string
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch run events: %w", ctx.Err())
			}
			if e == nil {
				return keys, nil // the events so far
			}
			var ev runEvent
			if json.Unmarshal(e.Value(), &ev) == nil && ev.Event == "message.delta" && e.Key() != last {
				keys = append(keys, e.Key())
			}
		}
	}
}

// watch passes each event of run id to fn, those written so far first,
// until fn returns false or ctx ends. idle is called when nothing came
// for keepaliveEvery.
func (rs *runStore) watch(ctx context.Context, id string, fn func(data []byte, ev runEvent) bool, idle func() bool) error {
	kv, err := rs.bucket(ctx)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, kvKey(id)+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("watch run events: %w", err)
	}
	defer func() { _ = w.Stop() }()
	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			if !idle() {
				return nil
			}
		case e, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if e == nil {
				continue // the events so far were passed on
			}
			var ev runEvent
			if err := json.Unmarshal(e.Value(), &ev); err != nil {
				continue
			}
			keepalive.Reset(keepaliveEvery)
			if !fn(e.Value(), ev) {
				return nil
			}
		}
	}
}

// deltaTally is what a run's record knows of the run's text deltas,
// without keeping their keys or their text, so that its size does not
// grow with them (the record is written again at each one):
//
//   - which were counted, for a delta delivered again not to be counted
//     twice (deltaRange);
//   - the text they carried since the last break (a later model call's
//     text restarts the answer): its length and its SHA-256 state, which
//     tells whether the answer continues it (rest);
//   - a mark, random, that the KV key of each delta event counted here
//     carries (eventKey), which the run's end reads (countedAll): an
//     event without it was written by a replica that did not count it
//     here (one of a release from before), and one with another mark was
//     counted in a tally that such a replica dropped when it rewrote the
//     record. Events that are gone (each expires run_ttl after its write,
//     the bucket evicts the oldest at runs_max_bytes, a slow delta's may
//     come after the end) tell nothing: every event written must have
//     been counted, not every delta counted written.
//   - Folded: the deltas a release that marked no events counted, before
//     the record came here (fold), whose events are under the unmarked key.
type deltaTally struct {
	Mark string `json:"mark,omitempty"`
	deltaRange

	Folded deltaRange `json:"folded,omitzero"`

	TextLen int    `json:"text_len,omitempty"`
	Text    []byte `json:"text,omitempty"`
}

// deltaRange says which deltas were counted, in a size that does not
// grow with them: delivery keys a turn's deltas <turn id>:<reply
// seq>:d and sends them in seq order, so the last turn and its highest
// seq say which; of those whose key names no seq, the last few keys.
type deltaRange struct {
	Turn string   `json:"turn,omitempty"`
	Seq  int64    `json:"seq,omitempty"`
	Keys []string `json:"keys,omitempty"`
}

// recentKeys is how many keys naming no seq a range keeps.
const recentKeys = 16

// deltaSeq reads the turn and reply seq of a delta's key as delivery
// makes it: <turn id>:<seq>:d.
func deltaSeq(key string) (turn string, seq int64, ok bool) {
	rest, ok := strings.CutSuffix(key, ":d")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i <= 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || seq <= 0 {
		return "", 0, false
	}
	return rest[:i], seq, true
}

// has reports whether the delta with key is in r: its seq is at or
// before the last one of its turn, or, naming no seq, it is one of the
// last few.
func (r *deltaRange) has(key string) bool {
	if turn, seq, ok := deltaSeq(key); ok {
		return turn == r.Turn && seq <= r.Seq
	}
	return slices.Contains(r.Keys, key)
}

// add adds the delta with key to r. A turn's deltas may come out of
// seq order where they were not counted as they came (the keys of a
// record of the release before, in the order they were written).
func (r *deltaRange) add(key string) {
	if turn, seq, ok := deltaSeq(key); ok {
		if turn != r.Turn || seq > r.Seq {
			r.Turn, r.Seq = turn, seq
		}
		return
	}
	r.Keys = append(r.Keys, key)
	if n := len(r.Keys); n > recentKeys {
		r.Keys = slices.Clone(r.Keys[n-recentKeys:])
	}
}

// empty reports whether r holds no delta.
func (r *deltaRange) empty() bool { return r.Turn == "" && len(r.Keys) == 0 }

// maxFoldedSeq bounds the seqs of a folded range whose event keys the
// run's end works out; a range beyond is taken as not counted.
const maxFoldedSeq = 1 << 16

// eventKeys are the KV keys of the unmarked events of the deltas in r
// (eventKey).
func (r *deltaRange) eventKeys(id string) map[string]bool {
	keys := make(map[string]bool, len(r.Keys))
	for _, key := range r.Keys {
		keys[eventKey(id, key)] = true
	}
	if r.Turn != "" && r.Seq <= maxFoldedSeq {
		for seq := int64(1); seq <= r.Seq; seq++ {
			keys[eventKey(id, r.Turn+":"+strconv.FormatInt(seq, 10)+":d")] = true
		}
	}
	return keys
}

// counted reports whether the delta with key was counted.
func (d *deltaTally) counted(key string) bool { return d.Folded.has(key) || d.has(key) }

// count counts the delta of run id with key and text; restart: it is
// the break before a later model call's text, which the answer starts
// after.
func (d *deltaTally) count(key, text string, restart bool) {
	if d.Mark == "" {
		d.Mark = randomHex(6)
	}
	d.add(key)
	if restart {
		d.TextLen, d.Text = 0, nil
		return
	}
	d.stream(text)
}

// markedKeys is how the KV keys of run id's delta events counted in a
// tally marked mark begin: the event key of the run's other events
// (eventKey) is hex digits alone.
func markedKeys(id, mark string) string { return kvKey(id) + ".m" + mark + "_" }

// eventKey is the KV key of the event of a delta this tally counted,
// with key: marked, but for one that a release marking none counted
// (Folded): that release wrote its event unmarked, or may yet (the
// delta delivered again there), and it is written once.
func (d *deltaTally) eventKey(id, key string) string {
	if d.Folded.has(key) || d.Mark == "" {
		return eventKey(id, key)
	}
	sum := sha256.Sum256([]byte(key))
	return markedKeys(id, d.Mark) + hex.EncodeToString(sum[:12])
}

// countedAll reports whether each delta event written of run id
// (events, their KV keys) is one the tally counted: marked by it, or
// one of the deltas folded into it. The events of deltas it counted
// may be gone.
func (d *deltaTally) countedAll(id string, events []string) bool {
	var folded map[string]bool
	for _, key := range events {
		if d.Mark != "" && strings.HasPrefix(key, markedKeys(id, d.Mark)) {
			continue
		}
		if folded == nil {
			folded = d.Folded.eventKeys(id)
		}
		if !folded[key] {
			return false
		}
	}
	return true
}

// stream adds text to the text streamed since the last break.
func (d *deltaTally) stream(text string) {
	if text == "" {
		return
	}
	if d.TextLen < 0 {
		return // unknown: no answer continues it
	}
	h := sha256.New()
	if d.TextLen > 0 {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(d.Text); err != nil {
			d.TextLen, d.Text = -1, nil // a state this build does not read
			return
		}
	}
	_, _ = h.Write([]byte(text))
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		d.TextLen, d.Text = -1, nil
		return
	}
	d.TextLen, d.Text = d.TextLen+len(text), state
}

// rest is what answer adds to the text streamed since the last break,
// when it continues it.
func (d *deltaTally) rest(answer string) (string, bool) {
	switch {
	case d.TextLen == 0:
		return answer, true
	case d.TextLen < 0 || d.TextLen > len(answer):
		return "", false
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(d.Text); err != nil {
		return "", false
	}
	if want := sha256.Sum256([]byte(answer[:d.TextLen])); !bytes.Equal(h.Sum(nil), want[:]) {
		return "", false
	}
	return answer[d.TextLen:], true
}

// fold takes into Deltas.Folded what a replica of a release that marked
// no events counted of run id's deltas, and drops it there: the one
// before the tally recorded them in Streamed and Streams (and leaves
// Deltas out of what it writes, so the record holds one or the other);
// the first with a tally kept its range, without a mark.
func (rec *runRecord) fold() {
	d := &rec.Deltas
	if d.Mark == "" && !d.empty() {
		d.Folded, d.deltaRange = d.deltaRange, deltaRange{}
	}
	if rec.Streamed == "" && rec.Streams == nil {
		return
	}
	for _, key := range rec.Streams {
		d.Folded.add(key)
	}
	d.TextLen, d.Text = 0, nil
	d.stream(rec.Streamed)
	rec.Streamed, rec.Streams = "", nil
}

// added reports whether the send with key was added to the answer.
func (rec *runRecord) added(key string) bool { return key != "" && slices.Contains(rec.Sent, key) }
