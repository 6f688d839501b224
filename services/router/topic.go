package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/command"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /topic is Hermes's Telegram DM topic mode (gateway/run.py's
// _handle_topic_command and its telegram topic mixin): Telegram lets a
// user open topics in their private chat with a bot (Bot API 9.3: the
// messages carry message_thread_id and is_topic_message; the bot's
// getMe has_topics_enabled, allows_users_to_create_topics in 9.4). Each
// topic of the chat is a conversation of its own either way; with
// /topic on, the chat's main view ("All Messages", no thread, or the
// General topic's thread 1) becomes a lobby for commands; /topic <session-id> inside a
// topic restores an earlier conversation into it; /topic off goes back
// (the main view a normal chat again).
//
// Session keys: topic mode changes one only. A Telegram DM's key follows
// DESIGN.md's rule for DMs whatever the mode (as Hermes's
// build_session_key): agent:main:telegram:dm:<chat>, then :<thread> for a
// message in a topic, so each topic is a conversation of its own and
// the main view the DM's. Topic mode (telegram_topic_modes, migration
// 00128) makes the main view (no thread, or the General topic's thread
// 1, which then keys as the main view) a lobby that takes commands
// only, and lets /topic <session-id> restore an earlier conversation
// into a topic. The mode is read from Postgres for each Telegram DM
// message, before its key is used, so every router replica treats the
// chat alike from the message after the one that changed it (a chat's
// messages are handled in order). Answers go back into the topic the
// message came from (its source keeps the thread).
//
// Differs from Hermes: Hermes reads the bot's BotFather Threads
// Settings (getMe) before enabling and creates a pinned System topic;
// the router has no Telegram connection, so /topic enables without that
// check and creates no topic.
//
// /topic <session-id> takes a whole id or, as Hermes's resolve_session_id,
// a prefix of exactly one conversation; a prefix of none or of several
// gets Hermes's "Session not found: <id>". Differs from Hermes, which
// matches a prefix against every user's conversations (so it can answer
// "does not belong to this Telegram user" for a prefix, or find a prefix
// ambiguous because of someone else's): a prefix here matches only the
// chat's own conversations (its DM's and its topics'), so it reveals
// nothing of other users'. A whole id of another user's conversation
// still gets "does not belong to this Telegram user", as in Hermes.

// topicPlace is where a Telegram DM message is, for topic mode.
type topicPlace int

const (
	topicOff   topicPlace = iota // not a Telegram DM, or topic mode off
	topicLobby                   // topic mode on, the chat's main view
	topicLane                    // topic mode on, in a topic
)

// generalThread is the General topic's thread id, which Hermes counts as
// the main view (some clients send it, others none).
const generalThread = "1"

// lobbyReminderEvery debounces the lobby reminder per chat (Hermes's
// _TELEGRAM_LOBBY_REMINDER_COOLDOWN_S).
const lobbyReminderEvery = 5 * time.Minute

// keyFor is the session key of a message from src and, for a Telegram
// DM, its place in topic mode and the chat's DM key (root).
func (s *Service) keyFor(ctx context.Context, src *eventsv1.SessionSource) (key, root string, place topicPlace, err error) {
	if !strings.EqualFold(src.GetPlatform(), "telegram") || !isDM(src) {
		return sessionkey.Build(src, s.keyOpts), "", topicOff, nil
	}
	thread := src.GetThreadId()
	if thread == "" {
		key = sessionkey.Build(src, s.keyOpts)
		root = key
	} else {
		bare := proto.CloneOf(src)
		bare.ThreadId = ""
		root = sessionkey.Build(bare, s.keyOpts)
	}
	on, err := s.store.TopicMode(ctx, root)
	if err != nil {
		return "", "", topicOff, err
	}
	switch {
	case !on:
		return sessionkey.Build(src, s.keyOpts), root, topicOff, nil
	case thread == "" || thread == generalThread:
		return root, root, topicLobby, nil
	}
	return sessionkey.Build(src, s.keyOpts), root, topicLane, nil
}

