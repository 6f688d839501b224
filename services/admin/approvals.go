package admin

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

// The approval mode RPCs read and set the gateway-wide dangerous-command
// approval mode that /approvals [manual|smart|off] reads and sets from a
// chat: the same entry (pkg/approvalmode), which every worker follows
// from its next dangerous tool call (Hermes writes approvals.mode to its
// profile's config, hermes_cli/approval_mode.py).

// approvalsBucket opens the approval mode's bucket.
func (s *Service) approvalsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return s.bucket(ctx, s.approvals, "the approval mode")
}

// approvalModeProto is the mode in force: st's, or the configured
// default while no one has set one.
func (s *Service) approvalModeProto(st *approvalmode.State) *adminv1.ApprovalMode {
	if st == nil {
		return &adminv1.ApprovalMode{Mode: string(s.approvalsDefault), ConfiguredDefault: true}
	}
	m := &adminv1.ApprovalMode{Mode: string(st.Mode), By: st.By}
	if !st.At.IsZero() {
		m.SetAt = timestamppb.New(st.At)
	}
	return m
}

// GetApprovalMode returns the mode in force.
func (s *Service) GetApprovalMode(ctx context.Context, _ *adminv1.GetApprovalModeRequest) (*adminv1.GetApprovalModeResponse, error) {
	kv, err := s.approvalsBucket(ctx)
	if err != nil {
		return nil, err
	}
	st, err := approvalmode.Get(ctx, kv)
	if err != nil {
		return nil, err
	}
	return &adminv1.GetApprovalModeResponse{ApprovalMode: s.approvalModeProto(st)}, nil
}

// SetApprovalMode sets the mode for the whole gateway, recording who set
// it, and audits and counts the change as /approvals logs and counts its
// own.
func (s *Service) SetApprovalMode(ctx context.Context, req *adminv1.SetApprovalModeRequest) (*adminv1.SetApprovalModeResponse, error) {
	mode, ok := approvalmode.Parse(req.GetMode())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "mode %q is no approval mode: want manual, smart or off", truncate(req.GetMode(), 64))
	}
	kv, err := s.approvalsBucket(ctx)
	if err != nil {
		return nil, err
	}
	st := approvalmode.State{Mode: mode, By: operatorBy(ctx), At: time.Now().UTC()}
	prev, err := approvalmode.Set(ctx, kv, st)
	if err != nil {
		return nil, approvalsError(err)
	}
	// What the set replaced (its write is conditional on it), not a
	// read before another change landed.
	was := approvalmode.Effective(prev, s.approvalsDefault)
	approvalModeChanges.WithLabelValues(string(mode)).Inc()
	s.log.WarnContext(ctx, "approval mode set from the admin API", "mode", mode, "was", was, "by", st.By)
	if err := s.audit(ctx, "approvals.set", "global", map[string]any{"mode": mode, "was": was}); err != nil {
		return nil, err
	}
	return &adminv1.SetApprovalModeResponse{ApprovalMode: s.approvalModeProto(&st), PreviousMode: string(was)}, nil
}

// approvalsError is a failed change of the mode as the API answers it:
// Aborted when the mode kept changing under it.
func approvalsError(err error) error {
	if errors.Is(err, approvalmode.ErrContended) {
		return status.Error(codes.Aborted, "the approval mode kept changing under this call: try again")
	}
	return err
}

// ResetApprovalMode returns the gateway to the configured default
// (approvals.mode): it deletes the mode set, on the condition that it is
// still the one read (approvalmode.Reset), and audits and counts the
// change as SetApprovalMode does. With no mode set it changes nothing,
// and neither audits nor counts.
func (s *Service) ResetApprovalMode(ctx context.Context, _ *adminv1.ResetApprovalModeRequest) (*adminv1.ResetApprovalModeResponse, error) {
	kv, err := s.approvalsBucket(ctx)
	if err != nil {
		return nil, err
	}
	prev, err := approvalmode.Reset(ctx, kv)
	if err != nil {
		return nil, approvalsError(err)
	}
	resp := &adminv1.ResetApprovalModeResponse{ApprovalMode: s.approvalModeProto(nil), PreviousMode: string(approvalmode.Effective(prev, s.approvalsDefault))}
	if prev == nil {
		return resp, nil
	}
	resp.Cleared = true
	approvalModeChanges.WithLabelValues(string(s.approvalsDefault)).Inc()
	by := operatorBy(ctx)
	s.log.WarnContext(ctx, "approval mode reset to the configured default from the admin API", "mode", s.approvalsDefault, "was", prev.Mode, "by", by)
	if err := s.audit(ctx, "approvals.reset", "global", map[string]any{"mode": s.approvalsDefault, "was": prev.Mode, "was_set_by": prev.By}); err != nil {
		return nil, err
	}
	return resp, nil
}
