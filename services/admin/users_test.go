package admin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/pkg/retention"
)

// ForgetUser over the API, on a real sweeper: refused without the token,
// without a platform or a user id, and where the process has no
// sweeper; a dry run is not audited, a forget is, by operator and user,
// with counts only.
func TestForgetUserRPC(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	rdb, prefix := redistest.New(t)
	sweeper, err := retention.New(retention.DefaultConfig(), 0, retention.Deps{DB: db, Redis: rdb, RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO agent_memories (user_key, content) VALUES ('discord:42', 'likes tea')`); err != nil {
		t.Fatal(err)
	}
	c, authed := serve(t, ctx, Config{}, Deps{DB: db, Forgetter: sweeper})
	if _, err := c.ForgetUser(ctx, &adminv1.ForgetUserRequest{Platform: "discord", UserId: "42"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}
	for _, req := range []*adminv1.ForgetUserRequest{{Platform: "discord"}, {UserId: "42"}, {Platform: " ", UserId: "42"}} {
		if _, err := c.ForgetUser(authed, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
	resp, err := c.ForgetUser(authed, &adminv1.ForgetUserRequest{Platform: "Discord", UserId: "42", DryRun: true})
	if err != nil || !resp.GetDryRun() || resp.GetRows()[retention.KindMemories] != 1 {
		t.Fatalf("dry run: %v, %v", resp, err)
	}
	resp, err = c.ForgetUser(authed, &adminv1.ForgetUserRequest{Platform: "discord", UserId: "42"})
	if err != nil || resp.GetDryRun() || resp.GetRows()[retention.KindMemories] != 1 {
		t.Fatalf("forget: %v, %v", resp, err)
	}
	var audited int
	var memories string
	if err := db.QueryRow(ctx, `SELECT count(*), max(detail->'rows'->>'agent_memories') FROM audit_log
		WHERE action = 'users.forget' AND target = 'discord:42' AND actor = 'token:ops-jane'`).Scan(&audited, &memories); err != nil || audited != 1 || memories != "1" {
		t.Errorf("audited %d (%s memories), %v; want the forget once, not the dry run", audited, memories, err)
	}

	bare, authedBare := serve(t, ctx, Config{}, Deps{DB: db})
	if _, err := bare.ForgetUser(authedBare, &adminv1.ForgetUserRequest{Platform: "discord", UserId: "42"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("without a sweeper: %v, want Unimplemented", err)
	}
}

// ExportUser streams the user's document in chunks under gRPC's message
// size, whose concatenation is the JSON document, and audits the
// access; refused without the token or a user.
func TestExportUserRPC(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	big := strings.Repeat("tea ", exportChunk/4+1000) // one memory past a chunk
	if _, err := db.Exec(ctx, `INSERT INTO agent_memories (user_key, content) VALUES ('discord:42', $1), ('discord:42', 'short')`, big); err != nil {
		t.Fatal(err)
	}
	c, authed := serve(t, ctx, Config{}, Deps{DB: db})
	read := func(ctx context.Context, req *adminv1.ExportUserRequest) ([]byte, int, error) {
		stream, err := c.ExportUser(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		return drain(stream)
	}
	if _, _, err := read(ctx, &adminv1.ExportUserRequest{Platform: "discord", UserId: "42"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}
	if _, _, err := read(authed, &adminv1.ExportUserRequest{Platform: "discord"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("without a user id: %v", err)
	}
	b, chunks, err := read(authed, &adminv1.ExportUserRequest{Platform: "discord", UserId: "42"})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Memories []struct{ Content string } `json:"memories"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || chunks != 2 || len(doc.Memories) != 2 || doc.Memories[0].Content != big {
		t.Fatalf("%d chunks, %d memories, %v", chunks, len(doc.Memories), err)
	}
	var audited int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'users.export' AND target = 'discord:42'
		AND actor = 'token:ops-jane' AND (detail->>'memories')::int = 2`).Scan(&audited); err != nil || audited != 1 {
		t.Errorf("audited %d, %v", audited, err)
	}
}
