// Package bustest gives tests a Bus on a real NATS server: an embedded
// nats-server, or the server at NATS_URL, with a topology prefix of their
// own so tests run in parallel without sharing streams.
package bustest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/natsd"
)

var (
	embedOnce sync.Once
	embedSrv  *natsd.Server
	embedErr  error
)

// EmbeddedURL starts (once per test binary) an embedded nats-server and
// returns its URL. The server lives until the process exits.
func EmbeddedURL(t testing.TB) string {
	t.Helper()
	embedOnce.Do(func() { embedSrv, embedErr = natsd.Start(natsd.Config{Port: -1}) })
	if embedErr != nil {
		t.Fatalf("start embedded nats: %v", embedErr)
	}
	return embedSrv.ClientURL()
}

// SystemURL is the machine's NATS server (NATS_URL, default the local one).
func SystemURL() string {
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// Prefix returns a fresh topology prefix like "t3f9a1c2e".
func Prefix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// New connects to url and returns a Bus with its own prefix, memory-backed
// streams already created, and cleanup that deletes them.
func New(t testing.TB, url string) *bus.Bus {
	t.Helper()
	return NewWith(t, url, bus.Topology{Prefix: Prefix(), Storage: jetstream.MemoryStorage, DedupeWindow: 2 * time.Minute})
}

// NewWith connects to url with the connection options given and returns
// a Bus of topo with its streams already created, and cleanup that
// deletes them and closes the connection.
func NewWith(t testing.TB, url string, topo bus.Topology, opts ...nats.Option) *bus.Bus {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name(t.Name())}, opts...)...)
	if err != nil {
		t.Fatalf("connect nats %s: %v", url, err)
	}
	b, err := bus.New(nc, topo, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	// Generous: under CI's load (every package's tests at once on two
	// cores) the embedded server once took more than 10 s to answer a
	// stream lookup here (BlueBubbles' contract suite, session 50).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, cfg := range topo.StreamConfigs() {
			_ = b.JetStream().DeleteStream(ctx, cfg.Name)
		}
		// and the buckets (KV_<PREFIX>_…, OBJ_<PREFIX>_…) the test made:
		// their names carry the prefix as topo.Stream writes it (upper
		// case), not as it is given.
		if topo.Prefix != "" {
			prefix := topo.Stream("")
			names := b.JetStream().StreamNames(ctx)
			var mine []string
			for name := range names.Name() {
				if strings.HasPrefix(name, "KV_"+prefix) || strings.HasPrefix(name, "OBJ_"+prefix) {
					mine = append(mine, name)
				}
			}
			for _, name := range mine {
				_ = b.JetStream().DeleteStream(ctx, name)
			}
		}
		nc.Close()
	})
	return b
}

// Restartable is an embedded nats-server with its JetStream store on disk,
// which a test stops and starts again on the same port and store: a NATS
// restart, or an outage of a given length.
type Restartable struct {
	t    testing.TB
	dir  string
	port int
	srv  *natsd.Server
	// URL is the server's client URL, the same across restarts.
	URL string
}

// NewRestartable starts one; cleanup shuts it down.
func NewRestartable(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{t: t, dir: t.TempDir()}
	srv, err := natsd.Start(natsd.Config{Port: -1, StoreDir: r.dir})
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	r.srv, r.URL = srv, srv.ClientURL()
	if r.port, err = strconv.Atoi(r.URL[strings.LastIndex(r.URL, ":")+1:]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.srv != nil {
			r.srv.Shutdown()
		}
	})
	return r
}

// Stop shuts the server down.
func (r *Restartable) Stop() {
	r.srv.Shutdown()
	r.srv = nil
}

// Start starts it again on its port and store.
func (r *Restartable) Start() {
	r.t.Helper()
	srv, err := natsd.Start(natsd.Config{Port: r.port, StoreDir: r.dir})
	if err != nil {
		r.t.Fatalf("restart embedded nats: %v", err)
	}
	r.srv = srv
}

// Topology is a fresh topology whose streams are on disk: they outlive a
// restart.
func (r *Restartable) Topology() bus.Topology {
	return bus.Topology{Prefix: Prefix(), Storage: jetstream.FileStorage, DedupeWindow: time.Minute}
}

// Bus returns a Bus of topo on the server whose connection reconnects
// for ever, 50 ms apart.
func (r *Restartable) Bus(t testing.TB, topo bus.Topology) *bus.Bus {
	t.Helper()
	return NewWith(t, r.URL, topo, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
}
