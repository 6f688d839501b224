// Package sessionkey builds the session key that addresses one conversation.
//
// Keys are byte-compatible with the Hermes Agent gateway, so a Hermes user can
// carry their session history over. The layout is colon-joined and unescaped:
//
//	<ns>:<platform>:<slot>[:<scope>][:<chat>]<tail>
//
// The key is an address, not an identity and not an authorization decision:
// the session id behind a key changes on reset while the key stays.
//
// Where Hermes (gateway/session.py build_session_key) and DESIGN.md differ,
// this package follows DESIGN.md:
//   - WhatsApp ids: only a leading "+" is dropped (Hermes drops the first "+"
//     anywhere and trims whitespace first), and a DM chat id that
//     canonicalises to nothing is kept raw (Hermes drops it and falls back
//     to the participant). Hermes also maps phone JIDs and LIDs to one alias
//     through the bridge's lid-mapping files; a stateless router cannot, so
//     the adapter must put the stable id in user_id_alt.
//   - An empty chat type means "dm", as a missing one does in Hermes.
//   - An empty scope_id yields to guild_id (Hermes reads guild_id only when
//     the scope_id key is missing).
package sessionkey

import (
	"strings"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Platform names that change how a key is built.
const (
	platformSlack    = "slack"
	platformWhatsApp = "whatsapp"
)

// chatTypeDM is the chat type of a direct conversation. An empty chat type
// counts as absent and takes this default, as in Hermes.
const chatTypeDM = "dm"

// slotThread replaces the chat type when the thread came from
// prospective_thread_id, so the channel message that opens a thread and the
// replies inside it share one key.
const slotThread = "thread"

// Options holds the operator settings that shape keys.
type Options struct {
	// Profile namespaces the key: "" or "default" → agent:main, "main" →
	// agent:main~, anything else p → agent:p.
	Profile string
	// GroupSessionsPerUser gives each participant of a group their own
	// session.
	GroupSessionsPerUser bool
	// ThreadSessionsPerUser gives each participant of a thread their own
	// session; off, a thread is one shared session.
	ThreadSessionsPerUser bool
}

// DefaultOptions returns the Hermes defaults: default profile, one session
// per user in groups, one shared session per thread.
func DefaultOptions() Options {
	return Options{GroupSessionsPerUser: true}
}

// Build returns the session key for a message from src. Empty fields count
// as absent; a nil src is an empty source. Build never fails: every source
// has a key, even if it is only the per-platform DM sink.
func Build(src *eventsv1.SessionSource, opts Options) string {
	platform := src.GetPlatform()
	chatType := src.GetChatType()
	if chatType == "" {
		chatType = chatTypeDM
	}
	isDM := chatType == chatTypeDM

	chatID := src.GetChatId()
	if isDM && platform == platformWhatsApp {
		// Group chat ids (…@g.us) are never canonicalised.
		chatID = canonicalWhatsApp(chatID)
	}

	thread, slot := src.GetThreadId(), chatType
	if thread == "" && !isDM && src.GetProspectiveThreadId() != "" {
		thread, slot = src.GetProspectiveThreadId(), slotThread
	}

	k := keyBuilder{}
	k.b.Grow(64)
	k.b.WriteString(namespace(opts.Profile))
	k.add(platform)
	k.add(slot)
	if platform == platformSlack {
		k.addIfSet(src.GetScopeId())
	}
	k.addIfSet(chatID)

	if isDM {
		// Without a chat id the participant stands in for it, so chat-id-less
		// DMs from different people do not share one session.
		if chatID == "" {
			k.addIfSet(participant(src))
		}
		k.addIfSet(thread)
		return k.b.String()
	}

	k.addIfSet(thread)
	if perUser(thread != "", opts) {
		k.addIfSet(participant(src))
	}
	return k.b.String()
}

// ReplyThread is the thread an answer to a message from src goes to: the
// message's thread, or else, outside a DM, the thread it is about to open
// (prospective_thread_id: a Discord channel message that is answered in
// a thread opened from it). It is the thread Build puts in the key, so
// the answer lands where the session is.
func ReplyThread(src *eventsv1.SessionSource) string {
	if t := src.GetThreadId(); t != "" {
		return t
	}
	if ct := src.GetChatType(); ct == "" || ct == chatTypeDM {
		return ""
	}
	return src.GetProspectiveThreadId()
}

// ChatKey returns <platform>:<account>:<chat_id>, the key that picks the bus
// partition for a chat. Unlike Build it keeps every id raw.
func ChatKey(src *eventsv1.SessionSource) string {
	return src.GetPlatform() + ":" + src.GetAccount() + ":" + src.GetChatId()
}

// namespace returns the first two parts of a key for a profile.
func namespace(profile string) string {
	switch profile {
	case "", "default":
		return "agent:main"
	case "main":
		// A profile named main must not share the default's sessions; "~"
		// is outside the profile alphabet, so no other profile collides.
		return "agent:main~"
	default:
		return "agent:" + profile
	}
}

// perUser reports whether a non-DM key ends with the participant.
func perUser(inThread bool, opts Options) bool {
	if !opts.GroupSessionsPerUser {
		return false
	}
	return !inThread || opts.ThreadSessionsPerUser
}

// participant returns the sender id that isolates a user's session:
// user_id_alt when set, else user_id, canonicalised on WhatsApp.
func participant(src *eventsv1.SessionSource) string {
	id := src.GetUserIdAlt()
	if id == "" {
		id = src.GetUserId()
	}
	if src.GetPlatform() == platformWhatsApp {
		id = canonicalWhatsApp(id)
	}
	return id
}

// canonicalWhatsApp strips WhatsApp JID syntax down to the bare number:
// one leading "+" goes, then everything from the first ":" or "@"
// ("15551234567:12@s.whatsapp.net" → "15551234567"). If nothing is left,
// the raw id is kept.
func canonicalWhatsApp(raw string) string {
	id := strings.TrimPrefix(raw, "+")
	if i := strings.IndexAny(id, ":@"); i >= 0 {
		id = id[:i]
	}
	if id == "" {
		return raw
	}
	return id
}

// keyBuilder joins key parts with ":".
type keyBuilder struct {
	b strings.Builder
}

func (k *keyBuilder) add(part string) {
	k.b.WriteByte(':')
	k.b.WriteString(part)
}

func (k *keyBuilder) addIfSet(part string) {
	if part != "" {
		k.add(part)
	}
}

// BackgroundPlatform stands where a key has its platform in the key of a
// /background task's session (Background). No gateway has that platform,
// and the router drops inbound events that claim it, so no chat's key
// starts like one.
const BackgroundPlatform = "background"

// Background returns the key of the session that runs the /background
// task taskID asked for in the chat whose session key is chatKey, under
// profile (the router's, which made chatKey):
//
//	<ns>:background:<chatKey after its namespace>:<taskID>
//
// ("agent:main:telegram:dm:99", "bg_072011_a1b2c3" →
// "agent:main:background:telegram:dm:99:bg_072011_a1b2c3"). The task's
// session is a conversation of its own, so its turn runs beside the
// chat's, under its own lock; the chat's part of the key names where it
// was asked, and taskID (which has no ":") ends it.
func Background(chatKey, profile, taskID string) string {
	ns := namespace(profile) + ":"
	return ns + BackgroundPlatform + ":" + strings.TrimPrefix(chatKey, ns) + ":" + taskID
}

// BackgroundTask returns the task id of a key Background made under
// profile, or false for any other key (every chat's).
func BackgroundTask(key, profile string) (string, bool) {
	rest, ok := strings.CutPrefix(key, namespace(profile)+":"+BackgroundPlatform+":")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 || i == len(rest)-1 {
		return "", false
	}
	return rest[i+1:], true
}

// BackgroundChat returns the session key of the chat in which the task
// of a key Background made under profile was asked (Background's
// chatKey), or false for any other key. What the chat chose for itself
// and its tasks too (/yolo) is read under it.
func BackgroundChat(key, profile string) (string, bool) {
	ns := namespace(profile) + ":"
	rest, ok := strings.CutPrefix(key, ns+BackgroundPlatform+":")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 {
		return "", false
	}
	return ns + rest[:i], true
}
