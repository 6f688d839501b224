package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/toolapproval"
)

// The tool approval RPCs list and revoke the standing approvals of
// dangerous tool calls that "/approve session" and "/approve always"
// grant from a chat (pkg/toolapproval). Hermes keeps "always" in its
// config's command allowlist, which an operator edits; here they are
// rows of Postgres, which these calls read and delete.

func toolApprovalProto(a toolapproval.Approval) *adminv1.ToolApproval {
	return &adminv1.ToolApproval{Scope: a.Scope, Subject: a.Subject, Pattern: a.Pattern,
		CreatedAt: timestamppb.New(a.CreatedAt), SessionKey: a.SessionKey}
}

// ListToolApprovals pages through the standing approvals that match the
// request, ordered by scope, subject and pattern.
func (s *Service) ListToolApprovals(ctx context.Context, req *adminv1.ListToolApprovalsRequest) (*adminv1.ListToolApprovalsResponse, error) {
	scope, err := toolapproval.ParseScope(req.GetScope())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	size := int(req.GetPageSize())
	if size <= 0 || size > 500 {
		size = 100
	}
	var after toolapproval.Position
	if req.GetPageToken() != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.GetPageToken())
		if err != nil || json.Unmarshal(b, &after) != nil {
			return nil, status.Error(codes.InvalidArgument, "bad page token")
		}
	}
	f := toolapproval.Filter{Scope: scope, Subject: strings.TrimSpace(req.GetSubject()), Pattern: req.GetPattern(),
		SessionKey: strings.TrimSpace(req.GetSessionKey())}
	if f.SessionKey != "" {
		// Whom the key's turns run as: its direct chat's user, or the
		// group's session key (a key no session holds any more: that).
		sess, err := s.sessions.Get(ctx, f.SessionKey)
		switch {
		case err == nil:
			f.Owner = memorygate.Owner(f.SessionKey, sess.Origin)
		case !errors.Is(err, sessionstore.ErrNotFound):
			return nil, err
		}
	}
	list, err := s.toolApprovals.List(ctx, f, after, size+1)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.ListToolApprovalsResponse{}
	if len(list) > size {
		list = list[:size]
		last := list[size-1]
		b, err := json.Marshal(toolapproval.Position{Scope: last.Scope, Subject: last.Subject, Pattern: last.Pattern})
		if err != nil {
			return nil, err
		}
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString(b)
	}
	for _, a := range list {
		resp.Approvals = append(resp.Approvals, toolApprovalProto(a))
	}
	return resp, nil
}

// RevokeToolApprovals deletes a subject's standing approval of one
// pattern, or all of them in the scope, and audits what went. Every
// worker reads the approvals at each dangerous call: the next call asks
// again. Revoking nothing is no error, and not audited.
func (s *Service) RevokeToolApprovals(ctx context.Context, req *adminv1.RevokeToolApprovalsRequest) (*adminv1.RevokeToolApprovalsResponse, error) {
	scope, err := toolapproval.ParseScope(req.GetScope())
	if err == nil && scope == "" {
		err = errors.New("scope is required: user or session")
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	subject := strings.TrimSpace(req.GetSubject())
	if subject == "" {
		return nil, status.Error(codes.InvalidArgument, "subject is required: a user key (telegram:42, session:<key>) or a conversation's session id")
	}
	revoked, err := s.toolApprovals.Revoke(ctx, scope, subject, req.GetPattern())
	if err != nil {
		return nil, err
	}
	resp := &adminv1.RevokeToolApprovalsResponse{}
	patterns := make([]string, 0, len(revoked))
	for _, a := range revoked {
		resp.Revoked = append(resp.Revoked, toolApprovalProto(a))
		patterns = append(patterns, a.Pattern)
	}
	if len(revoked) == 0 {
		return resp, nil
	}
	s.log.WarnContext(ctx, "tool approvals revoked from the admin API", "scope", scope, "subject", subject, "patterns", patterns, "by", operatorBy(ctx))
	if err := s.audit(ctx, "tool_approvals.revoke", scope+":"+subject, map[string]any{"patterns": patterns}); err != nil {
		return nil, err
	}
	return resp, nil
}
