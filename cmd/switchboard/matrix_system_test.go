package main

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// TestMatrixEndToEnd runs the whole system (`switchboard dev`) with the
// Matrix gateway pointed at a fake homeserver, through mautrix: a DM is
// answered (the first send refused with M_LIMIT_EXCEEDED and retried
// after retry_after_ms, streamed by editing one message), the processing
// reaction ends as ✅ (MATRIX_HOME_ROOM names the home channel, so no
// home notice comes first), a room message that mentions the bot is answered in
// the thread it opens, and a replayed event gets no second answer.
func TestMatrixEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const (
		bot   = "@bot:" + matrixfake.Server
		ann   = "@ann:" + matrixfake.Server
		token = "syt_system_test"
		dm    = "!dm:" + matrixfake.Server
		team  = "!team:" + matrixfake.Server
	)
	f := matrixfake.New(bot, token)
	defer f.Close()
	f.AddRoom(matrixfake.Room{ID: dm, Members: map[string]string{ann: "Ann"}, BotName: "Hermes", Direct: true})
	f.AddRoom(matrixfake.Room{ID: team, Name: "Team", Members: map[string]string{ann: "Ann", "@bob:" + matrixfake.Server: "Bob"}, BotName: "Hermes"})
	d := startDev(t, "GATEWAY_ALLOW_ALL_USERS=true", "MATRIX_HOMESERVER="+f.URL, "MATRIX_ACCESS_TOKEN="+token, "MATRIX_HOME_ROOM="+dm)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	answers := func(room, text string) []matrixfake.Sent {
		var out []matrixfake.Sent
		for _, s := range f.Sent(room) {
			if s.Body == text {
				out = append(out, s)
			}
		}
		return out
	}
	waitFor("the gateway to sync", func() bool { return f.Calls("sync") >= 2 })

	f.FailNext("send", 1, matrixfake.Fail{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 500})
	first := f.Message(dm, ann, "hello matrix")
	waitFor("the answer", func() bool { return len(answers(dm, "echo: hello matrix")) == 1 })
	if n := len(f.Sent(dm)); n != 1 {
		t.Fatalf("the DM shows %d bot messages, want the one answer: %+v", n, f.Sent(dm))
	}
	if f.Typing(dm) == 0 {
		t.Fatal("no typing notice")
	}
	waitFor("the ✅ reaction", func() bool { return slices.Equal(f.Reactions(dm, first), []string{"✅"}) })

	root := f.Message(team, ann, bot+" hello team")
	waitFor("the answer in the thread", func() bool {
		a := answers(team, "echo: hello team")
		return len(a) == 1 && a[0].Thread == root
	})

	// The first message again (a homeserver replaying it), then a new
	// one: once the second answer is there, the replay was handled.
	f.Replay(first)
	f.Message(dm, ann, "second")
	waitFor("the second answer", func() bool { return len(answers(dm, "echo: second")) == 1 })
	if n := len(answers(dm, "echo: hello matrix")); n != 1 {
		t.Fatalf("the first message was answered %d times, want once", n)
	}
}
