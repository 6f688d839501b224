package admin

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/estop"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
)

// The pause RPCs engage, read and lift the global emergency stop that
// /pause [reason | off] sets from a chat: the same entry (pkg/estop), so
// every router replica's watch takes it within its delay, /status shows
// it and /pause off lifts it. Hermes's operator verbs are `hermes pause
// [--reason] [--ttl]` and `hermes resume`; its re-arm keeps the standing
// expiry unless a TTL is given, and so does SetPause.

// maxPauseTTL is the longest expiry; a longer TTL arms a pause without
// one (Hermes's emergency stop never refuses to arm).
const maxPauseTTL = 100 * 365 * 24 * time.Hour

// pauseBucket opens the emergency stop's bucket.
func (s *Service) pauseBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if s.pause == nil {
		return nil, status.Error(codes.Unimplemented, "the emergency stop is not available in this process")
	}
	kv, err := s.pause(ctx)
	if err != nil {
		s.log.Warn("open the emergency stop's bucket", "err", err)
		return nil, status.Error(codes.Unavailable, "the emergency stop's bucket (NATS) is unavailable")
	}
	return kv, nil
}

// pauseBy is who pauses, as the pause records it: admin, or
// admin:<operator> when the caller names one.
func pauseBy(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(ActorHeader); len(v) > 0 && strings.TrimSpace(v[0]) != "" {
		return "admin:" + truncate(strings.TrimSpace(v[0]), 64)
	}
	return "admin"
}

func pauseProto(st *estop.State) *adminv1.Pause {
	if st == nil {
		return nil
	}
	p := &adminv1.Pause{Reason: st.Reason, By: st.By, PausedAt: timestamppb.New(st.At)}
	if !st.Until.IsZero() {
		p.ExpiresAt = timestamppb.New(st.Until)
	}
	return p
}

// GetPause returns the pause, none when Switchboard is not paused.
func (s *Service) GetPause(ctx context.Context, _ *adminv1.GetPauseRequest) (*adminv1.GetPauseResponse, error) {
	kv, err := s.pauseBucket(ctx)
	if err != nil {
		return nil, err
	}
	st, err := estop.Get(ctx, kv)
	if err != nil {
		return nil, err
	}
	return &adminv1.GetPauseResponse{Pause: pauseProto(st)}, nil
}

// SetPause engages the pause, or re-arms the one engaged (keeping its
// reason when none is given, and its expiry when no TTL is), and audits.
func (s *Service) SetPause(ctx context.Context, req *adminv1.SetPauseRequest) (*adminv1.SetPauseResponse, error) {
	if req.TtlSeconds != nil && req.GetTtlSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "ttl_seconds must not be negative")
	}
	kv, err := s.pauseBucket(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := estop.Get(ctx, kv)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	st := estop.State{Reason: command.PauseReason(req.GetReason()), By: pauseBy(ctx), At: now}
	if cur != nil && st.Reason == "" {
		st.Reason = cur.Reason
	}
	switch ttl := req.GetTtlSeconds(); {
	case req.TtlSeconds == nil:
		if cur != nil {
			st.Until = cur.Until
		}
	case ttl > 0 && ttl <= int64(maxPauseTTL/time.Second):
		st.Until = now.Add(time.Duration(ttl) * time.Second)
	}
	if cur != nil {
		// As Hermes's re-arm: the standing allowlist stays (it is set in
		// the bucket, docs/operations.md).
		st.Allow = cur.Allow
	}
	if err := estop.Engage(ctx, kv, st); err != nil {
		return nil, err
	}
	pauseActions.WithLabelValues("pause").Inc()
	s.log.WarnContext(ctx, "emergency stop engaged from the admin API: new work paused",
		"reason", st.Reason, "by", st.By, "until", st.Until, "already_paused", cur != nil)
	detail := map[string]any{"reason": st.Reason, "already_paused": cur != nil}
	if !st.Until.IsZero() {
		detail["until"] = st.Until
	}
	if err := s.audit(ctx, "pause.set", "global", detail); err != nil {
		return nil, err
	}
	return &adminv1.SetPauseResponse{Pause: pauseProto(&st), AlreadyPaused: cur != nil}, nil
}

// ClearPause lifts the pause, and audits when there was one.
func (s *Service) ClearPause(ctx context.Context, _ *adminv1.ClearPauseRequest) (*adminv1.ClearPauseResponse, error) {
	kv, err := s.pauseBucket(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := estop.Get(ctx, kv)
	if err != nil {
		return nil, err
	}
	cleared, err := estop.Disengage(ctx, kv)
	if err != nil {
		return nil, err
	}
	if !cleared {
		return &adminv1.ClearPauseResponse{}, nil
	}
	pauseActions.WithLabelValues("resume").Inc()
	s.log.WarnContext(ctx, "emergency stop lifted from the admin API: new work accepted again", "by", pauseBy(ctx))
	detail := map[string]any{}
	if cur != nil {
		detail["reason"], detail["paused_by"] = cur.Reason, cur.By
	}
	if err := s.audit(ctx, "pause.clear", "global", detail); err != nil {
		return nil, err
	}
	return &adminv1.ClearPauseResponse{Cleared: true, Pause: pauseProto(cur)}, nil
}
