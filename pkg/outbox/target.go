package outbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// ErrBadTarget marks a target string that cannot be resolved.
var ErrBadTarget = errors.New("bad target")

// platformName is what a platform name may be: it becomes a NATS subject
// token (gateway.<platform>.send).
var platformName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// ValidPlatform reports whether name can be a platform's name.
func ValidPlatform(name string) bool { return platformName.MatchString(name) }

// ParseTarget reads a proactive message's target without I/O:
// "platform:chat_id[:thread_id]", "platform:#name", or a bare platform,
// which means its home channel (home returns it, "" for none). A "#name"
// chat is returned as channel, with only the platform in the target, for
// the caller to look up. Matrix room ids contain a colon
// ("!room:server"), so on Matrix the whole rest is the room unless a last
// part starting with "$" names a thread. Errors wrap ErrBadTarget.
func ParseTarget(raw string, home func(platform string) string) (*deliveryv1.Target, string, error) {
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
			return nil, "", fmt.Errorf("%w: no home channel for %s: send /sethome in the chat that should be it, or set delivery.platforms.%s.home", ErrBadTarget, platform, platform)
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

// Home returns the home channel a user chose for platform with /sethome
// (the home_channels table), or ErrNotFound.
func (s *Store) Home(ctx context.Context, platform string) (*deliveryv1.Target, error) {
	return s.HomeIn(ctx, s.db, platform)
}

// HomeIn is Home read with q (a transaction the caller holds).
func (s *Store) HomeIn(ctx context.Context, q Querier, platform string) (*deliveryv1.Target, error) {
	t := &deliveryv1.Target{Platform: platform}
	err := q.QueryRow(ctx, `SELECT account, chat_id, thread_id FROM home_channels WHERE platform = $1`, platform).
		Scan(&t.Account, &t.ChatId, &t.ThreadId)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("home channel of %s: %w", platform, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("home channel of %s: %w", platform, err)
	}
	return t, nil
}

// ResolveTarget resolves a target string (see ParseTarget) to a chat: a
// bare platform to its configured home channel (configHome, "" for none)
// or, when the operator configured none, to the one /sethome chose; a
// "#name" through the channel directory. A configured home is not for
// users to move: proactive messages go there without the user's approval.
// Errors that the target itself causes wrap ErrBadTarget.
func (s *Store) ResolveTarget(ctx context.Context, raw string, configHome func(platform string) string) (*deliveryv1.Target, error) {
	if p := strings.ToLower(strings.TrimSpace(raw)); platformName.MatchString(p) && configHome(p) == "" {
		t, err := s.Home(ctx, p)
		if err == nil {
			return t, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	t, channel, err := ParseTarget(raw, configHome)
	if err != nil || channel == "" {
		return t, err
	}
	c, err := s.LookupChannel(ctx, t.GetPlatform(), channel)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("%w: no %s channel named %s", ErrBadTarget, t.GetPlatform(), channel)
	}
	if err != nil {
		return nil, err
	}
	return &deliveryv1.Target{Platform: t.GetPlatform(), Account: c.Account, ChatId: c.ChatID, ThreadId: c.ThreadID}, nil
}
