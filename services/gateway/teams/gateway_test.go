package teams

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// harness is a running gateway against a fake Microsoft.
type harness struct {
	f   *teamsfake.Fake
	s   *Service
	b   *bus.Bus
	url string
	evs chan *eventsv1.MessageReceived
}

func start(t *testing.T, f *teamsfake.Fake, cfg Config) *harness {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b, Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		platformtest.DeleteBuckets(b)
		_ = b.JetStream().DeleteKeyValue(context.Background(), b.Topology().Stream(BucketRoutes))
	})
	platformtest.WaitFor(t, "the gateway to be ready", func() bool { return s.Ready(context.Background()) == nil && s.Addr() != "" })
	return &harness{f: f, s: s, b: b, url: "http://" + s.Addr() + cfg.Path, evs: platformtest.InboundEvents(t, b)}
}

func (h *harness) post(t *testing.T, a map[string]any) int {
	t.Helper()
	code, err := h.f.Post(context.Background(), h.url, a)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func TestTokenChecks(t *testing.T) {
	f := teamsfake.New(t)
	h := start(t, f, testConfig(f))
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	svc := f.ServiceURL()
	with := func(mod func(teamsfake.Claims)) string {
		c := f.TokenClaims(svc)
		mod(c)
		return "Bearer " + f.Sign(c)
	}
	foreign := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, f.TokenClaims(svc))
		tok.Header["kid"] = "fake-key-1"
		s, _ := tok.SignedString(other)
		return "Bearer " + s
	}
	hs := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, f.TokenClaims(svc))
		tok.Header["kid"] = "fake-key-1"
		s, _ := tok.SignedString([]byte("secret"))
		return "Bearer " + s
	}
	for _, tc := range []struct {
		name, auth string
		mutate     func(map[string]any)
		want       int
	}{
		{"no header", "", nil, http.StatusUnauthorized},
		{"not bearer", "Basic Zm9vOmJhcg==", nil, http.StatusUnauthorized},
		{"garbage", "Bearer not.a.token", nil, http.StatusUnauthorized},
		{"other audience", with(func(c teamsfake.Claims) { c["aud"] = "someone-else" }), nil, http.StatusUnauthorized},
		{"other issuer", with(func(c teamsfake.Claims) { c["iss"] = "https://sts.windows.net/x/" }), nil, http.StatusUnauthorized},
		{"expired", with(func(c teamsfake.Claims) { c["exp"] = time.Now().Add(-10 * time.Minute).Unix() }), nil, http.StatusUnauthorized},
		{"no expiry", with(func(c teamsfake.Claims) { delete(c, "exp") }), nil, http.StatusUnauthorized},
		{"not yet valid", with(func(c teamsfake.Claims) { c["nbf"] = time.Now().Add(10 * time.Minute).Unix() }), nil, http.StatusUnauthorized},
		{"unknown key", "", nil, http.StatusUnauthorized},
		{"signed by another key", foreign(), nil, http.StatusUnauthorized},
		{"hs256", hs(), nil, http.StatusUnauthorized},
		{"other service url", with(func(c teamsfake.Claims) { c["serviceurl"] = "https://evil.example/" }), nil, http.StatusUnauthorized},
		{"activity points elsewhere", with(func(teamsfake.Claims) {}), func(a map[string]any) { a["serviceUrl"] = "https://evil.example/" }, http.StatusUnauthorized},
		{"channel not endorsed", with(func(teamsfake.Claims) {}), func(a map[string]any) { a["channelId"] = "slack" }, http.StatusUnauthorized},
		{"expired within the skew", with(func(c teamsfake.Claims) { c["exp"] = time.Now().Add(-2 * time.Minute).Unix() }), nil, http.StatusOK},
		{"service url without slash", with(func(c teamsfake.Claims) { c["serviceurl"] = strings.TrimSuffix(svc, "/") }), nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := f.Message(dmConv, "personal", userID, userName, tc.name)
			if tc.mutate != nil {
				tc.mutate(a)
			}
			auth := tc.auth
			if tc.name == "unknown key" {
				tok := jwt.NewWithClaims(jwt.SigningMethodRS256, f.TokenClaims(svc))
				tok.Header["kid"] = "nobody"
				s, _ := tok.SignedString(other)
				auth = "Bearer " + s
			}
			body, _ := json.Marshal(a)
			code, err := f.PostRaw(context.Background(), h.url, body, auth)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Fatalf("answered %d, want %d", code, tc.want)
			}
			if tc.want != http.StatusOK {
				platformtest.NoEvent(t, h.evs, 100*time.Millisecond)
				return
			}
			if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != tc.name {
				t.Fatalf("published %q, want %q", ev.GetText(), tc.name)
			}
		})
	}
	// Unknown kids refresh the keys at most once a minute.
	if n := f.KeyRequests(); n > 2 {
		t.Fatalf("the key set was fetched %d times, want at most 2", n)
	}
}

