package platformtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// InboundEvents reads the bus's inbound stream from its start, as a
// gateway's tests see what it published, until the test ends.
func InboundEvents(t testing.TB, b *bus.Bus) chan *eventsv1.MessageReceived {
	t.Helper()
	cons, err := b.JetStream().OrderedConsumer(context.Background(), b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	evs := make(chan *eventsv1.MessageReceived, 64)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				return
			}
			ev := &eventsv1.MessageReceived{}
			if proto.Unmarshal(m.Data(), ev) == nil {
				evs <- ev
			}
		}
	}()
	return evs
}

// NextEvent is the next inbound event of evs (InboundEvents), within 15 s.
func NextEvent(t testing.TB, evs <-chan *eventsv1.MessageReceived) *eventsv1.MessageReceived {
	t.Helper()
	select {
	case ev := <-evs:
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no inbound event within 15s")
		return nil
	}
}

// NoEvent checks that nothing more is published within the while.
func NoEvent(t testing.TB, evs <-chan *eventsv1.MessageReceived, within time.Duration) {
	t.Helper()
	select {
	case ev := <-evs:
		t.Fatalf("unexpected inbound event %s %q", ev.GetEventId(), ev.GetText())
	case <-time.After(within):
	}
}
