package platform

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// The router's answer to a press (its word) goes to the press's holders
// over core NATS (PublishPressAnswer), which keeps nothing: a replica
// that holds the press only after the word was published (a Teams
// invoke's retry whose first replica died), or takes over the query of
// a holder that died with the word (a Telegram replica watching it),
// would find no one to ask for it. So the router also keeps its word
// for a while in a bucket every replica reads (KeepPressAnswer,
// bus.BucketPressWords, for bus.PressWordsAge), after the publish,
// which holders get at once. A gateway whose press may be handed again
// to a replica that cannot tell a press decided long ago from one not
// decided yet (a Teams invoke) marks the press there once it is on the
// bus (MarkPress): a retry that finds the mark but no word waits for
// the word, one that finds neither has a press decided long ago.

// pressWordKey is the key of the press with interaction id on platform
// in the bucket of the router's words: hashed into a valid key, by
// SHA-256 (hashKey) rather than the press subject's FNV, so that two
// presses do not share one.
func pressWordKey(platform, id string) string { return hashKey(platform + ":" + id) }

// MarkPress marks the press with interaction id on platform as
// published, unless the bucket has its entry already (the router's
// word, which may come before the mark, is not overwritten).
func MarkPress(ctx context.Context, b *bus.Bus, platform, id string) error {
	kv, err := b.PressWords(ctx)
	if err != nil {
		return fmt.Errorf("mark press: %w", err)
	}
	if _, err := kv.Create(ctx, pressWordKey(platform, id), nil); err != nil && !bus.LostRace(err) {
		return fmt.Errorf("mark press: %w", err)
	}
	return nil
}

// KeepPressAnswer keeps req, the router's answer to the press its
// target's interaction names, where every replica of the press's
// gateway reads it (PressWord), for bus.PressWordsAge: the router's
// answer that it also publishes to the press's holders
// (PublishPressAnswer), and its refusal of the presser, which goes
// through delivery.
func KeepPressAnswer(ctx context.Context, b *bus.Bus, req *deliveryv1.SendRequested) error {
	data, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode press answer: %w", err)
	}
	kv, err := b.PressWords(ctx)
	if err != nil {
		return fmt.Errorf("keep press answer: %w", err)
	}
	if _, err := kv.Put(ctx, pressWordKey(req.GetTarget().GetPlatform(), req.GetTarget().GetInteraction().GetId()), data); err != nil {
		return fmt.Errorf("keep press answer: %w", err)
	}
	return nil
}

// PressWord reads what the bucket has of the press with interaction id
// on platform: the router's answer (KeepPressAnswer), nil when it has
// none; published is true when it has the answer or the press's mark
// (MarkPress). Neither: the press was not marked (its gateway does not
// mark its presses, or the mark could not be written) or was decided
// longer than bus.PressWordsAge ago.
func PressWord(ctx context.Context, b *bus.Bus, platform, id string) (word *deliveryv1.SendRequested, published bool, err error) {
	kv, err := b.PressWords(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("read press answer: %w", err)
	}
	e, err := kv.Get(ctx, pressWordKey(platform, id))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("read press answer: %w", err)
	case len(e.Value()) == 0:
		return nil, true, nil // marked, not decided yet
	}
	req := &deliveryv1.SendRequested{}
	if err := proto.Unmarshal(e.Value(), req); err != nil {
		return nil, false, fmt.Errorf("read press answer: decode: %w", err)
	}
	if req.GetTarget().GetInteraction().GetId() != id || req.GetTarget().GetPlatform() != platform {
		return nil, false, nil // another press's
	}
	return req, true, nil
}