func TestActivities(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	cfg.RequireMention = true
	h := start(t, f, cfg)

	// Non-message activities and the bot's own messages are answered and
	// not published.
	update := f.Message(channelConv, "channel", userID, userName, "")
	update["type"], update["membersAdded"] = "conversationUpdate", []map[string]any{{"id": f.BotID()}}
	own := f.Message(dmConv, "personal", userID, userName, "echo")
	own["from"] = map[string]any{"id": f.BotID(), "name": f.BotName}
	unmentioned := f.Message(channelConv, "channel", userID, userName, "talking among ourselves")
	for _, a := range []map[string]any{update, own, unmentioned} {
		if code := h.post(t, a); code != http.StatusOK {
			t.Fatalf("%s answered %d", a["type"], code)
		}
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)

	// A reply to a post of the bot's counts as addressing it.
	const channel = "19:general@thread.tacv2"
	if code := h.post(t, f.Mention(f.Message(channel, "channel", userID, userName, "hello"))); code != http.StatusOK {
		t.Fatal(code)
	}
	platformtest.NextEvent(t, h.evs)
	post, err := h.s.p.Send(context.Background(), &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "teams", ChatId: channel}, Text: "news"})
	if err != nil {
		t.Fatal(err)
	}
	reply := f.Message(channel+";messageid="+post, "channel", userID, userName, "tell me more")
	reply["replyToId"] = post
	if code := h.post(t, reply); code != http.StatusOK {
		t.Fatal(code)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "tell me more" || ev.GetMentioned() {
		t.Fatalf("reply to the bot's post: %v", ev)
	}
	other := f.Message(channel+";messageid=1", "channel", userID, userName, "not to the bot")
	other["replyToId"] = "1"
	if code := h.post(t, other); code != http.StatusOK {
		t.Fatal(code)
	}
	platformtest.NoEvent(t, h.evs, 200*time.Millisecond)

	// A personal chat needs no mention; a channel message that mentions
	// the bot is published without the <at> tag.
	if code := h.post(t, f.Message(dmConv, "personal", userID, userName, "hi")); code != http.StatusOK {
		t.Fatal(code)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "hi" || ev.GetSource().GetChatType() != "dm" {
		t.Fatalf("dm event %v", ev)
	}
	if code := h.post(t, f.Mention(f.Message(channelConv, "channel", userID, userName, "what's up?"))); code != http.StatusOK {
		t.Fatal(code)
	}
	ev := platformtest.NextEvent(t, h.evs)
	if ev.GetText() != "what's up?" || !ev.GetMentioned() || ev.GetSource().GetChatId() != channelConv {
		t.Fatalf("channel event %v", ev)
	}
}

// sendErr is a send's error class.
func sendErr(err error) (deliveryv1.ErrorClass, time.Duration) {
	var se *platform.SendError
	if errors.As(err, &se) {
		return se.Class, se.RetryAfter
	}
	return deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0
}

func TestSends(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	// Nothing is reachable here: a send finds its conversation's
	// serviceUrl only from a verified activity.
	cfg.ServiceURL = "http://127.0.0.1:1/"
	h := start(t, f, cfg)
	p := h.s.p
	ctx := context.Background()
	target := func(conv, reply string) *deliveryv1.Target {
		return &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: conv, ReplyToMessageId: reply}
	}
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(dmConv, ""), Text: "too early"}); err == nil {
		t.Fatal("a send to a conversation no activity came from reached the fake")
	}
	var ids []string
	for _, a := range []map[string]any{f.Message(dmConv, "personal", userID, userName, "hi"), f.Mention(f.Message(groupConv, "groupChat", userID, userName, "hi all"))} {
		if code := h.post(t, a); code != http.StatusOK {
			t.Fatal(code)
		}
		ids = append(ids, platformtest.NextEvent(t, h.evs).GetMessageId())
	}

	// A reply threads to the user's message, as Markdown.
	id, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(dmConv, ids[0]), Text: "**hello**"})
	if err != nil {
		t.Fatal(err)
	}
	got := f.Activities(dmConv)
	if len(got) != 1 || got[0].ID != id || got[0].ReplyTo != ids[0] || got[0].TextFormat != "markdown" || got[0].Text != "**hello**" {
		t.Fatalf("sent %+v", got)
	}
	// Group chats refuse replies: the answer goes to the chat.
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(groupConv, ids[1]), Text: "plain", Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN}); err != nil {
		t.Fatal(err)
	}
	if g := f.Activities(groupConv); len(g) != 1 || g[0].ReplyTo != "" || g[0].TextFormat != "plain" {
		t.Fatalf("group sent %+v", g)
	}
	// Edit, typing, delete.
	if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: target(dmConv, ""), MessageId: id, Text: "**hello** world"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Typing(ctx, &deliveryv1.SendRequested{Target: target(dmConv, "")}); err != nil {
		t.Fatal(err)
	}
	if got := f.Activities(dmConv); got[0].Text != "**hello** world" || got[0].Edits != 1 || f.Typing(dmConv) != 1 {
		t.Fatalf("after edit and typing %+v, %d typing", got, f.Typing(dmConv))
	}
	if err := p.Delete(ctx, &deliveryv1.SendRequested{Target: target(dmConv, ""), MessageId: id}); err != nil {
		t.Fatal(err)
	}
	if len(f.Texts(dmConv)) != 0 {
		t.Fatal("deleted message still shown")
	}
	if n := f.TokenRequests(); n != 1 {
		t.Fatalf("%d token requests, want 1 (cached)", n)
	}
	// A revoked token is replaced once.
	f.RevokeTokens()
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(dmConv, ""), Text: "after revocation"}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		fail  teamsfake.Failure
		class deliveryv1.ErrorClass
		after time.Duration
	}{
		{"429 with retry-after", teamsfake.Failure{Status: 429, RetryAfter: 7}, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 7 * time.Second},
		{"429 without", teamsfake.Failure{Status: 429}, deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, defaultRetryAfter},
		{"502", teamsfake.Failure{Status: 502}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		// Microsoft's rate-limit guide: retry 412, 502 and 504 as 429.
		{"412", teamsfake.Failure{Status: 412, Code: "PreconditionFailed"}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"504", teamsfake.Failure{Status: 504}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"403", teamsfake.Failure{Status: 403, Code: "BotNotInConversationRoster"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"404", teamsfake.Failure{Status: 404, Code: "ConversationNotFound"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.Fail(tc.fail)
			_, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(dmConv, ""), Text: tc.name})
			if err == nil {
				t.Fatal("send succeeded")
			}
			if class, after := sendErr(err); class != tc.class || after != tc.after {
				t.Fatalf("class %v after %v, want %v after %v (%v)", class, after, tc.class, tc.after, err)
			}
		})
	}
}

