// Package admin serves the operator API (switchboard.admin.v1.AdminService)
// over gRPC on its own port: sessions, pairing, standing tool approvals
// (pkg/toolapproval), a user's data forgotten or exported
// (pkg/userdata, pkg/retention) and the audit log against Postgres,
// deliveries through the delivery engine's implementation, and the
// operator controls kept in NATS KV buckets: the global emergency stop
// (/pause, pkg/estop), the dangerous-command approval mode (/approvals,
// pkg/approvalmode) and skill reload announcements (/reload-skills,
// pkg/skill). Every call carries the bearer token from
// SWITCHBOARD_ADMIN_TOKEN; every action that changes state, and every
// export of personal data, is written to the audit log.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/loopback"
	"github.com/switchboard-chat/switchboard/pkg/pairing"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/retention"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/pkg/toolapproval"
	"github.com/switchboard-chat/switchboard/pkg/userdata"
)

// DefaultAddr is where the admin API listens by default: loopback only.
const DefaultAddr = "127.0.0.1:7070"

// ActorHeader optionally names the person behind a call, for the audit log.
const ActorHeader = "x-switchboard-actor"

// Config is the admin section of the config file.
type Config struct {
	// Addr is the gRPC listen address.
	Addr string `koanf:"addr"`
	// ApprovalsMode is approvals.mode of the configuration, the approval
	// mode while no one has set one (GetApprovalMode shows it).
	ApprovalsMode string `koanf:"-"`
}

// Deliveries is the delivery engine's part of the API (pkg/outbox
// implements it). Nil answers Unimplemented.
type Deliveries interface {
	ListDeliveries(context.Context, *adminv1.ListDeliveriesRequest) (*adminv1.ListDeliveriesResponse, error)
	RetryDeliveries(context.Context, *adminv1.RetryDeliveriesRequest) (*adminv1.RetryDeliveriesResponse, error)
	PurgeDeliveries(context.Context, *adminv1.PurgeDeliveriesRequest) (*adminv1.PurgeDeliveriesResponse, error)
}

// SessionLocks reads and lets go of the session locks
// (redisx.Locker implements it).
type SessionLocks interface {
	Owner(ctx context.Context, name string) (string, error)
	Release(ctx context.Context, name, token string) error
}

// Pruner deletes idle sessions (pkg/retention implements it). Nil
// answers Unimplemented.
type Pruner interface {
	Prune(context.Context, retention.Criteria) (retention.Result, error)
}

// Forgetter deletes one user's data (pkg/retention implements it). Nil
// answers Unimplemented.
type Forgetter interface {
	Forget(context.Context, userdata.User, bool) (retention.Erasure, error)
}

// Deps are what the admin API uses.
type Deps struct {
	Log *slog.Logger
	DB  *pgxpool.Pool
	// Token is the bearer token every call must carry.
	Token string
	// Deliveries implements the delivery RPCs; nil answers Unimplemented.
	Deliveries Deliveries
	// Pruner implements PruneSessions; nil answers Unimplemented.
	Pruner Pruner
	// Forgetter implements ForgetUser; nil answers Unimplemented.
	Forgetter Forgetter
	// Pause opens the emergency stop's bucket (estop.Open on the bus),
	// called by each pause RPC; nil answers Unimplemented.
	Pause func(context.Context) (jetstream.KeyValue, error)
	// Approvals opens the approval mode's bucket (approvalmode.Open),
	// called by each approval mode RPC; nil answers Unimplemented.
	Approvals func(context.Context) (jetstream.KeyValue, error)
	// Skills opens the bucket of skill reload announcements
	// (skill.OpenBucket), called by ReloadSkills; nil answers
	// Unimplemented.
	Skills func(context.Context) (jetstream.KeyValue, error)
	// Bus opens the bus, on which a reset stops the session's running
	// turn and answers the API requests whose waiting messages it drops;
	// called by a reset only for those (an idle session's reset that
	// drops none does without). Nil: the running turn is only fenced off
	// and runs to its end, and those requests are left to their reply
	// timeout.
	Bus func(context.Context) (*bus.Bus, error)
	// Locks opens the session locks (redisx.Locker under redis.prefix,
	// the router's), called by a reset that stops a running turn.
	// Nil: the stopped turn keeps the lock until it has wound down.
	Locks func(context.Context) (SessionLocks, error)
	// Health drives the gRPC health service; nil reports SERVING.
	Health *telemetry.Health
}

