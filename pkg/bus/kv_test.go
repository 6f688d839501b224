package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
)

// TestLostRace makes each conditional write lose its race on the real
// servers (the embedded current one and the machine's older one, which
// word some refusals differently) and checks that LostRace, and only it,
// says so.
func TestLostRace(t *testing.T) {
	targets := map[string]func(testing.TB) string{
		"embedded": bustest.EmbeddedURL,
		"system": func(tb testing.TB) string {
			u := bustest.SystemURL()
			if !reachable(u) {
				tb.Skipf("NATS at %s is not reachable", u)
			}
			return u
		},
	}
	for name, url := range targets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t, url(t))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			bucket := b.Topology().Stream("LOSTRACE")
			kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 4, Storage: jetstream.MemoryStorage})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.JetStream().DeleteKeyValue(context.Background(), bucket) })
			rev, err := kv.Create(ctx, "k", []byte("a"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Create(ctx, "gone", []byte("a")); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, "gone"); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name  string
				write func() error
				lost  bool
			}{
				{"create over a value", func() error { _, err := kv.Create(ctx, "k", []byte("b")); return err }, true},
				{"update from an old revision", func() error { _, err := kv.Update(ctx, "k", []byte("b"), rev+100); return err }, true},
				{"update of a deleted key", func() error { _, err := kv.Update(ctx, "gone", []byte("b"), 1); return err }, true},
				{"delete at an old revision", func() error { return kv.Delete(ctx, "k", jetstream.LastRevision(rev+100)) }, true},
				{"update from the revision read", func() error { _, err := kv.Update(ctx, "k", []byte("c"), rev); return err }, false},
				{"create over a delete marker", func() error { _, err := kv.Create(ctx, "gone", []byte("b")); return err }, false},
				{"a bucket that is not there", func() error {
					_, err := b.JetStream().KeyValue(ctx, bucket+"_NONE")
					return err
				}, false},
				{"a cancelled call", func() error {
					cctx, stop := context.WithCancel(ctx)
					stop()
					_, err := kv.Create(cctx, "other", []byte("b"))
					return err
				}, false},
			} {
				err := tc.write()
				if got := bus.LostRace(err); got != tc.lost {
					t.Errorf("%s: LostRace(%v) = %v, want %v", tc.name, err, got, tc.lost)
				}
				if tc.lost && err == nil {
					t.Errorf("%s: the write was not refused", tc.name)
				}
			}
			if bus.LostRace(nil) || bus.LostRace(errors.New("other")) {
				t.Error("LostRace of nil or another error")
			}
		})
	}
}
