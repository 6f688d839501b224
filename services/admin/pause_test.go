package admin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// serve starts s's API for the test and returns a client and a context
// carrying the token "s3cret" and the operator ops-jane.
func serve(t *testing.T, ctx context.Context, cfg Config, deps Deps) (adminv1.AdminServiceClient, context.Context) {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	deps.Token = "s3cret"
	s, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminv1.NewAdminServiceClient(conn), metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret", ActorHeader, "ops-jane")
}

// The allowlist over the API: SetPause sets it (ids read as the bucket's
// entry reads them), replaces it, keeps it when not given (a re-arm, one
// written in the bucket by hand included), clears it on request, and
// refuses one that would let nobody through; GetPause and the routers'
// entry show the same.
//
// Not parallel: TestPauseRPCs counts the pause actions of its own calls.
func TestPauseAllowlistRPCs(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	kv, err := estop.Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	c, authed := serve(t, ctx, Config{}, Deps{DB: db, Pause: func(context.Context) (jetstream.KeyValue, error) { return kv, nil }})

	if _, err := c.SetPause(ctx, &adminv1.SetPauseRequest{Allow: &adminv1.PauseAllowlist{UserIds: []string{"42"}}}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want Unauthenticated", err)
	}
	allow := func(users []string, profiles ...string) *adminv1.PauseAllowlist {
		return &adminv1.PauseAllowlist{UserIds: users, Profiles: profiles}
	}
	for _, tt := range []struct {
		name string
		// entry, when set, is written in the bucket by hand first.
		entry string
		req   *adminv1.SetPauseRequest
		code  codes.Code
		// want is the allowlist afterwards (nil: none), users then profiles.
		want *estop.Allow
		// admits are user@profile pairs the routers let through; refuses
		// those they hold.
		admits, refuses []string
	}{
		{name: "set on a new pause, ids read as the entry's",
			req:  &adminv1.SetPauseRequest{Reason: "incident", Allow: allow([]string{" 42 ", "", "alice"})},
			want: &estop.Allow{UserIDs: estop.IDs{"42", "alice"}}, admits: []string{"42@default", "alice@coder"}, refuses: []string{"7@default", "@default"}},
		{name: "a re-arm keeps it",
			req:  &adminv1.SetPauseRequest{Reason: "still"},
			want: &estop.Allow{UserIDs: estop.IDs{"42", "alice"}}, admits: []string{"42@default"}},
		{name: "set replaces it, profiles narrow",
			req:  &adminv1.SetPauseRequest{Allow: allow([]string{"7"}, " coder ")},
			want: &estop.Allow{UserIDs: estop.IDs{"7"}, Profiles: estop.IDs{"coder"}}, admits: []string{"7@coder"}, refuses: []string{"7@default", "42@coder"}},
		{name: "profiles alone refused, nothing changed",
			req: &adminv1.SetPauseRequest{Allow: allow(nil, "coder")}, code: codes.InvalidArgument,
			want: &estop.Allow{UserIDs: estop.IDs{"7"}, Profiles: estop.IDs{"coder"}}},
		{name: "blank user ids refused",
			req: &adminv1.SetPauseRequest{Allow: allow([]string{" ", ""})}, code: codes.InvalidArgument,
			want: &estop.Allow{UserIDs: estop.IDs{"7"}, Profiles: estop.IDs{"coder"}}},
		{name: "set and clear together refused",
			req: &adminv1.SetPauseRequest{Allow: allow([]string{"8"}), ClearAllow: true}, code: codes.InvalidArgument,
			want: &estop.Allow{UserIDs: estop.IDs{"7"}, Profiles: estop.IDs{"coder"}}},
		{name: "too many user ids refused",
			req: &adminv1.SetPauseRequest{Allow: allow(manyIDs(maxAllowIDs + 1))}, code: codes.InvalidArgument,
			want: &estop.Allow{UserIDs: estop.IDs{"7"}, Profiles: estop.IDs{"coder"}}},
		{name: "a too long profile refused",
			req: &adminv1.SetPauseRequest{Allow: allow([]string{"7"}, strings.Repeat("p", maxAllowIDBytes+1))}, code: codes.InvalidArgument,
			want: &estop.Allow{UserIDs: estop.IDs{"7"}, Profiles: estop.IDs{"coder"}}},
		{name: "cleared",
			req:  &adminv1.SetPauseRequest{ClearAllow: true},
			want: nil, refuses: []string{"7@coder"}},
		{name: "one written by hand (numbers, a string) is kept by a re-arm",
			entry: `{"reason":"by hand","allow":{"user_ids":[42, " 99 "],"profiles":"default"}}`,
			req:   &adminv1.SetPauseRequest{Reason: "re-armed"},
			want:  &estop.Allow{UserIDs: estop.IDs{"42", "99"}, Profiles: estop.IDs{"default"}}, admits: []string{"99@default"}, refuses: []string{"99@coder"}},
		{name: "clear on a new pause",
			entry: "-",
			req:   &adminv1.SetPauseRequest{ClearAllow: true},
			want:  nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			switch tt.entry {
			case "":
			case "-":
				if _, err := c.ClearPause(authed, &adminv1.ClearPauseRequest{}); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := kv.Put(ctx, "global", []byte(tt.entry)); err != nil {
					t.Fatal(err)
				}
			}
			set, err := c.SetPause(authed, tt.req)
			if status.Code(err) != tt.code {
				t.Fatalf("set: %v, want %v", err, tt.code)
			}
			if err != nil && !strings.Contains(status.Convert(err).Message(), "allow") {
				t.Errorf("refusal %q does not say what is wrong", status.Convert(err).Message())
			}
			want := (*adminv1.PauseAllowlist)(nil)
			if tt.want != nil {
				want = &adminv1.PauseAllowlist{UserIds: tt.want.UserIDs, Profiles: tt.want.Profiles}
			}
			if err == nil && !sameAllow(set.GetPause().GetAllow(), want) {
				t.Errorf("set answered %v, want %v", set.GetPause().GetAllow(), want)
			}
			got, err := c.GetPause(authed, &adminv1.GetPauseRequest{})
			if err != nil || !sameAllow(got.GetPause().GetAllow(), want) {
				t.Errorf("get: %v, %v; want the allowlist %v", got, err, want)
			}
			st, err := estop.Get(ctx, kv)
			if err != nil || st == nil {
				t.Fatalf("stored %+v, %v", st, err)
			}
			if (st.Allow == nil) != (tt.want == nil) || st.Allow != nil &&
				(!slices.Equal(st.Allow.UserIDs, tt.want.UserIDs) || !slices.Equal(st.Allow.Profiles, tt.want.Profiles)) {
				t.Errorf("the routers' entry has %+v, want %+v", st.Allow, tt.want)
			}
			for _, p := range tt.admits {
				if user, profile, _ := strings.Cut(p, "@"); !st.Admits(user, profile) {
					t.Errorf("%s held, want it let through", p)
				}
			}
			for _, p := range tt.refuses {
				if user, profile, _ := strings.Cut(p, "@"); st.Admits(user, profile) {
					t.Errorf("%s let through, want it held", p)
				}
			}
		})
	}
	var detail string
	if err := db.QueryRow(ctx, `SELECT detail::text FROM audit_log WHERE action = 'pause.set' AND detail ? 'allow' ORDER BY id LIMIT 1`).Scan(&detail); err != nil ||
		!strings.Contains(detail, `"user_ids": ["42", "alice"]`) {
		t.Errorf("audited allowlist %s (%v), want the first one set", detail, err)
	}
}