// Hermes's words (locales/en.yaml gateway.topic and the topic mixin),
// "Hermes" left out where it names the agent.
const (
	topicNotTelegramDM    = "The /topic command is only available in Telegram private chats."
	topicRestoreNeedTopic = "To restore a session, first create or open a Telegram topic, then send /topic <session-id> inside that topic. To create a new topic, open All Messages and send any message there."
	topicBoundStatus      = "This topic is linked to:\nSession: %s\nID: %s\n\nUse /new to replace this topic with a fresh session.\nFor parallel work, open All Messages and send a message there to create another topic."
	topicThreadReady      = "Telegram multi-session topics are enabled.\n\nThis topic will be used as an independent session. Use /new to replace this topic's current session. For parallel work, open All Messages and send a message there to create another topic."
	topicUntitled         = "Untitled session"
	topicNotEnabled       = "Multi-session topic mode is not currently enabled for this chat."
	topicOffDone          = "Multi-session topic mode is now OFF for this chat.\n\nExisting topics in Telegram aren't removed — they'll just stop being gated as independent sessions. The root DM works as a normal chat again. Run /topic to re-enable later."
	topicLobbyText        = "This main chat is reserved for system commands.\n\nTo start a new chat, open the All Messages topic at the top of this bot interface and send any message there. Telegram will create a new topic for that message; each topic works as an independent session."
	topicRootNew          = "To start a new parallel chat, open the All Messages topic at the top of this bot interface and send any message there. Telegram will create a new topic for it.\n\nEach topic is an independent session. Use /new inside an existing topic only if you want to replace that topic's current session."
	topicNewHeader        = "Started a new session in this topic.\n\nTip: for parallel work, open All Messages and send a message there to create a separate topic instead of using /new here. /new replaces the session attached to the current topic."
	topicAlreadyLinked    = "That session is already linked to another Telegram topic."
	topicNotTelegram      = "That session is not a Telegram session and cannot be restored into this topic."
	topicNotYours         = "That session does not belong to this Telegram user."
	// topicRestoreNeedsMode is this gateway's: a restore is into a topic
	// of a chat in topic mode (Hermes binds it and waits for the mode).
	topicRestoreNeedsMode = "Multi-session topic mode is not currently enabled for this chat. Send /topic in the main chat to enable it, then /topic <session-id> inside a topic."
)

// topicHelp is Hermes's _telegram_topic_help_text.
var topicHelp = strings.Join([]string{
	"/topic — enable multi-session DM mode (one bot, many parallel chats)",
	"",
	"Usage:",
	"  /topic             Enable topic mode, or show status if already on",
	"  /topic help        Show this message",
	"  /topic off         Disable topic mode and clear topic bindings",
	"  /topic <id>        Inside a topic: restore a previous session by ID",
	"",
	"How it works:",
	"1. Run /topic once in this DM — it flips on multi-session mode.",
	"2. Tap All Messages at the top of the bot and send any message.",
	"   Telegram creates a new topic for that message; each topic is",
	"   an independent session (fresh history, fresh context).",
	"3. The root DM becomes a system lobby — send /topic, /status,",
	"   /help, /usage there. Normal prompts go in a topic.",
	"4. /new inside a topic resets just that topic's session.",
	"5. /topic <id> inside a topic restores an old session into it.",
}, "\n")

// topicRestoreSteps are Hermes's _TOPIC_RESTORE_STEPS.
var topicRestoreSteps = []string{
	"1. Create or open a topic. To create a new one, open All Messages and send any message there.",
	"2. Send /topic <session-id> inside that topic.",
}

