package homeassistant

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/homeassistant/hafake"
)

// gw is a running gateway on NATS (an embedded server), pointed at a fake
// Home Assistant.
type gw struct {
	f   *hafake.Fake
	b   *bus.Bus
	s   *Service
	ctx context.Context
	evs chan *eventsv1.MessageReceived
	// stop stops the gateway (Run returns).
	stop func()
}

func start(t *testing.T, mutate func(*Config), wait bool) *gw {
	t.Helper()
	return startClock(t, mutate, wait, nil)
}

// startClock is start with the cooldown's clock.
func startClock(t *testing.T, mutate func(*Config), wait bool, clock func() time.Time) *gw {
	t.Helper()
	return startLog(t, mutate, wait, clock, slog.New(slog.DiscardHandler))
}

// startLog is startClock with the gateway's logger.
func startLog(t *testing.T, mutate func(*Config), wait bool, clock func() time.Time, log *slog.Logger) *gw {
	t.Helper()
	f := hafake.New(token)
	t.Cleanup(f.Close)
	return startOn(t, f, mutate, wait, clock, log)
}

// startOn is startLog on a fake the test made (and filled) before.
func startOn(t *testing.T, f *hafake.Fake, mutate func(*Config), wait bool, clock func() time.Time, log *slog.Logger) *gw {
	t.Helper()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	t.Cleanup(func() { platformtest.DeleteBuckets(b) })
	g := &gw{f: f, b: b, evs: platformtest.InboundEvents(t, b)}
	cfg := testConfig(f)
	if mutate != nil {
		mutate(&cfg)
	}
	g.run(t, cfg, wait, clock, log)
	return g
}

// run starts a gateway of cfg on g's bus and fake (a second one after
// stop: a restarted process) and stops it at the test's end.
func (g *gw) run(t *testing.T, cfg Config, wait bool, clock func() time.Time, log *slog.Logger) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	g.ctx = ctx
	s, err := New(cfg, Deps{Log: log, Bus: g.b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	g.s = s
	if clock != nil {
		s.p.now = clock
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	var once sync.Once
	g.stop = func() {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(g.stop)
	if wait {
		platformtest.WaitFor(t, "the gateway to subscribe", func() bool {
			st, _ := s.Runner().State()
			return st == platform.StateConnected && g.f.Subscribed() == 1
		})
	}
}

func (g *gw) send(t *testing.T, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	r := &deliveryv1.SendReceipt{}
	if err := g.b.Request(g.ctx, g.b.Topology().SendSubject("homeassistant"), req, r); err != nil {
		t.Fatalf("send request: %v", err)
	}
	return r
}

func notify(key, text string) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: text, IdempotencyKey: key, Final: true,
		Target: &deliveryv1.Target{Platform: "homeassistant", ChatId: ChatID}}
}

func door(state, was string) hafake.Change {
	return hafake.Change{EntityID: "binary_sensor.front_door", Old: &hafake.State{State: was},
		New: &hafake.State{State: state, Attributes: map[string]any{"friendly_name": "Front Door"}}}
}

// A watched change reaches the bus once, in Hermes's channel and
// session, trusted as the transport's; ignored, unwatched and
// attributes-only changes publish nothing; each answer is a notification
// of its own, as Hermes's adapter posts them (it sends no
// notification_id, so Home Assistant makes a new one each time): a
// later answer does not take an earlier one off the drawer.
func TestWatchedChangeAndAnswer(t *testing.T) {
	t.Parallel()
	g := start(t, nil, true)
	g.f.Change(hafake.Change{EntityID: "sensor.uptime", Old: &hafake.State{State: "1"}, New: &hafake.State{State: "2"}})
	g.f.Change(hafake.Change{EntityID: "switch.heater", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	g.f.Change(hafake.Change{EntityID: "light.kitchen", Old: &hafake.State{State: "on"},
		New: &hafake.State{State: "on", Attributes: map[string]any{"brightness": 20}}})
	sent := g.f.Change(door("on", "off"))
	ev := platformtest.NextEvent(t, g.evs)
	if ev.GetEventId() != sent.EventID || ev.GetText() != "[Home Assistant] Front Door: triggered (was cleared)" ||
		!ev.GetTransportAuthenticated() || ev.GetSource().GetChatId() != "ha_events" || ev.GetSource().GetUserId() != "homeassistant" {
		t.Fatalf("event %v", ev)
	}
	platformtest.NoEvent(t, g.evs, 300*time.Millisecond)

	first := g.send(t, notify("turn-1:0", "The front door opened."))
	second := g.send(t, notify("turn-2:0", "It closed again."))
	if !first.GetOk() || !second.GetOk() || first.GetPlatformMessageId() == second.GetPlatformMessageId() {
		t.Fatalf("receipts %v %v: want two notifications", first, second)
	}
	shown := g.f.Notifications()
	if len(shown) != 2 || shown[0].Message != "The front door opened." || shown[1].Message != "It closed again." ||
		shown[0].Title != "Hermes Agent" || shown[1].Title != "Hermes Agent" {
		t.Fatalf("notifications %+v: want both answers, each its own", shown)
	}
}

// With notification_id set, every answer replaces that one notification.
func TestNotificationIDReplaces(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.NotificationID = "hermes_agent" }, true)
	first := g.send(t, notify("turn-1:0", "The front door opened."))
	if !first.GetOk() || first.GetPlatformMessageId() != "hermes_agent" {
		t.Fatalf("receipt %v", first)
	}
	if second := g.send(t, notify("turn-2:0", "It closed again.")); !second.GetOk() {
		t.Fatalf("receipt %v", second)
	}
	shown := g.f.Notifications()
	if len(shown) != 1 || shown[0].Message != "It closed again." || shown[0].ID != "hermes_agent" {
		t.Fatalf("notifications %+v: want the one, replaced", shown)
	}
}

// Without a notification id each answer is a notification of its own,
// and a repeated send (delivery's retry after a lost receipt) replaces
// its own instead of adding one.
func TestNotificationPerAnswer(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.NotificationID, c.NotificationTitle = "", "Switchboard" }, true)
	a := g.send(t, notify("turn-1:0", "first"))
	b := g.send(t, notify("turn-2:0", "second"))
	if !a.GetOk() || !b.GetOk() || a.GetPlatformMessageId() == b.GetPlatformMessageId() {
		t.Fatalf("receipts %v %v", a, b)
	}
	p := g.s.p
	if _, err := p.Send(g.ctx, notify("turn-1:0", "first")); err != nil {
		t.Fatal(err)
	}
	shown := g.f.Notifications()
	if len(shown) != 2 || shown[0].Message != "first" || shown[1].Message != "second" || shown[0].Title != "Switchboard" {
		t.Fatalf("notifications %+v", shown)
	}
}

