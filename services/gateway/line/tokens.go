package line

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// BucketReplyTokens (before the topology prefix) keeps each chat's
// latest reply token until its use or expiry: the replica that sends the
// answer need not be the one the webhook reached.
const BucketReplyTokens = "LINE_REPLY_TOKENS"

// replyTokens opens the bucket on first use.
func (p *Platform) replyTokens(ctx context.Context) (jetstream.KeyValue, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kv != nil {
		return p.kv, nil
	}
	top := p.bus.Topology()
	kv, err := p.bus.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: top.Stream(BucketReplyTokens), Description: "line: each chat's latest unused reply token",
		History: 1, TTL: p.cfg.ReplyTokenTTL + 10*time.Second, Replicas: max(top.Replicas, 1), Storage: top.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("line reply token bucket: %w", err)
	}
	p.kv = kv
	return kv, nil
}

// tokenKey is a chat's key (ids are letters and digits, but hashing
// keeps the channel apart and the key fixed-length).
func (p *Platform) tokenKey(chatID string) string {
	h := sha256.Sum256([]byte(p.account + "\x00" + chatID))
	return hex.EncodeToString(h[:20])
}

// storedToken is a reply token and when it stops being used.
type storedToken struct {
	Token   string `json:"t"`
	Expires int64  `json:"exp"` // unix ms
}

// markUnclearReply is the send mark of a reply that got no clear answer
// (a network error, a 5xx): LINE may have shown it. Its token is the
// send's own from then on; when the send's retry is told the token is no
// longer valid before it expired, its first attempt was shown.
const markUnclearReply = "line-unclear-reply"

// keepUnclearReply marks the send's reply with st as unclear (the first
// such mark stays). A send without an idempotency key keeps no marks: its
// retry is pushed.
func keepUnclearReply(ctx context.Context, st storedToken) {
	b, _ := json.Marshal(st)
	// The send's own context may be what ended (a timeout).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	platform.SendMark(ctx, markUnclearReply, string(b))
}

// unclearReply is the token of an earlier attempt's unclear reply, while
// it can still be used; mine is false without one.
func unclearReply(ctx context.Context) (st storedToken, mine bool) {
	v, ok := platform.SendMarked(ctx, markUnclearReply)
	if !ok || json.Unmarshal([]byte(v), &st) != nil || st.Token == "" || time.Now().UnixMilli() >= st.Expires {
		return storedToken{}, false
	}
	return st, true
}

// keepReplyToken stores chat's newest reply token, replacing an older
// one (LINE's tokens are per event; the newest lives longest).
func (p *Platform) keepReplyToken(ctx context.Context, chatID, token string) error {
	kv, err := p.replyTokens(ctx)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(storedToken{Token: token, Expires: time.Now().Add(p.cfg.ReplyTokenTTL).UnixMilli()})
	if _, err := kv.Put(ctx, p.tokenKey(chatID), b); err != nil {
		return fmt.Errorf("keep line reply token: %w", err)
	}
	return nil
}

// claimReplyToken takes chat's reply token for one send: deleting it at
// the revision read, so that of two sends racing across replicas one
// gets it. "" when there is none, it expired, or another send took it.
func (p *Platform) claimReplyToken(ctx context.Context, chatID string) (string, error) {
	st, err := p.claimStoredToken(ctx, chatID)
	return st.Token, err
}

// returnReplyToken puts back a claimed token LINE did not use (its call
// was refused before it was read: a 429), so the retry answers by reply
// rather than by a metered push. A newer token stored meanwhile wins.
func (p *Platform) returnReplyToken(ctx context.Context, chatID string, st storedToken) {
	if st.Token == "" || time.Now().UnixMilli() >= st.Expires {
		return
	}
	// The send's own context may be what ended (a timeout).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	kv, err := p.replyTokens(ctx)
	if err != nil {
		return
	}
	b, _ := json.Marshal(st)
	if _, err := kv.Create(ctx, p.tokenKey(chatID), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		p.log.Warn("line reply token not returned; the retry is pushed", "err", err)
	}
}

// claimStoredToken is claimReplyToken with the token's expiry.
func (p *Platform) claimStoredToken(ctx context.Context, chatID string) (storedToken, error) {
	kv, err := p.replyTokens(ctx)
	if err != nil {
		return storedToken{}, err
	}
	key := p.tokenKey(chatID)
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return storedToken{}, nil
	case err != nil:
		return storedToken{}, fmt.Errorf("read line reply token: %w", err)
	}
	var st storedToken
	if json.Unmarshal(e.Value(), &st) != nil || st.Token == "" || time.Now().UnixMilli() >= st.Expires {
		return storedToken{}, nil
	}
	if err := kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
		// Another send took it, or a newer event replaced it: push.
		return storedToken{}, nil
	}
	return st, nil
}
