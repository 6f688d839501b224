package webhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

const secret = "s3cret"

// stdSecret is a Standard Webhooks secret as senders show it.
const stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// standardDelivery is a Standard Webhooks delivery of body with id, sent
// (and signed) at at.
func standardDelivery(id string, at time.Time, body []byte) delivery {
	return delivery{"std", body, map[string]string{"Webhook-Id": id, "Webhook-Timestamp": strconv.FormatInt(at.Unix(), 10),
		"Webhook-Signature": SignStandard(stdSecret, id, at, body)}}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.MaxBodyBytes = 16 << 10
	cfg.Routes = map[string]Route{
		"gh": {Secret: secret, Events: []string{"push", "issues.opened"},
			Prompt: `{{event}} on {{.repository.full_name}} by {{.sender.login}}`,
			Reply:  ReplyTarget{Platform: "telegram", Account: "bot1", ChatID: "-100"}},
		"gl":      {Secret: secret, Signature: SigGitLab, Prompt: `gitlab {{event}} {{.project.name}}`},
		"generic": {Secret: secret, Signature: SigGeneric, Header: "X-Signature", Prompt: `alert {{.alert}}`},
		"notify": {Secret: secret, Signature: SigGeneric, DeliverOnly: true, Prompt: `deploy {{.version}} done`,
			Reply: ReplyTarget{Platform: "slack", ChatID: "C1", ThreadID: "t1"}},
		"std": {Secret: stdSecret, Signature: SigStandard, Prompt: `{{event}} {{.data.id}}`},
	}
	return cfg
}

// delivery is one HTTP post the fake makes.
type delivery struct {
	route   string
	body    []byte
	headers map[string]string
}

func post(t *testing.T, addr string, d delivery) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/"+d.route, bytes.NewReader(d.body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range d.headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

type webhookFake struct {
	s  *Service
	n  atomic.Int64
	mu sync.Mutex
	by map[string]delivery
}

func (f *webhookFake) Kinds() []string {
	return []string{"github_push", "github_issue", "gitlab", "generic", "deliver_only", "standard"}
}

func (f *webhookFake) make(kind string) (delivery, *eventsv1.MessageReceived) {
	n := f.n.Add(1)
	id := fmt.Sprintf("d-%d", n)
	var d delivery
	want := &eventsv1.MessageReceived{Internal: true, TransportAuthenticated: true, ReplyRoute: &eventsv1.ReplyRoute{}}
	switch kind {
	case "github_push", "github_issue":
		p := map[string]any{"repository": map[string]any{"full_name": "o/r"}, "sender": map[string]any{"login": "ann"}}
		event, text := "push", "push on o/r by ann"
		if kind == "github_issue" {
			p["action"] = "opened"
			event, text = "issues", "issues.opened on o/r by ann"
		}
		body, _ := json.Marshal(p)
		d = delivery{"gh", body, map[string]string{"X-GitHub-Event": event, "X-GitHub-Delivery": id, "X-Hub-Signature-256": Sign(secret, body)}}
		want.Text = text
		want.ReplyRoute = &eventsv1.ReplyRoute{Platform: "telegram", Account: "bot1", ChatId: "-100"}
	case "gitlab":
		body, _ := json.Marshal(map[string]any{"object_kind": "push", "project": map[string]any{"name": "proj"}})
		d = delivery{"gl", body, map[string]string{"X-Gitlab-Token": secret, "X-Gitlab-Event-UUID": id, "X-Gitlab-Event": "Push Hook"}}
		want.Text = "gitlab push proj"
	case "generic":
		body, _ := json.Marshal(map[string]any{"alert": "disk full", "n": n})
		mac := strings.TrimPrefix(Sign(secret, body), "sha256=")
		d = delivery{"generic", body, map[string]string{"X-Signature": mac, "X-Webhook-Id": id}}
		want.Text = "alert disk full"
	case "deliver_only":
		body, _ := json.Marshal(map[string]any{"version": "1.2.3"})
		d = delivery{"notify", body, map[string]string{"X-Webhook-Signature": Sign(secret, body), "X-Webhook-Id": id}}
		want.Text = "deploy 1.2.3 done"
		want.ReplyRoute = &eventsv1.ReplyRoute{Platform: "slack", ChatId: "C1", ThreadId: "t1", DeliverOnly: true}
	case "standard":
		id = "msg_" + id
		body, _ := json.Marshal(map[string]any{"type": "invoice.paid", "data": map[string]any{"id": "in_" + id}})
		d = standardDelivery(id, time.Now(), body)
		want.Text = "invoice.paid in_" + id
	}
	want.EventId, want.MessageId = d.route+"/"+id, id
	want.Source = &eventsv1.SessionSource{Platform: PlatformName, Account: "default", ChatId: d.route, ChatName: d.route, ChatType: "dm", UserId: "webhook:" + d.route, UserName: d.route}
	return d, want
}