// The per-entity cooldown: a second change of one entity within it is
// dropped, another entity's is not, and once it is over the entity is
// heard again.
func TestCooldown(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	g := startClock(t, func(c *Config) { c.CooldownSeconds = 30 }, true, clock)
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	a := g.f.Change(door("on", "off"))
	if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != a.EventID {
		t.Fatalf("event %s, want %s", ev.GetEventId(), a.EventID)
	}
	advance(29 * time.Second)
	g.f.Change(door("off", "on"))
	b := g.f.Change(hafake.Change{EntityID: "light.kitchen", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != b.EventID {
		t.Fatalf("event %s %q, want the light's %s (the door is cooling down)", ev.GetEventId(), ev.GetText(), b.EventID)
	}
	advance(time.Second)
	c := g.f.Change(door("on", "off"))
	if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != c.EventID {
		t.Fatalf("event %s, want %s after the cooldown", ev.GetEventId(), c.EventID)
	}
}

// One context changing several entities (a scene) is several events;
// the same change sent again is published once.
func TestContextSharedAndReplay(t *testing.T) {
	t.Parallel()
	g := start(t, nil, true)
	a := g.f.Change(hafake.Change{EntityID: "light.kitchen", ContextID: "01JSCENE", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	b := g.f.Change(hafake.Change{EntityID: "light.hall", ContextID: "01JSCENE", Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on"}})
	g.f.Replay(a.EventID)
	for _, want := range []string{a.EventID, b.EventID} {
		if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != want {
			t.Fatalf("event %s, want %s", ev.GetEventId(), want)
		}
	}
	platformtest.NoEvent(t, g.evs, 300*time.Millisecond)
}

// A refused token makes the gateway unready for good, with the reason.
func TestBadTokenIsFatal(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.Token = "wrong" }, false)
	platformtest.WaitFor(t, "the gateway to give up", func() bool {
		st, _ := g.s.Runner().State()
		return st == platform.StateFatal
	})
	if _, reason := g.s.Runner().State(); !strings.Contains(reason, "HASS_TOKEN") || !strings.Contains(reason, "Invalid access token") {
		t.Fatalf("reason %q does not say the token was refused", reason)
	}
	if err := g.s.Ready(g.ctx); err == nil {
		t.Fatal("ready with a refused token")
	}
	if n := g.f.Connections(); n != 0 {
		t.Fatalf("%d connections accepted", n)
	}
}

// Error classes of the services endpoint: 429 waits for Retry-After, a
// 5xx is retried, a revoked token or a bad request is permanent.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	g := start(t, nil, true)
	for _, tc := range []struct {
		name   string
		status int
		after  string
		class  deliveryv1.ErrorClass
		wait   time.Duration
	}{
		{"rate limited", http.StatusTooManyRequests, "7", deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 7 * time.Second},
		{"server error", http.StatusBadGateway, "", deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"bad request", http.StatusBadRequest, "", deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.f.FailNext(tc.status, tc.after)
			r := g.send(t, notify("err-"+tc.name, "x"))
			if r.GetOk() || r.GetErrorClass() != tc.class || (tc.wait > 0 && time.Duration(r.GetRetryAfterMs())*time.Millisecond != tc.wait) {
				t.Fatalf("receipt %v, want %s", r, tc.class)
			}
		})
	}
	g.f.SetToken("rotated")
	r := g.send(t, notify("revoked", "x"))
	if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !strings.Contains(r.GetError(), "HASS_TOKEN") {
		t.Fatalf("receipt with a revoked token %v", r)
	}
	for _, op := range []deliveryv1.SendOp{deliveryv1.SendOp_SEND_OP_EDIT, deliveryv1.SendOp_SEND_OP_DELETE, deliveryv1.SendOp_SEND_OP_TYPING} {
		req := notify("op-"+op.String(), "x")
		req.Op, req.MessageId, req.Final = op, "hermes_agent", false
		if r := g.send(t, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("%s receipt %v, want unsupported", op, r)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig()
	ok.Token = "t"
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"default url", func(*Config) {}, ""},
		{"no token", func(c *Config) { c.Token = "" }, "HASS_TOKEN"},
		{"not http", func(c *Config) { c.URL = "homeassistant.local:8123" }, "not an http(s) URL"},
		{"negative cooldown", func(c *Config) { c.CooldownSeconds = -1 }, "cooldown_seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

// A long answer is one notification, whole: delivery does not split
// Home Assistant's answers (with a configured notification id a second
// part would replace the first), and the gateway does not cut them
// (Hermes cut at 4,096 characters).
func TestLongAnswerIsOneNotification(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("All doors are closed. ", 1000)
	if parts := chunk.Split(long, "homeassistant"); len(parts) != 1 || parts[0] != long {
		t.Fatalf("delivery splits the answer into %d parts", len(parts))
	}
	g := start(t, nil, true)
	if r := g.send(t, notify("turn-long:0", long)); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	if shown := g.f.Notifications(); len(shown) != 1 || shown[0].Message != long {
		t.Fatalf("notifications: %d, want the whole answer in one", len(shown))
	}
}

// An answer's media reach the notification drawer as text: an
// attachment's URL (with its caption) as a line, one kept as bytes
// named. Sent alone after the answer's text, as delivery sends media,
// they are a notification of their own and do not replace the answer;
// a retry of that send replaces its own.
func TestMediaAsText(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.NotificationID = "hermes_agent" }, true)
	if r := g.send(t, notify("turn-1:0", "Here is the camera snapshot.")); !r.GetOk() {
		t.Fatalf("receipt %v", r)
	}
	media := notify("turn-1:1", "")
	media.Attachments = []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Caption: "Front door", Location: &eventsv1.Attachment_Url{Url: "https://cam.example/snap.jpg"}},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "log.txt", Location: &eventsv1.Attachment_BytesRef{BytesRef: "ref-1"}},
	}
	for range 2 {
		if r := g.send(t, media); !r.GetOk() || r.GetPlatformMessageId() == "hermes_agent" {
			t.Fatalf("media receipt %v", r)
		}
	}
	shown := g.f.Notifications()
	if len(shown) != 2 || shown[0].Message != "Here is the camera snapshot." {
		t.Fatalf("notifications %+v: want the answer kept and the media beside it", shown)
	}
	if m := shown[1].Message; m != "Front door\nhttps://cam.example/snap.jpg\n[log.txt: a file a notification cannot show]" {
		t.Fatalf("media notification %q", m)
	}

	both := notify("turn-2:0", "Snapshot:")
	both.Attachments = media.Attachments[:1]
	if r := g.send(t, both); !r.GetOk() || r.GetPlatformMessageId() != "hermes_agent" {
		t.Fatalf("receipt %v", r)
	}
	for _, n := range g.f.Notifications() {
		if n.ID == "hermes_agent" && n.Message != "Snapshot:\nFront door\nhttps://cam.example/snap.jpg" {
			t.Fatalf("answer with media %q", n.Message)
		}
	}
}

