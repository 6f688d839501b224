package main

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/gateway/mattermost/mattermostfake"
)

// TestMattermostEndToEnd runs the whole system (`switchboard dev`) with
// the Mattermost gateway pointed at a fake server, over REST and the
// websocket: a DM is answered (the first post refused with a 429 and
// retried after X-Ratelimit-Reset, streamed by patching one post), the
// processing reaction ends as white_check_mark (MATTERMOST_HOME_CHANNEL
// names the home channel, so no home notice comes first), a channel post
// that @mentions the bot is answered in the thread it asks for
// (MATTERMOST_REPLY_MODE=thread) while one without a mention is not, and
// a replayed posted event gets no second answer.
func TestMattermostEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const (
		bot   = "hermesbot0000000000000000a"
		ann   = "annuser0000000000000000000"
		token = "mm-system-test"
		dm    = "dmchannel00000000000000000"
		town  = "townsquare0000000000000000"
	)
	f := mattermostfake.New(bot, "hermes", token)
	defer f.Close()
	f.AddUser(ann, "ann")
	f.AddChannel(mattermostfake.Channel{ID: dm, Type: "D"})
	f.AddChannel(mattermostfake.Channel{ID: town, Type: "O", DisplayName: "Town Square", Name: "town-square"})
	d := startDev(t, "GATEWAY_ALLOW_ALL_USERS=true", "MATTERMOST_URL="+f.URL, "MATTERMOST_TOKEN="+token, "MATTERMOST_HOME_CHANNEL="+dm,
		"MATTERMOST_REACTIONS=true", "MATTERMOST_REPLY_MODE=thread")
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	answers := func(ch, text string) []mattermostfake.Post {
		var out []mattermostfake.Post
		for _, p := range f.BotPosts(ch) {
			if p.Message == text {
				out = append(out, p)
			}
		}
		return out
	}
	waitFor("the gateway's websocket", func() bool { return f.Connected() == 1 })

	f.FailNext("create post", 1, mattermostfake.Fail{Status: http.StatusTooManyRequests, Reset: 1})
	first := f.Message(dm, ann, "hello mattermost")
	waitFor("the answer", func() bool { return len(answers(dm, "echo: hello mattermost")) == 1 })
	if n := len(f.BotPosts(dm)); n != 1 {
		t.Fatalf("the DM shows %d bot posts, want the one answer: %+v", n, f.BotPosts(dm))
	}
	if f.Typing(dm) == 0 {
		t.Fatal("no typing call")
	}
	waitFor("the white_check_mark reaction", func() bool { return slices.Equal(f.Reactions(first), []string{"white_check_mark"}) })

	f.Message(town, ann, "just chatting")
	root := f.Message(town, ann, "@hermes hello town")
	waitFor("the answer in the thread", func() bool {
		a := answers(town, "echo: hello town")
		return len(a) == 1 && a[0].RootID == root
	})

	// The first post's event again, then a new post: once the second
	// answer is there, the replay was handled.
	f.Replay(first)
	f.Message(dm, ann, "second")
	waitFor("the second answer", func() bool { return len(answers(dm, "echo: second")) == 1 })
	if n := len(answers(dm, "echo: hello mattermost")); n != 1 {
		t.Fatalf("the first post was answered %d times, want once", n)
	}
	if n := len(f.BotPosts(town)); n != 1 {
		t.Fatalf("the channel shows %d bot posts, want the one answer (the unmentioned post unanswered): %+v", n, f.BotPosts(town))
	}
}
