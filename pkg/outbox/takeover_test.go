package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// ClaimNext tells when a claim may next take over a row being sent: a
// microsecond after the earliest lease that had not run out at the
// claim (the claim's own leases included), and never a lease that had
// run out by then, such as that of a row an older row of its chat
// holds up, which no claim made again at once could take: a send loop
// that wakes for these times does not spin.
func TestClaimNextTakeover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outbox.New(pgtest.New(t))
	const us = time.Microsecond
	if rows, at, err := s.ClaimNext(ctx, t0, 10*time.Second, "b", 10); err != nil || len(rows) != 0 || !at.IsZero() {
		t.Fatalf("empty outbox: claimed %v, takeover %v, %v", keys(rows), at, err)
	}
	// c2 is being sent (its lease ends at t0+3s) behind c1, an older row
	// of its chat requeued for an hour later: c2 cannot be taken over.
	if _, err := s.Enqueue(ctx, t0, time.Hour, req("c1", "C"), req("c2", "C")); err != nil {
		t.Fatal(err)
	}
	c1, err := s.Claim(ctx, t0, 10*time.Second, "x", 10)
	if err != nil || len(c1) != 1 {
		t.Fatalf("claimed %v, %v", keys(c1), err)
	}
	if err := s.Fail(ctx, c1[0].ID, "x", "chat not found", t0); err != nil {
		t.Fatal(err)
	}
	if c2, err := s.Claim(ctx, t0.Add(time.Second), 2*time.Second, "x", 10); err != nil || len(c2) != 1 {
		t.Fatalf("claimed %v, %v", keys(c2), err)
	}
	if n, err := s.Requeue(ctx, []int64{c1[0].ID}, false, t0.Add(time.Hour), time.Hour); err != nil || n != 1 {
		t.Fatalf("requeue %d %v", n, err)
	}
	if _, err := s.Enqueue(ctx, t0.Add(2*time.Second), time.Hour, req("a1", "A"), req("b1", "B")); err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		name     string
		at       time.Duration // after t0
		owner    string
		limit    int
		want     []string
		takeover time.Duration // after t0; 0: none
	}{
		{"a sender claims a1 (and dies)", 2 * time.Second, "dead", 1, []string{"a1"}, 3*time.Second + us},
		{"c2's lapsed lease is left out", 3*time.Second + us, "b", 10, []string{"b1"}, 12*time.Second + us},
		{"a1 at its lease's end", 12 * time.Second, "b", 10, nil, 12*time.Second + us},
		{"a1 taken over", 12*time.Second + us, "b", 10, []string{"a1"}, 13*time.Second + 2*us},
		{"both lapsed", 30 * time.Second, "b", 10, []string{"a1", "b1"}, 40*time.Second + us},
	} {
		rows, at, err := s.ClaimNext(ctx, t0.Add(st.at), 10*time.Second, st.owner, st.limit)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if fmt.Sprint(keys(rows)) != fmt.Sprint(st.want) {
			t.Errorf("%s: claimed %v, want %v", st.name, keys(rows), st.want)
		}
		want := time.Time{}
		if st.takeover > 0 {
			want = t0.Add(st.takeover)
		}
		if !at.Equal(want) {
			t.Errorf("%s: takeover at %v, want %v", st.name, at, want)
		}
	}
	if r, err := s.GetByKey(ctx, "c2"); err != nil || r.State != outbox.Sending {
		t.Fatalf("c2 %+v %v", r, err)
	}
}

// The read of the next takeover finds the earliest lease by the sending
// rows' lease index (migration 00305), not by reading every waiting row.
func TestNextTakeoverUsesItsIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	if p := pgtest.EmptyTablePlan(t, db, outbox.NextTakeoverSQL, t0); !strings.Contains(p, "delivery_outbox_lease") {
		t.Errorf("the read does not use delivery_outbox_lease:\n%s", p)
	}
}
