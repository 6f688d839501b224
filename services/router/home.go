package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// The home notice is Hermes's "📬 No home channel is set" (gateway/run.py,
// GatewayRunner._handle_message): the first message of a conversation
// that goes to the agent (a new session, or one after /new or a reset)
// is preceded by it while the platform has no home channel, configured
// (delivery.platforms.<p>.home) or chosen with /sethome. It goes to the
// chat the message came from, once per conversation however many
// replicas handle, redeliver or restart: the conversation's claim in
// Redis (home:<session key> = "<session id> <inbound event>") is taken
// before the message's turn is published (the answer follows it on the
// reply partition) or the message is recorded handled, and a redelivery
// of the message that took it publishes the notice again under the same
// ids, the message's (bus message "home:<inbound event>", delivery key
// "home:<inbound event>:1"), which the bus and the outbox take once: a
// new conversation whose start failed after the notice (its turn's
// publish, its commit) comes back with another session id.
//
// As Hermes does since it skips senders authorized by a role, it is for
// whoever can act on it: a sender who may run /sethome (an admin where
// router.admins lists some), not one authorized by the transport
// (Discord's allowed_roles); never on the API and webhooks, whose callers
// are programs.

// homeNoticeTTL bounds how long a conversation is remembered as told: one
// idle longer hears it again (while there is still no home channel).
const homeNoticeTTL = 30 * 24 * time.Hour

// homeClaimMark ends the claims of this release: "<session id> <inbound
// event>" then a NUL, which no event id holds (dropNUL). Releases before
// it published the notice of a claim under other ids: the one before
// 2026-12-06 under the conversation's ("home:<session id>"), the next
// under the message's, as this one does. A router crash's redelivery of
// the message that took the claim, landing on a replica of another
// release during an upgrade, published it again under its own ids,
// which the bus and the outbox took as a second notice. A claim of this
// release is another message's to a replica of those releases (its
// event no longer matches), so they tell nothing more; a claim of theirs
// for the message is told here no more (see claimHome).
const homeClaimMark = "\x00"

// claimHome takes the home notice of the conversation ARGV[1] for the
// inbound event ARGV[2]: 1 when it is new or the event's already (a
// redelivery: published again under the same ids), 0 when another
// message of the conversation took it, or when a replica of an earlier
// release took it for this event (the claim has no homeClaimMark): that
// replica may have published it under ids of its own, which the bus and
// the outbox would not take for this one's, so the notice is told at
// most once here, and lost only when that replica died between its claim
// and its publish. The claim is then this release's, for the later
// messages of the conversation to find.
var claimHome = redis.NewScript(`
local mine = ARGV[1] .. ' ' .. ARGV[2] .. '\0'
local v = redis.call('GET', KEYS[1])
if v then
  local sp = string.find(v, ' ', 1, true)
  if sp then
    local by = string.sub(v, sp + 1)
    if by == ARGV[2] then
      redis.call('SET', KEYS[1], mine, 'PX', ARGV[3])
      return 0
    end
    if string.sub(v, 1, sp - 1) == ARGV[1] then
      return by == ARGV[2] .. '\0' and 1 or 0
    end
  end
end
redis.call('SET', KEYS[1], mine, 'PX', ARGV[3])
return 1
`)

func (s *Service) homeKey(sessionKey string) string { return s.prefix + "home:" + sessionKey }

// wantsHome reports whether m may need the home notice: a message from a
// sender it is for, going to the agent, on a platform not known to have
// a home channel. For the others the home notice costs nothing.
func (s *Service) wantsHome(m *msgCtx) bool {
	if !s.cfg.HomeNotice || !m.decision.Allowed || m.isCmd || m.ev.GetInternal() || m.ev.GetTransportAuthenticated() ||
		quietPlatform(m.platform) || s.homes(m.platform) != "" {
		return false
	}
	if _, ok := s.homeKnown.Load(m.platform); ok {
		return false
	}
	admin, _ := s.isAdmin(m)
	return admin
}