func TestRefusedSecretIsFatal(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	cfg.ClientSecret = "wrong"
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p, err := NewPlatform(cfg, b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.checkCredentials(context.Background()); !platform.IsFatal(err) {
		t.Fatalf("refused secret: %v, want a fatal error", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{ClientID: "app", ClientSecret: "s", TenantID: "tenant"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	c := ok
	if err := c.validate(); err != nil || c.TokenURL != "https://login.microsoftonline.com/tenant/oauth2/v2.0/token" || c.Addr != "127.0.0.1:3978" || c.Path != "/api/messages" || c.PressHold != 1500*time.Millisecond {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c = ok
	c.Addr, c.Port = "0.0.0.0:80", 3979
	if err := c.validate(); err != nil || c.Addr != "0.0.0.0:3979" {
		t.Fatalf("port: %q %v", c.Addr, err)
	}
	for name, mod := range map[string]func(*Config){
		"bad port":       func(c *Config) { c.Port = 70000 },
		"no client id":   func(c *Config) { c.ClientID = "" },
		"no secret":      func(c *Config) { c.ClientSecret = "" },
		"no tenant":      func(c *Config) { c.TenantID = "" },
		"tenant path":    func(c *Config) { c.TenantID = "a/b" },
		"bad metadata":   func(c *Config) { c.OpenIDMetadataURL = "ftp://x" },
		"bad serviceurl": func(c *Config) { c.ServiceURL = "nope" },
		"long hold":      func(c *Config) { c.PressHold = 6 * time.Second },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

// An approval prompt carries Hermes's Adaptive Card of four
// Action.Execute buttons; a press (an adaptiveCard/action invoke, or an
// Action.Submit message) is published as the command it stands for,
// from the presser, naming the card and the call, even in a channel
// under require_mention, and the invoke is answered with an action
// response; a redelivered invoke is published once; the router's answer
// (an edit of the card) takes the buttons off. Other invokes stay
// skipped.
func TestApprovalCard(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	cfg.RequireMention = true
	h := start(t, f, cfg)
	p := h.s.p
	ctx := context.Background()
	if code := h.post(t, f.Mention(f.Message(channelConv, "channel", userID, userName, "deploy it"))); code != http.StatusOK {
		t.Fatal(code)
	}
	platformtest.NextEvent(t, h.evs)
	prompt := &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: channelConv},
		Text:     "⚠️ **Dangerous command requires approval:** reply `/approve` or `/deny`",
		Approval: &deliveryv1.Approval{Choices: []string{"once", "session", "always", "deny"}, ToolCallId: "call_9"}}
	card, err := p.Send(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	sent := f.Activities(channelConv)
	if len(sent) != 1 || sent[0].Text != prompt.Text || len(sent[0].Attachments) != 1 {
		t.Fatalf("sent %+v", sent)
	}
	att := sent[0].Attachments[0]
	b, _ := json.Marshal(att["content"])
	var c struct {
		Type, Version string
		Actions       []struct {
			Type, Title, Verb, Style string
			Data                     map[string]string
		}
	}
	if err := json.Unmarshal(b, &c); err != nil || att["contentType"] != "application/vnd.microsoft.card.adaptive" || c.Type != "AdaptiveCard" || c.Version != "1.4" || len(c.Actions) != 4 {
		t.Fatalf("card %s (%v)", b, err)
	}
	for i, want := range []struct{ title, action, style string }{
		{"Allow Once", "approve_once", "positive"}, {"Allow Session", "approve_session", ""}, {"Always Allow", "approve_always", ""}, {"Deny", "deny", "destructive"},
	} {
		a := c.Actions[i]
		if a.Type != "Action.Execute" || a.Verb != "hermes_approve" || a.Title != want.title || a.Style != want.style || a.Data["hermes_action"] != want.action || a.Data["tool_call_id"] != "call_9" {
			t.Fatalf("action %d: %+v", i, a)
		}
	}

	press := f.Press(channelConv, "channel", "aad-user-2", "Bob", card, "hermes_approve", map[string]any{"hermes_action": "approve_session", "tool_call_id": "call_9"})
	for range 2 { // the second is the Bot Framework's retry of the same invoke
		code, body, err := f.PostAnswer(ctx, h.url, press)
		if err != nil || code != http.StatusOK || !strings.Contains(body, `"statusCode":200`) || !strings.Contains(body, "application/vnd.microsoft.activity.message") {
			t.Fatalf("invoke answered %d %s (%v)", code, body, err)
		}
	}
	ev := platformtest.NextEvent(t, h.evs)
	if ev.GetText() != "/approve session" || ev.GetButtonPress().GetMessageId() != card || ev.GetButtonPress().GetToolCallId() != "call_9" ||
		ev.GetSource().GetUserId() != "aad-user-2" || ev.GetSource().GetChatId() != channelConv || ev.GetSource().GetChatType() != "channel" {
		t.Fatalf("press %v", ev)
	}
	if code := h.post(t, f.Submit(channelConv, "channel", userID, userName, card, map[string]any{"hermes_action": "deny"})); code != http.StatusOK {
		t.Fatal(code)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "/deny" || ev.GetButtonPress().GetMessageId() != card || ev.GetButtonPress().GetToolCallId() != "" {
		t.Fatalf("submit %v", ev)
	}
	// Hermes reads a card action by its data, whatever its verb: a press
	// of another verb carrying an approval's data is that approval's.
	if code, body, err := f.PostAnswer(ctx, h.url, f.Press(channelConv, "channel", userID, userName, card, "other_verb",
		map[string]any{"hermes_action": "deny", "tool_call_id": "call_9"})); err != nil || code != http.StatusOK || !strings.Contains(body, "application/vnd.microsoft.activity.message") {
		t.Fatalf("invoke of another verb answered %d %s (%v)", code, body, err)
	}
	if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != "/deny" || ev.GetButtonPress().GetMessageId() != card || ev.GetButtonPress().GetToolCallId() != "call_9" {
		t.Fatalf("press of another verb %v", ev)
	}
	// A card action naming no choice is not published, and its invoke is
	// answered with Hermes's "Unknown action.", as Hermes does before any
	// authorization: Teams shows an error for an invoke answered without
	// an action response. (One naming a choice the gateway does not know
	// goes to the router: TestInvokeOfAnUnknownChoice.)
	for _, other := range []map[string]any{
		f.Press(channelConv, "channel", userID, userName, card, "other_verb", map[string]any{"page": 2}),
		f.Press(channelConv, "channel", userID, userName, card, "hermes_approve", map[string]any{}),
	} {
		code, body, err := f.PostAnswer(ctx, h.url, other)
		var v struct {
			StatusCode  int
			Type, Value string
		}
		if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil || v.StatusCode != 200 ||
			v.Type != "application/vnd.microsoft.activity.message" || v.Value != "Unknown action." {
			t.Fatalf("unknown card action answered %d %q (%v), want Hermes's \"Unknown action.\"", code, body, err)
		}
	}
	select {
	case ev := <-h.evs:
		t.Fatalf("published %v", ev)
	case <-time.After(300 * time.Millisecond):
	}

	if err := p.Edit(ctx, &deliveryv1.SendRequested{Target: prompt.Target, MessageId: card, Text: "✅ Approved for session by Bob"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Activities(channelConv); got[0].Text != "✅ Approved for session by Bob" || len(got[0].Attachments) != 0 {
		t.Fatalf("after the answer %+v", got[0])
	}
}

// A press's invoke is published with its interaction (Interaction.component)
// and its answer waits for the router's: a refusal (delivery's send with
// that interaction, "⛔ Not authorized.") becomes the invoke's answer,
// shown to the presser only, and nothing goes to the conversation; the
// router's answer of a press it decided ends the wait at once, with its
// text or "Answer received."; without either the invoke is answered when
// the hold ends, and a refusal after it is dropped.
func TestPressAnswer(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	// Long enough that an answer published at once always comes first,
	// however busy the machine.
	const pressHold = 4 * time.Second
	cfg.PressHold = pressHold
	h := start(t, f, cfg)
	p := h.s.p
	ctx := context.Background()
	if code := h.post(t, f.Message(dmConv, "personal", userID, userName, "hi")); code != http.StatusOK {
		t.Fatal(code)
	}
	platformtest.NextEvent(t, h.evs)
	before := len(f.Activities(dmConv))
	type answered struct {
		body string
		took time.Duration
	}
	// press presses a card's button and returns the published press's
	// interaction and the invoke's answer, to come.
	press := func() (*eventsv1.Interaction, chan answered) {
		t.Helper()
		out := make(chan answered, 1)
		act := f.Press(dmConv, "personal", "aad-stranger", "Mallory", "card-1", "hermes_approve", map[string]any{"hermes_action": "approve_once"})
		go func() {
			at := time.Now()
			code, body, err := f.PostAnswer(ctx, h.url, act)
			if err != nil || code != http.StatusOK {
				body = fmt.Sprintf("%d %v", code, err)
			}
			out <- answered{body, time.Since(at)}
		}()
		ev := platformtest.NextEvent(t, h.evs)
		ia := ev.GetInteraction()
		if ev.GetText() != "/approve" || ia.GetId() == "" || !ia.GetComponent() || ia.GetExpiresAt() == nil {
			t.Fatalf("press %v", ev)
		}
		return ia, out
	}
	value := func(body string) string {
		var v struct {
			StatusCode  int
			Type, Value string
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.StatusCode != 200 || v.Type != "application/vnd.microsoft.activity.message" {
			t.Fatalf("invoke answered %s (%v)", body, err)
		}
		return v.Value
	}
	target := func(ia *eventsv1.Interaction) *deliveryv1.Target {
		return &deliveryv1.Target{Platform: "teams", Account: f.ClientID, ChatId: dmConv, Interaction: ia}
	}

	ia, out := press()
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(ia), Text: "⛔ Not authorized."}); err != nil {
		t.Fatal(err)
	}
	if a := <-out; value(a.body) != "⛔ Not authorized." || a.took >= pressHold {
		t.Fatalf("invoke answered %s after %v, want the refusal before the hold ends", a.body, a.took)
	}

	for _, text := range []string{"⚠️ Approval already resolved or expired.", ""} {
		ia, out = press()
		if err := platform.PublishPressAnswer(h.b, &deliveryv1.SendRequested{Target: target(ia), Text: text}); err != nil {
			t.Fatal(err)
		}
		want := text
		if want == "" {
			want = "Answer received."
		}
		if a := <-out; value(a.body) != want || a.took >= pressHold {
			t.Fatalf("invoke answered %s after %v, want %q before the hold ends", a.body, a.took, want)
		}
	}

	ia, out = press()
	if a := <-out; value(a.body) != "Answer received." || a.took < pressHold {
		t.Fatalf("invoke answered %s after %v, want it when the hold ends", a.body, a.took)
	}
	if _, err := p.Send(ctx, &deliveryv1.SendRequested{Target: target(ia), Text: "⛔ Not authorized."}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Activities(dmConv)); n != before {
		t.Fatalf("the conversation has %d activities, want %d: no refusal in it", n, before)
	}
}
