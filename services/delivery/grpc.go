package delivery

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// sendServer is DeliveryService: proactive messages (cron jobs, tools,
// operators) queued in the outbox like any reply.
type sendServer struct {
	deliveryv1.UnimplementedDeliveryServiceServer
	s *Service
}

// ErrBadTarget marks a target string that cannot be resolved.
var ErrBadTarget = errors.New("bad target")

// resolveTarget parses "platform", "platform:chat_id",
// "platform:chat_id:thread_id" and "platform:#name" (see parseTarget) and
// looks a #name up in the channel directory.
func (s *Service) resolveTarget(ctx context.Context, raw string) (*deliveryv1.Target, error) {
	t, channel, err := parseTarget(raw, func(platform string) string { return s.cfg.platform(platform).Home })
	if err != nil || channel == "" {
		return t, err
	}
	c, err := s.store.LookupChannel(ctx, t.GetPlatform(), channel)
	if errors.Is(err, outbox.ErrNotFound) {
		return nil, fmt.Errorf("%w: no %s channel named %s", ErrBadTarget, t.GetPlatform(), channel)
	}
	if err != nil {
		return nil, err
	}
	return &deliveryv1.Target{Platform: t.GetPlatform(), Account: c.Account, ChatId: c.ChatID, ThreadId: c.ThreadID}, nil
}

// platformName is what a platform name may be: it becomes a NATS subject
// token (gateway.<platform>.send).
var platformName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// parseTarget reads a target without I/O. A bare platform means its home
// channel (home returns it, "" for none). A "#name" chat is returned as
// channel, with only the platform in the target, for the caller to look
// up. Matrix room ids contain a colon ("!room:server"), so on Matrix the
// whole rest is the room unless a last part starting with "$" names a
// thread. Errors wrap ErrBadTarget.
func parseTarget(raw string, home func(platform string) string) (*deliveryv1.Target, string, error) {
	platform, rest, _ := strings.Cut(strings.TrimSpace(raw), ":")
	platform = strings.ToLower(platform)
	if platform == "" {
		return nil, "", fmt.Errorf("%w: %q has no platform", ErrBadTarget, raw)
	}
	if !platformName.MatchString(platform) {
		return nil, "", fmt.Errorf("%w: %q is not a platform name", ErrBadTarget, platform)
	}
	if rest == "" {
		rest = home(platform)
		if rest == "" {
			return nil, "", fmt.Errorf("%w: no home channel configured for %s (delivery.platforms.%s.home)", ErrBadTarget, platform, platform)
		}
	}
	if strings.HasPrefix(rest, "#") {
		return &deliveryv1.Target{Platform: platform}, rest, nil
	}
	chat, thread := rest, ""
	if platform == "matrix" {
		if i := strings.LastIndex(rest, ":$"); i > 0 {
			chat, thread = rest[:i], rest[i+1:]
		}
	} else if c, th, ok := strings.Cut(rest, ":"); ok {
		chat, thread = c, th
	}
	if chat == "" {
		return nil, "", fmt.Errorf("%w: %q has no chat id", ErrBadTarget, raw)
	}
	return &deliveryv1.Target{Platform: platform, ChatId: chat, ThreadId: thread}, "", nil
}

func (g *sendServer) authorize(ctx context.Context) error {
	if g.s.cfg.Token == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && subtle.ConstantTimeCompare([]byte(tok), []byte(g.s.cfg.Token)) == 1 {
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
