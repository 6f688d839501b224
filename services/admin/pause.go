package admin

import (
	"context"
	"errors"
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

// bucket opens the NATS KV bucket of one operator control (what names
// it in errors): Unimplemented when this process has none, Unavailable
// when NATS does not answer.
func (s *Service) bucket(ctx context.Context, open func(context.Context) (jetstream.KeyValue, error), what string) (jetstream.KeyValue, error) {
	if open == nil {
		return nil, status.Errorf(codes.Unimplemented, "%s is not available in this process", what)
	}
	kv, err := open(ctx)
	if err != nil {
		s.log.Warn("open an operator control's bucket", "control", what, "err", err)
		return nil, status.Errorf(codes.Unavailable, "the bucket of %s (NATS) is unavailable", what)
	}
	return kv, nil
}

// pauseBucket opens the emergency stop's bucket.
func (s *Service) pauseBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return s.bucket(ctx, s.pause, "the emergency stop")
}

// operatorBy is who acts, as the pause, the approval mode and a skill
// reload record it: admin, or admin:<operator> when the caller names
// one.
func operatorBy(ctx context.Context) string {
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
	if st.Allow != nil {
		p.Allow = &adminv1.PauseAllowlist{UserIds: st.Allow.UserIDs, Profiles: st.Allow.Profiles}
	}
	return p
}

// Bounds of a request's allowlist: a pause is one KV entry, read by
// every router replica.
const (
	maxAllowIDs     = 1000
	maxAllowIDBytes = 256
)

// pauseAllow reads a request's allowlist as an entry's is read
// (estop.NormalizeIDs); one that names no user id is refused: it would
// let nobody through while looking like it lets someone.
func pauseAllow(req *adminv1.PauseAllowlist) (*estop.Allow, error) {
	a := &estop.Allow{UserIDs: estop.NormalizeIDs(req.GetUserIds()), Profiles: estop.NormalizeIDs(req.GetProfiles())}
	if len(a.UserIDs) == 0 {
		return nil, status.Error(codes.InvalidArgument,
			"allow.user_ids names no user id: an allowlist without one lets nobody through (profiles only narrow it); set clear_allow to remove the allowlist")
	}
	for field, ids := range map[string]estop.IDs{"allow.user_ids": a.UserIDs, "allow.profiles": a.Profiles} {
		if len(ids) > maxAllowIDs {
			return nil, status.Errorf(codes.InvalidArgument, "%s has %d ids: at most %d", field, len(ids), maxAllowIDs)
		}
		for _, id := range ids {
			if len(id) > maxAllowIDBytes {
				return nil, status.Errorf(codes.InvalidArgument, "%s: %q… is longer than %d bytes", field, truncate(id, 32), maxAllowIDBytes)
			}
		}
	}
	return a, nil
}

// allowDetail is an allowlist as the audit log and the logs record it.
func allowDetail(a *estop.Allow) map[string]any {
	if a == nil {
		return nil
	}
	return map[string]any{"user_ids": []string(a.UserIDs), "profiles": []string(a.Profiles)}
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
// reason when none is given, its expiry when no TTL is, and its
// allowlist unless one is given or cleared), and audits.
func (s *Service) SetPause(ctx context.Context, req *adminv1.SetPauseRequest) (*adminv1.SetPauseResponse, error) {
	if req.TtlSeconds != nil && req.GetTtlSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "ttl_seconds must not be negative")
	}
	if req.Allow != nil && req.GetClearAllow() {
		return nil, status.Error(codes.InvalidArgument, "allow and clear_allow exclude each other: set the allowlist, or clear it")
	}
	var allow *estop.Allow
	if req.Allow != nil {
		var err error
		if allow, err = pauseAllow(req.Allow); err != nil {
			return nil, err
		}
	}
	kv, err := s.pauseBucket(ctx)
	if err != nil {
		return nil, err
	}
	// A re-arm keeps what it is not given of the pause engaged, so it
	// writes on the condition that nothing changed since its read
	// (estop.Update): a /pause off, a chat's /pause or another call
	// landing between is read and decided on again, never overwritten.
	var cur, st *estop.State
	err = estop.Update(ctx, kv, func(stored *estop.State) (*estop.State, error) {
		cur = stored
		st = rearm(ctx, req, allow, cur)
		return st, nil
	})
	if errors.Is(err, estop.ErrContended) {
		return nil, status.Error(codes.Aborted, "the pause kept changing while this call re-armed it: try again")
	}
	if err != nil {
		return nil, err
	}
	pauseActions.WithLabelValues("pause").Inc()
	s.log.WarnContext(ctx, "emergency stop engaged from the admin API: new work paused",
		"reason", st.Reason, "by", st.By, "until", st.Until, "already_paused", cur != nil, "allow", allowDetail(st.Allow))
	detail := map[string]any{"reason": st.Reason, "already_paused": cur != nil}
	if !st.Until.IsZero() {
		detail["until"] = st.Until
	}
	if st.Allow != nil {
		detail["allow"] = allowDetail(st.Allow)
	}
	if req.GetClearAllow() {
		detail["allow_cleared"] = true
	}
	if err := s.audit(ctx, "pause.set", "global", detail); err != nil {
		return nil, err
	}
	return &adminv1.SetPauseResponse{Pause: pauseProto(st), AlreadyPaused: cur != nil}, nil
}

// rearm is the pause req engages over cur, the one engaged (nil: none):
// what req does not give is cur's, as Hermes's re-arm keeps it.
func rearm(ctx context.Context, req *adminv1.SetPauseRequest, allow *estop.Allow, cur *estop.State) *estop.State {
	now := time.Now().UTC()
	st := &estop.State{Reason: command.PauseReason(req.GetReason()), By: operatorBy(ctx), At: now}
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
	switch {
	case req.Allow != nil:
		st.Allow = allow
	case req.GetClearAllow():
		// Nobody works through the pause.
	case cur != nil:
		// As Hermes's re-arm: the standing allowlist stays.
		st.Allow = cur.Allow
	}
	return st
}

// ClearPause lifts the pause, and audits when there was one.
func (s *Service) ClearPause(ctx context.Context, _ *adminv1.ClearPauseRequest) (*adminv1.ClearPauseResponse, error) {
	kv, err := s.pauseBucket(ctx)
	if err != nil {
		return nil, err
	}
	// The pause audited is the one deleted (estop.Disengage), not one
	// read before another change landed.
	cur, err := estop.Disengage(ctx, kv)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		return &adminv1.ClearPauseResponse{}, nil
	}
	pauseActions.WithLabelValues("resume").Inc()
	s.log.WarnContext(ctx, "emergency stop lifted from the admin API: new work accepted again", "by", operatorBy(ctx))
	detail := map[string]any{"reason": cur.Reason, "paused_by": cur.By}
	if err := s.audit(ctx, "pause.clear", "global", detail); err != nil {
		return nil, err
	}
	return &adminv1.ClearPauseResponse{Cleared: true, Pause: pauseProto(cur)}, nil
}
