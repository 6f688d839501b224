package auth

import (
	"context"
	"strings"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// FuzzRules checks that any environment and any sender give a decision
// without panicking, and that a denial never happens for a listed user.
func FuzzRules(f *testing.F) {
	f.Add("TELEGRAM_ALLOWED_USERS=1,2\nGATEWAY_ALLOW_ALL_USERS=true", "telegram", "dm", "c", "1", false)
	f.Add("EMAIL_ALLOWED_USERS=a@b", "email", "group", "c", "a@b", false)
	f.Add("=\n_ALLOWED_USERS=x\nX_GROUP_ALLOWED_CHATS=,,", "", "", "", "", true)
	f.Fuzz(func(t *testing.T, env, platform, chatType, chatID, userID string, bot bool) {
		r := New(Config{}, strings.Split(env, "\n"))
		ev := &eventsv1.MessageReceived{Source: &eventsv1.SessionSource{Platform: platform, ChatType: chatType, ChatId: chatID, UserId: userID, IsBot: bot}}
		d, err := r.Decide(context.Background(), ev, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason == "" {
			t.Fatal("decision without reason")
		}
		// Listing the user makes them allowed (unless id-less), a bot
		// too: as in Hermes, a bot not admitted as a bot is a sender.
		id := strings.TrimSpace(userID)
		if id == "" || id != userID || strings.ContainsAny(id, ",\n") {
			return
		}
		r2 := New(Config{GatewayAllowedUsers: []string{id}}, nil)
		if d2, _ := r2.Decide(context.Background(), ev, nil); !d2.Allowed {
			t.Fatalf("listed user %q denied: %v", id, d2.Reason)
		}
	})
}

// FuzzAllowedUsersEnv reads TELEGRAM_ALLOWED_USERS the way an operator
// writes it (commas, spaces, empty items): a DM sender is allowed exactly
// when one of their ids is an item of the list, or the list has "*".
func FuzzAllowedUsersEnv(f *testing.F) {
	f.Add("1, 2 ,,3", "2", "")
	f.Add("*", "x", "")
	f.Add(" , ", "1", "")
	f.Add("alice", "alice@example.com", "")
	f.Add("42", "", "42")
	f.Fuzz(func(t *testing.T, list, userID, userIDAlt string) {
		r := New(Config{}, []string{"TELEGRAM_ALLOWED_USERS=" + list})
		ev := &eventsv1.MessageReceived{Source: &eventsv1.SessionSource{Platform: "telegram", ChatType: "dm", ChatId: "c", UserId: userID, UserIdAlt: userIDAlt}}
		d, err := r.Decide(context.Background(), ev, nil)
		if err != nil {
			t.Fatal(err)
		}
		items := map[string]bool{}
		for _, it := range strings.Split(list, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items[it] = true
			}
		}
		listed := items["*"]
		for _, id := range candidates("telegram", ev.GetSource()) {
			listed = listed || items[id]
		}
		if userID == "" {
			listed = false
		}
		if d.Allowed != listed {
			t.Fatalf("list %q, user %q/%q: allowed %v (%s), listed %v", list, userID, userIDAlt, d.Allowed, d.Reason, listed)
		}
	})
}
