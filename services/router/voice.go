package router

import (
	"context"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /voice is Hermes's voice reply mode (gateway/run.py's voice mixin,
// _handle_voice_command): per chat, the agent's answers also come as a
// voice message — /voice on (Hermes's "voice_only") when the user's
// message was a voice message, /voice tts ("all") to every message,
// /voice off text only (the default). /voice status shows the mode; a
// bare /voice toggles between off and on and explains the words. While
// a turn runs it is refused, as Hermes's (busy_policy reject:
// refusedMidTurn), and set between turns it counts from the next. The
// text answer is always sent too (first; the voice message follows it).
//
// The chat's choice is the voice_mode column of its session key's row
// (migration 00119), which /new, /branch and /resume keep; the router
// puts it on each turn (TurnRequested.voice_mode) and the worker, which
// has the answer, speaks it (services/worker/voice.go).
//
// Differs from Hermes: Hermes keys the mode by platform and chat id in a
// JSON file of its process; here it is the session key's, so in a group
// with per-user sessions each member chooses for themselves. Without a
// text-to-speech provider (the tts section) /voice says voice replies
// are not configured rather than storing a mode nothing would use (Hermes
// falls back to its free Edge TTS). An argument /voice does not know
// gets its usage, where Hermes toggles. Hermes's Discord voice channels
// (/voice channel, /voice leave) are not reproduced.

// Voice modes as stored (Hermes's names).
const (
	voiceOff  = "off"
	voiceOnly = "voice_only"
	voiceAll  = "all"
)

// voiceUsage answers an argument /voice does not know.
const voiceUsage = "Usage: `/voice [on|off|tts|status]`"

// voiceNotConfigured answers /voice when no text-to-speech provider is
// configured.
const voiceNotConfigured = "🔇 Voice replies are not configured on this gateway: it has no text-to-speech provider (the operator sets the `tts` section). Answers stay text."

// voiceHelp follows the answer to a bare /voice (Hermes's
// gateway.voice.help, without its Discord voice channel lines).
const voiceHelp = "\n\n**How /voice works**\n" +
	"• `/voice on` — voice reply when you send a voice message\n" +
	"• `/voice tts` — voice reply to *every* message\n" +
	"• `/voice off` — back to text-only replies\n" +
	"• `/voice status` — show the current mode\n" +
	"• `/voice` (no argument) — quick toggle between on and off"

// voicePlatforms are the platforms whose gateways upload a voice reply
// (the audio kept in the attachment store): Telegram (sendVoice) and
// Matrix (MSC3245) as a voice message; WhatsApp, Signal, Discord, Slack,
// Mattermost, BlueBubbles and email as an audio attachment. The
// others send media only by public URL (LINE, Google Chat, SMS), show no
// files (Home Assistant), take no kept bytes (Teams) or are not chats
// (api, webhook, cron).
var voicePlatforms = map[string]bool{
	"telegram": true, "whatsapp": true, "signal": true, "matrix": true, "discord": true,
	"slack": true, "mattermost": true, "bluebubbles": true, "email": true,
}

// voiceLabel is how /voice status names a mode (Hermes's labels).
func voiceLabel(mode string) string {
	switch mode {
	case voiceOnly:
		return "On (voice reply to voice messages)"
	case voiceAll:
		return "TTS (voice reply to all messages)"
	}
	return "Off (text only)"
}

// voiceFor is the voice mode the turn of key, answering on platform,
// carries: the chat's, or none when no text-to-speech provider is
// configured, on a platform that cannot carry one (voicePlatforms: not
// the API, a program's response body, nor cron runs), and for
// /background tasks, which are not answers in a chat.
func (s *Service) voiceFor(key, platform string, sess sessionstore.Session) string {
	if !s.cfg.VoiceReplies || !voicePlatforms[platform] {
		return ""
	}
	if _, ok := sessionkey.BackgroundTask(key, s.cfg.Profile); ok {
		return ""
	}
	switch sess.VoiceMode {
	case voiceOnly, voiceAll:
		return sess.VoiceMode
	}
	return ""
}

// voiceCommand answers /voice [on|off|tts|status].
func (s *Service) voiceCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	if !s.cfg.VoiceReplies {
		return reply(voiceNotConfigured)
	}
	if !voicePlatforms[m.platform] {
		return reply("🔇 Voice replies are not available on " + m.platform + ": it cannot send an uploaded voice message. Answers stay text.")
	}
	current := sess.VoiceMode
	if current == "" {
		current = voiceOff
	}
	var want, text string
	switch strings.ToLower(strings.TrimSpace(args)) {
	case "status":
		return reply("Voice mode: " + voiceLabel(current))
	case "on", "enable":
		want, text = voiceOnly, "Voice mode enabled.\nI'll reply with voice when you send voice messages.\nUse /voice tts to get voice replies for all messages."
	case "off", "disable":
		want, text = voiceOff, "Voice mode disabled. Text-only replies."
	case "tts":
		want, text = voiceAll, "Auto-TTS enabled.\nAll replies will include a voice message."
	case "":
		// Toggle: off → on, on or tts → off.
		if current == voiceOff {
			want, text = voiceOnly, "Voice mode enabled."+voiceHelp
		} else {
			want, text = voiceOff, "Voice mode disabled."+voiceHelp
		}
	case "channel", "join":
		return reply("Voice channels are not supported on this platform.")
	case "leave":
		return reply("Not in a voice channel.")
	default:
		return reply(voiceUsage)
	}
	// Once per inbound event: a redelivered bare /voice does not toggle
	// back.
	return s.once(ctx, m, "voice", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		if err := st.SetVoiceMode(ctx, m.key, want); err != nil {
			return "", 0, err
		}
		s.log.InfoContext(ctx, "voice mode changed", "session_key", m.key, "mode", want, "by", m.platform+":"+m.src.GetUserId())
		return text, sess.Generation, nil
	})
}
