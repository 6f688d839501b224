package platform_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// The router's word on a press is kept where any replica reads it: a
// press marked published has no word until the router keeps one, a
// mark written after the word leaves the word, each press (and each
// platform's press of one id) has its own, and the bucket keeps every
// entry for bus.PressWordsAge, by its MaxAge (no per-key TTL, which
// the machine's NATS 2.9 lacks).
func TestPressWordKept(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	word := func(platformName, id string) (string, bool) {
		t.Helper()
		req, published, err := platform.PressWord(ctx, b, platformName, id)
		if err != nil {
			t.Fatal(err)
		}
		if req == nil {
			return "", published
		}
		return req.GetText(), published
	}
	answer := func(platformName, id, text string) *deliveryv1.SendRequested {
		return &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: platformName, ChatId: "c1",
			Interaction: &eventsv1.Interaction{Id: id, Component: true}}, Text: text}
	}

	if w, published := word("teams", "i1"); w != "" || published {
		t.Fatalf("a press never marked: word %q, published %v", w, published)
	}
	if err := platform.MarkPress(ctx, b, "teams", "i1"); err != nil {
		t.Fatal(err)
	}
	if w, published := word("teams", "i1"); w != "" || !published {
		t.Fatalf("a marked press: word %q, published %v; want published without a word", w, published)
	}
	if err := platform.KeepPressAnswer(ctx, b, answer("teams", "i1", "⛔ Not authorized.")); err != nil {
		t.Fatal(err)
	}
	if err := platform.MarkPress(ctx, b, "teams", "i1"); err != nil {
		t.Fatal(err)
	}
	if w, published := word("teams", "i1"); w != "⛔ Not authorized." || !published {
		t.Fatalf("a decided press marked again: word %q, published %v; want the router's word", w, published)
	}
	if w, published := word("telegram", "i1"); w != "" || published {
		t.Fatalf("another platform's press of the same id: word %q, published %v", w, published)
	}
	// A word without text is a word all the same: the press is decided.
	if err := platform.KeepPressAnswer(ctx, b, answer("telegram", "q2", "")); err != nil {
		t.Fatal(err)
	}
	req, published, err := platform.PressWord(ctx, b, "telegram", "q2")
	if err != nil || req == nil || !published || req.GetTarget().GetInteraction().GetId() != "q2" {
		t.Fatalf("a word without text: %v, published %v, %v", req, published, err)
	}

	kv, err := b.JetStream().KeyValue(ctx, b.Topology().Stream(bus.BucketPressWords))
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// TTL is the bucket's stream's MaxAge.
	if st.TTL() != bus.PressWordsAge || st.History() != 1 {
		t.Fatalf("bucket keeps entries %v, %d of each; want %v, the last", st.TTL(), st.History(), bus.PressWordsAge)
	}
}
