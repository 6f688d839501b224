package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestPauseRPCs: the pause RPCs write the entry /pause writes, which a
// router's watch (estop.Watch, on another connection) takes; a re-arm
// keeps the reason and expiry it is not given; a TTL lifts the pause by
// itself; every call needs the token; changes are audited and counted.
func TestPauseRPCs(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	s, err := New(Config{Addr: "127.0.0.1:0"}, Deps{DB: db, Token: "s3cret",
		Pause: func(ctx context.Context) (jetstream.KeyValue, error) {
			return estop.Open(ctx, b.JetStream(), b.Topology())
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := adminv1.NewAdminServiceClient(conn)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret", ActorHeader, "ops-jane")

	// A router's view, on a connection of its own.
	router := bustest.NewWith(t, url, b.Topology())
	rkv, err := estop.Open(ctx, router.JetStream(), router.Topology())
	if err != nil {
		t.Fatal(err)
	}
	view, err := estop.Watch(ctx, rkv, nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Refused without the token, changing nothing.
	for name, cctx := range map[string]context.Context{
		"no token":    ctx,
		"wrong token": metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer nope"),
	} {
		_, errGet := c.GetPause(cctx, &adminv1.GetPauseRequest{})
		_, errSet := c.SetPause(cctx, &adminv1.SetPauseRequest{Reason: "x"})
		_, errClear := c.ClearPause(cctx, &adminv1.ClearPauseRequest{})
		for _, err := range []error{errGet, errSet, errClear} {
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: %v, want Unauthenticated", name, err)
			}
		}
	}

	got, err := c.GetPause(authed, &adminv1.GetPauseRequest{})
	if err != nil || got.Pause != nil {
		t.Fatalf("get before any pause: %v, %v", got, err)
	}
	cleared, err := c.ClearPause(authed, &adminv1.ClearPauseRequest{})
	if err != nil || cleared.Cleared {
		t.Fatalf("clear while not paused: %v, %v", cleared, err)
	}
	pauses := testutil.ToFloat64(pauseActions.WithLabelValues("pause"))
	resumes := testutil.ToFloat64(pauseActions.WithLabelValues("resume"))

	set, err := c.SetPause(authed, &adminv1.SetPauseRequest{Reason: "  deploy\nwindow " + strings.Repeat("x", 300)})
	if err != nil || set.AlreadyPaused {
		t.Fatalf("set: %v, %v", set, err)
	}
	if p := set.Pause; !strings.HasPrefix(p.Reason, "deploy window xxx") || len([]rune(p.Reason)) != 200 ||
		p.By != "admin:ops-jane" || p.ExpiresAt != nil || p.PausedAt == nil {
		t.Errorf("set answered %+v", p)
	}
	waitFor(t, "the router's view to pause", func() bool { return view.Current() != nil })
	if st := view.Current(); st.By != "admin:ops-jane" || st.Reason != set.Pause.Reason || !st.Until.IsZero() {
		t.Errorf("the router sees %+v", st)
	}
	got, err = c.GetPause(authed, &adminv1.GetPauseRequest{})
	if err != nil || got.Pause.GetReason() != set.Pause.Reason || got.Pause.GetBy() != "admin:ops-jane" {
		t.Fatalf("get: %v, %v", got, err)
	}

	// Re-armed with a TTL and no reason: the reason stays, the expiry is set.
	hour := int64(3600)
	set, err = c.SetPause(authed, &adminv1.SetPauseRequest{TtlSeconds: &hour})
	if err != nil || !set.AlreadyPaused || set.Pause.Reason != got.Pause.Reason || set.Pause.ExpiresAt == nil {
		t.Fatalf("re-arm with a TTL: %v, %v", set, err)
	}
	if left := time.Until(set.Pause.ExpiresAt.AsTime()); left < 59*time.Minute || left > time.Hour {
		t.Errorf("expires in %v, want an hour", left)
	}
	// Re-armed with a reason and no TTL: the expiry stays.
	again, err := c.SetPause(authed, &adminv1.SetPauseRequest{Reason: "rotating keys"})
	if err != nil || again.Pause.Reason != "rotating keys" || !again.Pause.ExpiresAt.AsTime().Equal(set.Pause.ExpiresAt.AsTime()) {
		t.Fatalf("re-arm with a reason: %v, %v", again, err)
	}
	// TTL 0: no expiry.
	zero := int64(0)
	if again, err = c.SetPause(authed, &adminv1.SetPauseRequest{TtlSeconds: &zero}); err != nil || again.Pause.ExpiresAt != nil {
		t.Fatalf("ttl 0: %v, %v", again, err)
	}
	minus := int64(-1)
	if _, err := c.SetPause(authed, &adminv1.SetPauseRequest{TtlSeconds: &minus}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative ttl: %v", err)
	}

	cleared, err = c.ClearPause(authed, &adminv1.ClearPauseRequest{})
	if err != nil || !cleared.Cleared || cleared.Pause.GetReason() != "rotating keys" {
		t.Fatalf("clear: %v, %v", cleared, err)
	}
	waitFor(t, "the router's view to resume", func() bool { return view.Current() == nil })

	// A pause with a TTL lifts by itself, on the router too.
	one := int64(1)
	if _, err := c.SetPause(authed, &adminv1.SetPauseRequest{Reason: "brief", TtlSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the router's view to pause", func() bool { return view.Current() != nil })
	waitFor(t, "the pause to expire", func() bool { return view.Current() == nil })
	if got, err := c.GetPause(authed, &adminv1.GetPauseRequest{}); err != nil || got.Pause != nil {
		t.Errorf("get after the expiry: %v, %v", got, err)
	}
	if cleared, err := c.ClearPause(authed, &adminv1.ClearPauseRequest{}); err != nil || cleared.Cleared {
		t.Errorf("clear after the expiry: %v, %v", cleared, err)
	}

	if n := testutil.ToFloat64(pauseActions.WithLabelValues("pause")); n != pauses+5 {
		t.Errorf("pause actions %v, want %v", n, pauses+5)
	}
	if n := testutil.ToFloat64(pauseActions.WithLabelValues("resume")); n != resumes+1 {
		t.Errorf("resume actions %v, want %v", n, resumes+1)
	}
	var sets, clears int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE action = 'pause.set'), count(*) FILTER (WHERE action = 'pause.clear')
		FROM audit_log WHERE actor = 'token:ops-jane'`).Scan(&sets, &clears); err != nil || sets != 5 || clears != 1 {
		t.Errorf("audited %d sets and %d clears (%v), want 5 and 1", sets, clears, err)
	}
}

// Without a bucket the pause RPCs answer Unimplemented.
func TestPauseUnimplementedWithoutBucket(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Addr: "127.0.0.1:0"}, Deps{DB: pgtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPause(context.Background(), &adminv1.GetPauseRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("get: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
