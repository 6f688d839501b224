package gatewaystatus_test

import (
	"context"
	"testing"
	"time"

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
