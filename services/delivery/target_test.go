package delivery

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
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
			got, channel, err := parseTarget(c.raw, homeOf)
			if c.bad {
				if !errors.Is(err, ErrBadTarget) {
					t.Fatalf("err = %v, want ErrBadTarget", err)
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
// ErrBadTarget; an accepted target names a platform that can be a
// subject token and a chat (or a #channel to look up); an explicit
// platform:chat[:thread] parses back to itself.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"telegram", "slack:C1:1.2", "matrix:!r:s:$e", "discord:#ops", "", ":", "a::b", "x y:1", "Télé:1", "email:a@b:c:d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, channel, err := parseTarget(raw, homeOf)
		if err != nil {
			if !errors.Is(err, ErrBadTarget) {
				t.Fatalf("error %v is not ErrBadTarget", err)
			}
			return
		}
		if !platformName.MatchString(got.GetPlatform()) {
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
		again, ch, err := parseTarget(back, homeOf)
		if err != nil || ch != "" || !proto.Equal(again, got) {
			t.Fatalf("%q → %v → %q → %v %q %v", raw, got, back, again, ch, err)
		}
	})
}
