package router

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
)

// BenchmarkRouteOneMessage is the router's decision for one message of an
// idle session, end to end against the real servers: dedupe check,
// authorization, session key, the session's arrival, the durable enqueue,
// the dedupe record and lock, and the turn start with its publish.
func BenchmarkRouteOneMessage(b *testing.B) {
	if testing.Short() {
		b.Skip("needs Postgres, Redis and NATS")
	}
	url := bustest.EmbeddedURL(b)
	rdb, prefix := redistest.New(b)
	s, err := New(testConfig(), Deps{Log: slog.New(slog.DiscardHandler), Bus: bustest.New(b, url), DB: pgtest.New(b), Redis: rdb, RedisPrefix: prefix, Environ: []string{}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ev := &eventsv1.MessageReceived{EventId: fmt.Sprintf("ev-%d", i), MessageId: fmt.Sprintf("m-%d", i), Text: "hello",
			Source: &eventsv1.SessionSource{Platform: "telegram", Account: "bot", ChatId: fmt.Sprintf("chat-%d", i), ChatType: "dm", UserId: "alice"}}
		if err := s.handleInbound(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}
