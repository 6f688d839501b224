package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/secret"
)

// sendServer is DeliveryService: proactive messages (cron jobs, tools,
// operators) queued in the outbox like any reply.
type sendServer struct {
	deliveryv1.UnimplementedDeliveryServiceServer
	s *Service
}

// ErrBadTarget marks a target string that cannot be resolved.
var ErrBadTarget = outbox.ErrBadTarget

// resolveTarget resolves a proactive send's target (outbox.ParseTarget):
// a bare platform to the home channel /sethome chose, else to
// delivery.platforms.<p>.home.
func (s *Service) resolveTarget(ctx context.Context, raw string) (*deliveryv1.Target, error) {
	return s.store.ResolveTarget(ctx, raw, s.cfg.HomeOf)
}

func (g *sendServer) authorize(ctx context.Context) error {
	if g.s.cfg.Token == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && secret.Equal(tok, g.s.cfg.Token) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "missing or wrong bearer token")
}

// Send queues a proactive message and returns its first outbox row.
func (g *sendServer) Send(ctx context.Context, req *deliveryv1.SendRequest) (*deliveryv1.SendResponse, error) {
	if err := g.authorize(ctx); err != nil {
		return nil, err
	}
	s := g.s
	if req.GetText() == "" && len(req.GetAttachments()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "text or attachments required")
	}
	target, err := s.resolveTarget(ctx, req.GetTarget())
	if errors.Is(err, ErrBadTarget) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	key := req.GetIdempotencyKey()
	if key == "" {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		key = hex.EncodeToString(b)
	}
	base := "send:" + key
	var reqs []*deliveryv1.SendRequested
	if req.GetText() != "" {
		for _, p := range chunk.Split(req.GetText(), target.GetPlatform()) {
			reqs = append(reqs, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Text: p, Format: req.GetFormat()})
		}
	}
	if len(req.GetAttachments()) > 0 {
		reqs = append(reqs, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Target: target, Attachments: req.GetAttachments()})
	}
	for i, r := range number(reqs) {
		r.IdempotencyKey = base + ":" + strconv.Itoa(i)
	}
	ids, err := s.store.Enqueue(ctx, s.now(), s.cfg.TTL, reqs...)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	s.kick()
	row, err := s.store.Get(ctx, ids[0])
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &deliveryv1.SendResponse{
		DeliveryId:     strconv.FormatInt(ids[0], 10),
		State:          row.State.Proto(),
		ResolvedTarget: target,
	}, nil
}
