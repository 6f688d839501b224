package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// TestDiscordPressOfAStranger runs the whole system (`switchboard dev`,
// the Discord gateway on the fake Discord, real Postgres, Redis and the
// embedded NATS) with an allowlist: a button press from a user it does
// not list, in a server channel, gets Hermes's refusal as an ephemeral
// followup of the press's interaction (the gateway, the router and
// delivery in turn), the message with the buttons left alone, once a
// minute; an allowed user's press is answered as before (the card
// edited).
func TestDiscordPressOfAStranger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const (
		ann     = "555000000000000001" // allowed
		mallory = "555000000000000002" // not
		dmChan  = "700000000000000001"
		guild   = "710000000000000001"
		channel = "720000000000000001"
		card    = "730000000000000001" // a prompt in the channel
	)
	dc := discordfake.New(t)
	dc.AddChannel(dmChan, discordfake.TypeDM, "", "")
	dc.AddChannel(channel, discordfake.TypeGuildText, guild, "")
	d := startDev(t,
		"DISCORD_BOT_TOKEN="+dc.Token, "DISCORD_API_BASE_URL="+dc.URL(),
		"DISCORD_ALLOWED_USERS="+ann, "GATEWAY_ALLOW_ALL_USERS=",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s\nstderr:\n%s", what, d.stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := dc.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	press := func(user, ch, g, msg, customID string) string {
		t.Helper()
		in, err := dc.Press(ctx, discordfake.Press{ChannelID: ch, GuildID: g, MessageID: msg, UserID: user, UserName: "someone", CustomID: customID})
		if err != nil {
			t.Fatal(err)
		}
		return in["id"].(string)
	}

	const refusal = "You're not authorized to approve commands~"
	first := press(mallory, channel, guild, card, "ea:once:call_1")
	waitFor("the refusal", func() bool { return len(dc.InteractionState(first).Followups) == 1 })
	st := dc.InteractionState(first)
	if f := st.Followups[0]; f.Content != refusal || f.Flags != 64 || st.Original != "" {
		t.Fatalf("interaction %+v, want %q as an ephemeral followup and the response message untouched", st, refusal)
	}
	second := press(mallory, channel, guild, card, "ea:deny:call_1") // within the minute

	// Ann's press of a card in her DM (the answer to her message): the
	// router's "expired" card replaces its text.
	if err := dc.Dispatch(ctx, "MESSAGE_CREATE", discordfake.MessageCreate{ID: dc.NewID(), ChannelID: dmChan, AuthorID: ann, Content: "hello"}.Payload()); err != nil {
		t.Fatal(err)
	}
	waitFor("ann's answer", func() bool { return len(dc.Messages(dmChan)) == 1 })
	answer := dc.Messages(dmChan)[0]
	press(ann, dmChan, "", answer.ID, "ea:once")
	waitFor("ann's card answered", func() bool {
		ms := dc.Messages(dmChan)
		return len(ms) == 1 && strings.HasPrefix(ms[0].Content, "⌛ Approval expired")
	})
	time.Sleep(time.Second) // mallory's second press has had its time
	if st := dc.InteractionState(second); len(st.Followups) != 0 || st.Original != "" {
		t.Fatalf("mallory's second press within the minute got %+v", st)
	}
	if ms := dc.Messages(channel); len(ms) != 0 {
		t.Fatalf("the channel got %+v", ms)
	}
	for _, req := range dc.Requests() {
		if strings.HasPrefix(req, "DELETE /api/v9/webhooks/") || strings.Contains(req, "/messages/"+card) {
			t.Fatalf("the press's message was touched: %s", req)
		}
	}
}
