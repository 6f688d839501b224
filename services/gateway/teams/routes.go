package teams

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketRoutes (before the topology prefix) keeps each conversation's
// serviceUrl, from its last verified activity: any replica can answer
// it, and nothing but a verified activity sets it.
const BucketRoutes = "TEAMS_ROUTES"

// routes opens the bucket on first use.
func (p *Platform) routes(ctx context.Context) (jetstream.KeyValue, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kv != nil {
		return p.kv, nil
	}
	top := p.bus.Topology()
	kv, err := p.bus.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: top.Stream(BucketRoutes), Description: "teams: the serviceUrl of each conversation, from its last verified activity",
		History: 1, TTL: p.cfg.RouteTTL, Replicas: max(top.Replicas, 1), Storage: top.Storage,
	})
	if err != nil {
		return nil, fmt.Errorf("teams routes bucket: %w", err)
	}
	p.kv = kv
	return kv, nil
}

// routeKey is a conversation's key: a hash, since conversation ids hold
// characters KV keys do not allow (";", "@", "=").
func (p *Platform) routeKey(conversation string) string {
	h := sha256.Sum256([]byte(p.cfg.ClientID + "\x00" + conversation))
	return hex.EncodeToString(h[:20])
}

// storedRoute is what this replica wrote for a conversation, and when.
type storedRoute struct {
	url string
	at  time.Time
}

// remember stores conversation's serviceUrl unless this replica stored
// the same one within the last quarter of RouteTTL (each write renews
// the entry's TTL).
func (p *Platform) remember(ctx context.Context, conversation, serviceURL string) error {
	key := p.routeKey(conversation)
	p.mu.Lock()
	last := p.stored[key]
	p.mu.Unlock()
	same := last.url == serviceURL && time.Since(last.at) < p.cfg.RouteTTL/4
	if same {
		return nil
	}
	kv, err := p.routes(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.PutString(ctx, key, serviceURL); err != nil {
		return fmt.Errorf("keep teams serviceUrl: %w", err)
	}
	p.mu.Lock()
	if len(p.stored) > 10000 {
		clear(p.stored)
	}
	p.stored[key] = storedRoute{url: serviceURL, at: time.Now()}
	p.mu.Unlock()
	return nil
}

// serviceURL is where conversation is addressed: its last verified
// activity's serviceUrl, else the configured one.
func (p *Platform) serviceURL(ctx context.Context, conversation string) (string, error) {
	kv, err := p.routes(ctx)
	if err != nil {
		return "", err
	}
	e, err := kv.Get(ctx, p.routeKey(conversation))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return p.cfg.ServiceURL, nil
	case err != nil:
		return "", fmt.Errorf("read teams serviceUrl: %w", err)
	}
	return string(e.Value()), nil
}

// sentKey is the key of a message the bot sent, under its channel or
// chat (a thread's ;messageid=… cut off: a reply to the bot's post
// arrives in the thread the post opened).
func (p *Platform) sentKey(conversation, id string) string {
	base, _, _ := strings.Cut(conversation, ";")
	h := sha256.Sum256([]byte("sent\x00" + p.cfg.ClientID + "\x00" + base + "\x00" + id))
	return "sent." + hex.EncodeToString(h[:20])
}

// rememberSent records that the bot sent message id in conversation, so
// that a reply to it counts as addressing the bot (require_mention).
func (p *Platform) rememberSent(ctx context.Context, conversation, id string) {
	kv, err := p.routes(ctx)
	if err == nil {
		_, err = kv.PutString(ctx, p.sentKey(conversation, id), "1")
	}
	if err != nil {
		p.log.Warn("teams sent message not recorded; a reply to it needs a mention", "err", err)
	}
}

// sentByBot reports whether the bot sent message id in conversation.
func (p *Platform) sentByBot(ctx context.Context, conversation, id string) (bool, error) {
	kv, err := p.routes(ctx)
	if err != nil {
		return false, err
	}
	_, err = kv.Get(ctx, p.sentKey(conversation, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read teams sent message: %w", err)
	}
	return true, nil
}
