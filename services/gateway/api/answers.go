package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// A request with an Idempotency-Key is one message however often and
// wherever it is sent: its id is derived from the client and the key
// alone, so every attempt on every replica publishes the same event (the
// bus and the router drop the copies), and its answer is kept in a KV
// bucket, so the attempt that waits for it — on any replica, while the
// turn runs or after it ended — gets it.

// BucketAnswers is the KV bucket (before the topology prefix) of the
// answers to requests with an Idempotency-Key.
const BucketAnswers = "GATEWAY_API_ANSWERS"

// keyedPrefix starts the id of a request with an Idempotency-Key.
const keyedPrefix = "idem_"

// keyedID is the id of a request with an Idempotency-Key: the same for
// every attempt of one client (API key identity), session and key, on
// every replica.
func keyedID(identity, session, key string) string {
	sum := sha256.Sum256([]byte(identity + "\x00" + session + "\x00" + key))
	return keyedPrefix + hex.EncodeToString(sum[:16])
}

func isKeyed(id string) bool { return strings.HasPrefix(id, keyedPrefix) }

// fingerprint identifies what a request asks, so a key reused for a
// different request is refused rather than answered with another answer.
func fingerprint(text string, atts []*eventsv1.Attachment, history []*eventsv1.ContextMessage) string {
	data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&eventsv1.MessageReceived{Text: text, Attachments: atts, Context: history})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// answer is the stored record of a keyed request: created when the
// request is first accepted, then the text of each send delivery made for
// it, in order, until the final one. It only grows.
type answer struct {
	// Request is the fingerprint of the request.
	Request string        `json:"request,omitempty"`
	Pieces  []answerPiece `json:"pieces,omitempty"`
	Final   bool          `json:"final,omitempty"`
}

type answerPiece struct {
	// Key is the send's idempotency key: a send delivery retries is
	// recorded once.
	Key  string `json:"key,omitempty"`
	Text string `json:"text"`
	// ErrorCode: the text explains a failed turn (SendRequested.error_code).
	ErrorCode string `json:"error_code,omitempty"`
	// Media links to the media the send carried (mediaLinks).
	Media string `json:"media,omitempty"`
	// Turn and SessionKey, on the final piece: the turn that answered and
	// the session key it ran under (answerPoint).
	Turn       string `json:"turn,omitempty"`
	SessionKey string `json:"session_key,omitempty"`
	// Usage, on the final piece: the turn's model tokens, which the
	// answer reports (a chat completion's usage, a response's).
	Usage *answerUsage `json:"usage,omitempty"`
}

// answerUsage is a deliveryv1.TokenUsage in an answer record.
type answerUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// usageRecord is the record of a final send's usage (nil for none).
func usageRecord(u *deliveryv1.TokenUsage) *answerUsage {
	if u == nil {
		return nil
	}
	return &answerUsage{PromptTokens: u.GetPromptTokens(), CompletionTokens: u.GetCompletionTokens()}
}

// tokens is the usage the record kept (nil for none).
func (u *answerUsage) tokens() *deliveryv1.TokenUsage {
	if u == nil {
		return nil
	}
	return &deliveryv1.TokenUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
}

func (a answer) has(key string) bool {
	return key != "" && slices.ContainsFunc(a.Pieces, func(p answerPiece) bool { return p.Key == key })
}

// answerUpdate is what the replica that served a send publishes to the
// requests waiting on it: the whole record after the send, or a stream
// delta.
type answerUpdate struct {
	Answer *answer `json:"answer,omitempty"`
	Delta  string  `json:"delta,omitempty"`
	// Restart: the delta is the break before a later model call's text
	// (piece.restart).
	Restart bool `json:"restart,omitempty"`
	// Tool is a step of one of the turn's tool calls (piece.tool).
	Tool *toolUpdate `json:"tool,omitempty"`
}

