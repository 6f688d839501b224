package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// TestDiscordPressOfAStranger runs the whole system (`switchboard dev`,
// the Discord gateway on the fake Discord, real Postgres, Redis and the
// embedded NATS) with an allowlist: a button press from a user it does
// not list, in a server channel, gets Hermes's refusal as an ephemeral
// followup of the press's interaction (the gateway, the router and
// delivery in turn), the message with the buttons left alone, and a
// second press within the minute the same, as the router's answer to
// the press's holder; an allowed user's press is answered as before
// (the card edited).
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
	waitFor := d.waiter(ctx, t)
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
	// Mallory's second press, within the minute, is refused too (Hermes
	// refuses every press), with the router's answer to the press's
	// holder rather than through delivery.
	waitFor("the second refusal", func() bool { return len(dc.InteractionState(second).Followups) == 1 })
	time.Sleep(time.Second) // and no more than once
	if st := dc.InteractionState(second); len(st.Followups) != 1 || st.Followups[0].Content != refusal || st.Followups[0].Flags != 64 || st.Original != "" {
		t.Fatalf("mallory's second press within the minute got %+v, want %q as an ephemeral followup alone", st, refusal)
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

// TestTelegramPressOfAStranger runs the whole system with the Telegram
// gateway on the fake Bot API and an allowlist: an approval prompt in a
// group, pressed by a user the allowlist does not list, gets Hermes's
// refusal as the callback query's answer (the gateway holds the query
// for it), the card and the chat unchanged, on every press (the second,
// within the minute, with the router's answer to the holder); the allowed
// user's press then approves as before, and a second one on the answered
// prompt gets Hermes's "already resolved" toast.
func TestTelegramPressOfAStranger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const token = "4545:press-test-token"
	tg, err := telegramfake.New(token, "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t,
		"TELEGRAM_BOT_TOKEN="+token, "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		// Each press's answer is the router's, however busy the machine.
		"SWITCHBOARD_GATEWAYS__TELEGRAM__PRESS_HOLD=10s",
		"TELEGRAM_ALLOWED_USERS=99", "GATEWAY_ALLOW_ALL_USERS=",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
		"SWITCHBOARD_AGENT__DANGEROUS_TOOLS=clock",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	const group = "-1002285219667"
	chat := map[string]any{"id": -1002285219667, "type": "supergroup", "title": "Team"}
	ann := map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"}
	mallory := map[string]any{"id": 66, "is_bot": false, "first_name": "Mallory"}
	text := `@switchboard_bot what time? [[tool:clock {"tz":"UTC"}]]`
	tg.Inject(map[string]any{"message": map[string]any{"message_id": 1, "date": time.Now().Unix(), "text": text, "chat": chat, "from": ann,
		"entities": []map[string]any{{"type": "mention", "offset": 0, "length": len("@switchboard_bot")}}}})
	var card *telegramfake.Message
	waitFor("the approval prompt", func() bool {
		for _, m := range tg.Messages(group) {
			if strings.Contains(m.Shown, "Dangerous command requires approval") && len(m.Buttons) > 0 {
				card = &m
				return true
			}
		}
		return false
	})
	shown := card.Shown
	messages := len(tg.Messages(group))

	const refusal = "⛔ You are not authorized to approve commands."
	_, first, err := tg.Press(group, card.ID, mallory, card.Buttons[0][0].Data)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the refusal", func() bool { return len(tg.CallbackAnswers()) == 1 })
	if a := tg.CallbackAnswers()[0]; a.QueryID != first || a.Text != refusal {
		t.Fatalf("answer %+v, want %q to query %s", a, refusal, first)
	}
	_, second, err := tg.Press(group, card.ID, mallory, card.Buttons[1][1].Data) // within the minute
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the second press answered", func() bool { return len(tg.CallbackAnswers()) == 2 })
	if a := tg.CallbackAnswers()[1]; a.QueryID != second || a.Text != refusal {
		t.Fatalf("answer %+v to the second press, want %q (Hermes refuses every press)", a, refusal)
	}
	if m := tg.Message(group, card.ID); m.Shown != shown || len(m.Buttons) == 0 || len(tg.Messages(group)) != messages {
		t.Fatalf("the card shows %q with buttons %v and the group %d messages after the stranger's presses", m.Shown, m.Buttons, len(tg.Messages(group)))
	}

	// Ann's press approves, and her second, quick one finds the prompt
	// answered: each query is answered with Hermes's toast, which only
	// the router's answer to the holding gateway carries.
	_, once, err := tg.Press(group, card.ID, ann, card.Buttons[0][0].Data)
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := tg.Press(group, card.ID, ann, card.Buttons[1][1].Data)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("ann's approval", func() bool { return tg.Message(group, card.ID).Shown == "✅ Approved once by Ann" })
	waitFor("ann's presses answered", func() bool { return len(tg.CallbackAnswers()) == 4 })
	for i, want := range map[string]string{once: "✅ Approved once", again: "This approval has already been resolved."} {
		found := false
		for _, a := range tg.CallbackAnswers()[2:] {
			found = found || a.QueryID == i && a.Text == want
		}
		if !found {
			t.Fatalf("answers %+v, want %q to query %s", tg.CallbackAnswers()[2:], want, i)
		}
	}
}

// TestTeamsPressOfAStranger runs the whole system with the Teams gateway
// on the fake Bot Framework and an allowlist: an approval button's press
// (an adaptiveCard/action invoke) from a user the allowlist does not
// list gets Hermes's "⛔ Not authorized." as the invoke's answer, which
// only the presser sees (the gateway holds the invoke for the router's
// refusal, which delivery brings back), nothing posted to the
// conversation, on every press (the second, within the minute, with the
// router's answer to the holder rather than through delivery); the allowed user's press on a card nothing waits for is answered
// with Hermes's word for it, and the card edited.
func TestTeamsPressOfAStranger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	ms := teamsfake.New(t)
	msAddr := freeAddr(t)
	d := startDev(t,
		"TEAMS_CLIENT_ID="+ms.ClientID, "TEAMS_CLIENT_SECRET="+ms.ClientSecret, "TEAMS_TENANT_ID="+ms.TenantID,
		"TEAMS_TOKEN_URL="+ms.TokenURL(), "TEAMS_OPENID_METADATA_URL="+ms.MetadataURL(), "TEAMS_SERVICE_URL="+ms.ServiceURL(),
		"SWITCHBOARD_GATEWAYS__TEAMS__ADDR="+msAddr,
		// Each press's answer is the router's, however busy the machine.
		"SWITCHBOARD_GATEWAYS__TEAMS__PRESS_HOLD=5s",
		"TEAMS_ALLOWED_USERS=aad-ann", "GATEWAY_ALLOW_ALL_USERS=",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	const group = "19:team-chat@thread.v2"
	url := "http://" + msAddr + "/api/messages"
	waitFor("the teams gateway", func() bool {
		code, err := ms.Post(ctx, url, ms.Mention(ms.Message(group, "groupChat", "aad-ann", "Ann", "hello")))
		return err == nil && code == 200
	})
	waitFor("ann's answer", func() bool { return len(ms.Activities(group)) == 1 })
	card := ms.Activities(group)[0].ID
	// press presses card's Allow Once as user and returns the invoke's
	// answer's text.
	press := func(user, name string) string {
		t.Helper()
		code, body, err := ms.PostAnswer(ctx, url, ms.Press(group, "groupChat", user, name, card, "hermes_approve", map[string]any{"hermes_action": "approve_once"}))
		var v struct{ Value string }
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &v) != nil {
			t.Fatalf("invoke answered %d %s (%v)\nstderr:\n%s", code, body, err, d.stderr.String())
		}
		return v.Value
	}
	if got := press("aad-mallory", "Mallory"); got != "⛔ Not authorized." {
		t.Fatalf("the stranger's invoke answered %q", got)
	}
	if got := press("aad-mallory", "Mallory"); got != "⛔ Not authorized." { // within the minute: Hermes refuses every press
		t.Fatalf("the stranger's second invoke answered %q", got)
	}
	if got := press("aad-ann", "Ann"); got != "⚠️ Approval already resolved or expired." {
		t.Fatalf("ann's invoke answered %q", got)
	}
	waitFor("ann's card answered", func() bool { return strings.HasPrefix(ms.Activities(group)[0].Text, "⌛ Approval expired") })
	if n := len(ms.Activities(group)); n != 1 {
		t.Fatalf("the conversation has %d activities, want ann's answer alone: %+v", n, ms.Activities(group))
	}
}