func (f *webhookFake) Deliver(t *testing.T, _ context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	d, want := f.make(kind)
	if code := post(t, f.s.Addr(), d); code != http.StatusAccepted {
		t.Fatalf("%s: status %d, want 202", kind, code)
	}
	f.mu.Lock()
	f.by[want.EventId] = d
	f.mu.Unlock()
	return want
}

func (f *webhookFake) Redeliver(t *testing.T, _ context.Context, eventID string) {
	f.mu.Lock()
	d := f.by[eventID]
	f.mu.Unlock()
	if code := post(t, f.s.Addr(), d); code != http.StatusOK {
		t.Fatalf("redelivery: status %d, want 200", code)
	}
}

func (f *webhookFake) DeliverOversized(t *testing.T, _ context.Context) {
	body := []byte(`{"alert":"` + strings.Repeat("x", 32<<10) + `"}`)
	d := delivery{"generic", body, map[string]string{"X-Signature": strings.TrimPrefix(Sign(secret, body), "sha256=")}}
	if code := post(t, f.s.Addr(), d); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized: status %d, want 413", code)
	}
}

func (f *webhookFake) DeliverMalformed(t *testing.T, _ context.Context) {
	body := []byte(`{"alert": "unterminated`)
	d := delivery{"generic", body, map[string]string{"X-Signature": strings.TrimPrefix(Sign(secret, body), "sha256=")}}
	if code := post(t, f.s.Addr(), d); code != http.StatusBadRequest {
		t.Fatalf("malformed: status %d, want 400", code)
	}
}

func (f *webhookFake) Drop(*testing.T)  { f.s.dropListener() }
func (f *webhookFake) Connections() int { return int(f.s.connects.Load()) }

func (f *webhookFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Target: &deliveryv1.Target{Platform: PlatformName, ChatId: ev.GetSource().GetChatId()}}
}

func (f *webhookFake) Sent(*testing.T, context.Context, *deliveryv1.Target) []string { return nil }

func TestContract(t *testing.T) {
	t.Parallel()
	platformtest.Run(t, platformtest.Harness{New: func(t *testing.T, env platformtest.Env) (platform.Platform, platformtest.Fake) {
		s, err := New(testConfig(), Deps{Bus: env.Bus, Log: env.Log})
		if err != nil {
			t.Fatal(err)
		}
		s.runnerFn = env.Runner
		return s, &webhookFake{s: s, by: map[string]delivery{}}
	}})
}

// inbound reads the events published on b's inbound stream.
func inbound(t *testing.T, b *bus.Bus) func() *eventsv1.MessageReceived {
	t.Helper()
	ctx := context.Background()
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	return func() *eventsv1.MessageReceived {
		m, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			t.Fatal(err)
		}
		return ev
	}
}

// startGateway runs the gateway on testConfig until the test ends or
// cancel is called, and waits until it is ready.
func startGateway(t *testing.T) (*bus.Bus, *Service, context.Context, context.CancelFunc) {
	t.Helper()
	return startGatewayWith(t, testConfig(), nil)
}

// startGatewayWith runs the gateway on cfg with the clock now (time.Now
// when nil).
func startGatewayWith(t *testing.T, cfg Config, now func() time.Time) (*bus.Bus, *Service, context.Context, context.CancelFunc) {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Bus: b, Log: slog.Default(), RunnerOptions: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		s.now = now
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-s.Listening()
	platformtest.WaitFor(t, "ready", func() bool { return s.Ready(ctx) == nil })
	return b, s, ctx, cancel
}