// homeNotice sends the home notice before m is recorded handled, when m
// is the first message of its conversation (m.sessionID) to want it and
// the platform still has no home channel. m.home is the conversation's
// claim, read with the dedupe record (nil: m does not want the notice).
func (s *Service) homeNotice(ctx context.Context, m *msgCtx) error {
	if m.tx != nil {
		// Read through the connection m's replies use (msgCtx.tx).
		return s.homeNoticeAt(ctx, m, 0, m.tx)
	}
	return s.homeNoticeAt(ctx, m, 0, nil)
}

// homeNoticeAt is homeNotice for a turn of generation gen about to be
// published (0: the session's generation, read), which the notice goes
// before; tx (nil: none) is the turn's start transaction, which the
// read of the home channel uses: the start holds a connection of the
// pool, and waiting for another one there could wait for ever once
// every connection is held by a start doing the same.
func (s *Service) homeNoticeAt(ctx context.Context, m *msgCtx, gen int64, tx outbox.Querier) error {
	if m.home == nil || m.sessionID == "" {
		return nil
	}
	claim := *m.home
	m.home = nil
	if sid, by, _ := strings.Cut(claim, " "); sid == m.sessionID && strings.TrimSuffix(by, homeClaimMark) != m.dedupeID {
		return nil // told already
	}
	// A home channel chosen since, on any replica, stops it.
	read := s.directory.Home
	if tx != nil {
		read = func(ctx context.Context, platform string) (*deliveryv1.Target, error) {
			return s.directory.HomeIn(ctx, tx, platform)
		}
	}
	if _, err := read(ctx, m.platform); err == nil {
		s.homeKnown.Store(m.platform, true)
		return nil
	} else if !errors.Is(err, outbox.ErrNotFound) {
		return err
	}
	took, err := claimHome.Run(ctx, s.rdb, []string{s.homeKey(m.key)}, m.sessionID, m.dedupeID, homeNoticeTTL.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("claim home notice: %w", err)
	}
	if took == 0 {
		return nil
	}
	if gen == 0 {
		st := s.store
		if m.tx != nil {
			st = m.tx
		}
		if gen, err = st.Generation(ctx, m.key); err != nil {
			return fmt.Errorf("home notice: %w", err)
		}
	}
	ev := &repliesv1.ReplyEvent{
		TurnId:     "home:" + m.dedupeID,
		SessionKey: m.key,
		Generation: gen,
		Seq:        1,
		Target:     target(m.ev),
		CreatedAt:  timestamppb.New(s.now()),
		Body:       &repliesv1.ReplyEvent_Notice{Notice: &repliesv1.Notice{Text: homeText(m.platform), Kind: "home"}},
	}
	if id := m.ev.GetMessageId(); id != "" {
		ev.InputMessageIds = []string{id}
		if m.ev.GetNoReaction() {
			ev.NoReactionMessageIds = ev.InputMessageIds
		}
	}
	if _, err := s.bus.Publish(ctx, s.topo.ReplySubject(m.key), "home:"+m.dedupeID, ev); err != nil {
		return fmt.Errorf("publish home notice: %w", err)
	}
	homeNotices.Inc()
	return nil
}

// homeText is Hermes's notice, in its words but for the name of who
// delivers, with the command as the platform's users type it: "!sethome"
// on Slack and Matrix (command.TypedPrefix; Slack keeps "/" for its own
// slash commands and refuses them in threads; Hermes says "/hermes
// sethome" there, which the Events API does not serve here).
func homeText(platform string) string {
	cmd := command.TypedPrefix(platform) + "sethome"
	return "📬 No home channel is set for " + title(platform) + ". A home channel is where cron job results and " +
		"cross-platform messages are delivered.\n\nType " + cmd + " to make this chat your home channel, or ignore to skip."
}

// title capitalizes each word of a platform name, as Python's str.title
// (Hermes writes "Telegram", "Home_Assistant").
func title(s string) string {
	r := []rune(s)
	for i := range r {
		if i == 0 || !unicode.IsLetter(r[i-1]) {
			r[i] = unicode.ToUpper(r[i])
		}
	}
	return string(r)
}