// lobby answers a message for the agent sent to the main view of a chat
// in topic mode: no turn, and a reminder at most once per
// lobbyReminderEvery (a documented drop otherwise, as in Hermes). The
// claim names the event, so a redelivery sends its reminder again
// (under the same notice id: once).
func (s *Service) lobby(ctx context.Context, m *msgCtx) error {
	prev, err := s.rdb.SetArgs(ctx, s.prefix+"topiclobby:"+m.key, m.dedupeID, redis.SetArgs{Mode: "NX", Get: true, TTL: lobbyReminderEvery}).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return fmt.Errorf("claim lobby reminder: %w", err)
	case prev != m.dedupeID:
		s.log.DebugContext(ctx, "topic lobby message dropped; reminded recently", "session_key", m.key, "event", m.dedupeID)
		return nil
	}
	return s.notice(ctx, m, 0, topicLobbyText, "command")
}

// topicCommand answers /topic [off|help|<session-id>].
func (s *Service) topicCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string, busy bool) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if m.platform != "telegram" || !isDM(m.src) || m.rootKey == "" {
		return reply(topicNotTelegramDM)
	}
	a := command.Topic(args)
	thread := m.src.GetThreadId()
	inTopic := thread != "" && thread != generalThread
	switch a.Action {
	case command.TopicHelp:
		return reply(topicHelp)
	case command.TopicOff:
		return s.once(ctx, m, "topic", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			was, err := st.DisableTopicMode(ctx, m.rootKey)
			if err != nil || !was {
				return topicNotEnabled, sess.Generation, err
			}
			// As Hermes, the next activation starts without a stale
			// lobby cooldown.
			if err := s.rdb.Del(ctx, s.prefix+"topiclobby:"+m.rootKey).Err(); err != nil {
				s.log.WarnContext(ctx, "clear topic lobby reminder", "err", err)
			}
			s.log.InfoContext(ctx, "telegram topic mode disabled", "session_key", m.rootKey, "by", m.platform+":"+m.src.GetUserId())
			return topicOffDone, sess.Generation, nil
		})
	case command.TopicRestore:
		if !inTopic {
			return reply(topicRestoreNeedTopic)
		}
		if m.place != topicLane {
			return reply(topicRestoreNeedsMode)
		}
		if busy {
			// Recorded with the event (once), as the restore would be: a
			// redelivery after the turn ended finds it and is refused
			// again, not restored.
			return s.once(ctx, m, "topic", func(context.Context, *sessionstore.Store) (string, int64, error) {
				return midTurnRefusal("topic"), sess.Generation, nil
			})
		}
		return s.once(ctx, m, "topic", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			return s.restoreTopic(ctx, st, m, sess, thread, a.SessionID)
		})
	}
	return s.once(ctx, m, "topic", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		already, err := st.EnableTopicMode(ctx, m.rootKey, m.src.GetChatId(), m.src.GetUserId())
		if err != nil {
			return "", 0, err
		}
		if !already {
			s.log.InfoContext(ctx, "telegram topic mode enabled", "session_key", m.rootKey, "by", m.platform+":"+m.src.GetUserId())
		}
		if !inTopic {
			text, err := s.topicRootStatus(ctx, st, m.rootKey)
			return text, sess.Generation, err
		}
		// A topic whose conversation has not started yet (its row made
		// by this command) is ready, not linked (Hermes records the
		// binding with the topic's first message).
		topic, err := st.Get(ctx, sessionstore.TopicKey(m.rootKey, thread))
		if errors.Is(err, sessionstore.ErrNotFound) || err == nil && topic.LastTurnID == "" && topic.Title == "" && !topic.ResumePending {
			return topicThreadReady, sess.Generation, nil
		}
		if err != nil {
			return "", 0, err
		}
		label := topic.Title
		if label == "" {
			label = topicUntitled
		}
		return fmt.Sprintf(topicBoundStatus, label, topic.ID), sess.Generation, nil
	})
}

