package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// A turn's first final to ask is its one final, taken again each time it
// comes back; another is refused; a final that only asks (claims
// nothing) goes out unless another was recorded; the prune forgets old
// ones.
func TestClaimFinal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	now := time.Now()
	answer := outbox.Final{Seq: 2, Digest: []byte("answer")}
	apology := outbox.Final{Seq: 3, Digest: []byte("apology")}
	sameSeq := outbox.Final{Seq: 2, Digest: []byte("another body")}
	for _, step := range []struct {
		name  string
		turn  string
		f     outbox.Final
		claim bool
		want  bool
	}{
		{"an end that shows nothing, first", "t1", apology, false, true},
		{"the first final", "t1", answer, true, true},
		{"the same final again", "t1", answer, true, true},
		{"another final", "t1", apology, true, false},
		{"another body at the same seq", "t1", sameSeq, true, false},
		{"an end that shows nothing, after the final", "t1", apology, false, false},
		{"the final of another turn", "t2", apology, true, true},
	} {
		got, err := s.ClaimFinal(ctx, step.turn, step.f, now, step.claim)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got != step.want {
			t.Errorf("%s: goes out %v, want %v", step.name, got, step.want)
		}
	}
	if err := s.PruneFinals(ctx, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ClaimFinal(ctx, "t1", apology, now, true); err != nil || !ok {
		t.Errorf("a final after the prune: %v, %v; want it to go out", ok, err)
	}
}
