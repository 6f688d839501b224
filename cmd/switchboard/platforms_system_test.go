package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
	"github.com/switchboard-chat/switchboard/services/gateway/bluebubbles/bbfake"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
	"github.com/switchboard-chat/switchboard/services/gateway/line/linefake"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
	"github.com/switchboard-chat/switchboard/services/gateway/sms/smsfake"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
	"github.com/switchboard-chat/switchboard/services/gateway/whatsapp/whatsappfake"
)

// TestChatPlatformsEndToEnd runs the whole system (`switchboard dev`) with
// the Telegram, Discord, Slack, WhatsApp, SMS, Teams, BlueBubbles
// (iMessage), LINE and Google Chat gateways pointed at local
// fakes of those platforms, through the real client libraries (WhatsApp's
// is the gateway's own; the fake signs its webhook notifications as Meta
// does). A message in each fake chat gets its answer in the same chat
// (and thread), and a platform's redelivery of the same event produces no
// second answer.
func TestChatPlatformsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	tg, err := telegramfake.New("4242:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	dc := discordfake.New(t)
	dc.AddChannel("700000000000000001", discordfake.TypeDM, "", "")
	sl := slackfake.New(t)
	wa := whatsappfake.New(t)
	waAddr := freeAddr(t)
	tw := smsfake.New(t)
	smsAddr := freeAddr(t)
	ms := teamsfake.New(t)
	msAddr := freeAddr(t)
	bb := bbfake.New(t)
	bb.AddChat(bbfake.Chat{GUID: "iMessage;-;+15551234567", ChatIdentifier: "+15551234567", Participants: []string{"+15551234567"}})
	bb.AddChat(bbfake.Chat{GUID: "iMessage;+;chat493817263544", ChatIdentifier: "chat493817263544", DisplayName: "Family", Participants: []string{"+15551234567", "ann@icloud.com"}})
	bbAddr := freeAddr(t)
	lf := linefake.New(t)
	lineAddr := freeAddr(t)
	const lineGroup = "Ca56f94637cc4347f90a25382909b24b9"
	gc := googlechatfake.New(t)
	gcAddr := freeAddr(t)

	d := startDev(t,
		"GATEWAY_ALLOW_ALL_USERS=true",
		"TELEGRAM_BOT_TOKEN=4242:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"DISCORD_BOT_TOKEN="+dc.Token, "DISCORD_API_BASE_URL="+dc.URL(),
		"SLACK_BOT_TOKEN="+sl.BotToken, "SLACK_APP_TOKEN="+sl.AppToken, "SLACK_API_BASE_URL="+sl.APIURL(),
		"SWITCHBOARD_GATEWAYS__SLACK__ADDR=127.0.0.1:0",
		"WHATSAPP_ACCESS_TOKEN="+wa.AccessToken, "WHATSAPP_PHONE_NUMBER_ID="+wa.PhoneNumberID, "WHATSAPP_APP_SECRET="+wa.AppSecret,
		"WHATSAPP_VERIFY_TOKEN="+wa.VerifyToken, "WHATSAPP_API_BASE_URL="+wa.BaseURL(), "SWITCHBOARD_GATEWAYS__WHATSAPP__ADDR="+waAddr,
		"TWILIO_ACCOUNT_SID="+tw.AccountSID, "TWILIO_AUTH_TOKEN="+tw.AuthToken, "TWILIO_PHONE_NUMBER="+tw.PhoneNumber,
		"SMS_WEBHOOK_PUBLIC_URL="+tw.PublicURL, "SMS_API_BASE_URL="+tw.BaseURL(), "SWITCHBOARD_GATEWAYS__SMS__ADDR="+smsAddr,
		"TEAMS_CLIENT_ID="+ms.ClientID, "TEAMS_CLIENT_SECRET="+ms.ClientSecret, "TEAMS_TENANT_ID="+ms.TenantID,
		"TEAMS_TOKEN_URL="+ms.TokenURL(), "TEAMS_OPENID_METADATA_URL="+ms.MetadataURL(), "TEAMS_SERVICE_URL="+ms.ServiceURL(),
		"SWITCHBOARD_GATEWAYS__TEAMS__ADDR="+msAddr,
		"BLUEBUBBLES_SERVER_URL="+bb.URL(), "BLUEBUBBLES_PASSWORD="+bb.Password, "SWITCHBOARD_GATEWAYS__BLUEBUBBLES__ADDR="+bbAddr,
		"LINE_CHANNEL_ACCESS_TOKEN="+lf.Token, "LINE_CHANNEL_SECRET="+lf.Secret, "LINE_API_BASE_URL="+lf.BaseURL(),
		"LINE_DATA_API_BASE_URL="+lf.BaseURL(), "LINE_ALLOWED_GROUPS="+lineGroup, "SWITCHBOARD_GATEWAYS__LINE__ADDR="+lineAddr,
		"GOOGLE_CHAT_SERVICE_ACCOUNT_JSON="+gc.ServiceAccountJSON(), "GOOGLE_CHAT_HTTP_EVENTS_AUDIENCE="+gc.ProjectNumber,
		"GOOGLE_CHAT_KEYS_URL="+gc.KeysURL(), "GOOGLE_CHAT_API_BASE_URL="+gc.APIBaseURL(), "SWITCHBOARD_GATEWAYS__GOOGLECHAT__ADDR="+gcAddr,
		// Each chat's messages are counted: no home channel notice.
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false",
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	waitFor := d.waiter(ctx, t)

	t.Run("telegram", func(t *testing.T) {
		update := func(id int, text string) map[string]any {
			return map[string]any{"message": map[string]any{
				"message_id": id, "date": time.Now().Unix(), "text": text,
				"chat": map[string]any{"id": 99, "type": "private", "first_name": "Ann"},
				"from": map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"},
			}}
		}
		shown := func() []string {
			var out []string
			for _, m := range tg.Messages("99") {
				out = append(out, m.Shown)
			}
			return out
		}
		first := tg.Inject(update(1, "hello telegram"))
		waitFor("telegram answer", func() bool { return len(shown()) == 1 })
		if got := shown()[0]; got != "echo: hello telegram" {
			t.Fatalf("answer = %q", got)
		}
		// Telegram hands the same update out again; then a new message.
		// Messages of a chat are handled in order, so once the second
		// answer is there the replay has been handled too.
		tg.Redeliver(first)
		tg.Inject(update(2, "second"))
		waitFor("second telegram answer", func() bool { return len(shown()) >= 2 })
		if got := shown(); len(got) != 2 || got[1] != "echo: second" {
			t.Fatalf("answers after a replay = %q, want exactly one more", got)
		}
		// A photo, a voice message and a text file: the gateway downloads
		// each through the Bot API's file endpoint, the model sees the
		// picture, hears the voice (the fake's transcription) and reads the
		// file.
		ann := map[string]any{"chat": map[string]any{"id": 99, "type": "private", "first_name": "Ann"},
			"from": map[string]any{"id": 99, "is_bot": false, "first_name": "Ann"}}
		with := func(extra map[string]any) map[string]any {
			m := map[string]any{}
			for k, v := range ann {
				m[k] = v
			}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
		pic := []byte("\xff\xd8\xff\xe0 not really a jpeg")
		tg.AddFile("photo-1", pic)
		tg.InjectPhoto(with(map[string]any{"caption": "what is this?"}), "photo-1")
		waitFor("photo answer", func() bool { return len(shown()) >= 3 })
		if got, want := shown()[2], "echo: what is this?\n[Attachment: image] [image "+(fakellm.Image{MediaType: "image/jpeg", Data: pic}).String()+"]"; got != want {
			t.Fatalf("photo answer = %q, want %q", got, want)
		}
		tg.AddFile("voice-1", []byte("remind me to call mum"))
		tg.Inject(map[string]any{"message": with(map[string]any{"message_id": 40, "date": time.Now().Unix(),
			"voice": map[string]any{"file_id": "voice-1", "file_unique_id": "uv1", "duration": 2, "mime_type": "audio/ogg", "file_size": 21}})})
		waitFor("voice answer", func() bool { return len(shown()) >= 4 })
		if got := shown()[3]; got != `echo: [The user sent a voice message~ Here's what they said: "remind me to call mum"]` {
			t.Fatalf("voice answer = %q", got)
		}
		tg.AddFile("doc-1", []byte("milk, eggs"))
		tg.InjectDocument(with(nil), "doc-1", "list.txt", "text/plain")
		waitFor("document answer", func() bool { return len(shown()) >= 5 })
		if got := shown()[4]; !strings.Contains(got, `[The user sent a document: "list.txt". Its content is included below.] milk, eggs`) &&
			!strings.Contains(got, "[The user sent a document: \"list.txt\". Its content is included below.]\nmilk, eggs") {
			t.Fatalf("document answer = %q", got)
		}
		// An album: Telegram sends one message per picture; the agent
		// answers once, after the last.
		pic2 := []byte("\xff\xd8\xff\xe0 the second picture")
		tg.AddFile("photo-2", pic2)
		tg.InjectPhoto(with(map[string]any{"caption": "compare these", "media_group_id": "alb-1"}), "photo-1")
		tg.InjectPhoto(with(map[string]any{"media_group_id": "alb-1"}), "photo-2")
		waitFor("album answer", func() bool { return len(shown()) >= 6 })
		tg.Inject(update(3, "after the album"))
		waitFor("the answer after the album", func() bool { return len(shown()) >= 7 })
		got := shown()
		if len(got) != 7 || got[6] != "echo: after the album" {
			t.Fatalf("answers from the album on = %q, want one for the album, then one for the text", got[5:])
		}
		if want := "[image " + (fakellm.Image{MediaType: "image/jpeg", Data: pic2}).String() + "]"; !strings.Contains(got[5], want) {
			t.Fatalf("album answer = %q, want the last picture %s", got[5], want)
		}
	})

	t.Run("whatsapp", func(t *testing.T) {
		const ann = "15551234567"
		url := "http://" + waAddr + "/whatsapp/webhook"
		if code, body, err := wa.Verify(ctx, url, "subscribe", wa.VerifyToken, "8675309"); err != nil || code != 200 || body != "8675309" {
			t.Fatalf("subscription handshake: %d %q %v\nstderr:\n%s", code, body, err, d.stderr.String())
		}
		post := func(body []byte) {
			t.Helper()
			if code, err := wa.Post(ctx, url, body); err != nil || code != 200 {
				t.Fatalf("notification answered %d %v", code, err)
			}
		}
		texts := func() []string {
			var out []string
			for _, m := range wa.Messages(ann) {
				out = append(out, m.Text)
			}
			return out
		}
		first := wa.NewID()
		firstBody := wa.Notification(whatsappfake.Text(first, ann, "Ann", "hello whatsapp"))
		post(firstBody)
		waitFor("whatsapp answer", func() bool { return len(texts()) == 1 })
		if got := wa.Messages(ann)[0]; got.Text != "echo: hello whatsapp" || got.Type != "text" {
			t.Fatalf("answer = %+v", got)
		}
		// The turn marked the message read, with the typing indicator.
		waitFor("the read receipt", func() bool {
			for _, r := range wa.Reads() {
				if r.MessageID == first && r.Typing {
					return true
				}
			}
			return false
		})
		// Meta retries the notification; then a new message.
		post(firstBody)
		post(wa.Notification(whatsappfake.Text(wa.NewID(), ann, "Ann", "second")))
		waitFor("second whatsapp answer", func() bool { return len(texts()) >= 2 })
		if got := texts(); len(got) != 2 || got[1] != "echo: second" {
			t.Fatalf("answers after a retried notification = %q, want exactly one more", got)
		}
		// A picture: downloaded through the Graph API, seen by the model.
		pic := []byte("\xff\xd8\xff\xe0 a whatsapp photo")
		wa.AddMedia("7001", "image/jpeg", pic)
		post(wa.Notification(whatsappfake.Inbound{ID: wa.NewID(), From: ann, Name: "Ann", Type: "image",
			Object: map[string]any{"id": "7001", "mime_type": "image/jpeg", "sha256": "x", "caption": "what is this?"}}))
		waitFor("picture answer", func() bool { return len(texts()) >= 3 })
		if got, want := texts()[2], "echo: what is this?\n[Attachment: image] [image "+(fakellm.Image{MediaType: "image/jpeg", Data: pic}).String()+"]"; got != want {
			t.Fatalf("picture answer = %q, want %q", got, want)
		}
		// Rate limited once (429, 130429): delivery retries after Retry-After.
		fail := whatsappfake.ErrThroughput
		fail.RetryAfter = 1
		wa.Fail(fail)
		post(wa.Notification(whatsappfake.Text(wa.NewID(), ann, "Ann", "third")))
		waitFor("the answer after a rate limit", func() bool { return len(texts()) >= 4 })
		// The 24-hour window closed (131047): the answer is a failed
		// delivery naming it, and the next message is answered.
		wa.Fail(whatsappfake.ErrReengagement)
		post(wa.Notification(whatsappfake.Text(wa.NewID(), ann, "Ann", "fourth")))
		var lastError string
		waitFor("a failed delivery", func() bool {
			err := d.db.QueryRow(ctx, `SELECT last_error FROM delivery_outbox WHERE platform = 'whatsapp' AND state = 'failed'`).Scan(&lastError)
			return err == nil
		})
		if !strings.Contains(lastError, "24-hour customer service window") {
			t.Fatalf("failed delivery's error = %q", lastError)
		}
		post(wa.Notification(whatsappfake.Text(wa.NewID(), ann, "Ann", "fifth")))
		waitFor("the answer after the failed one", func() bool { return len(texts()) >= 5 })
		if got := texts(); len(got) != 5 || got[3] != "echo: third" || got[4] != "echo: fifth" {
			t.Fatalf("answers = %q, want third once and fifth", got)
		}
	})

	t.Run("teams", func(t *testing.T) {
		const dm, channel = "a:1teams-personal-chat", "19:general@thread.tacv2;messageid=1699999999999"
		url := "http://" + msAddr + "/api/messages"
		post := func(a map[string]any) {
			t.Helper()
			if code, err := ms.Post(ctx, url, a); err != nil || code != 200 {
				t.Fatalf("activity answered %d %v\nstderr:\n%s", code, err, d.stderr.String())
			}
		}
		shown := func(conv string) []string {
			return ms.Texts(conv)
		}
		done := func(conv string, n int) func() bool {
			return func() bool {
				got := shown(conv)
				return len(got) >= n && strings.HasPrefix(got[n-1], "echo: ")
			}
		}
		// A token not signed by the Bot Framework is refused, and nothing
		// is answered.
		if code, err := ms.PostRaw(ctx, url, []byte(`{"type":"message"}`), "Bearer eyJhbGciOiJub25lIn0.e30."); err != nil || code != 401 {
			t.Fatalf("forged token answered %d %v", code, err)
		}
		first := ms.Message(dm, "personal", "aad-ann", "Ann", "hello teams")
		post(first)
		waitFor("teams answer", done(dm, 1))
		a := ms.Activities(dm)[0]
		if a.Text != "echo: hello teams" || a.ReplyTo != first["id"] || a.TextFormat != "markdown" {
			t.Fatalf("answer = %+v", a)
		}
		if ms.Typing(dm) == 0 {
			t.Fatal("no typing activity while the turn ran")
		}
		// The Bot Framework retries the activity; then a new message.
		post(first)
		post(ms.Message(dm, "personal", "aad-ann", "Ann", "second"))
		waitFor("second teams answer", done(dm, 2))
		if got := shown(dm); len(got) != 2 || got[1] != "echo: second" {
			t.Fatalf("answers after a retried activity = %q, want exactly one more", got)
		}
		// A picture on the connector, fetched with the bot's token.
		pic := []byte("\xff\xd8\xff\xe0 a teams photo")
		withPic := ms.Message(dm, "personal", "aad-ann", "Ann", "what is this?")
		withPic["attachments"] = []map[string]any{{"contentType": "image/jpeg", "contentUrl": ms.AddFile(pic), "name": "photo.jpg"}}
		post(withPic)
		waitFor("picture answer", done(dm, 3))
		if got, want := shown(dm)[2], "echo: what is this?\n[Attachment: image photo.jpg] [image "+(fakellm.Image{MediaType: "image/jpeg", Data: pic}).String()+"]"; got != want {
			t.Fatalf("picture answer = %q, want %q", got, want)
		}
		// Rate limited once (429 with Retry-After): delivery retries.
		ms.Fail(teamsfake.Failure{Status: 429, RetryAfter: 1})
		post(ms.Message(dm, "personal", "aad-ann", "Ann", "third"))
		waitFor("the answer after a rate limit", done(dm, 4))
		// A channel message that mentions the bot is answered in its thread,
		// without the mention.
		post(ms.Mention(ms.Message(channel, "channel", "aad-ann", "Ann", "hello channel")))
		waitFor("channel answer", done(channel, 1))
		if got := shown(channel); got[0] != "echo: hello channel" {
			t.Fatalf("channel answer = %q", got)
		}
		if got := shown(dm); len(got) != 4 || got[3] != "echo: third" {
			t.Fatalf("answers = %q", got)
		}
	})

	t.Run("googlechat", func(t *testing.T) {
		const dm, room = "spaces/gc-dm-ann", "spaces/gc-room"
		url := "http://" + gcAddr + "/googlechat/events"
		post := func(e map[string]any) {
			t.Helper()
			if code, err := gc.Post(ctx, url, e); err != nil || code != 200 {
				t.Fatalf("event answered %d %v\nstderr:\n%s", code, err, d.stderr.String())
			}
		}
		done := func(space string, n int) func() bool {
			return func() bool {
				got := gc.Texts(space)
				return len(got) >= n && strings.HasPrefix(got[n-1], "echo: ")
			}
		}
		// A token Google Chat did not sign is refused, and nothing is answered.
		if code, err := gc.PostRaw(ctx, url, []byte(`{"type":"MESSAGE"}`), "Bearer eyJhbGciOiJub25lIn0.e30."); err != nil || code != 401 {
			t.Fatalf("forged token answered %d %v", code, err)
		}
		first := gc.Message(dm, "DIRECT_MESSAGE", "ann@example.com", "Ann", "hello google chat")
		post(first)
		waitFor("google chat answer", done(dm, 1))
		if got := gc.Texts(dm); got[0] != "echo: hello google chat" {
			t.Fatalf("answer = %q", got)
		}
		// Google Chat retries the event; then a new message.
		post(first)
		post(gc.Message(dm, "DIRECT_MESSAGE", "ann@example.com", "Ann", "second"))
		waitFor("second google chat answer", done(dm, 2))
		if got := gc.Texts(dm); len(got) != 2 || got[1] != "echo: second" {
			t.Fatalf("answers after a retried event = %q, want exactly one more", got)
		}
		// An uploaded picture, fetched through media.download with the
		// app's token.
		pic := []byte("\xff\xd8\xff\xe0 a google chat photo")
		withPic := gc.Message(dm, "DIRECT_MESSAGE", "ann@example.com", "Ann", "what is this?")
		msg := withPic["message"].(map[string]any)
		msg["attachment"] = []map[string]any{{"name": msg["name"].(string) + "/attachments/a", "contentName": "photo.jpg", "contentType": "image/jpeg",
			"source": "UPLOADED_CONTENT", "attachmentDataRef": map[string]any{"resourceName": gc.AddFile(pic, "image/jpeg")}}}
		post(withPic)
		waitFor("picture answer", done(dm, 3))
		if got, want := gc.Texts(dm)[2], "echo: what is this?\n[Attachment: image photo.jpg] [image "+(fakellm.Image{MediaType: "image/jpeg", Data: pic}).String()+"]"; got != want {
			t.Fatalf("picture answer = %q, want %q", got, want)
		}
		// Rate limited once (429 with Retry-After): delivery retries.
		gc.Fail(googlechatfake.Failure{Status: 429, RetryAfter: 1})
		post(gc.Message(dm, "DIRECT_MESSAGE", "ann@example.com", "Ann", "third"))
		waitFor("the answer after a rate limit", done(dm, 4))
		// A space message that mentions the app is answered in its thread,
		// without the mention.
		inRoom := gc.Message(room, "SPACE", "ann@example.com", "Ann", "hello space")
		post(inRoom)
		waitFor("space answer", done(room, 1))
		m := gc.Messages(room)[0]
		if want := inRoom["message"].(map[string]any)["thread"].(map[string]any)["name"]; m.Text != "echo: hello space" || m.Thread != want {
			t.Fatalf("space answer = %+v, want in thread %v", m, want)
		}
		if got := gc.Texts(dm); len(got) != 4 || got[3] != "echo: third" {
			t.Fatalf("answers = %q", got)
		}
	})

	t.Run("sms", func(t *testing.T) {
		const ann = "+15551234567"
		hook := "http://" + smsAddr + "/webhooks/twilio"
		post := func(form url.Values) {
			t.Helper()
			code, ct, body, err := tw.Post(ctx, hook, form)
			if err != nil || code != 200 || !strings.HasPrefix(ct, "text/xml") || !strings.Contains(body, "<Response/>") {
				t.Fatalf("twilio webhook answered %d %q %q %v\nstderr:\n%s", code, ct, body, err, d.stderr.String())
			}
		}
		bodies := func() []string {
			var out []string
			for _, m := range tw.Messages(ann) {
				out = append(out, m.Body)
			}
			return out
		}
		// A call not signed with the auth token is refused and publishes
		// nothing (it is never answered below).
		forged := tw.Form(smsfake.Inbound{From: ann, Body: "forged"})
		if code, _, _, err := smsfake.PostSigned(ctx, hook, smsfake.Sign("not-the-auth-token", tw.PublicURL, forged), forged.Encode()); err != nil || code != 403 {
			t.Fatalf("forged call answered %d %v", code, err)
		}
		first := tw.Form(smsfake.Inbound{From: ann, Body: "hello sms"})
		post(first)
		waitFor("sms answer", func() bool { return len(bodies()) == 1 })
		if got := tw.Messages(ann)[0]; got.Body != "echo: hello sms" || got.From != tw.PhoneNumber {
			t.Fatalf("answer = %+v", got)
		}
		// The session key is Hermes's: the sender's number as the chat.
		var n int
		if err := d.db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE session_key = 'agent:main:sms:dm:' || $1`, ann).Scan(&n); err != nil || n != 1 {
			t.Fatalf("sessions under agent:main:sms:dm:%s: %d %v", ann, n, err)
		}
		// Twilio calls again with the same MessageSid; then a new message.
		post(first)
		post(tw.Form(smsfake.Inbound{From: ann, Body: "second"}))
		waitFor("second sms answer", func() bool { return len(bodies()) >= 2 })
		// Rate limited once (429, 20429): delivery retries after Retry-After.
		fail := smsfake.ErrTooManyRequests
		fail.RetryAfter = 1
		tw.Fail(fail)
		attempts := tw.Attempts()
		post(tw.Form(smsfake.Inbound{From: ann, Body: "third"}))
		waitFor("the answer after a rate limit", func() bool { return len(bodies()) >= 3 })
		if got := bodies(); len(got) != 3 || got[1] != "echo: second" || got[2] != "echo: third" {
			t.Fatalf("answers = %q, want hello, second and third once each (the retried call and the forged one unanswered)", got)
		}
		if got := tw.Attempts() - attempts; got != 2 {
			t.Fatalf("%d sends of the rate-limited answer, want 2", got)
		}
		// A picture (MMS): downloaded with the account's credentials when
		// the turn reads it, seen by the model.
		pic := []byte("\xff\xd8\xff\xe0 an mms photo")
		mms := smsfake.NewSID("MM")
		post(tw.Form(smsfake.Inbound{SID: mms, From: ann, Body: "what is this?",
			Media: []string{tw.AddMedia(mms, "image/jpeg", pic)}, MediaTypes: []string{"image/jpeg"}}))
		waitFor("mms answer", func() bool { return len(bodies()) >= 4 })
		if got, want := bodies()[3], "echo: what is this?\n[Attachment: image] [image "+(fakellm.Image{MediaType: "image/jpeg", Data: pic}).String()+"]"; got != want {
			t.Fatalf("mms answer = %q, want %q", got, want)
		}
	})

	t.Run("line", func(t *testing.T) {
		const ann = "U4af4980629a0c1b2c3d4e5f6a7b8c9d0"
		hook := "http://" + lineAddr + "/line/webhook"
		post := func(body []byte) {
			t.Helper()
			code, answer, err := lf.Post(ctx, hook, body)
			if err != nil || code != 200 {
				t.Fatalf("line webhook answered %d %q %v\nstderr:\n%s", code, answer, err, d.stderr.String())
			}
		}
		texts := func(chat string) []string {
			var out []string
			for _, m := range lf.Sent(chat) {
				out = append(out, m.Via+": "+m.Text)
			}
			return out
		}
		// A delivery not signed with the channel secret is refused and
		// publishes nothing (it is never answered below).
		forged := lf.Body(lf.Event(linefake.Inbound{UserID: ann, Text: "forged"}))
		if code, _, err := linefake.PostSigned(ctx, hook, linefake.Sign("not-the-secret", forged), forged); err != nil || code != 401 {
			t.Fatalf("forged delivery answered %d %v", code, err)
		}
		first := lf.Event(linefake.Inbound{UserID: ann, Text: "hello line"})
		post(lf.Body(first))
		waitFor("line answer", func() bool { return len(texts(ann)) == 1 })
		if got := texts(ann)[0]; got != "reply: echo: hello line" {
			t.Fatalf("answer = %q, want the echo sent with the free reply token", got)
		}
		var n int
		if err := d.db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE session_key = 'agent:main:line:dm:' || $1`, ann).Scan(&n); err != nil || n != 1 {
			t.Fatalf("sessions under agent:main:line:dm:%s: %d %v", ann, n, err)
		}
		// LINE redelivers the same event; then the reply token of a new
		// message has expired before the answer: it is pushed.
		first["deliveryContext"] = map[string]any{"isRedelivery": true}
		post(lf.Body(first))
		post(lf.Body(lf.Event(linefake.Inbound{UserID: ann, Text: "second", ExpiredToken: true})))
		waitFor("second line answer", func() bool { return len(texts(ann)) >= 2 })
		// A group of the allowed list, with Hermes's per-user session.
		post(lf.Body(lf.Event(linefake.Inbound{UserID: ann, GroupID: lineGroup, Text: "hi group"})))
		waitFor("line group answer", func() bool { return len(texts(lineGroup)) == 1 })
		if got := texts(lineGroup)[0]; got != "reply: echo: hi group" {
			t.Fatalf("group answer = %q", got)
		}
		if err := d.db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE session_key = 'agent:main:line:group:' || $1 || ':' || $2`, lineGroup, ann).Scan(&n); err != nil || n != 1 {
			t.Fatalf("sessions under agent:main:line:group:%s:%s: %d %v", lineGroup, ann, n, err)
		}
		// A picture: downloaded with the channel's token when the turn
		// reads it, seen by the model.
		pic := []byte("\xff\xd8\xff\xe0 a line photo")
		post(lf.Body(lf.Event(linefake.Inbound{UserID: ann, Type: "image", ContentID: lf.AddContent("image/jpeg", pic)})))
		waitFor("line image answer", func() bool { return len(texts(ann)) >= 3 })
		got := texts(ann)
		if len(got) != 3 || got[1] != "push: echo: second" || !strings.Contains(got[2], "[image "+(fakellm.Image{MediaType: "image/jpeg", Data: pic}).String()+"]") {
			t.Fatalf("answers = %q, want hello (once), second (pushed) and the picture seen", got)
		}
		if lf.Downloads() != 1 {
			t.Fatalf("%d content downloads, want 1", lf.Downloads())
		}
	})

	t.Run("bluebubbles", func(t *testing.T) {
		const ann, dm, group = "+15551234567", "iMessage;-;+15551234567", "iMessage;+;chat493817263544"
		hook := "http://" + bbAddr + "/bluebubbles-webhook?password=" + url.QueryEscape(bb.Password)
		post := func(in bbfake.Inbound) string {
			t.Helper()
			b, guid := bbfake.Event(in)
			if code, body, err := bbfake.Post(ctx, hook, b); err != nil || code != 200 {
				t.Fatalf("bluebubbles webhook answered %d %q %v\nstderr:\n%s", code, body, err, d.stderr.String())
			}
			return guid
		}
		texts := func(chat string) []string {
			var out []string
			for _, m := range bb.Sent(chat) {
				out = append(out, m.Text)
			}
			return out
		}
		// A call without the password is refused and publishes nothing
		// (it is never answered below).
		forged, _ := bbfake.Event(bbfake.Inbound{ChatGUID: dm, From: ann, Text: "forged"})
		if code, _, err := bbfake.Post(ctx, "http://"+bbAddr+"/bluebubbles-webhook?password=guess", forged); err != nil || code != 401 {
			t.Fatalf("call without the password answered %d %v", code, err)
		}
		first := bbfake.Inbound{GUID: bbfake.NewGUID(), ChatGUID: dm, From: ann, Text: "hello imessage"}
		post(first)
		waitFor("bluebubbles answer", func() bool { return len(texts(dm)) == 1 })
		if got := texts(dm)[0]; got != "echo: hello imessage" {
			t.Fatalf("answer = %q", got)
		}
		// BlueBubbles posts the same message again, and the bot's own
		// answer comes back as a message from me; then a new message.
		post(first)
		post(bbfake.Inbound{ChatGUID: dm, From: ann, Text: "echo: hello imessage", FromMe: true})
		post(bbfake.Inbound{ChatGUID: dm, From: ann, Text: "second"})
		waitFor("second bluebubbles answer", func() bool { return len(texts(dm)) >= 2 })
		// A group chat: its own session per sender, as Hermes keys it.
		post(bbfake.Inbound{ChatGUID: group, From: ann, Text: "hi family"})
		waitFor("group answer", func() bool { return len(texts(group)) == 1 })
		// A picture, downloaded from the server when the turn reads it.
		pic := []byte("\xff\xd8\xff\xe0 an imessage photo")
		att := bb.AddAttachment("image/jpeg", pic)
		post(bbfake.Inbound{ChatGUID: dm, From: ann, Text: "what is this?", Attachments: []bbfake.InboundAttachment{{GUID: att, MimeType: "image/jpeg", TransferName: "IMG_0001.jpeg", TotalBytes: len(pic)}}})
		waitFor("picture answer", func() bool { return len(texts(dm)) >= 3 })
		if got, want := texts(dm), []string{"echo: hello imessage", "echo: second",
			"echo: what is this?\n[Attachment: image IMG_0001.jpeg] [image " + (fakellm.Image{MediaType: "image/jpeg", Data: pic}).String() + "]"}; strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("answers = %q, want %q (the repeated call, the bot's own message and the forged one unanswered)", got, want)
		}
		if got := texts(group); len(got) != 1 || got[0] != "echo: hi family" {
			t.Fatalf("group answers = %q", got)
		}
		for key, want := range map[string]int{"agent:main:bluebubbles:dm:" + dm: 1, "agent:main:bluebubbles:group:" + group + ":" + ann: 1} {
			var n int
			if err := d.db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE session_key = $1`, key).Scan(&n); err != nil || n != want {
				t.Fatalf("sessions under %s: %d %v", key, n, err)
			}
		}
	})

	t.Run("slack thread", func(t *testing.T) {
		ev := func(ts, text string) slackfake.Event {
			return slackfake.Event{Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: text, TS: ts, ThreadTS: "1700000000.000001"}
		}
		answers := func() []slackfake.Message { return sl.Messages("D0DM") }
		payload := sl.Callback("Ev1", ev("1700000000.000100", "hello slack"))
		if err := sl.Push(ctx, payload, 0); err != nil {
			t.Fatal(err)
		}
		waitFor("slack answer", func() bool { return len(answers()) == 1 })
		if a := answers()[0]; a.Text != "echo: hello slack" || a.ThreadTS != "1700000000.000001" {
			t.Fatalf("answer = %+v, want the echo in the thread", a)
		}
		// Slack retries the same event; then a new message.
		if err := sl.Push(ctx, payload, 1); err != nil {
			t.Fatal(err)
		}
		if err := sl.Push(ctx, sl.Callback("Ev2", ev("1700000000.000200", "second")), 0); err != nil {
			t.Fatal(err)
		}
		waitFor("second slack answer", func() bool { return len(answers()) >= 2 })
		if got := answers(); len(got) != 2 || got[1].Text != "echo: second" {
			t.Fatalf("answers after a retry = %+v, want exactly one more", got)
		}
	})

	t.Run("discord", func(t *testing.T) {
		if err := dc.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
		const channel = "700000000000000001"
		msg := func(id, text string) map[string]any {
			return discordfake.MessageCreate{ID: id, ChannelID: channel, AuthorID: "555000000000000001", Content: text}.Payload()
		}
		answers := func() []discordfake.Message { return dc.Messages(channel) }
		firstID := dc.NewID()
		if err := dc.Dispatch(ctx, "MESSAGE_CREATE", msg(firstID, "hello discord")); err != nil {
			t.Fatal(err)
		}
		waitFor("discord answer", func() bool { return len(answers()) == 1 })
		if got := answers()[0].Content; got != "echo: hello discord" {
			t.Fatalf("answer = %q", got)
		}
		// The same message event again (as a resume replays it); then a new one.
		if err := dc.Dispatch(ctx, "MESSAGE_CREATE", msg(firstID, "hello discord")); err != nil {
			t.Fatal(err)
		}
		if err := dc.Dispatch(ctx, "MESSAGE_CREATE", msg(dc.NewID(), "second")); err != nil {
			t.Fatal(err)
		}
		waitFor("second discord answer", func() bool { return len(answers()) >= 2 })
		var texts []string
		for _, a := range answers() {
			texts = append(texts, a.Content)
		}
		if len(texts) != 2 || texts[1] != "echo: second" {
			t.Fatalf("answers after a replay = %q, want exactly one more", strings.Join(texts, " | "))
		}

		// A slash command from the registered menu: acknowledged, its
		// "thinking…" cleared, answered in the channel as the typed one.
		waitFor("discord slash commands registered", func() bool {
			cmds, _, _ := dc.Commands()
			return cmds["help"] != ""
		})
		in, err := dc.Invoke(ctx, discordfake.Invoke{ChannelID: channel, UserID: "555000000000000001", UserName: "ann", Name: "help"})
		if err != nil {
			t.Fatal(err)
		}
		waitFor("the /help answer", func() bool {
			as := answers()
			return len(as) > 2 && strings.Contains(as[2].Content, "/new")
		})
		waitFor("the deferred response cleared", func() bool {
			return dc.InteractionState(in["id"].(string)).Original == "deleted"
		})
	})
}