// topicRootStatus is Hermes's _telegram_topic_root_status_message: topic
// mode is on, and the conversations /topic <session-id> can restore.
func (s *Service) topicRootStatus(ctx context.Context, st *sessionstore.Store, root string) (string, error) {
	lines := []string{
		"Telegram multi-session topics are enabled.",
		"",
		"To create a new chat, open All Messages at the top of this bot interface and send any message there. Telegram will create a new topic for it.",
		"",
	}
	unlinked, err := st.Unlinked(ctx, root, 10)
	if err != nil {
		return "", err
	}
	if len(unlinked) == 0 {
		lines = append(lines, "No previous unlinked Telegram sessions found.", "", "To restore a previous session later:")
		return strings.Join(append(lines, topicRestoreSteps...), "\n"), nil
	}
	lines = append(lines, "Previous unlinked sessions:")
	for _, h := range unlinked {
		title := h.Title
		if title == "" {
			title = topicUntitled
		}
		lines = append(lines, fmt.Sprintf("- %s — `%s`", title, h.SessionID))
	}
	lines = append(lines, "", "To restore one:")
	lines = append(lines, topicRestoreSteps...)
	lines = append(lines, fmt.Sprintf("Example: Send /topic %s inside a topic.", unlinked[0].SessionID))
	return strings.Join(lines, "\n"), nil
}

// restoreTopic is Hermes's _restore_telegram_topic_session: the
// conversation id (whole, or a prefix of one of this chat's), one of this
// chat's (its DM or its topics), becomes the topic's, unless another
// topic of the chat is on it.
func (s *Service) restoreTopic(ctx context.Context, st *sessionstore.Store, m *msgCtx, sess sessionstore.Session, thread, raw string) (string, int64, error) {
	id := raw
	owner, _, err := st.Owner(ctx, id)
	if errors.Is(err, sessionstore.ErrNotFound) {
		// A whole id wins; else a prefix of exactly one of the chat's.
		id, err = st.ChatSessionByPrefix(ctx, m.rootKey, raw)
		if errors.Is(err, sessionstore.ErrNotFound) || errors.Is(err, sessionstore.ErrAmbiguous) {
			return "Session not found: " + raw, sess.Generation, nil
		}
		if err != nil {
			return "", 0, err
		}
		owner, _, err = st.Owner(ctx, id)
	}
	if err != nil {
		return "", 0, err
	}
	if parts := strings.SplitN(owner, ":", 4); len(parts) < 3 || parts[2] != "telegram" {
		return topicNotTelegram, sess.Generation, nil
	}
	if owner != m.rootKey && !strings.HasPrefix(owner, m.rootKey+":") {
		return topicNotYours, sess.Generation, nil
	}
	// The main view's own conversation moves into the topic (BindTopic
	// puts the main view on a new one), never from under a turn of it
	// still running there (one begun before topic mode went on): its
	// answer would be fenced off, lost. Refused as a restore into a
	// topic whose turn runs is, and recorded so with the event.
	switch root, err := st.Get(ctx, m.rootKey); {
	case errors.Is(err, sessionstore.ErrNotFound):
	case err != nil:
		return "", 0, err
	case root.ID == id:
		owner, err := s.locker.Owner(ctx, m.rootKey)
		if err != nil {
			return "", 0, err
		}
		// The turn's lease stands in for a lock Redis lost.
		if owner, err = s.holderOrLease(ctx, m.rootKey, owner); err != nil {
			return "", 0, err
		}
		if owner != "" && !s.flushRunning(ctx, m.rootKey, owner) {
			return midTurnRefusal("topic"), sess.Generation, nil
		}
	}
	bound, err := st.BindTopic(ctx, m.rootKey, m.key, thread, m.src.GetUserId(), id)
	if errors.Is(err, sessionstore.ErrTopicLinked) {
		return topicAlreadyLinked, sess.Generation, nil
	}
	if err != nil {
		return "", 0, err
	}
	s.log.InfoContext(ctx, "telegram topic bound to a session", "session_key", m.key, "session_id", id, "by", m.platform+":"+m.src.GetUserId())
	title := bound.Title
	if title == "" {
		title = id
	}
	text := "Session restored: " + title
	last, err := st.LastAnswer(ctx, id)
	if err != nil {
		return "", 0, err
	}
	if last != "" {
		text += "\n\nLast message:\n" + last
	}
	return text, bound.Generation, nil
}