func TestDeliveries(t *testing.T) {
	t.Parallel()
	b, s, ctx, _ := startGateway(t)
	next := inbound(t, b)
	f := &webhookFake{s: s, by: map[string]delivery{}}

	body := []byte(`{"repository":{"full_name":"o/r"},"sender":{"login":"x"}}`)
	cases := []struct {
		name string
		d    delivery
		code int
	}{
		{"bad github signature", delivery{"gh", body, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": Sign("wrong", body)}}, 401},
		{"missing github signature", delivery{"gh", body, map[string]string{"X-GitHub-Event": "push"}}, 401},
		{"github signature without prefix", delivery{"gh", body, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": strings.TrimPrefix(Sign(secret, body), "sha256=")}}, 401},
		{"wrong gitlab token", delivery{"gl", body, map[string]string{"X-Gitlab-Token": "nope"}}, 401},
		{"filtered event", delivery{"gh", body, map[string]string{"X-GitHub-Event": "star", "X-Hub-Signature-256": Sign(secret, body)}}, 200},
		{"filtered action", delivery{"gh", []byte(`{"action":"closed"}`), map[string]string{"X-GitHub-Event": "issues", "X-Hub-Signature-256": Sign(secret, []byte(`{"action":"closed"}`))}}, 200},
		{"unknown route", delivery{"nope", body, nil}, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if code := post(t, s.Addr(), c.d); code != c.code {
				t.Fatalf("status %d, want %d", code, c.code)
			}
		})
	}
	// None of the above was published: the next event is this sentinel.
	want := f.Deliver(t, ctx, "github_push")
	if got := next(); got.GetEventId() != want.GetEventId() {
		t.Fatalf("published %s before the sentinel", got.GetEventId())
	}
	// A duplicate delivery id answers 200 and publishes nothing.
	f.Redeliver(t, ctx, want.GetEventId())
	want2 := f.Deliver(t, ctx, "deliver_only")
	if got := next(); got.GetEventId() != want2.GetEventId() || !got.GetReplyRoute().GetDeliverOnly() {
		t.Fatalf("after a duplicate got %v", got)
	}
}

// A Standard Webhooks delivery carries a signed time and id: its
// sender's retry within the tolerance is a duplicate, and a captured
// delivery replayed after it — after the sender's retries, however long
// the gateway remembers ids — is refused, as is one replayed under
// another id. A GitHub, GitLab or generic delivery carries neither (see
// docs/gateways.md).
func TestStandardWebhookReplays(t *testing.T) {
	t.Parallel()
	b, s, ctx, _ := startGateway(t)
	next := inbound(t, b)
	f := &webhookFake{s: s, by: map[string]delivery{}}

	body := []byte(`{"type":"invoice.paid","data":{"id":"in_9"}}`)
	fresh := standardDelivery("msg_fresh", time.Now(), body)
	if code := post(t, s.Addr(), fresh); code != http.StatusAccepted {
		t.Fatalf("fresh delivery: %d, want 202", code)
	}
	if got := next(); got.GetEventId() != "std/msg_fresh" || got.GetText() != "invoice.paid in_9" {
		t.Fatalf("published %v", got)
	}
	captured := standardDelivery("msg_old", time.Now().Add(-6*time.Minute), body)
	renamed := fresh
	renamed.headers = map[string]string{"Webhook-Id": "msg_renamed", "Webhook-Timestamp": fresh.headers["Webhook-Timestamp"],
		"Webhook-Signature": fresh.headers["Webhook-Signature"]}
	for _, c := range []struct {
		name string
		d    delivery
		code int
	}{
		{"the sender's retry", fresh, http.StatusOK},
		{"a capture replayed after the tolerance", captured, http.StatusUnauthorized},
		{"a capture replayed under another id", renamed, http.StatusUnauthorized},
	} {
		if code := post(t, s.Addr(), c.d); code != c.code {
			t.Fatalf("%s: %d, want %d", c.name, code, c.code)
		}
	}
	// None of them was published: the next event is this sentinel.
	want := f.Deliver(t, ctx, "standard")
	if got := next(); got.GetEventId() != want.GetEventId() {
		t.Fatalf("published %s before the sentinel %s", got.GetEventId(), want.GetEventId())
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		route Route
		ok    bool
	}{
		{"github with secret", Route{Secret: "s"}, true},
		{"github without secret", Route{}, false},
		{"none without insecure", Route{Signature: SigNone}, false},
		{"none with insecure", Route{Signature: SigNone, Insecure: true}, true},
		{"unknown scheme", Route{Secret: "s", Signature: "md5"}, false},
		{"standard with a whsec secret", Route{Secret: stdSecret, Signature: SigStandard}, true},
		{"standard with a broken whsec secret", Route{Secret: "whsec_%%%", Signature: SigStandard}, false},
		{"standard without secret", Route{Signature: SigStandard}, false},
		{"deliver only without target", Route{Secret: "s", DeliverOnly: true}, false},
		{"reply without chat", Route{Secret: "s", Reply: ReplyTarget{Platform: "telegram"}}, false},
		{"bad template", Route{Secret: "s", Prompt: "{{.x"}, false},
		{"rate limit 0 (unlimited)", Route{Secret: "s", RateLimit: ptr(0)}, true},
		{"rate limit 120", Route{Secret: "s", RateLimit: ptr(120)}, true},
		{"negative rate limit", Route{Secret: "s", RateLimit: ptr(-1)}, false},
		{"body dedupe 0 (never)", Route{Secret: "s", BodyDedupe: ptr(time.Duration(0))}, true},
		{"body dedupe 10m", Route{Secret: "s", BodyDedupe: ptr(10 * time.Minute)}, true},
		{"negative body dedupe", Route{Secret: "s", BodyDedupe: ptr(-time.Second)}, false},
		{"body dedupe over a day", Route{Secret: "s", BodyDedupe: ptr(25 * time.Hour)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Routes = map[string]Route{"r": c.route}
			if err := cfg.Validate(); (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
		})
	}
	cfg := DefaultConfig()
	cfg.RateLimit = -1
	if err := cfg.Validate(); err == nil {
		t.Fatal("a negative gateway rate_limit validated")
	}
}

func ptr[T any](v T) *T { return &v }

// A delivery without a delivery id is deduped by its body only within
// the route's body_dedupe window, a sender's retries: the same body
// sent later (a recurring alert whose text does not change) is a new
// event. Before, the body's hash was the event id and the seen record
// answered "duplicate" for 7 days. A delivery id keeps its longer
// memory, and a route with body_dedupe 0 takes every such delivery.
func TestSameBodyAfterTheRetryWindowIsNew(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Routes["always"] = Route{Secret: secret, Signature: SigGeneric, Header: "X-Signature", Prompt: `alert {{.alert}}`,
		BodyDedupe: ptr(time.Duration(0))}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	b, s, _, _ := startGatewayWith(t, cfg, func() time.Time { return time.Unix(0, clock.Load()) })
	next := inbound(t, b)

	body := []byte(`{"alert":"disk full on db1"}`)
	generic := func(route string, headers ...string) delivery {
		h := map[string]string{"X-Signature": strings.TrimPrefix(Sign(secret, body), "sha256="), "X-Webhook-Event": "alert"}
		for i := 0; i+1 < len(headers); i += 2 {
			h[headers[i]] = headers[i+1]
		}
		return delivery{route, body, h}
	}
	steps := []struct {
		name  string
		after time.Duration
		d     delivery
		code  int
	}{
		{"first", 0, generic("generic"), http.StatusAccepted},
		{"sender's retry", time.Minute, generic("generic"), http.StatusOK},
		{"retry at the window's end", 3*time.Minute + 59*time.Second, generic("generic"), http.StatusOK},
		{"same alert later", 2 * time.Second, generic("generic"), http.StatusAccepted},
		{"its retry", 10 * time.Second, generic("generic"), http.StatusOK},
		{"with a delivery id", 0, generic("generic", "X-Webhook-Id", "alert-7"), http.StatusAccepted},
		{"that id later", time.Hour, generic("generic", "X-Webhook-Id", "alert-7"), http.StatusOK},
		{"route without body dedupe", 0, generic("always"), http.StatusAccepted},
		{"at once again", 0, generic("always"), http.StatusAccepted},
	}
	ids := map[string]bool{}
	for _, st := range steps {
		advance(st.after)
		if code := post(t, s.Addr(), st.d); code != st.code {
			t.Fatalf("%s: status %d, want %d", st.name, code, st.code)
		}
		if st.code != http.StatusAccepted {
			continue
		}
		ev := next()
		if ids[ev.GetEventId()] || ev.GetText() != "alert disk full on db1" {
			t.Fatalf("%s: published %s %q, want a new event with the alert", st.name, ev.GetEventId(), ev.GetText())
		}
		ids[ev.GetEventId()] = true
	}
}

// A delivery in flight when the gateway stops still gets its answer and
// its event: GitHub and GitLab do not retry on their own, so a 503 here
// would lose it. The body arrives only after the stop began.
func TestStopFinishesDeliveriesInFlight(t *testing.T) {
	t.Parallel()
	b, s, _, cancel := startGateway(t)
	next := inbound(t, b)

	body := []byte(`{"repository":{"full_name":"o/r"},"sender":{"login":"x"}}`)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := fmt.Sprintf("POST /webhooks/gh HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n"+
		"X-GitHub-Delivery: in-flight-1\r\nX-Hub-Signature-256: %s\r\nContent-Length: %d\r\n\r\n", Sign(secret, body), len(body))
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server is reading the body
	cancel()
	time.Sleep(100 * time.Millisecond) // the shutdown has begun
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}
	if got := next(); !strings.Contains(got.GetText(), "push on o/r") {
		t.Fatalf("published %q", got.GetText())
	}
}

// A delivery that says it is over max_body_bytes is refused (413)
// before any of it is read, not after the gateway waited for it.
func TestBodyOverTheLimitRefusedUnread(t *testing.T) {
	t.Parallel()
	_, s, _, _ := startGateway(t)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	head := "POST /webhooks/gh HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-GitHub-Event: push\r\n" +
		"X-Hub-Signature-256: sha256=00\r\nContent-Length: 1073741824\r\n\r\n{"
	if _, err := conn.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
}
