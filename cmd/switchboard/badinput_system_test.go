package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
	"github.com/switchboard-chat/switchboard/services/gateway/webhook"
)

// TestBadInputGetsItsDocumentedAnswer runs the whole system (`switchboard
// dev`, with a fake Telegram and the fake model) and sends it each class
// of bad input listed in docs/gateways.md ("Bad input"): each gets its
// documented answer, while a well-behaved API client and a well-behaved
// Telegram user in other sessions keep getting correct answers, and
// afterwards every affected session answers a new message (no turn is
// stuck).
func TestBadInputGetsItsDocumentedAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const (
		tgToken       = "4343:bad-input-token"
		webhookSecret = "wh-s3cret"
		replyChat     = "-1001" // where the webhook route's answers go
		goodUser      = "77"    // the well-behaved Telegram user
		badUser       = "55"    // an allowed user who sends bad input
		strangerUser  = "66"    // not allowed
	)
	tg, err := telegramfake.New(tgToken, "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	cfgPath := filepath.Join(t.TempDir(), "switchboard.yaml")
	cfgYAML := `gateways:
  webhook:
    routes:
      gh:
        secret: ` + webhookSecret + `
        events: [push]
        prompt: "{{event}} to {{.repository.full_name}}: {{.head_commit.message}}"
        reply: {platform: telegram, chat_id: "` + replyChat + `"}
      # Flooded by "webhook flood": 5 a minute, answers nowhere.
      flood:
        secret: ` + webhookSecret + `
        rate_limit: 5
      calm:
        secret: ` + webhookSecret + `
`
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	webhookAddr, deliveryAddr := freeAddr(t), freeAddr(t)
	d := startDev(t,
		"SWITCHBOARD_CONFIG="+cfgPath,
		"TELEGRAM_BOT_TOKEN="+tgToken, "TELEGRAM_API_BASE_URL="+tg.URL,
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"TELEGRAM_ALLOWED_USERS="+goodUser+","+badUser, "GATEWAY_ALLOW_ALL_USERS=",
		// With an allowlist strangers get silence by default (as Hermes):
		// the pairing answers are checked here.
		"SWITCHBOARD_ROUTER__AUTH__UNAUTHORIZED_DM_BEHAVIOR=pair",
		"SWITCHBOARD_GATEWAYS__WEBHOOK__ADDR="+webhookAddr,
		"SWITCHBOARD_DELIVERY__GRPC_ADDR="+deliveryAddr,
		// Bounds the busy acknowledgements of the flood to one.
		"SWITCHBOARD_ROUTER__BUSY_ACK_INTERVAL=10m",
		"SWITCHBOARD_ROUTER__QUEUE_CAP=8",
		"SWITCHBOARD_ROUTER__HOME_NOTICE=false", // the chats' messages are counted
	)
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitFor := func(t *testing.T, what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Clients of the API from two loopback addresses: the gateway's rate
	// limit without a key is per client address, so the flood from
	// 127.0.0.2 does not use up the well-behaved client's budget.
	good := newAPIClient(d.apiAddr, "127.0.0.1")
	flooder := newAPIClient(d.apiAddr, "127.0.0.2")
	shown := func(chat string) []telegramfake.Message { return tg.Messages(chat) }
	var msgID struct {
		sync.Mutex
		n int
	}
	nextMsgID := func() int {
		msgID.Lock()
		defer msgID.Unlock()
		msgID.n++
		return msgID.n
	}
	tgSay := func(user, text string) int {
		id := nextMsgID()
		uid, _ := strconv.Atoi(user)
		tg.Inject(map[string]any{"message": map[string]any{
			"message_id": id, "date": time.Now().Unix(), "text": text,
			"chat": map[string]any{"id": uid, "type": "private", "first_name": "U" + user},
			"from": map[string]any{"id": uid, "is_bot": false, "first_name": "U" + user},
		}})
		return id
	}
	// answerTo waits for the bot's message in a user's chat that replies
	// to message id and has stopped changing (streamed by edits).
	answerTo := func(t *testing.T, chat string, id int, want func(string) bool) string {
		t.Helper()
		var got string
		waitFor(t, fmt.Sprintf("answer to message %d in chat %s", id, chat), func() bool {
			for _, m := range shown(chat) {
				if m.ReplyTo == id && want(m.Shown) {
					got = m.Shown
					return true
				}
			}
			return false
		})
		return got
	}
	is := func(s string) func(string) bool { return func(got string) bool { return got == s } }

	// The well-behaved clients talk all the time the bad input arrives.
	stopGood := make(chan struct{})
	var goodWG sync.WaitGroup
	var goodAPI, goodTG int
	var goodErrs []string
	var goodMu sync.Mutex
	goodWG.Add(2)
	go func() { // API, session "good"
		defer goodWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stopGood:
				return
			case <-time.After(300 * time.Millisecond): // stays under 5 requests/s
			}
			text := fmt.Sprintf("good api %d", i)
			r := good.chat(ctx, "good-session", chatBody(text), nil)
			goodMu.Lock()
			if r.status != http.StatusOK || r.content != "echo: "+text {
				goodErrs = append(goodErrs, fmt.Sprintf("api %q: %d %q %s", text, r.status, r.content, r.raw))
			} else {
				goodAPI++
			}
			goodMu.Unlock()
		}
	}()
	go func() { // Telegram user 77
		defer goodWG.Done()
		for i := 0; ; i++ {
			select {
			case <-stopGood:
				return
			default:
			}
			text := fmt.Sprintf("good telegram %d", i)
			id := tgSay(goodUser, text)
			deadline := time.Now().Add(60 * time.Second)
			ok := false
			for time.Now().Before(deadline) && !ok {
				for _, m := range shown(goodUser) {
					if m.ReplyTo == id && m.Shown == "echo: "+text {
						ok = true
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			goodMu.Lock()
			if ok {
				goodTG++
			} else {
				goodErrs = append(goodErrs, fmt.Sprintf("telegram %q: no answer in 60s", text))
			}
			goodMu.Unlock()
		}
	}()

	// stillAnswers checks an API session after its bad input: a new
	// message gets its answer.
	stillAnswers := func(t *testing.T, c *apiClient, session string) {
		t.Helper()
		text := "still there? " + session
		if r := c.chat(ctx, session, chatBody(text), nil); r.status != http.StatusOK || r.content != "echo: "+text {
			t.Fatalf("session %s after bad input: %d %q %s", session, r.status, r.content, r.raw)
		}
	}
	hook := func(t *testing.T, route string, body []byte, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+webhookAddr+"/webhooks/"+route, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("webhook: %v", err)
		}
		defer resp.Body.Close()
		var out struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.Status
	}
	signed := func(body []byte, event, id string) map[string]string {
		return map[string]string{"X-Hub-Signature-256": webhook.Sign(webhookSecret, body), "X-GitHub-Event": event, "X-GitHub-Delivery": id}
	}
	pushBody := func(msg string) []byte {
		b, _ := json.Marshal(map[string]any{"repository": map[string]any{"full_name": "o/r"}, "head_commit": map[string]any{"message": msg}})
		return b
	}

	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"api oversized body", func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 4<<20) + `"}]}`
			r := flooder.chat(ctx, "big", []byte(body), nil)
			wantAPIError(t, r, http.StatusRequestEntityTooLarge, "body_too_large")
			stillAnswers(t, flooder, "big")
		}},
		{"api malformed json", func(t *testing.T) {
			for _, body := range []string{`{"messages":[{"role":"user","content":"hi"}`, `not json`, `{"messages":"hi"}`, `{"messages":[{"role":"user","content":"a"}]} {}`} {
				wantAPIError(t, flooder.chat(ctx, "malformed", []byte(body), nil), http.StatusBadRequest, "invalid_request")
			}
			wantAPIError(t, flooder.chat(ctx, "malformed", chatBody("   "), nil), http.StatusBadRequest, "invalid_request")
			stillAnswers(t, flooder, "malformed")
		}},
		{"api invalid utf-8", func(t *testing.T) {
			r := flooder.chat(ctx, "utf8", []byte("{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9 \xff\xfe ok\"}]}"), nil)
			if r.status != http.StatusOK || r.content != "echo: caf\uFFFD \uFFFD\uFFFD ok" {
				t.Fatalf("invalid UTF-8: %d %q %s", r.status, r.content, r.raw)
			}
			wantAPIError(t, flooder.chat(ctx, "bad\xffsession", chatBody("hi"), nil), http.StatusBadRequest, "invalid_session_id")
			stillAnswers(t, flooder, "utf8")
		}},
		{"api unknown url", func(t *testing.T) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.apiAddr+"/v1/nope", nil)
			r := flooder.do(req)
			wantAPIError(t, r, http.StatusNotFound, "unknown_url")
		}},
		{"api unknown command", func(t *testing.T) {
			for text, want := range map[string]string{
				"/frobnicate": "Unknown command /frobnicate. Send /help for the list.",
				"/stpo":       "Unknown command /stpo. Did you mean /stop? Send /help for the list.",
			} {
				if r := flooder.chat(ctx, "commands", chatBody(text), nil); r.status != http.StatusOK || r.content != want {
					t.Fatalf("%s: %d %q %s", text, r.status, r.content, r.raw)
				}
			}
			stillAnswers(t, flooder, "commands")
		}},
		{"api flood", func(t *testing.T) {
			const n = 40
			results := make([]apiResult, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = flooder.chat(ctx, "flood", chatBody(fmt.Sprintf("flood %d", i)), nil)
				}()
			}
			wg.Wait()
			limited, answered, wait := 0, 0, 0
			for i, r := range results {
				switch r.status {
				case http.StatusOK:
					if want := fmt.Sprintf("echo: flood %d", i); r.content != want {
						t.Errorf("flood %d answered %q", i, r.content)
					}
					answered++
				case http.StatusTooManyRequests:
					wantAPIError(t, r, http.StatusTooManyRequests, "rate_limit_exceeded")
					s, err := strconv.Atoi(r.header.Get("Retry-After"))
					if err != nil || s < 1 {
						t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
					}
					wait = max(wait, s)
					limited++
				default:
					t.Errorf("flood %d: %d %s", i, r.status, r.raw)
				}
			}
			if limited == 0 || answered == 0 {
				t.Fatalf("%d answered, %d rate limited; want both", answered, limited)
			}
			time.Sleep(time.Duration(wait) * time.Second) // the Retry-After the gateway asked for
			stillAnswers(t, flooder, "flood")
		}},
		{"provider 429", func(t *testing.T) {
			r := flooder.chat(ctx, "p429", chatBody("[[fail:429 retry=0.2]] are you busy"), nil)
			wantAPIError(t, r, http.StatusTooManyRequests, "rate_limit_exceeded")
			// Not retried by the SDKs: the turn ran (the worker retried the
			// provider), so their retry would run the message again.
			if want := "The AI service is busy right now. Please try again in a minute."; !strings.Contains(r.raw, want) || r.header.Get("X-Should-Retry") != "false" {
				t.Fatalf("provider 429: %s %v", r.raw, r.header)
			}
			stillAnswers(t, flooder, "p429")
		}},
		{"provider 402", func(t *testing.T) {
			r := flooder.chat(ctx, "p402", chatBody("[[fail:402]] out of credit"), nil)
			wantAPIError(t, r, http.StatusTooManyRequests, "insufficient_quota")
			if want := "The AI service's usage quota or credit is exhausted. The operator needs to top it up."; !strings.Contains(r.raw, want) || r.header.Get("X-Should-Retry") != "false" {
				t.Fatalf("provider 402: %s %v", r.raw, r.header)
			}
			stillAnswers(t, flooder, "p402")
		}},
		{"webhook bad requests", func(t *testing.T) {
			ok := pushBody("fine")
			for _, c := range []struct {
				name, route string
				body        []byte
				header      map[string]string
				code        int
				status      string
			}{
				{"oversized", "gh", append(append([]byte(`{"x":"`), bytes.Repeat([]byte("y"), 1<<20)...), `"}`...), nil, http.StatusRequestEntityTooLarge, "too_large"},
				{"wrong signature", "gh", ok, map[string]string{"X-Hub-Signature-256": webhook.Sign("not the secret", ok), "X-GitHub-Event": "push"}, http.StatusUnauthorized, "bad_signature"},
				{"no signature", "gh", ok, map[string]string{"X-GitHub-Event": "push"}, http.StatusUnauthorized, "bad_signature"},
				{"signature of another body", "gh", ok, map[string]string{"X-Hub-Signature-256": webhook.Sign(webhookSecret, pushBody("other")), "X-GitHub-Event": "push"}, http.StatusUnauthorized, "bad_signature"},
				{"malformed json", "gh", []byte(`{"repository":`), signed([]byte(`{"repository":`), "push", "m-1"), http.StatusBadRequest, "malformed_payload"},
				{"unknown route", "nope", ok, signed(ok, "push", "u-1"), http.StatusNotFound, "unknown_route"},
				{"filtered event", "gh", ok, signed(ok, "issues", "f-1"), http.StatusOK, "ignored"},
				{"bad delivery id", "gh", ok, signed(ok, "push", "a b/c"), http.StatusBadRequest, "bad_delivery_id"},
			} {
				if code, st := hook(t, c.route, c.body, c.header); code != c.code || st != c.status {
					t.Errorf("%s: %d %q, want %d %q", c.name, code, st, c.code, c.status)
				}
			}
		}},
		{"webhook flood", func(t *testing.T) {
			post := func(route, id string, sign bool) (int, string, string) {
				body := pushBody("flood " + id)
				header := signed(body, "push", id)
				if !sign {
					header["X-Hub-Signature-256"] = webhook.Sign("a guess", body)
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+webhookAddr+"/webhooks/"+route, bytes.NewReader(body))
				for k, v := range header {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("webhook: %v", err)
				}
				defer resp.Body.Close()
				var out struct {
					Error string `json:"error"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&out)
				return resp.StatusCode, out.Error, resp.Header.Get("Retry-After")
			}
			// Forged deliveries are refused before the limit and do not
			// spend the route's budget.
			for i := range 10 {
				if code, _, _ := post("flood", fmt.Sprint("forged-", i), false); code != http.StatusUnauthorized {
					t.Fatalf("forged delivery %d: %d, want 401", i, code)
				}
			}
			for i := range 12 {
				code, msg, retry := post("flood", fmt.Sprint("flood-", i), true)
				switch {
				case i < 5 && code != http.StatusAccepted:
					t.Fatalf("delivery %d within the limit: %d %q", i, code, msg)
				case i >= 5:
					if s, err := strconv.Atoi(retry); code != http.StatusTooManyRequests || msg != "Rate limit exceeded" || err != nil || s < 1 || s > 60 {
						t.Fatalf("delivery %d over the limit: %d %q Retry-After %q", i, code, msg, retry)
					}
				}
				// Another route, meanwhile, takes its deliveries.
				if i%3 != 2 {
					continue
				}
				if code, _, _ := post("calm", fmt.Sprint("calm-", i), true); code != http.StatusAccepted {
					t.Fatalf("calm route during the flood, delivery %d: %d", i, code)
				}
			}
		}},
		{"webhook invalid utf-8", func(t *testing.T) {
			body := []byte("{\"repository\":{\"full_name\":\"o/r\"},\"head_commit\":{\"message\":\"fix \xff bug\"}}")
			if code, st := hook(t, "gh", body, signed(body, "push", "utf8-1")); code != http.StatusAccepted || st != "accepted" {
				t.Fatalf("webhook with invalid UTF-8: %d %q", code, st)
			}
			// The prompt carries U+FFFD; the agent's answer reaches the
			// route's chat. Then the route works for a good delivery, once.
			answerIn := func(want string) {
				waitFor(t, "webhook answer "+want, func() bool {
					for _, m := range shown(replyChat) {
						if m.Shown == want {
							return true
						}
					}
					return false
				})
			}
			answerIn("echo: push to o/r: fix \uFFFD bug")
			good := pushBody("release 1.0")
			if code, st := hook(t, "gh", good, signed(good, "push", "good-1")); code != http.StatusAccepted || st != "accepted" {
				t.Fatalf("good delivery: %d %q", code, st)
			}
			if code, st := hook(t, "gh", good, signed(good, "push", "good-1")); code != http.StatusOK || st != "duplicate" {
				t.Fatalf("repeated delivery: %d %q", code, st)
			}
			answerIn("echo: push to o/r: release 1.0")
		}},
		{"telegram malformed update", func(t *testing.T) {
			bad := tg.InjectRaw(`"message":"not an object"`)
			bad2 := tg.InjectRaw(`"message":{"message_id":1,"chat":{"id":` + badUser + `,"type":"private"},"text":["no"]}`)
			id := tgSay(badUser, "after malformed")
			answerTo(t, badUser, id, is("echo: after malformed"))
			if c := tg.Confirmed(); c <= bad || c <= bad2 {
				t.Fatalf("confirmed offset %d, want past the malformed updates %d, %d", c, bad, bad2)
			}
		}},
		{"telegram invalid utf-8", func(t *testing.T) {
			id := nextMsgID()
			tg.InjectRaw(fmt.Sprintf("\"message\":{\"message_id\":%d,\"date\":%d,\"chat\":{\"id\":%s,\"type\":\"private\"},\"from\":{\"id\":%s,\"is_bot\":false,\"first_name\":\"B\"},\"text\":\"na\xefve \xff\"}",
				id, time.Now().Unix(), badUser, badUser))
			answerTo(t, badUser, id, is("echo: na\uFFFDve \uFFFD"))
		}},
		{"telegram unknown command", func(t *testing.T) {
			id := tgSay(badUser, "/frobnicate now")
			answerTo(t, badUser, id, is("Unknown command /frobnicate. Send /help for the list."))
			id = tgSay(badUser, "after the command")
			answerTo(t, badUser, id, is("echo: after the command"))
		}},
		{"telegram unauthorized sender", func(t *testing.T) {
			first := tgSay(strangerUser, "hello, let me in")
			code := answerTo(t, strangerUser, first, func(s string) bool { return strings.HasPrefix(s, "Hi! I don't know you yet. Your pairing code is ") })
			if !strings.Contains(code, "switchboard pairing approve telegram ") {
				t.Fatalf("pairing answer %q", code)
			}
			second := tgSay(strangerUser, "hello again")
			answerTo(t, strangerUser, second, is("A pairing code was sent to you recently. Ask the bot owner to approve it, or try again later."))
			var n int
			if err := d.db.QueryRow(ctx, `SELECT count(*) FROM sessions WHERE session_key LIKE '%:telegram:dm:' || $1`, strangerUser).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%d sessions for a denied sender", n)
			}
		}},
		{"telegram flood", func(t *testing.T) {
			const n = 30
			ids := make([]int, n)
			for i := range n {
				ids[i] = tgSay(badUser, fmt.Sprintf("flood %d", i))
			}
			// The last message is answered (or refused); then the
			// conversation shows which messages reached the agent.
			answerTo(t, badUser, ids[n-1], func(s string) bool {
				return s == fmt.Sprintf("echo: flood %d", n-1) || strings.HasPrefix(s, "⚠️ Too many messages are waiting")
			})
			recallID := tgSay(badUser, "[[recall:user]]")
			recall := answerTo(t, badUser, recallID, func(s string) bool { return strings.HasPrefix(s, "recall: ") })
			heard := map[string]bool{}
			for _, p := range strings.Split(strings.TrimPrefix(recall, "recall: "), " | ") {
				heard[p] = true
			}
			// Each flood message gets its answer (whole, or cut short by
			// the next message's interrupt), a refusal, or joins a later
			// turn; besides, at most one busy acknowledgement.
			inFlood := map[int]int{}
			for i, id := range ids {
				inFlood[id] = i
			}
			refused := map[int]bool{}
			answered := map[string]int{}
			acks, cut := 0, 0
			for _, m := range shown(badUser) {
				if _, ok := inFlood[m.ReplyTo]; !ok {
					continue
				}
				switch {
				case strings.HasPrefix(m.Shown, "⚠️ Too many messages are waiting (8)."):
					refused[m.ReplyTo] = true
				case strings.HasPrefix(m.Shown, "⚡ Interrupting") || strings.HasPrefix(m.Shown, "⏳ Queued for the next turn"):
					// A message that came while the turn before it was
					// running interrupts it; one that came while that
					// turn still waited for a worker waits behind it.
					acks++
				case m.Shown == fmt.Sprintf("echo: flood %d", inFlood[m.ReplyTo]):
					answered[m.Shown]++
				case m.Shown != "" && strings.HasPrefix(fmt.Sprintf("echo: flood %d", inFlood[m.ReplyTo]), m.Shown):
					// Its answer was streaming when the next message
					// interrupted it: it stays as far as it got.
					cut++
				default:
					t.Errorf("unexpected message %q in reply to flood %d", m.Shown, inFlood[m.ReplyTo])
				}
			}
			for text, n := range answered {
				if n > 1 {
					t.Errorf("%q shown %d times", text, n)
				}
			}
			if acks > 1 {
				t.Errorf("%d busy acknowledgements, want at most one per interval", acks)
			}
			prev := -1
			order := strings.Split(strings.TrimPrefix(recall, "recall: "), " | ")
			for i, id := range ids {
				text := fmt.Sprintf("flood %d", i)
				switch {
				case heard[text] && refused[id]:
					t.Errorf("%q both reached the agent and was refused", text)
				case !heard[text] && !refused[id]:
					t.Errorf("%q neither reached the agent nor was refused (lost)", text)
				}
				if heard[text] {
					at := indexOf(order, text)
					if at < prev {
						t.Errorf("%q out of order in %q", text, recall)
					}
					prev = at
				}
			}
			t.Logf("telegram flood: %d of %d answered on their own, %d cut short by the next, %d refused, %d busy acknowledgement(s)", len(answered), n, cut, len(refused), acks)
		}},
		{"telegram queue full", func(t *testing.T) {
			// The session is busy (its lock held, as by a long turn) while
			// twelve messages arrive: eight wait, the rest are refused.
			key := "agent:main:telegram:dm:" + badUser
			if ok, err := d.locker.Acquire(ctx, key, "held-by-test", time.Minute); err != nil || !ok {
				t.Fatalf("hold the session: %v %v", ok, err)
			}
			const n, capacity = 12, 8
			ids := make([]int, n)
			for i := range n {
				ids[i] = tgSay(badUser, fmt.Sprintf("waiting %d", i))
			}
			for _, id := range ids[capacity:] {
				answerTo(t, badUser, id, is("⚠️ Too many messages are waiting (8). This one was not queued; please wait for the current reply."))
			}
			if err := d.locker.Release(ctx, key, "held-by-test"); err != nil {
				t.Fatal(err)
			}
			// The waiting messages run once the session is free (the
			// router's sweep); the conversation has exactly them, in order.
			answerTo(t, badUser, ids[capacity-1], is(fmt.Sprintf("echo: waiting %d", capacity-1)))
			recallID := tgSay(badUser, "[[recall:user]]")
			recall := answerTo(t, badUser, recallID, func(s string) bool { return strings.HasPrefix(s, "recall: ") })
			var want []string
			for i := range capacity {
				want = append(want, fmt.Sprintf("waiting %d", i))
			}
			if got := strings.TrimPrefix(recall, "recall: "); !strings.HasSuffix(got, strings.Join(want, " | ")) || strings.Contains(got, fmt.Sprintf("waiting %d", capacity)) {
				t.Fatalf("recall %q, want it to end with the %d waiting messages and nothing refused", recall, capacity)
			}
			for _, id := range ids[:capacity] {
				for _, m := range shown(badUser) {
					if m.ReplyTo == id && strings.HasPrefix(m.Shown, "⚠️") {
						t.Errorf("queued message %d refused: %q", id, m.Shown)
					}
				}
			}
		}},
		{"proactive send to a malformed platform", func(t *testing.T) {
			conn, err := grpc.NewClient(deliveryAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := deliveryv1.NewDeliveryServiceClient(conn)
			for _, target := range []string{"no such:1", "a.b:1", ":1", "telegram:"} {
				if _, err := c.Send(ctx, &deliveryv1.SendRequest{Target: target, Text: "x"}); status.Code(err) != codes.InvalidArgument {
					t.Errorf("target %q: %v, want InvalidArgument", target, err)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, c.run)
	}

	close(stopGood)
	goodWG.Wait()
	goodMu.Lock()
	defer goodMu.Unlock()
	for _, e := range goodErrs {
		t.Errorf("well-behaved client disturbed: %s", e)
	}
	if goodAPI == 0 || goodTG == 0 {
		t.Errorf("well-behaved clients got %d API and %d Telegram answers during the bad input", goodAPI, goodTG)
	}
	t.Logf("well-behaved clients: %d API and %d Telegram answers while bad input arrived", goodAPI, goodTG)
	if t.Failed() {
		t.Logf("switchboard dev stderr, last lines:\n%s", lastLines(d.stderr.String(), 150))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// apiClient talks to the API gateway from a chosen loopback address.
type apiClient struct {
	base string
	http *http.Client
}

func newAPIClient(addr, fromIP string) *apiClient {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fromIP)}, Timeout: 5 * time.Second}
	return &apiClient{base: "http://" + addr, http: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}}
}

// apiResult is one answer: status, headers, the completion's content or
// the OpenAI error's code.
type apiResult struct {
	status  int
	header  http.Header
	content string
	code    string
	raw     string
}

func chatBody(text string) []byte {
	b, _ := json.Marshal(map[string]any{"model": "switchboard", "messages": []map[string]string{{"role": "user", "content": text}}})
	return b
}

func (c *apiClient) chat(ctx context.Context, session string, body []byte, header map[string]string) apiResult {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return c.do(req)
}

func (c *apiClient) do(req *http.Request) apiResult {
	resp, err := c.http.Do(req)
	if err != nil {
		return apiResult{raw: err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	content, code, _ := decodeCompletion(raw)
	return apiResult{status: resp.StatusCode, header: resp.Header, code: code, content: content, raw: string(raw)}
}

func wantAPIError(t *testing.T, r apiResult, status int, code string) {
	t.Helper()
	if r.status != status || r.code != code {
		t.Fatalf("got %d %q (%s), want %d %q", r.status, r.code, r.raw, status, code)
	}
}
