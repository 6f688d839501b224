package homeassistant

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// A server that takes the connection but never answers the websocket's
// HTTP upgrade (Home Assistant starting up, a proxy in front of it stuck)
// is given up after the handshake's bound and dialled again, instead of
// being waited for forever with the gateway unready and never
// reconnecting.
func TestUnansweredUpgradeReconnects(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { // read the request, answer nothing
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := DefaultConfig()
	cfg.URL, cfg.Token, cfg.WatchAll = "http://"+ln.Addr().String(), token, true
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	s.p.handshakeTimeout = 200 * time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the gateway did not stop")
		}
		platformtest.DeleteBuckets(b)
	})
	platformtest.WaitFor(t, "the gateway to dial again", func() bool { return accepted.Load() >= 3 })
}
