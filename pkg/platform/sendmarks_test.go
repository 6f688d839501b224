package platform_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// markingMemory fails the first attempt of each send after marking it,
// and records what later attempts find.
type markingMemory struct {
	*platformtest.Memory
	seen []string
}

func (m *markingMemory) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	before, marked := platform.SendMarked(ctx, "first")
	kept, ok := platform.SendMark(ctx, "first", req.GetText())
	m.seen = append(m.seen, before+"|"+kept+"|"+map[bool]string{true: "kept", false: "not kept"}[ok])
	if !marked && ok {
		return "", errors.New("first attempt fails")
	}
	return m.Memory.Send(ctx, req)
}

// TestSendMarks: a mark an attempt records is what every later attempt
// of the same send finds, whatever it records; another send starts
// afresh; a send without an idempotency key keeps none.
func TestSendMarks(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := &markingMemory{Memory: platformtest.NewMemory("bot-m", false)}
	r, ctx := runRunner(t, m, b)
	target := &deliveryv1.Target{Platform: "memory", ChatId: "chat"}
	req := func(key, text string) *deliveryv1.SendRequested {
		return &deliveryv1.SendRequested{IdempotencyKey: key, Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: text}
	}
	if rec := r.Execute(ctx, req("k1", "A")); rec.GetOk() {
		t.Fatalf("first attempt %+v", rec)
	}
	if rec := r.Execute(ctx, req("k1", "B")); !rec.GetOk() {
		t.Fatalf("second attempt %+v", rec)
	}
	if rec := r.Execute(ctx, req("k2", "C")); rec.GetOk() {
		t.Fatalf("another send's first attempt %+v", rec)
	}
	if rec := r.Execute(ctx, req("", "D")); !rec.GetOk() {
		t.Fatalf("a send without a key %+v", rec)
	}
	want := []string{"|A|kept", "A|A|kept", "|C|kept", "|D|not kept"}
	if len(m.seen) != len(want) {
		t.Fatalf("seen %q, want %q", m.seen, want)
	}
	for i := range want {
		if m.seen[i] != want[i] {
			t.Fatalf("seen %q, want %q", m.seen, want)
		}
	}
}
