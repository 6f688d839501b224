package gatewaystatus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/gatewaystatus"
)

// A replica that stops writing its entry (killed) drops out of the list
// after the bucket's max age; pauses are set and cleared once.
func TestPresenceAndPauses(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := gatewaystatus.PresenceWithTTL(ctx, b.JetStream(), b.Topology(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []gatewaystatus.Replica{
		{Platform: "telegram", Account: "42", Instance: "host.example-1/a b", State: "connected"},
		{Platform: "discord", Account: "", Instance: "d1", State: "connecting", Attempts: 2, Reason: "EOF"},
	} {
		if err := gatewaystatus.Put(ctx, kv, r); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := gatewaystatus.Replicas(ctx, kv)
	if err != nil || len(rs) != 2 || rs[0].Platform != "discord" || rs[0].Attempts != 2 || rs[1].Instance != "host.example-1/a b" {
		t.Fatalf("replicas %+v, %v", rs, err)
	}
	if err := gatewaystatus.Remove(ctx, kv, "discord", "", "d1"); err != nil {
		t.Fatal(err)
	}
	if rs, _ := gatewaystatus.Replicas(ctx, kv); len(rs) != 1 {
		t.Fatalf("after remove: %+v", rs)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rs, err := gatewaystatus.Replicas(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a replica that stopped writing is still listed: %+v", rs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	pauses, err := gatewaystatus.Pauses(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := gatewaystatus.SetPause(ctx, pauses, gatewaystatus.Pause{Platform: "slack", Reason: "r"}); err != nil || ok != want {
			t.Fatalf("pause %d: %v, %v", i, ok, err)
		}
	}
	if p, err := gatewaystatus.Get(ctx, pauses, "slack"); err != nil || p == nil || p.Reason != "r" || p.At.IsZero() {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := gatewaystatus.ClearPause(ctx, pauses, "slack"); err != nil || ok != want {
			t.Fatalf("resume %d: %v, %v", i, ok, err)
		}
	}
	// Paused again after a resume: a deleted key can be created again.
	if ok, err := gatewaystatus.SetPause(ctx, pauses, gatewaystatus.Pause{Platform: "slack"}); err != nil || !ok {
		t.Fatalf("pause after resume: %v, %v", ok, err)
	}
	if ps, err := gatewaystatus.Paused(ctx, pauses); err != nil || len(ps) != 1 || ps[0].Platform != "slack" {
		t.Fatalf("paused %+v, %v", ps, err)
	}
}

// raceKV lands another change of the key between ClearPause's first
// read and its delete.
type raceKV struct {
	jetstream.KeyValue
	reads   int
	between func() error
}

func (k *raceKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	k.reads++
	if k.reads == 1 && k.between != nil {
		if err := k.between(); err != nil {
			return nil, err
		}
	}
	return e, err
}

// A resume and a new pause landing between ClearPause's read and its
// delete are read again: the new pause is the one deleted and reported,
// and a resume landing there leaves nothing to clear.
func TestClearPauseReadsAgainAfterALostRace(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := gatewaystatus.Pauses(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		between func() error
		cleared bool
	}{
		{"paused again meanwhile", func() error {
			if _, err := gatewaystatus.ClearPause(ctx, kv, "slack"); err != nil {
				return err
			}
			_, err := gatewaystatus.SetPause(ctx, kv, gatewaystatus.Pause{Platform: "slack", Reason: "second"})
			return err
		}, true},
		{"resumed meanwhile", func() error {
			_, err := gatewaystatus.ClearPause(ctx, kv, "slack")
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := gatewaystatus.SetPause(ctx, kv, gatewaystatus.Pause{Platform: "slack", Reason: "first"}); err != nil {
				t.Fatal(err)
			}
			racing := &raceKV{KeyValue: kv, between: tc.between}
			cleared, err := gatewaystatus.ClearPause(ctx, racing, "slack")
			if err != nil || cleared != tc.cleared {
				t.Fatalf("cleared %v, %v; want %v", cleared, err, tc.cleared)
			}
			if racing.reads != 2 {
				t.Errorf("%d reads, want the entry read again", racing.reads)
			}
			if p, err := gatewaystatus.Get(ctx, kv, "slack"); err != nil || p != nil {
				t.Errorf("after the clear: %+v, %v; want not paused", p, err)
			}
		})
	}
}