// Service is the admin gRPC server.
type Service struct {
	adminv1.UnimplementedAdminServiceServer
	cfg        Config
	log        *slog.Logger
	db         *pgxpool.Pool
	tokenSum   [32]byte
	deliveries Deliveries
	pruner     Pruner
	forgetter  Forgetter
	pause      func(context.Context) (jetstream.KeyValue, error)
	approvals  func(context.Context) (jetstream.KeyValue, error)
	skills     func(context.Context) (jetstream.KeyValue, error)
	bus        func(context.Context) (*bus.Bus, error)
	locks      func(context.Context) (SessionLocks, error)
	// approvalsDefault is cfg.ApprovalsMode, read.
	approvalsDefault approvalmode.Mode
	health           *telemetry.Health
	sessions         *sessionstore.Store
	pairing          *pairing.Store
	toolApprovals    *toolapproval.Store
	srv              *grpc.Server
	hs               *health.Server
	lis              net.Listener
	noToken          bool
}

// New builds the server. Without a token it refuses to start unless Addr
// is a loopback address.
func New(cfg Config, deps Deps) (*Service, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if deps.DB == nil {
		return nil, errors.New("admin: database required")
	}
	approvalsDefault, err := approvalmode.FromConfig(cfg.ApprovalsMode)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if deps.Token == "" && !loopback.Addr(cfg.Addr) {
		return nil, fmt.Errorf("admin: SWITCHBOARD_ADMIN_TOKEN is not set and admin.addr %s is not a loopback address", cfg.Addr)
	}
	log := deps.Log
	if log == nil {
		log = slog.Default()
	}
	s := &Service{
		cfg: cfg, log: log.With("service", "admin"), db: deps.DB, tokenSum: sha256.Sum256([]byte(deps.Token)),
		deliveries: deps.Deliveries, pruner: deps.Pruner, forgetter: deps.Forgetter, pause: deps.Pause, health: deps.Health,
		approvals: deps.Approvals, skills: deps.Skills, bus: deps.Bus, locks: deps.Locks, approvalsDefault: approvalsDefault,
		sessions: sessionstore.New(deps.DB), pairing: pairing.NewStore(deps.DB),
		toolApprovals: toolapproval.NewStore(deps.DB),
		hs:            health.NewServer(),
	}
	if deps.Token == "" {
		s.log.Warn("admin API has no token; it accepts every call on loopback", "addr", cfg.Addr)
	}
	s.srv = grpc.NewServer(grpc.StatsHandler(otelgrpc.NewServerHandler()), grpc.ChainUnaryInterceptor(panics.UnaryServerInterceptor(s.log, "admin_rpc"), s.authUnary), grpc.ChainStreamInterceptor(s.authStream))
	adminv1.RegisterAdminServiceServer(s.srv, s)
	healthpb.RegisterHealthServer(s.srv, s.hs)
	s.hs.SetServingStatus(adminv1.AdminService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.noToken = deps.Token == ""
	return s, nil
}

// Listen binds the address (Run does it if not done); Addr then reports it.
func (s *Service) Listen() error {
	if s.lis != nil {
		return nil
	}
	lis, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("admin listen %s: %w", s.cfg.Addr, err)
	}
	s.lis = lis
	return nil
}

// Addr is the bound address.
func (s *Service) Addr() string {
	if s.lis == nil {
		return s.cfg.Addr
	}
	return s.lis.Addr().String()
}

