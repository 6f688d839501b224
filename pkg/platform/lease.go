package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
)

// lease elects one active replica per bot identity through a NATS KV
// bucket whose max age is the lease TTL: the holder creates the key and
// rewrites it every TTL/3 with a compare-and-set on its revision; a
// standby retries Create every TTL/5 (at most 1 s) and wins once the key
// expired or was deleted.
//
// A holder that finds the key taken stops its connection, and so does
// one that cannot renew for a TTL, before anyone else can have started
// one (a platform that keeps undelivered events, Telegram, loses nothing
// by it). The holder of an ephemeral platform's connection (Discord, which
// replays nothing to a new session) keeps it instead for as long as NATS
// is out of reach (a restart, a partition), letting go only when its
// NATS connection is closed for good: what it receives waits in its
// gateway until NATS is back; if only the holder was cut off, a standby
// takes over after the TTL and both are connected until the holder
// reaches NATS again and lets go, and what both receive is published once
// (the seen bucket and the bus's dedupe id).
//
// A holder that finds the key gone (the bucket is in memory: a NATS
// restart empties it, and a single server forgets the bucket itself,
// which the lease then creates again) creates the key again; a standby
// that lost NATS, or whose connection reconnected, waits a TTL before it
// creates the key, so a holder that kept its connection through the
// outage takes its key back first (it tries every TTL/3).
type lease struct {
	kv     jetstream.KeyValue
	open   func(context.Context) (jetstream.KeyValue, error) // creates the bucket, or opens it
	key    string
	holder string
	ttl    time.Duration
	log    *slog.Logger
	onHeld func(bool)
	// conn reports whether the NATS connection is closed for good and how
	// many times it has reconnected.
	conn connState
	// ephemeral: keep the connection while NATS is out of reach.
	ephemeral bool
}

// connState is what the lease reads of its NATS connection.
type connState interface {
	IsClosed() bool
	Reconnects() uint64
}

// natsConn is a NATS connection's state as the lease reads it.
type natsConn struct{ nc *nats.Conn }

func (c natsConn) IsClosed() bool     { return c.nc.IsClosed() }
func (c natsConn) Reconnects() uint64 { return c.nc.Stats().Reconnects }

// run calls active with a context that lives while the lease is held,
// and waits as standby otherwise, until ctx ends.
func (l *lease) run(ctx context.Context, active func(context.Context)) {
	poll := min(max(l.ttl/5, 50*time.Millisecond), time.Second)
	reconnects, lostNATS := l.conn.Reconnects(), false
	for ctx.Err() == nil {
		if n := l.conn.Reconnects(); n != reconnects || lostNATS {
			// NATS was out of reach: a holder that kept its connection
			// through the outage gets a TTL to take its key back.
			reconnects, lostNATS = n, false
			l.log.Info("lease: NATS was out of reach; waiting a TTL before taking over", "key", l.key, "ttl", l.ttl)
			sleep(ctx, l.ttl)
			continue
		}
		rev, err := l.kv.Create(ctx, l.key, []byte(l.holder))
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
				l.log.Warn("lease create failed", "key", l.key, "err", err)
				lostNATS = true
				if bucketGone(err) {
					_ = l.reopen(ctx)
				}
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
			keyChanged := bus.LostRace(err)
			if bucketGone(err) {
				if err = l.reopen(ctx); err == nil {
					keyChanged = true // the key went with the bucket
				}
			}
			switch {
			case err == nil && !keyChanged:
				rev, lastRenew = next, time.Now()
			case keyChanged:
				next, held, rerr := l.reclaim(ctx)
				switch {
				case held:
					l.log.Warn("lease key had vanished; created it again", "key", l.key)
					rev, lastRenew = next, time.Now()
				case rerr == nil:
					l.log.Warn("lease lost: another replica holds it", "key", l.key)
					return
				case l.expired(lastRenew, every, rerr):
					return
				}
			case l.expired(lastRenew, every, err):
				return
			}
		}
	}
}

// bucketGone reports whether err says the lease bucket's stream does not
// exist: a single NATS server restarted forgets a bucket kept in memory.
func bucketGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound)
}

// reopen opens the lease bucket again, creating it when NATS lost it.
func (l *lease) reopen(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, max(l.ttl/3, 20*time.Millisecond))
	defer cancel()
	kv, err := l.open(rctx)
	if err != nil {
		l.log.Warn("lease bucket not found; opening or creating it again failed", "key", l.key, "err", err)
		return err
	}
	l.log.Warn("lease bucket opened again (created if NATS had lost it)", "key", l.key)
	l.kv = kv
	return nil
}

// expired reports, after a failed renewal, whether the holder must let
// go: once a TTL has passed since the last renewal, and for an ephemeral
// platform only when its NATS connection is closed for good (see lease).
func (l *lease) expired(lastRenew time.Time, every time.Duration, err error) bool {
	if time.Since(lastRenew) > l.ttl-every && (!l.ephemeral || l.conn.IsClosed()) {
		l.log.Warn("lease expired: cannot renew", "key", l.key, "err", err)
		return true
	}
	if since := time.Since(lastRenew); since > l.ttl-every {
		l.log.Warn("lease not renewed: NATS out of reach; keeping the connection", "key", l.key, "since", since.Round(time.Second), "err", err)
	} else {
		l.log.Warn("lease renew failed, retrying", "key", l.key, "err", err)
	}
	return false
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
