package googlechat

import (
	"errors"
	"fmt"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
)

// TestNormalizeSessionKeys: each kind of Google Chat message maps to the
// session key Hermes gives it (platform google_chat, the space as the
// chat, users/… as the group participant, a group's thread as its own
// session, a DM's thread only for a reply in an existing thread).
func TestNormalizeSessionKeys(t *testing.T) {
	const sender = `"sender":{"name":"users/111","displayName":"Ann","email":"ann@example.com","type":"HUMAN"}`
	for _, c := range []struct {
		name, body, key, text, skip string
	}{
		{"dm top level", `{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m1",` + sender + `,"text":" hi ","thread":{"name":"spaces/D1/threads/t1"}}}`,
			"agent:main:google_chat:dm:spaces/D1", "hi", ""},
		{"dm legacy type", `{"type":"MESSAGE","space":{"name":"spaces/D1","type":"DM"},"message":{"name":"spaces/D1/messages/m2",` + sender + `,"text":"hi"}}`,
			"agent:main:google_chat:dm:spaces/D1", "hi", ""},
		{"dm side thread", `{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m3",` + sender + `,"text":"more","thread":{"name":"spaces/D1/threads/t1"},"threadReply":true}}`,
			"agent:main:google_chat:dm:spaces/D1:spaces/D1/threads/t1", "more", ""},
		{"space thread", `{"type":"MESSAGE","space":{"name":"spaces/S1","spaceType":"SPACE"},"message":{"name":"spaces/S1/messages/m4",` + sender + `,"text":"@Hermes go","argumentText":" go","thread":{"name":"spaces/S1/threads/t9"},"annotations":[{"type":"USER_MENTION","userMention":{"user":{"name":"users/app","type":"BOT"}}}]}}`,
			"agent:main:google_chat:group:spaces/S1:spaces/S1/threads/t9", "go", ""},
		{"space without thread", `{"type":"MESSAGE","space":{"name":"spaces/S1","type":"ROOM"},"message":{"name":"spaces/S1/messages/m5",` + sender + `,"argumentText":"go"}}`,
			"agent:main:google_chat:group:spaces/S1:users/111", "go", ""},
		{"no email", `{"type":"MESSAGE","space":{"name":"spaces/D2","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D2/messages/m6","sender":{"name":"users/222","type":"HUMAN"},"text":"x"}}`,
			"agent:main:google_chat:dm:spaces/D2", "x", ""},
		{"slash command", `{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m7",` + sender + `,"text":"/reset now","argumentText":" now","slashCommand":{"commandId":"3"}}}`,
			"agent:main:google_chat:dm:spaces/D1", "/cmd_3 now", ""},
		{"own", `{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m8","sender":{"name":"users/app","type":"BOT"},"text":"x"}}`,
			"", "", "own"},
		{"other app", `{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m9","sender":{"name":"users/999","type":"BOT"},"text":"x"}}`,
			"", "", "bot"},
		{"empty", `{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m9",` + sender + `,"text":"  "}}`,
			"", "", "empty"},
		{"added", `{"type":"ADDED_TO_SPACE","space":{"name":"spaces/S1","spaceType":"SPACE"}}`, "", "", "event_added_to_space"},
		// Added to a space by an @mention: the event carries the message
		// that mentioned the app, which is the user's first question.
		{"added by mention", `{"type":"ADDED_TO_SPACE","space":{"name":"spaces/S1","spaceType":"SPACE"},"message":{"name":"spaces/S1/messages/m10",` + sender + `,"text":"@Hermes what is up","argumentText":" what is up","thread":{"name":"spaces/S1/threads/t10"},"annotations":[{"type":"USER_MENTION","userMention":{"user":{"name":"users/app","type":"BOT"}}}]}}`,
			"agent:main:google_chat:group:spaces/S1:spaces/S1/threads/t10", "what is up", ""},
		{"removed", `{"type":"REMOVED_FROM_SPACE","space":{"name":"spaces/S1","spaceType":"SPACE"}}`, "", "", "event_removed_from_space"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := parseEvent([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			n := normalize(e, "123", platform.BotsNone, (&selfNames{}).is)
			if c.skip != "" {
				if n.ev != nil || n.skip != c.skip {
					t.Fatalf("normalized to %v (skip %q), want skip %q", n.ev, n.skip, c.skip)
				}
				return
			}
			if n.ev == nil {
				t.Fatalf("skipped: %s", n.skip)
			}
			if k := sessionkey.Build(n.ev.GetSource(), sessionkey.DefaultOptions()); k != c.key {
				t.Errorf("key %q, want %q", k, c.key)
			}
			if n.ev.GetText() != c.text {
				t.Errorf("text %q, want %q", n.ev.GetText(), c.text)
			}
		})
	}
}

func TestParseEventRejects(t *testing.T) {
	for name, body := range map[string]string{
		"not json":                 `{"type":`,
		"no type":                  `{"space":{"name":"spaces/S"}}`,
		"no space":                 `{"type":"MESSAGE"}`,
		"message elsewhere":        `{"type":"MESSAGE","space":{"name":"spaces/S"},"message":{"name":"spaces/T/messages/1","sender":{"name":"users/1"}}}`,
		"no sender":                `{"type":"MESSAGE","space":{"name":"spaces/S"},"message":{"name":"spaces/S/messages/1"}}`,
		"thread elsewhere":         `{"type":"MESSAGE","space":{"name":"spaces/S"},"message":{"name":"spaces/S/messages/1","sender":{"name":"users/1"},"thread":{"name":"spaces/T/threads/1"}}}`,
		"space name has space":     `{"type":"MESSAGE","space":{"name":"spaces/S 1"}}`,
		"added, message elsewhere": `{"type":"ADDED_TO_SPACE","space":{"name":"spaces/S"},"message":{"name":"spaces/T/messages/1","sender":{"name":"users/1"}}}`,
	} {
		if _, err := parseEvent([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestNormalizeBots: another app's message is published, marked is_bot,
// as allow_bots says (mentions: when it @mentions an app, as Google Chat
// delivers space messages); the app's own, by its alias or by the name a
// send answer gave it, never.
func TestNormalizeBots(t *testing.T) {
	const (
		mention = `,"annotations":[{"type":"USER_MENTION","userMention":{"user":{"name":"users/app","type":"BOT"}}}]`
		space   = `{"type":"MESSAGE","space":{"name":"spaces/S1","spaceType":"SPACE"},"message":{"name":"spaces/S1/messages/m1","sender":{"name":"%s","displayName":"Other","type":"BOT"},"text":"@Hermes hi","argumentText":" hi"%s}}`
	)
	var self selfNames
	self.learn("users/424242") // the sender of a message the app created
	for _, c := range []struct {
		name, sender, annotations string
		mode                      platform.BotMode
		skip                      string // "": published
	}{
		{"none", "users/999", mention, platform.BotsNone, "bot"},
		{"mentions, mentioned", "users/999", mention, platform.BotsMentions, ""},
		{"mentions, not mentioned", "users/999", "", platform.BotsMentions, "bot"},
		{"all", "users/999", "", platform.BotsAll, ""},
		{"all, own alias", "users/app", mention, platform.BotsAll, "own"},
		{"all, own learned name", "users/424242", mention, platform.BotsAll, "own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := parseEvent([]byte(fmt.Sprintf(space, c.sender, c.annotations)))
			if err != nil {
				t.Fatal(err)
			}
			n := normalize(e, "123", c.mode, self.is)
			switch {
			case c.skip != "" && (n.ev != nil || n.skip != c.skip):
				t.Fatalf("normalized to %v (skip %q), want skip %q", n.ev, n.skip, c.skip)
			case c.skip == "" && n.ev == nil:
				t.Fatalf("skipped: %s", n.skip)
			case c.skip == "" && (!n.ev.GetSource().GetIsBot() || n.ev.GetText() != "hi" || n.ev.GetSource().GetUserIdAlt() != c.sender):
				t.Fatalf("published %v, want hi from bot %s", n.ev, c.sender)
			}
		})
	}
}