func sameAllow(a, b *adminv1.PauseAllowlist) bool {
	return (a == nil) == (b == nil) && slices.Equal(a.GetUserIds(), b.GetUserIds()) && slices.Equal(a.GetProfiles(), b.GetProfiles())
}

func manyIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return ids
}

// interleaved is the real bucket whose next Get, once armed, is followed
// by another writer's change: the seam between a read-modify-write's
// read and its write (Deps.Pause hands the service the bucket).
type interleaved struct {
	jetstream.KeyValue
	after atomic.Pointer[func()]
}

func (kv *interleaved) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := kv.KeyValue.Get(ctx, key)
	if f := kv.after.Swap(nil); f != nil {
		(*f)()
	}
	return e, err
}

// SetPause's re-arm writes on the condition that the pause is still the
// one it read: a /pause off or a chat's re-arm landing between its read
// and its write is read and decided on again, never overwritten.
//
// Not parallel: TestPauseRPCs counts the pause actions of its own calls.
func TestSetPauseKeepsAChangeMadeMeanwhile(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	real, err := estop.Open(ctx, b.JetStream(), b.Topology())
	if err != nil {
		t.Fatal(err)
	}
	kv := &interleaved{KeyValue: real}
	c, authed := serve(t, ctx, Config{}, Deps{DB: pgtest.New(t), Pause: func(context.Context) (jetstream.KeyValue, error) { return kv, nil }})
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	standing := estop.State{Reason: "window", By: "telegram:alice", Until: until, Allow: &estop.Allow{UserIDs: estop.IDs{"alice"}}}
	for _, tt := range []struct {
		name    string
		req     *adminv1.SetPauseRequest
		between func() error
		// the pause answered and stored
		reason, allow string
		until         time.Time
		already       bool
	}{
		{name: "a /pause off between: a pause of its own, without the lifted one's expiry and allowlist",
			req:     &adminv1.SetPauseRequest{Reason: "incident"},
			between: func() error { _, err := estop.Disengage(ctx, real); return err },
			reason:  "incident", allow: "<nil>"},
		{name: "a chat's allowlist change between is kept",
			req: &adminv1.SetPauseRequest{Reason: "incident"},
			between: func() error {
				return estop.Engage(ctx, real, estop.State{Reason: "chat", Until: until, Allow: &estop.Allow{UserIDs: estop.IDs{"bob"}}})
			},
			reason: "incident", allow: "[bob]", until: until, already: true},
		{name: "a reason kept from the pause engaged between",
			req: &adminv1.SetPauseRequest{},
			between: func() error {
				return estop.Engage(ctx, real, estop.State{Reason: "chat", Allow: &estop.Allow{UserIDs: estop.IDs{"bob"}}})
			},
			reason: "chat", allow: "[bob]", already: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := estop.Engage(ctx, real, standing); err != nil {
				t.Fatal(err)
			}
			f := func() {
				if err := tt.between(); err != nil {
					t.Error(err)
				}
			}
			kv.after.Store(&f)
			set, err := c.SetPause(authed, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if kv.after.Load() != nil {
				t.Fatal("the change between was never made")
			}
			st, err := estop.Get(ctx, real)
			if err != nil || st == nil {
				t.Fatalf("stored %+v, %v", st, err)
			}
			allow := "<nil>"
			if st.Allow != nil {
				allow = fmt.Sprint(st.Allow.UserIDs)
			}
			if st.Reason != tt.reason || allow != tt.allow || !st.Until.Equal(tt.until) || st.By != "admin:ops-jane" {
				t.Errorf("stored %+v (allow %s), want reason %q, allow %s, until %v", st, allow, tt.reason, tt.allow, tt.until)
			}
			if p := set.GetPause(); p.GetReason() != st.Reason || fmt.Sprint(p.GetAllow().GetUserIds()) != fmt.Sprint(allowOrNil(st.Allow)) || set.GetAlreadyPaused() != tt.already {
				t.Errorf("answered %+v, want the pause stored (already paused %v)", set, tt.already)
			}
		})
	}
}

// allowOrNil are an allowlist's user ids, nil for none.
func allowOrNil(a *estop.Allow) []string {
	if a == nil {
		return nil
	}
	return a.UserIDs
}
