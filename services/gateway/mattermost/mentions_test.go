package mattermost

import (
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

func TestNeutralizeChannelMentions(t *testing.T) {
	const z = zeroWidthJoiner
	for _, tc := range []struct{ in, want string }{
		{"@channel the build is green", "@" + z + "channel the build is green"},
		{"Heads up @here!", "Heads up @" + z + "here!"},
		{"@ALL: done.", "@" + z + "ALL: done."},
		{"see @channel. Then", "see @" + z + "channel. Then"},
		{"team-@all-hands", "team-@" + z + "all-hands"}, // split at '-', as the server does
		{"(@here)", "(@" + z + "here)"},
		{"@here @here", "@" + z + "here @" + z + "here"},
		// Not mentions to the server: a longer word, a user, an address.
		{"@allison and @channels", "@allison and @channels"},
		{"@channel_ops", "@channel_ops"},
		{"mail bob@all.example", "mail bob@all.example"},
		{"ask @alice", "ask @alice"},
		// Code is not read for mentions: left as written.
		{"run `notify @here`", "run `notify @here`"},
		{"```sh\necho @channel\n```\n@all", "```sh\necho @channel\n```\n@" + z + "all"},
		{"~~~\n@here\n~~~", "~~~\n@here\n~~~"},
		// Already neutralised: unchanged.
		{"@" + z + "channel", "@" + z + "channel"},
		{"no mention", "no mention"},
	} {
		got := neutralizeChannelMentions(tc.in)
		if got != tc.want {
			t.Errorf("neutralizeChannelMentions(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if mentionsChannel(got) {
			t.Errorf("%q still notifies the channel", got)
		}
	}
}

// FuzzNeutralizeChannelMentions: whatever the agent writes, the post
// notifies no channel, and reads the same (only zero-width joiners are
// added).
func FuzzNeutralizeChannelMentions(f *testing.F) {
	for _, s := range []string{"@channel", "hi @here.", "`@all` @all", "```\n@here\n```", "a-@ALL:b", "x@channel", "@\u200dall", "`@here\n`"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := neutralizeChannelMentions(in)
		if mentionsChannel(out) {
			t.Fatalf("%q → %q still notifies the channel", in, out)
		}
		if strings.ReplaceAll(out, zeroWidthJoiner, "") != strings.ReplaceAll(in, zeroWidthJoiner, "") {
			t.Fatalf("%q → %q changed more than zero-width joiners", in, out)
		}
	})
}

// An answer that says @channel, @all or @here, sent or reached by the
// edits of a stream, notifies no channel on the server, and reads the
// same; with allow_channel_mentions it does.
func TestChannelMentionsInAnswers(t *testing.T) {
	t.Parallel()
	const text = "@channel the deploy is done, @here see below:\n```\n@all stays in code\n```"
	for _, allow := range []bool{false, true} {
		g := start(t, func(c *Config) { c.AllowChannelMentions = allow }, platform.Options{})
		g.f.Message(town, ann, "@"+botName+" announce it")
		ev := g.next(t)
		if r := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "a1", text)); !r.GetOk() {
			t.Fatalf("send receipt %v", r)
		}
		first := g.send(t, answer(ev, deliveryv1.SendOp_SEND_OP_SEND, "a2", "Deploying"))
		edit := answer(ev, deliveryv1.SendOp_SEND_OP_EDIT, "a2-edit", text)
		edit.MessageId = first.GetPlatformMessageId()
		if r := g.send(t, edit); !r.GetOk() {
			t.Fatalf("edit receipt %v", r)
		}
		posts := g.f.BotPosts(town)
		if len(posts) != 2 {
			t.Fatalf("posts %+v", posts)
		}
		notified := g.f.ChannelWide()
		if !allow {
			if len(notified) != 0 {
				t.Fatalf("posts notified the channel: %q", notified)
			}
			for _, p := range posts {
				if strings.ReplaceAll(p.Message, zeroWidthJoiner, "") != text || !strings.Contains(p.Message, "@all stays in code") {
					t.Fatalf("post reads %q, want %q with only zero-width joiners added, code untouched", p.Message, text)
				}
			}
			continue
		}
		if len(notified) != 2 || notified[0] != text || notified[1] != text {
			t.Fatalf("with allow_channel_mentions the send and the edit notify as written, got %q", notified)
		}
	}
}