// logRecords keeps the messages of a logger's records and their
// entity_id attribute.
type logRecords struct {
	mu   sync.Mutex
	recs []string // "message entity_id"
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	entity := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "entity_id" {
			entity = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, r.Message+" "+entity)
	l.mu.Unlock()
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

func (l *logRecords) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// A state change too large to publish is rejected (logged and counted)
// only when its entity is watched: one of an entity the filters leave
// out, unwatched or ignored, is skipped like its small changes.
func TestOversizedChangeOfUnwatchedEntity(t *testing.T) {
	t.Parallel()
	logs := &logRecords{}
	g := startLog(t, nil, true, nil, slog.New(logs))
	huge := map[string]any{"friendly_name": "Huge", "blob": strings.Repeat("x", maxEventBytes)}
	for _, id := range []string{"media_player.living_room", "sensor.uptime", "light.huge"} {
		g.f.Change(hafake.Change{EntityID: id, Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on", Attributes: huge}})
	}
	sent := g.f.Change(door("on", "off"))
	// Changes are handled in order: the door's on the bus means the
	// three before it were read.
	if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != sent.EventID {
		t.Fatalf("event %s %q, want the door's %s", ev.GetEventId(), ev.GetText(), sent.EventID)
	}
	if n := logs.count("inbound payload rejected"); n != 1 {
		t.Errorf("%d rejections logged, want 1 (the watched light's)", n)
	}
	for _, want := range []string{"homeassistant state change skipped media_player.living_room", "homeassistant state change skipped sensor.uptime"} {
		if logs.count(want) != 1 {
			t.Errorf("no %q logged", want)
		}
	}
}

// A state change larger than the gateway keeps in memory (over 1 MiB: a
// media player's playlist) is read to its end and skipped, its entity
// read from its start: logged and counted when the entity is watched,
// skipped as its small changes when not. The connection stays up and
// the changes after it are published.
func TestChangeOverTheFrameLimitKeepsTheConnection(t *testing.T) {
	t.Parallel()
	logs := &logRecords{}
	g := startLog(t, nil, true, nil, slog.New(logs))
	huge := map[string]any{"friendly_name": "Huge", "playlist": strings.Repeat("x", 2*maxFrameBytes)}
	for _, id := range []string{"media_player.living_room", "light.huge"} {
		g.f.Change(hafake.Change{EntityID: id, Old: &hafake.State{State: "off"}, New: &hafake.State{State: "on", Attributes: huge}})
	}
	sent := g.f.Change(door("on", "off"))
	if ev := platformtest.NextEvent(t, g.evs); ev.GetEventId() != sent.EventID {
		t.Fatalf("event %s %q, want the door's %s", ev.GetEventId(), ev.GetText(), sent.EventID)
	}
	if n := g.f.Connections(); n != 1 {
		t.Errorf("%d connections, want 1: the large change dropped the connection", n)
	}
	if n := logs.count("inbound payload rejected"); n != 1 {
		t.Errorf("%d rejections logged, want 1 (the watched light's)", n)
	}
	if logs.count("homeassistant state change skipped media_player.living_room") != 1 {
		t.Error("the unwatched media player's change was not skipped as such")
	}
}
