package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// memoryAdapter renders store results for the memory and session_search
// tools.
type memoryAdapter struct {
	s *store.Store
	// limit bounds the characters of one user's notes
	// (agent.memory_char_limit).
	limit int
	// gate holds writes while the owner's memory.write_approval is on.
	gate *memorygate.Store
}

func (m memoryAdapter) WriteApproval(ctx context.Context, userKey string) (bool, error) {
	return m.gate.Enabled(ctx, userKey)
}

func (m memoryAdapter) StageMemory(ctx context.Context, w memorygate.Write) (string, error) {
	return m.gate.Stage(ctx, w)
}

func (m memoryAdapter) MemoryNote(ctx context.Context, userKey string, id int64) (string, bool, error) {
	return m.gate.Note(ctx, userKey, id)
}

func (m memoryAdapter) AddMemory(ctx context.Context, userKey, content string) (int64, error) {
	if userKey == "" {
		return 0, errors.New("no user to remember for")
	}
	id, err := m.s.AddMemory(ctx, userKey, content, m.limit)
	if errors.Is(err, store.ErrMemoryFull) {
		return 0, fmt.Errorf("%w; remove notes that no longer matter first (list shows their ids), or save a shorter one", err)
	}
	return id, err
}

func (m memoryAdapter) DeleteMemory(ctx context.Context, userKey string, id int64) (bool, error) {
	return m.s.DeleteMemory(ctx, userKey, id)
}

func (m memoryAdapter) MemoryList(ctx context.Context, userKey string) (string, error) {
	notes, err := m.s.Memories(ctx, userKey, 200)
	if err != nil {
		return "", err
	}
	if len(notes) == 0 {
		return "no notes", nil
	}
	var b strings.Builder
	for _, n := range notes {
		fmt.Fprintf(&b, "%d: %s\n", n.ID, n.Content)
	}
	return b.String(), nil
}

func (m memoryAdapter) SearchText(ctx context.Context, userKey, exceptSession, query string, limit int) (string, error) {
	if userKey == "" {
		return "no results", nil
	}
	hits, err := m.s.Search(ctx, userKey, exceptSession, query, limit)
	if err != nil {
		return "", err
	}
	if len(hits) == 0 {
		return "no results", nil
	}
	j, err := json.Marshal(hits)
	if err != nil {
		return "", err
	}
	return string(j), nil
}

// noticeSender is send_message without the delivery API: it publishes a
// Notice reply event to the target chat. The event's id derives from the
// tool call, so a resumed turn repeating the call is deduplicated.
type noticeSender struct {
	bus *bus.Bus
	// home is agent.home_channel, the target "home" stands for.
	home string
	// resolve reads a target string as delivery's API does: a bare
	// platform is its home channel (the configured one, else the chat
	// /sethome chose), "platform:#name" a chat of the channel directory.
	resolve func(ctx context.Context, raw string) (*deliveryv1.Target, error)
}

func (n *noticeSender) Send(ctx context.Context, target, text, key string) (string, error) {
	raw := target
	if target == "home" {
		if n.home == "" {
			return "", errors.New(`no home channel is configured (agent.home_channel); name a platform ("telegram") for its home channel`)
		}
		raw = n.home
	}
	t, err := n.resolve(ctx, raw)
	if err != nil {
		return "", err
	}
	sessionKey := "send:" + t.GetPlatform() + ":" + t.GetChatId()
	ev := &repliesv1.ReplyEvent{TurnId: "send:" + key, SessionKey: sessionKey, Seq: 1, Target: t,
		CreatedAt: timestamppb.Now(), Body: &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: text, Kind: "send_message"}}}
	if _, err := n.bus.Publish(ctx, n.bus.Topology().ReplySubject(sessionKey), "send:"+key, ev); err != nil {
		return "", fmt.Errorf("send message: %w", err)
	}
	return "sent to " + target, nil
}

// DeliverySender is send_message through the delivery service's gRPC API,
// which resolves home channels and channel names.
type DeliverySender struct {
	Client deliveryv1.DeliveryServiceClient
}

// Send implements tools.Sender.
func (d DeliverySender) Send(ctx context.Context, target, text, key string) (string, error) {
	resp, err := d.Client.Send(ctx, &deliveryv1.SendRequest{Target: target, Text: text, IdempotencyKey: key,
		Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN})
	if err != nil {
		return "", fmt.Errorf("send message: %w", err)
	}
	return fmt.Sprintf("queued as delivery %s (%s)", resp.GetDeliveryId(), resp.GetState().String()), nil
}
