package router

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's /voice shows, toggles and sets the chat's voice reply mode in
// Hermes's words; the choice is the chat's (another chat keeps text
// only), outlives /new, and reaches the worker on each turn
// (TurnRequested.voice_mode); an unknown argument gets the usage and
// changes nothing.
func TestVoiceCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.VoiceReplies = true
	cfg.Auth.GatewayAllowedUsers = append(cfg.Auth.GatewayAllowedUsers, "carol")
	e.startRouter(cfg, nil, nil)
	w := e.startWorker(nil)
	n := 0
	modeOf := func(user string) string {
		t.Helper()
		n++
		text := "hello " + string(rune('a'+n))
		e.publish(dm(user, text))
		return turnOf(t, w, text).GetVoiceMode()
	}
	for _, tt := range []struct {
		text string
		want []string
		mode string
	}{
		{"/voice status", []string{"Voice mode: Off (text only)"}, ""},
		{"/voice on", []string{"Voice mode enabled.\nI'll reply with voice when you send voice messages.\nUse /voice tts to get voice replies for all messages."}, "voice_only"},
		{"/voice status", []string{"Voice mode: On (voice reply to voice messages)"}, "voice_only"},
		{"/new", []string{"New session started"}, "voice_only"},
		{"/voice tts", []string{"Auto-TTS enabled.\nAll replies will include a voice message."}, "all"},
		{"/voice status", []string{"Voice mode: TTS (voice reply to all messages)"}, "all"},
		{"/voice", []string{"Voice mode disabled.", "**How /voice works**", "`/voice tts` — voice reply to *every* message"}, ""},
		{"/voice", []string{"Voice mode enabled.", "**How /voice works**"}, "voice_only"},
		{"/voice loud", []string{"Usage: `/voice [on|off|tts|status]`"}, "voice_only"},
		{"/voice OFF", []string{"Voice mode disabled. Text-only replies."}, ""},
		{"/voice enable", []string{"Voice mode enabled."}, "voice_only"},
		{"/voice disable", []string{"Voice mode disabled. Text-only replies."}, ""},
		{"/voice channel", []string{"Voice channels are not supported on this platform."}, ""},
	} {
		got := e.ask("alice", tt.text)
		for _, want := range tt.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: %q, want it to contain %q", tt.text, got, want)
			}
		}
		if mode := modeOf("alice"); mode != tt.mode {
			t.Errorf("after %s: turn voice_mode %q, want %q", tt.text, mode, tt.mode)
		}
	}
	if got := e.ask("bob", "/voice tts"); !strings.Contains(got, "Auto-TTS enabled.") {
		t.Errorf("bob's /voice tts: %q", got)
	}
	if mode := modeOf("alice"); mode != "" {
		t.Errorf("alice's turn carries voice mode %q bob chose", mode)
	}
	// LINE sends media only by public URL: /voice says so there, and
	// its turns carry no voice mode.
	line := dm("carol", "/voice tts")
	line.Source.Platform = "line"
	e.publish(line)
	waitFor(t, "the answer on LINE", func() bool { return len(e.noticesTo("carol")) > 0 })
	if got := e.noticesTo("carol")[0]; !strings.Contains(got, "Voice replies are not available on line") {
		t.Errorf("/voice tts on LINE: %q", got)
	}
	// API requests (a program's response body) never carry it.
	api := dm("x", "from the api")
	api.Source.Platform, api.Source.ChatId, api.Source.UserId = "api", "conv-1", ""
	api.TransportAuthenticated = true
	e.publish(api)
	if mode := turnOf(t, w, "from the api").GetVoiceMode(); mode != "" {
		t.Errorf("API turn with voice mode %q", mode)
	}
}

// Without a text-to-speech provider /voice says so, stores nothing, and
// turns carry no voice mode.
func TestVoiceCommandNotConfigured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	for _, text := range []string{"/voice on", "/voice tts", "/voice status", "/voice"} {
		if got := e.ask("alice", text); !strings.Contains(got, "Voice replies are not configured") {
			t.Errorf("%s: %q", text, got)
		}
	}
	e.publish(dm("alice", "hello"))
	if mode := turnOf(t, w, "hello").GetVoiceMode(); mode != "" {
		t.Errorf("turn voice_mode %q without a provider", mode)
	}
	sess, err := sessionstore.New(e.db).Get(context.Background(), "agent:main:telegram:dm:chat-alice")
	if err != nil {
		t.Fatal(err)
	}
	if mode := sess.VoiceMode; mode != "" {
		t.Errorf("stored voice mode %q without a provider", mode)
	}
}