// toolUpdate is a deliveryv1.ToolStep in an answerUpdate.
type toolUpdate struct {
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Detail    string `json:"detail,omitempty"`
	Emoji     string `json:"emoji,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// answers stores the records (one KV key per request id) and fans out
// their updates on gateway.api.answer.<id>.
type answers struct {
	bus *bus.Bus
	log *slog.Logger
	kv  *kvBucket
}

func newAnswers(b *bus.Bus, log *slog.Logger, ttl time.Duration) *answers {
	return &answers{bus: b, log: log, kv: &kvBucket{bus: b, cfg: jetstream.KeyValueConfig{
		Bucket: BucketAnswers, Description: "answers to API requests with an Idempotency-Key", TTL: ttl, History: 1,
	}}}
}

// bucket opens the KV bucket on first use.
func (a *answers) bucket(ctx context.Context) (jetstream.KeyValue, error) { return a.kv.open(ctx) }

func (a *answers) key(id string) string { return kvKey(id) }

// kvBucket is a KV bucket of the gateway, opened (created or updated to
// its configuration) on first use.
type kvBucket struct {
	bus *bus.Bus
	// cfg names the bucket before the topology prefix; the replicas and
	// the storage are the topology's.
	cfg jetstream.KeyValueConfig
	// discardOld: when the bucket is full (cfg.MaxBytes), the least
	// recently written records make room for a new one, rather than the
	// write failing as it does in a KV bucket.
	discardOld bool

	mu sync.Mutex
	kv jetstream.KeyValue
}

func (b *kvBucket) open(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.kv != nil {
		return b.kv, nil
	}
	cfg := b.cfg
	cfg.Bucket = b.bus.Topology().Stream(cfg.Bucket)
	cfg.Replicas = max(b.bus.Topology().Replicas, 1)
	// File in every deployment; memory in tests, where creating many
	// file-backed buckets at once in the embedded server now and then
	// failed ("error creating store for stream").
	cfg.Storage = b.bus.Topology().Storage
	js := b.bus.JetStream()
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", b.cfg.Bucket, err)
	}
	if b.discardOld {
		// The KV layer makes its streams discard new messages; the
		// stream under the bucket is KV_<bucket>.
		st, err := js.Stream(ctx, "KV_"+cfg.Bucket)
		if err != nil {
			return nil, fmt.Errorf("open bucket %s: %w", b.cfg.Bucket, err)
		}
		if scfg := st.CachedInfo().Config; scfg.Discard != jetstream.DiscardOld {
			scfg.Discard = jetstream.DiscardOld
			if _, err := js.UpdateStream(ctx, scfg); err != nil {
				return nil, fmt.Errorf("open bucket %s: discard old: %w", b.cfg.Bucket, err)
			}
		}
	}
	b.kv = kv
	return kv, nil
}

// kvKey is the KV key of an id: its hash, as ids may hold characters a
// key may not.
func kvKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:20])
}

func (a *answers) subject(id string) string {
	return a.bus.Topology().Subject("gateway." + PlatformName + ".answer." + id)
}

func decodeAnswer(data []byte) (answer, error) {
	var rec answer
	if err := json.Unmarshal(data, &rec); err != nil {
		return answer{}, fmt.Errorf("decode answer record: %w", err)
	}
	return rec, nil
}

// begin records that the request was accepted, unless it already was:
// created reports whether this call made the record; otherwise the
// stored record is returned.
func (a *answers) begin(ctx context.Context, id, request string) (rec answer, created bool, err error) {
	kv, err := a.bucket(ctx)
	if err != nil {
		return answer{}, false, err
	}
	data, _ := json.Marshal(answer{Request: request})
	if _, err := kv.Create(ctx, a.key(id), data); err == nil {
		return answer{Request: request}, true, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return answer{}, false, fmt.Errorf("create answer record: %w", err)
	}
	rec, ok, err := a.get(ctx, id)
	if err != nil {
		return answer{}, false, err
	}
	if !ok { // expired between the two calls
		return a.begin(ctx, id, request)
	}
	return rec, false, nil
}

// get returns the record of id; ok is false when there is none.
func (a *answers) get(ctx context.Context, id string) (answer, bool, error) {
	kv, err := a.bucket(ctx)
	if err != nil {
		return answer{}, false, err
	}
	e, err := kv.Get(ctx, a.key(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return answer{}, false, nil
	}
	if err != nil {
		return answer{}, false, fmt.Errorf("read answer record: %w", err)
	}
	rec, err := decodeAnswer(e.Value())
	return rec, err == nil, err
}

// forget removes the record of id.
func (a *answers) forget(ctx context.Context, id string) error {
	kv, err := a.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, a.key(id)); err != nil {
		return fmt.Errorf("delete answer record: %w", err)
	}
	return nil
}

// add appends a piece of the answer (a send delivery made for id) unless
// it is there already or the answer is complete, and publishes the
// record to the requests waiting on it. A send retried by delivery, or
// served again by another replica, changes nothing and publishes again.
func (a *answers) add(ctx context.Context, id string, p answerPiece, final bool) error {
	kv, err := a.bucket(ctx)
	if err != nil {
		return err
	}
	key := a.key(id)
	for attempt := 0; ; attempt++ {
		var rec answer
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read answer record: %w", err)
		default:
			if rec, err = decodeAnswer(e.Value()); err != nil {
				return err
			}
			rev = e.Revision()
		}
		if rec.Final || rec.has(p.Key) {
			a.publish(id, answerUpdate{Answer: &rec})
			return nil
		}
		rec.Pieces = append(rec.Pieces, p)
		rec.Final = final
		data, _ := json.Marshal(rec)
		if rev == 0 {
			_, err = kv.Create(ctx, key, data)
		} else {
			_, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			a.publish(id, answerUpdate{Answer: &rec})
			return nil
		}
		// Another replica wrote first: read again.
		if (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)) && attempt < 10 {
			continue
		}
		return fmt.Errorf("write answer record: %w", err)
	}
}

// delta passes a stream delta to the requests waiting on id.
func (a *answers) delta(id, text string, restart bool) {
	a.publish(id, answerUpdate{Delta: text, Restart: restart})
}

// tool passes a step of a tool call to the requests waiting on id.
func (a *answers) tool(id string, s *deliveryv1.ToolStep) {
	a.publish(id, answerUpdate{Tool: &toolUpdate{CallID: s.GetToolCallId(), Name: s.GetToolName(), Phase: s.GetPhase(), Detail: s.GetDetail(),
		Emoji: s.GetEmoji(), Arguments: s.GetArguments()}})
}

// publish is best effort: a waiting request also reads the record.
func (a *answers) publish(id string, u answerUpdate) {
	data, _ := json.Marshal(u)
	if err := a.bus.Conn().Publish(a.subject(id), data); err != nil {
		a.log.Debug("publish answer update", "err", err)
	}
}

// follow subscribes f to the updates of id; stop unsubscribes.
func (a *answers) follow(id string, f *follower) (stop func(), err error) {
	sub, err := a.bus.Conn().Subscribe(a.subject(id), func(m *nats.Msg) {
		var u answerUpdate
		if err := json.Unmarshal(m.Data, &u); err != nil {
			return
		}
		if u.Answer != nil {
			f.apply(*u.Answer)
		}
		if u.Delta != "" {
			f.delta(piece{delta: u.Delta, restart: u.Restart})
		}
		if t := u.Tool; t != nil {
			f.tool(piece{tool: &deliveryv1.ToolStep{ToolCallId: t.CallID, ToolName: t.Name, Phase: t.Phase, Detail: t.Detail,
				Emoji: t.Emoji, Arguments: t.Arguments}})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe answer updates: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// follower feeds one waiting keyed request: the pieces of the record it
// has not passed on yet, in order, the steps of the turn's tool calls
// (to every attempt), and stream deltas — but only to the attempt that
// published the message, which sees the stream from its start; a retry
// gets the answer as it is sent, each delta it does not show only
// saying that the turn goes on (piece.alive), so that a long answer
// still being written does not reach the retry's silence bound.
type follower struct {
	wt *waiter

	mu      sync.Mutex
	emitted int  // record pieces passed on
	done    bool // the final piece was passed on
	live    int  // 0: not known yet, 1: pass deltas, -1: drop them
	// What came while live was not known: passed on by decide, deltas
	// first (they precede the sends of a turn), then the record pieces.
	heldDeltas []piece
	heldPieces []piece
}

func newFollower(wt *waiter) *follower { return &follower{wt: wt} }

func (f *follower) apply(rec answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	for i := f.emitted; i < len(rec.Pieces); i++ {
		p := rec.Pieces[i]
		final := rec.Final && i == len(rec.Pieces)-1
		pc := piece{text: p.Text, final: final, errorCode: p.ErrorCode, media: p.Media}
		if final {
			pc.at, pc.usage = answerPoint{turn: p.Turn, sessionKey: p.SessionKey}, p.Usage.tokens()
		}
		f.piece(pc)
	}
	if rec.Final && f.emitted >= len(rec.Pieces) {
		pc := piece{final: true}
		if n := len(rec.Pieces); n > 0 {
			last := rec.Pieces[n-1]
			pc.at, pc.usage = answerPoint{turn: last.Turn, sessionKey: last.SessionKey}, last.Usage.tokens()
		}
		f.piece(pc)
	}
	f.emitted = max(f.emitted, len(rec.Pieces))
	f.done = rec.Final
}

// piece passes on (or holds) a record piece; f.mu is held.
func (f *follower) piece(p piece) {
	if f.live == 0 {
		f.heldPieces = append(f.heldPieces, p)
		return
	}
	f.wt.push(p)
}

func (f *follower) delta(p piece) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.done:
	case f.live < 0:
		f.wt.push(piece{alive: true})
	case f.live == 0:
		f.heldDeltas = append(f.heldDeltas, p)
	default:
		f.wt.push(p)
	}
}

// tool passes on a step of a tool call, to every attempt: a retry
// shows the calls it sees start.
func (f *follower) tool(p piece) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.done:
	case f.live == 0:
		f.heldDeltas = append(f.heldDeltas, p)
	default:
		f.wt.push(p)
	}
}

// decide says whether this attempt streams deltas, and passes on what
// was held (a retry, the tool steps alone).
func (f *follower) decide(live bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = -1
	if live {
		f.live = 1
	}
	for _, d := range f.heldDeltas {
		if live || d.tool != nil {
			f.wt.push(d)
		}
	}
	for _, p := range f.heldPieces {
		f.wt.push(p)
	}
	f.heldDeltas, f.heldPieces = nil, nil
}

func (f *follower) finished() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}