// Run serves until ctx ends, then stops gracefully.
func (s *Service) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	if s.health != nil {
		go s.health.SyncGRPC(ctx, s.hs, 2*time.Second, adminv1.AdminService_ServiceDesc.ServiceName)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.lis) }()
	s.log.Info("admin API listening", "addr", s.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("admin serve: %w", err)
	case <-ctx.Done():
	}
	s.hs.Shutdown()
	stopped := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		s.srv.Stop()
	}
	return nil
}

// --- authentication ---

const healthService = "/grpc.health.v1.Health/"

func (s *Service) authorize(ctx context.Context, method string) error {
	// Probes (Kubernetes gRPC health checks) carry no token.
	if strings.HasPrefix(method, healthService) {
		return nil
	}
	if s.noToken {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var got string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			got = t
		}
	}
	sum := sha256.Sum256([]byte(got))
	if got == "" || subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		authFailures.Inc()
		s.log.Warn("admin call refused: bad or missing token", "method", method, "peer", peerAddr(ctx))
		return status.Error(codes.Unauthenticated, "missing or invalid bearer token")
	}
	return nil
}

func (s *Service) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	resp, err := h(ctx, req)
	return resp, toStatus(err)
}

func (s *Service) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return toStatus(h(srv, ss))
}

// toStatus maps domain errors to gRPC codes in one place.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, sessionstore.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, pairing.ErrInvalidCode):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, pairing.ErrLockedOut):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, "internal error")
}

func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

