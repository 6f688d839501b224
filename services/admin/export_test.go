package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// ExportSession over the API: the current conversation or one the key
// left, in each of /save's formats, credentials masked on request;
// unknown keys, conversations and formats refused; every export audited.
func TestExportSessionRPC(t *testing.T) {
	t.Parallel()
	ctx, cancelAll := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelAll()
	db := pgtest.New(t)
	const key = "agent:main:telegram:dm:42"
	for _, q := range []string{
		`INSERT INTO sessions (session_key, session_id, platform, chat_type, origin, title, model_override)
			VALUES ('` + key + `', 'c-now', 'telegram', 'dm', '{"platform": "telegram", "chat_type": "dm", "chat_id": "42"}', 'Tea', 'gpt-4o')`,
		`INSERT INTO session_history (session_key, session_id, title, started_at) VALUES ('` + key + `', 'c-old', 'Coffee', '2026-12-01T09:00:00Z'), ('` + key + `', 'c-now', '', now())`,
		`INSERT INTO transcript_messages (session_key, session_id, turn_id, generation, step, role, content) VALUES
			('` + key + `', 'c-old', 't1', 1, 0, 'user', 'about coffee'),
			('` + key + `', 'c-now', 't2', 2, 0, 'user', 'my key is sk-abcdefghijklmnopqrstuvwx1234'),
			('` + key + `', 'c-now', 't2', 2, 1, 'assistant', 'noted')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	c, authed := serve(t, ctx, Config{}, Deps{DB: db})
	read := func(ctx context.Context, req *adminv1.ExportSessionRequest) (string, error) {
		stream, err := c.ExportSession(ctx, req)
		if err != nil {
			return "", err
		}
		b, _, err := drain(stream)
		return string(b), err
	}
	if _, err := read(ctx, &adminv1.ExportSessionRequest{SessionKey: key}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without the token: %v", err)
	}
	for _, tt := range []struct {
		req  *adminv1.ExportSessionRequest
		code codes.Code
	}{
		{&adminv1.ExportSessionRequest{}, codes.InvalidArgument},
		{&adminv1.ExportSessionRequest{SessionKey: key, Format: "pdf"}, codes.InvalidArgument},
		{&adminv1.ExportSessionRequest{SessionKey: "agent:main:telegram:dm:43"}, codes.NotFound},
		{&adminv1.ExportSessionRequest{SessionKey: key, SessionId: "c-other"}, codes.NotFound},
	} {
		if _, err := read(authed, tt.req); status.Code(err) != tt.code {
			t.Errorf("%v: %v, want %v", tt.req, err, tt.code)
		}
	}

	out, err := read(authed, &adminv1.ExportSessionRequest{SessionKey: key})
	var doc struct {
		ID       string                     `json:"id"`
		Source   string                     `json:"source"`
		Model    string                     `json:"model"`
		Title    string                     `json:"title"`
		Messages []struct{ Content string } `json:"messages"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || doc.ID != "c-now" || doc.Source != "telegram" || doc.Model != "gpt-4o" ||
		doc.Title != "Tea" || len(doc.Messages) != 2 || !strings.Contains(doc.Messages[0].Content, "sk-abcdefghijklmnopqrstuvwx1234") {
		t.Fatalf("the current conversation as json: %v\n%s", err, out)
	}
	out, err = read(authed, &adminv1.ExportSessionRequest{SessionKey: key, SessionId: "c-old", Format: "MD"})
	if err != nil || !strings.Contains(out, "Coffee") || !strings.Contains(out, "about coffee") || strings.Contains(out, "noted") {
		t.Fatalf("the conversation it left as markdown: %v\n%s", err, out)
	}
	out, err = read(authed, &adminv1.ExportSessionRequest{SessionKey: key, Format: "html", Redact: true})
	if err != nil || !strings.Contains(out, "<html") || strings.Contains(out, "sk-abcdefghijklmnopqrstuvwx1234") || !strings.Contains(out, "noted") {
		t.Fatalf("redacted html: %v\n%s", err, out)
	}
	var audited int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'session.export' AND target = $1 AND actor = 'token:ops-jane'`, key).Scan(&audited); err != nil || audited != 3 {
		t.Errorf("audited %d exports, %v; want 3", audited, err)
	}
}

// drain reads an export stream to its end: the data, in how many
// chunks, and the error that ended it (nil at io.EOF).
func drain[T any, P interface {
	*T
	GetData() []byte
}](stream grpc.ServerStreamingClient[T]) ([]byte, int, error) {
	var b []byte
	chunks := 0
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return b, chunks, nil
		}
		if err != nil {
			return b, chunks, err
		}
		chunks++
		b = append(b, P(chunk).GetData()...)
	}
}
