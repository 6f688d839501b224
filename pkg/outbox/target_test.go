package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

func homeOf(platform string) string {
	if platform == "telegram" {
		return "-100:7"
	}
	return ""
}

func TestParseTarget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raw     string
		want    *deliveryv1.Target
		channel string
		bad     bool
	}{
		{raw: "telegram", want: &deliveryv1.Target{Platform: "telegram", ChatId: "-100", ThreadId: "7"}},
		{raw: " Slack:C1:1700.1 ", want: &deliveryv1.Target{Platform: "slack", ChatId: "C1", ThreadId: "1700.1"}},
		{raw: "matrix:!room:server:$ev", want: &deliveryv1.Target{Platform: "matrix", ChatId: "!room:server", ThreadId: "$ev"}},
		{raw: "matrix:!room:server", want: &deliveryv1.Target{Platform: "matrix", ChatId: "!room:server"}},
		{raw: "discord:#ops", want: &deliveryv1.Target{Platform: "discord"}, channel: "#ops"},
		{raw: "", bad: true},
		{raw: ":123", bad: true},
		{raw: "slack", bad: true},       // no home channel
		{raw: "slack::1", bad: true},    // no chat
		{raw: "tele gram:1", bad: true}, // not a subject token
		{raw: "a.b:1", bad: true},
		{raw: ">:1", bad: true},
	} {
		t.Run(c.raw, func(t *testing.T) {
			got, channel, err := outbox.ParseTarget(c.raw, homeOf)
			if c.bad {
				if !errors.Is(err, outbox.ErrBadTarget) {
					t.Fatalf("err = %v, want outbox.ErrBadTarget", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, c.want) || channel != c.channel {
				t.Fatalf("got %v %q, want %v %q", got, channel, c.want, c.channel)
			}
		})
	}
}

// FuzzParseTarget checks the proactive-send target parser: errors are
// outbox.ErrBadTarget; an accepted target names a platform that can be a
// subject token and a chat (or a #channel to look up); an explicit
// platform:chat[:thread] parses back to itself.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"telegram", "slack:C1:1.2", "matrix:!r:s:$e", "discord:#ops", "", ":", "a::b", "x y:1", "Télé:1", "email:a@b:c:d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, channel, err := outbox.ParseTarget(raw, homeOf)
		if err != nil {
			if !errors.Is(err, outbox.ErrBadTarget) {
				t.Fatalf("error %v is not outbox.ErrBadTarget", err)
			}
			return
		}
		if !outbox.ValidPlatform(got.GetPlatform()) {
			t.Fatalf("platform %q", got.GetPlatform())
		}
		if channel != "" {
			if !strings.HasPrefix(channel, "#") || got.GetChatId() != "" {
				t.Fatalf("channel %q with target %v", channel, got)
			}
			return
		}
		if got.GetChatId() == "" {
			t.Fatalf("%q: no chat id", raw)
		}
		if got.GetPlatform() == "matrix" || got.GetThreadId() != "" && strings.Contains(got.GetChatId(), ":") {
			return
		}
		back := got.GetPlatform() + ":" + got.GetChatId()
		if got.GetThreadId() != "" {
			back += ":" + got.GetThreadId()
		}
		again, ch, err := outbox.ParseTarget(back, homeOf)
		if err != nil || ch != "" || !proto.Equal(again, got) {
			t.Fatalf("%q → %v → %q → %v %q %v", raw, got, back, again, ch, err)
		}
	})
}

// A bare platform goes to its configured home, else to the chat /sethome
// chose there; a #name through the channel directory.
func TestResolveTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := outbox.New(db)
	home := &eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: "-100", ThreadId: "7", ChatName: "ops"}
	if err := sessionstore.New(db).SetHome(ctx, home, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertChannel(ctx, outbox.Channel{Platform: "discord", ChatID: "42", Name: "#ops"}); err != nil {
		t.Fatal(err)
	}
	// A user's /sethome does not move a home the operator configured.
	if err := sessionstore.New(db).SetHome(ctx, &eventsv1.SessionSource{Platform: "slack", ChatId: "CUSER"}, "mallory"); err != nil {
		t.Fatal(err)
	}
	configured := func(platform string) string {
		return map[string]string{"slack": "C9"}[platform]
	}
	for _, c := range []struct {
		raw  string
		want *deliveryv1.Target
		bad  bool
	}{
		{raw: "telegram", want: &deliveryv1.Target{Platform: "telegram", Account: "bot1", ChatId: "-100", ThreadId: "7"}},
		{raw: " Telegram ", want: &deliveryv1.Target{Platform: "telegram", Account: "bot1", ChatId: "-100", ThreadId: "7"}},
		{raw: "slack", want: &deliveryv1.Target{Platform: "slack", ChatId: "C9"}},
		{raw: "telegram:55", want: &deliveryv1.Target{Platform: "telegram", ChatId: "55"}},
		{raw: "discord:#ops", want: &deliveryv1.Target{Platform: "discord", ChatId: "42"}},
		{raw: "discord", bad: true},
		{raw: "discord:#nope", bad: true},
	} {
		t.Run(c.raw, func(t *testing.T) {
			got, err := s.ResolveTarget(ctx, c.raw, configured)
			if c.bad {
				if !errors.Is(err, outbox.ErrBadTarget) {
					t.Fatalf("err = %v, want ErrBadTarget", err)
				}
				return
			}
			if err != nil || !proto.Equal(got, c.want) {
				t.Fatalf("got %v %v, want %v", got, err, c.want)
			}
		})
	}
}
