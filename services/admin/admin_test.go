package admin

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

func TestRefusesToStartWithoutTokenOffLoopback(t *testing.T) {
	db := pgtest.New(t)
	for _, tt := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:0", true}, {"localhost:7070", true}, {"[::1]:7070", true}, {":7070", false}, {"0.0.0.0:7070", false}, {"10.0.0.5:7070", false}} {
		_, err := New(Config{Addr: tt.addr}, Deps{DB: db})
		if (err == nil) != tt.ok {
			t.Errorf("addr %s without token: err %v, want ok=%v", tt.addr, err, tt.ok)
		}
	}
	if _, err := New(Config{Addr: "0.0.0.0:7070"}, Deps{DB: db, Token: "x"}); err != nil {
		t.Errorf("with token: %v", err)
	}
}

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s, err := New(Config{Addr: "127.0.0.1:0"}, Deps{DB: db, Token: "s3cret"})
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

	// Every call is authenticated.
	for name, cctx := range map[string]context.Context{
		"no token":    ctx,
		"wrong token": metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cres"),
		"not bearer":  metadata.AppendToOutgoingContext(ctx, "authorization", "s3cret"),
	} {
		if _, err := c.ListPairings(cctx, &adminv1.ListPairingsRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	// Health answers probes without a token.
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	defer hcancel()
	if _, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health: %v", err)
	}

	// Pairing: a code issued by the router is approved over the API.
	code, err := pairing.NewStore(db).Issue(ctx, "telegram", "42", "Zed")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListPairings(authed, &adminv1.ListPairingsRequest{Platform: "telegram"})
	if err != nil || len(list.Pairings) != 1 || list.Pairings[0].State != "pending" {
		t.Fatalf("list: %v %v", list, err)
	}
	if _, err := c.ApprovePairing(authed, &adminv1.ApprovePairingRequest{Platform: "telegram", Code: "WRONGCDE"}); status.Code(err) != codes.NotFound {
		t.Fatalf("wrong code: %v", err)
	}
	got, err := c.ApprovePairing(authed, &adminv1.ApprovePairingRequest{Platform: "telegram", Code: code})
	if err != nil || got.Pairing.UserId != "42" || got.Pairing.State != "approved" {
		t.Fatalf("approve: %v %v", got, err)
	}
	rev, err := c.RevokePairing(authed, &adminv1.RevokePairingRequest{Platform: "telegram", UserId: "42"})
	if err != nil || !rev.Revoked {
		t.Fatalf("revoke: %v %v", rev, err)
	}

	// Sessions.
	store := sessionstore.New(db)
	for _, k := range []string{"agent:main:telegram:dm:1", "agent:main:telegram:dm:2", "agent:main:slack:dm:3"} {
		if _, _, _, err := store.Arrive(ctx, k, "", &eventsv1.SessionSource{Platform: k[11:16], ChatId: k[len(k)-1:]}, ""); err != nil {
			t.Fatal(err)
		}
	}
	page, err := c.ListSessions(authed, &adminv1.ListSessionsRequest{PageSize: 2})
	if err != nil || len(page.Sessions) != 2 || page.NextPageToken == "" {
		t.Fatalf("page 1: %v %v", page, err)
	}
	page2, err := c.ListSessions(authed, &adminv1.ListSessionsRequest{PageSize: 2, PageToken: page.NextPageToken})
	if err != nil || len(page2.Sessions) != 1 || page2.NextPageToken != "" {
		t.Fatalf("page 2: %v %v", page2, err)
	}
	before, _ := store.Get(ctx, "agent:main:telegram:dm:1")
	reset, err := c.ResetSession(authed, &adminv1.ResetSessionRequest{SessionKey: "agent:main:telegram:dm:1"})
	if err != nil || reset.Session.SessionId == before.ID || reset.Session.Generation != before.Generation+1 {
		t.Fatalf("reset: %v %v", reset, err)
	}
	if _, err := c.GetSession(authed, &adminv1.GetSessionRequest{SessionKey: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := c.ListDeliveries(authed, &adminv1.ListDeliveriesRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("deliveries without engine: %v", err)
	}

	// Every state change is in the audit log, with its actor.
	rows, err := db.Query(ctx, `SELECT actor, action FROM audit_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var actions []string
	for rows.Next() {
		var actor, action string
		if err := rows.Scan(&actor, &action); err != nil {
			t.Fatal(err)
		}
		if actor != "token:ops-jane" {
			t.Errorf("actor %q", actor)
		}
		actions = append(actions, action)
	}
	want := []string{"pairing.approve_failed", "pairing.approve", "pairing.revoke", "session.reset"}
	if len(actions) != len(want) {
		t.Fatalf("audit actions %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("audit actions %v, want %v", actions, want)
		}
	}
}

func TestDeliveriesDelegateToOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s, err := New(Config{Addr: "127.0.0.1:0"}, Deps{DB: db, Token: "t", Deliveries: &outbox.Admin{Store: outbox.New(db)}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := adminv1.NewAdminServiceClient(conn)
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer t")
	if _, err := c.ListDeliveries(authed, &adminv1.ListDeliveriesRequest{}); err != nil {
		t.Fatalf("list deliveries: %v", err)
	}
	if _, err := c.PurgeDeliveries(authed, &adminv1.PurgeDeliveriesRequest{All: true}); err != nil {
		t.Fatalf("purge deliveries: %v", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'deliveries.purge'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("purge audited %d times (%v)", n, err)
	}
}
