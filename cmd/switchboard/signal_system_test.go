package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

// TestSignalEndToEnd runs the whole system (`switchboard dev`) with the
// Signal gateway pointed at a fake signal-cli daemon in manual receive
// mode (the gateway's default), through the gateway's real HTTP client.
// A message sent before the system started waits on the daemon and is
// answered; a direct message gets its answer (after a typing indicator;
// the first send is refused for rate limiting and delivery retries it
// after the wait Signal names), the processing reaction ends as ✅, and
// the same envelope sent again gets no second answer.
func TestSignalEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const account = "+15550000001"
	f := signalfake.New(account)
	defer f.Close()
	f.SetReceiveMode(signalfake.Manual)
	ann := signalfake.Contact{Number: "+4915112345678", UUID: "a11ce000-0000-4000-8000-000000000042", Name: "Ann"}
	f.Receive(signalfake.Message{From: ann, Text: "sent before the start"})
	d := startDev(t, "GATEWAY_ALLOW_ALL_USERS=true", "SIGNAL_HTTP_URL="+f.URL, "SIGNAL_ACCOUNT="+account)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	answers := func(text string) int {
		n := 0
		for _, s := range f.Sent(ann.Number) {
			if s.Text == text {
				n++
			}
		}
		return n
	}
	waitFor("the message sent before the start answered", func() bool { return answers("echo: sent before the start") == 1 })

	f.FailNext("send", signalfake.RateLimited(ann.Number, 1))
	first := f.Receive(signalfake.Message{From: ann, Text: "hello signal"})
	waitFor("the answer", func() bool { return answers("echo: hello signal") == 1 })
	if n := len(f.Calls("send")); n < 2 {
		t.Fatalf("%d send calls, want the rate-limited one and its retry", n)
	}
	if len(f.Calls("sendTyping")) == 0 {
		t.Fatal("no typing indicator")
	}
	waitFor("the ✅ reaction", func() bool { return slices.Equal(f.Reactions(ann.Number, ann.Number, first), []string{"✅"}) })

	// The same envelope again (a daemon replaying its buffer), then a new
	// message: once the second answer is there, the replay was handled.
	again, _ := f.Envelope(signalfake.Message{From: ann, Text: "hello signal", Timestamp: first})
	f.Push(again)
	f.Receive(signalfake.Message{From: ann, Text: "second"})
	waitFor("the second answer", func() bool { return answers("echo: second") == 1 })
	if n := answers("echo: hello signal"); n != 1 {
		t.Fatalf("the first message was answered %d times, want once", n)
	}
}