func actor(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(ActorHeader); len(v) > 0 && strings.TrimSpace(v[0]) != "" {
		return "token:" + truncate(strings.TrimSpace(v[0]), 64)
	}
	return "token"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// audit records a state-changing action. It fails the call if the record
// cannot be written after the change (the change stays; the error says so).
func (s *Service) audit(ctx context.Context, action, target string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	detail["peer"] = peerAddr(ctx)
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode audit detail: %w", err)
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO audit_log (actor, action, target, detail) VALUES ($1, $2, $3, $4)`,
		actor(ctx), action, target, b); err != nil {
		return fmt.Errorf("write audit log: %w", err)
	}
	if strings.HasPrefix(action, "users.") {
		// A person's id (a phone number, an address) stays out of the
		// process log: the audit row has it.
		s.log.Info("admin action", "action", action, "actor", actor(ctx))
		return nil
	}
	s.log.Info("admin action", "action", action, "target", target, "actor", actor(ctx))
	return nil
}

// --- sessions ---

func toProto(sess sessionstore.Session) *adminv1.Session {
	return &adminv1.Session{
		SessionKey: sess.Key, SessionId: sess.ID, Origin: sess.Origin, DisplayName: sess.DisplayName,
		ChatType: sess.ChatType, CreatedAt: timestamppb.New(sess.CreatedAt), UpdatedAt: timestamppb.New(sess.UpdatedAt),
		InputTokens: sess.InputTokens, OutputTokens: sess.OutputTokens, ModelOverride: sess.ModelOverride,
		Generation: sess.Generation, Suspended: sess.Suspended, Title: sess.Title,
	}
}

// ListSessions pages through sessions ordered by key.
func (s *Service) ListSessions(ctx context.Context, req *adminv1.ListSessionsRequest) (*adminv1.ListSessionsResponse, error) {
	size := int(req.GetPageSize())
	if size <= 0 || size > 500 {
		size = 100
	}
	after := ""
	if req.GetPageToken() != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.GetPageToken())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "bad page token")
		}
		after = string(b)
	}
	// Lowercased, as PruneSessions and ListPairings take theirs: the
	// sessions listed for a platform are those a prune of it would take.
	list, err := s.sessions.List(ctx, strings.ToLower(req.GetPlatform()), size+1, after)
	if err != nil {
		return nil, err
	}
	resp := &adminv1.ListSessionsResponse{}
	if len(list) > size {
		list = list[:size]
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(list[size-1].Key))
	}
	if err := s.sessions.AddTurnUsage(ctx, list); err != nil {
		return nil, err
	}
	for _, sess := range list {
		resp.Sessions = append(resp.Sessions, toProto(sess))
	}
	return resp, nil
}

// GetSession returns one session.
func (s *Service) GetSession(ctx context.Context, req *adminv1.GetSessionRequest) (*adminv1.GetSessionResponse, error) {
	if req.GetSessionKey() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_key is required")
	}
	sess, err := s.sessions.Get(ctx, req.GetSessionKey())
	if err != nil {
		return nil, err
	}
	counted := []sessionstore.Session{sess}
	if err := s.sessions.AddTurnUsage(ctx, counted); err != nil {
		return nil, err
	}
	return &adminv1.GetSessionResponse{Session: toProto(counted[0])}, nil
}

// ResetSession starts a new conversation under the key. It stops the
// session's running turn, as the router's /new does: a stop control to
// whichever turn runs there (stopTurn), sent when one may run, and the
// new generation fences off what the stopped turn still writes; the
// stopped turn's session lock is let go, as /new lets it go. An idle
// session's reset needs no bus: it is done while NATS is down. The API
// requests whose waiting messages it drops are answered with an
// "interrupted" error, as the router's /new answers them. Both go out before the reset commits (a
// turn start landing meanwhile waits for it and finds the queue
// dropped): a stop or an answer that cannot go out fails the reset,
// which then leaves the session as it was; a stop that went out before
// the failure has still stopped the turn, as /new's does.
func (s *Service) ResetSession(ctx context.Context, req *adminv1.ResetSessionRequest) (*adminv1.ResetSessionResponse, error) {
	if req.GetSessionKey() == "" {
		return nil, status.Error(codes.InvalidArgument, "session_key is required")
	}
	// Whether a turn may run is read before the reset's transaction, not
	// in it on a second connection of the pool (resets holding every
	// connection would wait on each other for ever); the reset then sees,
	// under its lock of the session row, whether a turn started since.
	before, err := s.sessions.Get(ctx, req.GetSessionKey())
	if err != nil {
		return nil, err
	}
	mayRun, err := s.sessions.TurnMayRun(ctx, before)
	if err != nil {
		return nil, err
	}
	var unlock func(context.Context)
	sess, err := s.sessions.ResetAnswering(ctx, req.GetSessionKey(), "admin", func(ctx context.Context, sess sessionstore.Session, dropped []sessionstore.Queued) error {
		unlock = nil // a retried transaction's
		if mayRun || sess.LastTurnID != before.LastTurnID {
			var err error
			if unlock, err = s.stopTurn(ctx, sess); err != nil {
				return err
			}
		}
		return s.answerDropped(ctx, sess, dropped)
	})
	if err != nil {
		return nil, err
	}
	if unlock != nil {
		// After the commit: the new generation fences the stopped turn
		// off before a turn of the new conversation can take the lock,
		// so the two never write as one conversation's.
		unlock(ctx)
	}
	if err := s.audit(ctx, "session.reset", req.GetSessionKey(), map[string]any{"session_id": sess.ID, "generation": sess.Generation}); err != nil {
		return nil, err
	}
	return &adminv1.ResetSessionResponse{Session: toProto(sess)}, nil
}

// stopTurn asks the worker running a turn of the session reset to sess
// to stop it, and returns what lets go of the turn's session lock (nil
// when no lock is to go), as the router's /new lets it go (services/router
// forceUnlock), for after the reset commits: a message sent while the
// stopped turn winds down starts a turn of the new conversation at once,
// instead of being queued behind the stopped turn with a busy answer
// (the stopped turn's writes are fenced off by the new generation, and
// its release of the lock finds it gone). ResetSession
// calls it only when a turn may run (sessionstore TurnMayRun): an idle
// session needs no stop, so its reset, a Postgres operation, is done
// while NATS is down. Without a bus (Deps.Bus nil) the turn is only
// fenced off by the new generation and runs to its end.
func (s *Service) stopTurn(ctx context.Context, sess sessionstore.Session) (unlock func(context.Context), err error) {
	if s.bus == nil {
		s.log.Warn("reset cannot stop a running turn (no bus): its writes are fenced off, it runs to its end", "session_key", sess.Key)
		return nil, nil
	}
	b, err := s.bus(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "stop the session's running turn: %v", err)
	}
	locks, owner := s.lockOwner(ctx, sess.Key)
	msg := &turnsv1.TurnControlRequested{SessionKey: sess.Key, Action: turnsv1.ControlAction_CONTROL_ACTION_STOP, EventId: "admin-reset:" + sess.ID}
	if err := b.PublishCore(ctx, b.Topology().ControlSubject(sess.Key), msg); err != nil {
		return nil, status.Errorf(codes.Unavailable, "stop the session's running turn: %v", err)
	}
	if owner == "" || redisx.GrantOf(owner) != sess.LastTurnID {
		// Only the lock of the turn stopped, sess.LastTurnID (a turn's
		// id is its grant): another grant read under the reset's lock of
		// the session row is a router's for a message whose start waits
		// for the reset, a turn of the new conversation. Let go, it
		// would run with no lock, and a turn started beside it would
		// fence it off.
		return nil, nil
	}
	return func(ctx context.Context) {
		// Compare-and-delete with the token read before the stop: a
		// turn that took the lock since keeps it.
		if err := locks.Release(ctx, sess.Key, owner); err != nil {
			s.log.Debug("reset: release the stopped turn's lock", "session_key", sess.Key, "err", err)
		}
	}, nil
}

// lockTimeout bounds a reset's wait for Redis, where the session locks
// are: without it the reset goes on, and the stopped turn keeps its lock
// until it has wound down.
const lockTimeout = 5 * time.Second

// lockOwner returns the session locks and the token holding key's lock
// ("" when it is free or cannot be read), read before the stop goes out
// so that only the stopped turn's lock is let go. Best effort, as the
// router's: without Redis (Deps.Locks nil, or Redis unreachable) the
// reset is done and the stopped turn lets go of the lock as it ends.
func (s *Service) lockOwner(ctx context.Context, key string) (SessionLocks, string) {
	if s.locks == nil {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	locks, err := s.locks(ctx)
	if err != nil {
		s.log.Warn("reset cannot let go of the stopped turn's lock (no Redis): a message before it ends is queued behind it", "session_key", key, "err", err)
		return nil, ""
	}
	owner, err := locks.Owner(ctx, key)
	if err != nil {
		s.log.Warn("reset cannot let go of the stopped turn's lock: a message before it ends is queued behind it", "session_key", key, "err", err)
		return nil, ""
	}
	return locks, owner
}

// resetDroppedText explains an API request whose waiting message an
// operator's reset dropped.
const resetDroppedText = "Stopped before it ran: an operator reset this conversation and dropped this waiting message."

// answerDropped ends the API requests whose waiting messages the reset
// to sess dropped: each waits for an answer of its own, which no turn
// will give now. The reply is the router's to a message /new drops
// (services/router answerDropped): an "interrupted" error under the
// id "stopped:<event id>", so a republished one is taken once; a
// chat's dropped messages get none, as with /new.
func (s *Service) answerDropped(ctx context.Context, sess sessionstore.Session, dropped []sessionstore.Queued) error {
	var b *bus.Bus
	for _, q := range dropped {
		ev := q.Event
		if !strings.EqualFold(ev.GetSource().GetPlatform(), "api") || ev.GetMessageId() == "" {
			continue
		}
		if b == nil {
			if s.bus == nil {
				s.log.Warn("reset dropped a waiting API request it cannot answer (no bus): it waits for its reply timeout", "session_key", sess.Key)
				continue
			}
			var err error
			if b, err = s.bus(ctx); err != nil {
				return status.Errorf(codes.Unavailable, "answer the API requests the reset drops: %v", err)
			}
		}
		src := ev.GetSource()
		turnID := "stopped:" + ev.GetEventId()
		reply := &repliesv1.ReplyEvent{
			TurnId:     turnID,
			SessionKey: sess.Key,
			Generation: sess.Generation,
			Seq:        1,
			Target: &deliveryv1.Target{Platform: src.GetPlatform(), Account: src.GetAccount(), ChatId: src.GetChatId(),
				ThreadId: sessionkey.ReplyThread(src), ReplyToMessageId: ev.GetMessageId()},
			CreatedAt:       timestamppb.Now(),
			InputMessageIds: []string{ev.GetMessageId()},
			Body:            &repliesv1.ReplyEvent_Error{Error: &repliesv1.ReplyError{Code: "interrupted", Message: resetDroppedText}},
		}
		if _, err := b.Publish(ctx, b.Topology().ReplySubject(sess.Key), turnID, reply); err != nil {
			return status.Errorf(codes.Unavailable, "answer a waiting API request the reset drops: %v", err)
		}
	}
	return nil
}

// PruneSessions deletes sessions idle for at least older_than_seconds,
// with everything that hangs off them, and audits it (a dry run deletes
// nothing and is not audited).
func (s *Service) PruneSessions(ctx context.Context, req *adminv1.PruneSessionsRequest) (*adminv1.PruneSessionsResponse, error) {
	if s.pruner == nil {
		return nil, status.Error(codes.Unimplemented, "session pruning is not available in this process")
	}
	if req.GetOlderThanSeconds() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "older_than_seconds must be positive")
	}
	// Checked in seconds: a larger count wraps around as a duration, to
	// an age that could be a fraction of a second (prune everything).
	if req.GetOlderThanSeconds() > int64(retention.MaxAge/time.Second) {
		return nil, status.Error(codes.InvalidArgument, "older_than_seconds must be at most 100 years")
	}
	c := retention.Criteria{OlderThan: time.Duration(req.GetOlderThanSeconds()) * time.Second,
		Platform: strings.ToLower(req.GetPlatform()), DryRun: req.GetDryRun()}
	res, err := s.pruner.Prune(ctx, c)
	if err != nil {
		s.log.Error("prune sessions", "err", err, "deleted", res.Sessions)
		return nil, status.Errorf(codes.Internal, "prune sessions (%d deleted before the error): %v", res.Sessions, err)
	}
	if !c.DryRun {
		if err := s.audit(ctx, "sessions.prune", c.Platform, map[string]any{"older_than": c.OlderThan.String(),
			"sessions": res.Sessions, "skipped": res.Skipped, "rows": res.Rows}); err != nil {
			return nil, err
		}
	}
	return &adminv1.PruneSessionsResponse{Sessions: res.Sessions, Skipped: res.Skipped, Rows: res.Rows, DryRun: c.DryRun}, nil
}

// --- pairing ---

func pairingProto(p pairing.Pairing) *adminv1.Pairing {
	out := &adminv1.Pairing{Platform: p.Platform, UserId: p.UserID, UserName: p.UserName, State: p.State, CreatedAt: timestamppb.New(p.CreatedAt)}
	if !p.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(p.ExpiresAt)
	}
	if !p.ApprovedAt.IsZero() {
		out.ApprovedAt = timestamppb.New(p.ApprovedAt)
	}
	return out
}

// ListPairings lists pending codes and approved users.
func (s *Service) ListPairings(ctx context.Context, req *adminv1.ListPairingsRequest) (*adminv1.ListPairingsResponse, error) {
	list, err := s.pairing.List(ctx, strings.ToLower(req.GetPlatform()))
	if err != nil {
		return nil, err
	}
	resp := &adminv1.ListPairingsResponse{}
	for _, p := range list {
		resp.Pairings = append(resp.Pairings, pairingProto(p))
	}
	return resp, nil
}

// ApprovePairing admits the user whose pending code matches. Failed
// attempts are audited too (five lock the platform).
func (s *Service) ApprovePairing(ctx context.Context, req *adminv1.ApprovePairingRequest) (*adminv1.ApprovePairingResponse, error) {
	platform := strings.ToLower(strings.TrimSpace(req.GetPlatform()))
	if platform == "" || req.GetCode() == "" {
		return nil, status.Error(codes.InvalidArgument, "platform and code are required")
	}
	p, err := s.pairing.Approve(ctx, platform, req.GetCode(), actor(ctx))
	if err != nil {
		if errors.Is(err, pairing.ErrInvalidCode) || errors.Is(err, pairing.ErrLockedOut) {
			if aerr := s.audit(ctx, "pairing.approve_failed", platform, map[string]any{"reason": err.Error()}); aerr != nil {
				return nil, aerr
			}
		}
		return nil, err
	}
	if err := s.audit(ctx, "pairing.approve", platform+":"+p.UserID, map[string]any{"user_name": p.UserName}); err != nil {
		return nil, err
	}
	return &adminv1.ApprovePairingResponse{Pairing: pairingProto(p)}, nil
}

// RevokePairing removes an approval.
func (s *Service) RevokePairing(ctx context.Context, req *adminv1.RevokePairingRequest) (*adminv1.RevokePairingResponse, error) {
	platform := strings.ToLower(strings.TrimSpace(req.GetPlatform()))
	if platform == "" || req.GetUserId() == "" {
		return nil, status.Error(codes.InvalidArgument, "platform and user_id are required")
	}
	ok, err := s.pairing.Revoke(ctx, platform, req.GetUserId())
	if err != nil {
		return nil, err
	}
	if err := s.audit(ctx, "pairing.revoke", platform+":"+req.GetUserId(), map[string]any{"revoked": ok}); err != nil {
		return nil, err
	}
	return &adminv1.RevokePairingResponse{Revoked: ok}, nil
}

// --- deliveries (delegated) ---

// ListDeliveries delegates to the delivery engine.
func (s *Service) ListDeliveries(ctx context.Context, req *adminv1.ListDeliveriesRequest) (*adminv1.ListDeliveriesResponse, error) {
	if s.deliveries == nil {
		return nil, status.Error(codes.Unimplemented, "deliveries are not available in this process")
	}
	return s.deliveries.ListDeliveries(ctx, req)
}

// RetryDeliveries delegates to the delivery engine and audits.
func (s *Service) RetryDeliveries(ctx context.Context, req *adminv1.RetryDeliveriesRequest) (*adminv1.RetryDeliveriesResponse, error) {
	if s.deliveries == nil {
		return nil, status.Error(codes.Unimplemented, "deliveries are not available in this process")
	}
	resp, err := s.deliveries.RetryDeliveries(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.audit(ctx, "deliveries.retry", "", map[string]any{"ids": req.GetIds(), "all": req.GetAll(), "requeued": resp.GetRequeued()}); err != nil {
		return nil, err
	}
	return resp, nil
}

// PurgeDeliveries delegates to the delivery engine and audits.
func (s *Service) PurgeDeliveries(ctx context.Context, req *adminv1.PurgeDeliveriesRequest) (*adminv1.PurgeDeliveriesResponse, error) {
	if s.deliveries == nil {
		return nil, status.Error(codes.Unimplemented, "deliveries are not available in this process")
	}
	resp, err := s.deliveries.PurgeDeliveries(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := s.audit(ctx, "deliveries.purge", "", map[string]any{"ids": req.GetIds(), "all": req.GetAll(), "purged": resp.GetPurged()}); err != nil {
		return nil, err
	}
	return resp, nil
}
