package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// lease elects one active replica per bot identity through a NATS KV
// bucket whose max age is the lease TTL: the holder creates the key and
// rewrites it every TTL/3 with a compare-and-set on its revision; a
// standby retries Create every TTL/5 (at most 1 s) and wins once the key expired or was
// deleted. A holder that cannot renew for a whole TTL, or finds the key
// taken, stops its connection before anyone else can have started one. A
// holder that finds the key gone (the bucket is in memory: a NATS restart
// empties it) creates it again and keeps its connection: a reconnection
// to the platform would lose what it sends meanwhile (Discord replays
// nothing to a new session).
type lease struct {
	kv     jetstream.KeyValue
	key    string
	holder string
	ttl    time.Duration
	log    *slog.Logger
	onHeld func(bool)
}

// run calls active with a context that lives while the lease is held,
// and waits as standby otherwise, until ctx ends.
func (l *lease) run(ctx context.Context, active func(context.Context)) {
	poll := min(max(l.ttl/5, 50*time.Millisecond), time.Second)
	for ctx.Err() == nil {
		rev, err := l.kv.Create(ctx, l.key, []byte(l.holder))
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				l.log.Warn("lease create failed", "key", l.key, "err", err)
			}
			sleep(ctx, poll)
			continue
		}
		l.log.Info("lease acquired: active connection", "key", l.key, "holder", l.holder)
		l.hold(ctx, rev, active)
	}
}

// hold runs active while renewing; it returns when the lease is lost or
// ctx ends (then the key is deleted so a standby takes over at once).
func (l *lease) hold(ctx context.Context, rev uint64, active func(context.Context)) {
	l.onHeld(true)
	defer l.onHeld(false)
	actCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		active(actCtx)
	}()
	defer func() {
		stop()
		<-done
	}()

	every := max(l.ttl/3, 20*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	lastRenew := time.Now()
	for {
		select {
		case <-ctx.Done():
			stop()
			<-done
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := l.kv.Delete(rctx, l.key, jetstream.LastRevision(rev)); err != nil {
				l.log.Warn("lease release failed", "key", l.key, "err", err)
			}
			cancel()
			return
		case <-done:
			// The connection ended on its own (fatal error): keep the lease,
			// so a standby does not repeat a fatal failure, until ctx ends.
			<-ctx.Done()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = l.kv.Delete(rctx, l.key, jetstream.LastRevision(rev))
			cancel()
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, every)
			next, err := l.kv.Update(rctx, l.key, []byte(l.holder), rev)
			cancel()
			switch {
			case err == nil:
				rev, lastRenew = next, time.Now()
			case errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err):
				next, held, rerr := l.reclaim(ctx)
				switch {
				case held:
					l.log.Warn("lease key had vanished; created it again", "key", l.key)
					rev, lastRenew = next, time.Now()
				case rerr == nil:
					l.log.Warn("lease lost: another replica holds it", "key", l.key)
					return
				case time.Since(lastRenew) > l.ttl-every:
					l.log.Warn("lease expired: cannot renew", "key", l.key, "err", rerr)
					return
				}
			case time.Since(lastRenew) > l.ttl-every:
				l.log.Warn("lease expired: cannot renew", "key", l.key, "err", err)
				return
			default:
				l.log.Warn("lease renew failed, retrying", "key", l.key, "err", err)
			}
		}
	}
}

// reclaim looks at the key whose revision a renewal found changed: gone,
// it is created again (held); holding this holder's value, its revision
// is adopted (held); holding another's, the lease is lost (not held, nil
// error). An error says nothing is known yet.
func (l *lease) reclaim(ctx context.Context) (rev uint64, held bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, max(l.ttl/3, 20*time.Millisecond))
	defer cancel()
	e, err := l.kv.Get(rctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err := l.kv.Create(rctx, l.key, []byte(l.holder))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, nil // another replica was quicker
		}
		return rev, err == nil, err
	case err != nil:
		return 0, false, err
	case string(e.Value()) == l.holder:
		return e.Revision(), true, nil
	}
	return 0, false, nil
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// leaseBucket creates (or opens) the lease bucket with the lease TTL.
func leaseBucket(ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      name,
		Description: "active/standby leases of single-consumer platform connections",
		TTL:         ttl,
		History:     1,
		Replicas:    replicas,
		Storage:     jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", name, err)
	}
	return kv, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
