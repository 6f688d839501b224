package cron

import (
	"context"
	"errors"
	"fmt"
	"strings"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// HomeOrder is the order in which a deliver target "origin" of a job
// that has no origin chat (made over the API or by an admin) looks for
// a home channel: Hermes's (_HOME_TARGET_ENV_VARS, which its
// deliver=origin fallback walks, cron/scheduler.py
// _resolve_single_delivery_target) for the platforms both have, then the
// platforms only Switchboard has.
var HomeOrder = []string{"matrix", "telegram", "discord", "slack", "signal", "mattermost", "sms", "email", "bluebubbles",
	"whatsapp", "line", "google_chat", "teams"}

// DeliverParts are the targets of a deliver value: as Hermes's
// _resolve_delivery_targets, a comma-separated list ("telegram,
// discord:123, origin"), each part trimmed, empty parts dropped. A value
// stored before lists were read (one target, which had no comma unless it
// was a chat id no platform has) reads as the one target it was.
func DeliverParts(deliver string) []string {
	var parts []string
	for p := range strings.SplitSeq(deliver, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

// Resolver turns a deliver target that names a platform (a bare
// platform, platform:chat_id[:thread_id], platform:#name) into a chat;
// errors wrapping outbox.ErrBadTarget say the target does not resolve.
type Resolver func(ctx context.Context, raw string) (*deliveryv1.Target, error)

// Targets are the chats a run of j answers in, in the order of its
// deliver value, each once (Hermes's _resolve_delivery_targets: a part
// that does not resolve is skipped, a chat named twice, by two parts that
// resolve to it, gets one answer). None and a nil error: the job delivers
// nowhere (local). None and an error wrapping outbox.ErrBadTarget: no
// part resolves, and the error says why for each. Any other error: the
// resolver failed (the database), and nothing is known. skipped says,
// "<part>: <why>", why each part that did not resolve was skipped.
//
// Each part, as Hermes's _resolve_single_delivery_target: "local" is
// nowhere; "origin" the chat (and thread) the job was made in, or,
// without one, the home channel of the first platform of HomeOrder that
// has one; a bare platform that is the origin's platform the origin chat
// (and thread), ahead of that platform's home channel; any other
// platform target is what resolve makes of it (a home channel, a chat, a
// channel of the directory), resolved now.
func Targets(ctx context.Context, j Job, resolve Resolver) (targets []*deliveryv1.Target, skipped []string, err error) {
	var (
		seen  = map[string]bool{}
		first error
	)
	parts := DeliverParts(j.Deliver)
	for _, part := range parts {
		t, err := target(ctx, j, part, resolve)
		switch {
		case errors.Is(err, outbox.ErrBadTarget):
			if first == nil {
				first = err
			}
			skipped = append(skipped, part+": "+err.Error())
			continue
		case err != nil:
			return nil, nil, err
		case t == nil:
			continue // local
		}
		if k := TargetKey(t); !seen[k] {
			seen[k] = true
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 && len(skipped) > 0 {
		if len(skipped) == 1 {
			// One target did not resolve (the others, if any, were
			// local): its own error.
			return nil, skipped, first
		}
		return nil, skipped, fmt.Errorf("%w: no deliver target resolves (%s)", outbox.ErrBadTarget, strings.Join(skipped, "; "))
	}
	return targets, skipped, nil
}

// target resolves one part of j's deliver value; nil for local.
func target(ctx context.Context, j Job, part string, resolve Resolver) (*deliveryv1.Target, error) {
	o := j.Origin
	hasOrigin := o.Platform != "" && o.ChatID != ""
	origin := &deliveryv1.Target{Platform: o.Platform, Account: o.Account, ChatId: o.ChatID, ThreadId: o.ThreadID}
	switch {
	case strings.EqualFold(part, DeliverLocal):
		return nil, nil
	case strings.EqualFold(part, DeliverOrigin) && hasOrigin:
		return origin, nil
	case strings.EqualFold(part, DeliverOrigin):
		return homeTarget(ctx, resolve)
	case hasOrigin && strings.EqualFold(part, o.Platform):
		// Hermes's: a bare platform that is the origin's is the origin
		// chat and thread, not that platform's home channel.
		return origin, nil
	}
	return resolve(ctx, part)
}

// homeTarget is the home channel of the first platform of HomeOrder that
// has one, as Hermes's deliver=origin fallback for a job without an
// origin; none is ErrBadTarget.
func homeTarget(ctx context.Context, resolve Resolver) (*deliveryv1.Target, error) {
	for _, p := range HomeOrder {
		t, err := resolve(ctx, p)
		if errors.Is(err, outbox.ErrBadTarget) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("%w: the job has no origin chat, and no platform has a home channel (/sethome, or delivery.platforms.<platform>.home)", outbox.ErrBadTarget)
}

// TargetKey is what tells two targets apart (Hermes's dedupe key: the
// platform, any case, the chat and the thread; not the account, which a
// target string leaves empty for the platform's default one).
func TargetKey(t *deliveryv1.Target) string {
	return strings.ToLower(t.GetPlatform()) + "\x00" + t.GetChatId() + "\x00" + t.GetThreadId()
}
