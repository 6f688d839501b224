package admin

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/userdata"
)

// ForgetUser deletes what Switchboard holds of one user (retention
// Forget) and audits it with the counts, not the data (a dry run deletes
// nothing and is not audited).
func (s *Service) ForgetUser(ctx context.Context, req *adminv1.ForgetUserRequest) (*adminv1.ForgetUserResponse, error) {
	if s.forgetter == nil {
		return nil, status.Error(codes.Unimplemented, "forgetting users is not available in this process")
	}
	u, err := userArg(req.GetPlatform(), req.GetUserId())
	if err != nil {
		return nil, err
	}
	res, err := s.forgetter.Forget(ctx, u, req.GetDryRun())
	if err != nil {
		s.log.ErrorContext(ctx, "forget user", "platform", u.Platform, "err", err)
		return nil, status.Errorf(codes.Internal, "forget user: %v; it is one transaction, safe to run again", err)
	}
	resp := &adminv1.ForgetUserResponse{Sessions: res.Sessions, BusySessions: res.Busy, SharedSessions: res.Shared,
		Rows: res.Rows, DryRun: req.GetDryRun()}
	if req.GetDryRun() {
		return resp, nil
	}
	if err := s.audit(ctx, "users.forget", u.Platform+":"+u.ID, map[string]any{"sessions": len(res.Sessions),
		"busy_sessions": len(res.Busy), "shared_sessions": len(res.Shared), "rows": res.Rows}); err != nil {
		// The erasure committed: say so, or a rerun finding nothing would
		// be all the operator sees.
		s.log.ErrorContext(ctx, "user forgotten but not audited", "platform", u.Platform, "err", err)
		return nil, status.Errorf(codes.Internal, "the user was forgotten (%d sessions deleted) but the audit record could not be written: %v",
			len(res.Sessions), err)
	}
	return resp, nil
}

// userArg is the user a request names, or InvalidArgument.
func userArg(platform, id string) (userdata.User, error) {
	u, err := userdata.User{Platform: platform, ID: id}.Normalized()
	if err != nil {
		return u, status.Error(codes.InvalidArgument, "platform and user_id are required (the user id as /whoami shows it)")
	}
	return u, nil
}

// ExportUser streams everything held of one user as a JSON document
// (userdata.Export) and audits the access (who, whose, how much).
func (s *Service) ExportUser(req *adminv1.ExportUserRequest, stream grpc.ServerStreamingServer[adminv1.ExportUserResponse]) error {
	ctx := stream.Context()
	u, err := userArg(req.GetPlatform(), req.GetUserId())
	if err != nil {
		return err
	}
	doc, err := userdata.Export(ctx, s.db, u, time.Now())
	if err != nil {
		s.log.ErrorContext(ctx, "export user", "platform", u.Platform, "err", err)
		return err
	}
	b, err := doc.JSON()
	if err != nil {
		return err
	}
	if err := s.audit(ctx, "users.export", u.Platform+":"+u.ID, map[string]any{"sessions": len(doc.Sessions),
		"memories": len(doc.Memories), "bytes": len(b)}); err != nil {
		return err
	}
	return sendChunks(b, func(c []byte) error { return stream.Send(&adminv1.ExportUserResponse{Data: c}) })
}
