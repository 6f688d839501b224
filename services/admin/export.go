package admin

import (
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/export"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

// exportChunk is how much of an export one message carries: well under
// gRPC's default 4 MiB a message.
const exportChunk = 1 << 20

// sendChunks sends b in chunks of exportChunk.
func sendChunks(b []byte, send func([]byte) error) error {
	for len(b) > 0 {
		n := min(len(b), exportChunk)
		if err := send(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// ExportSession streams one conversation of a session as /save writes
// it, and audits the access (who, which, how much).
func (s *Service) ExportSession(req *adminv1.ExportSessionRequest, stream grpc.ServerStreamingServer[adminv1.ExportSessionResponse]) error {
	ctx := stream.Context()
	key := strings.TrimSpace(req.GetSessionKey())
	if key == "" {
		return status.Error(codes.InvalidArgument, "session_key is required")
	}
	format := strings.ToLower(strings.TrimSpace(req.GetFormat()))
	if format == "" {
		format = "json"
	}
	if !slices.Contains(export.Formats, format) {
		return status.Errorf(codes.InvalidArgument, "format %q: want json, md or html", truncate(req.GetFormat(), 16))
	}
	sess, err := s.sessions.Get(ctx, key)
	if err != nil {
		return err
	}
	id, title, started := sess.ID, sess.Title, sess.CreatedAt
	if want := strings.TrimSpace(req.GetSessionId()); want != "" && want != sess.ID {
		// A conversation the key left (/new, /resume, /branch).
		if err := s.db.QueryRow(ctx, `SELECT title, started_at FROM session_history WHERE session_key = $1 AND session_id = $2`,
			key, want).Scan(&title, &started); errors.Is(err, pgx.ErrNoRows) {
			return status.Errorf(codes.NotFound, "session %s has no conversation %s", key, truncate(want, 64))
		} else if err != nil {
			return err
		}
		id = want
	}
	e, err := s.sessions.Export(ctx, key, id, 0)
	if err != nil {
		s.log.ErrorContext(ctx, "export session", "session_id", id, "err", err)
		return err
	}
	e.Title, e.Platform, e.Started, e.Model = title, sess.Origin.GetPlatform(), started, sess.ModelOverride
	if req.GetRedact() {
		e = export.Redacted(e)
	}
	b, err := export.Render(e, format)
	if err != nil {
		return err
	}
	if err := s.audit(ctx, "session.export", key, map[string]any{"session_id": id, "format": format,
		"redact": req.GetRedact(), "messages": len(e.Messages), "bytes": len(b)}); err != nil {
		return err
	}
	return sendChunks(b, func(c []byte) error { return stream.Send(&adminv1.ExportSessionResponse{Data: c}) })
}
