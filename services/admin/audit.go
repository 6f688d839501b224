package admin

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

// listAuditSQL pages through the audit log newest first, by id (its
// primary key): $1 an action ("" any; ending in "." a prefix), $2 a
// target, $3 an actor ("" any), $4 the earliest time, $5 the id below
// which the page starts, $6 how many.
const listAuditSQL = `SELECT id, at, actor, action, target, detail::text FROM audit_log
WHERE ($1 = '' OR action = $1 OR (right($1, 1) = '.' AND starts_with(action, $1)))
  AND ($2 = '' OR target = $2) AND ($3 = '' OR actor = $3) AND at >= $4 AND id < $5
ORDER BY id DESC
LIMIT $6`

// ListAuditLog pages through the audit log, newest first.
func (s *Service) ListAuditLog(ctx context.Context, req *adminv1.ListAuditLogRequest) (*adminv1.ListAuditLogResponse, error) {
	size := int(req.GetPageSize())
	if size <= 0 || size > 500 {
		size = 100
	}
	before := int64(1<<63 - 1)
	if req.GetPageToken() != "" {
		id, err := strconv.ParseInt(req.GetPageToken(), 10, 64)
		if err != nil || id <= 0 {
			return nil, status.Error(codes.InvalidArgument, "bad page token")
		}
		before = id
	}
	since := time.Unix(0, 0).UTC()
	if req.GetSince() != nil {
		if err := req.GetSince().CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "since: %v", err)
		}
		since = req.GetSince().AsTime()
	}
	rows, err := s.db.Query(ctx, listAuditSQL, strings.TrimSpace(req.GetAction()), req.GetTarget(), req.GetActor(), since, before, size+1)
	if err != nil {
		return nil, err
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*adminv1.AuditEntry, error) {
		e := &adminv1.AuditEntry{}
		var at time.Time
		err := r.Scan(&e.Id, &at, &e.Actor, &e.Action, &e.Target, &e.DetailJson)
		e.At = timestamppb.New(at)
		return e, err
	})
	if err != nil {
		return nil, err
	}
	resp := &adminv1.ListAuditLogResponse{Entries: entries}
	if len(entries) > size {
		resp.Entries = entries[:size]
		resp.NextPageToken = strconv.FormatInt(entries[size-1].GetId(), 10)
	}
	return resp, nil
}
