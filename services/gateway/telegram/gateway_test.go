package telegram

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startService runs a gateway until the test ends or stop is called.
func startService(t *testing.T, cfg Config, b *bus.Bus, instance string) (*Service, func()) {
	t.Helper()
	s, err := New(cfg, Deps{Log: quietLog(), Bus: b, Instance: instance, Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return s, stop
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inbound reads every event on the inbound stream so far.
func inbound(t *testing.T, b *bus.Bus) []*eventsv1.MessageReceived {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*eventsv1.MessageReceived
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(m.Data, ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func injectText(f *telegramfake.Server, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = f.Inject(obj{"message": msg(obj{"message_id": 100 + i, "from": alice, "chat": dmChat, "text": fmt.Sprintf("m%d", i)})})
	}
	return ids
}

// checkExactlyOnce: every id appears on the bus once, nothing else does.
func checkExactlyOnce(t *testing.T, evs []*eventsv1.MessageReceived, ids []int64) {
	t.Helper()
	seen := map[string]int{}
	for _, e := range evs {
		seen[e.GetEventId()]++
	}
	for _, id := range ids {
		if n := seen[strconv.FormatInt(id, 10)]; n != 1 {
			t.Errorf("update %d published %d times, want once", id, n)
		}
	}
	if len(evs) != len(ids) {
		t.Errorf("%d events on the bus, want %d", len(evs), len(ids))
	}
}

func TestConflictIsFatal(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	f.FailNext("getUpdates", telegramfake.ErrConflict)
	s, _ := startService(t, testConfig(f), b, "a")
	waitFor(t, "fatal state", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateFatal })
	err := s.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "another poller") {
		t.Fatalf("readiness %v: want unready naming the conflict", err)
	}
	calls := f.Calls("getUpdates")
	time.Sleep(300 * time.Millisecond) // several backoff periods: no retry may happen
	if f.Calls("getUpdates") != calls {
		t.Fatalf("getUpdates called again after a fatal 409 (%d → %d)", calls, f.Calls("getUpdates"))
	}
}

// A long-polling gateway is connected (and ready) once a first, short
// getUpdates has answered, not after a whole poll_timeout (here ten
// minutes) of an idle bot: it reports connected while its long poll is
// held open. Updates waiting at the start come with that first answer,
// each published and confirmed once.
func TestConnectedWhilePolling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		waiting int // updates sent before the start
	}{
		{"idle bot", 0},
		{"updates waiting", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			cfg := testConfig(f)
			cfg.PollTimeout = 10 * time.Minute
			ids := injectText(f, tc.waiting)
			s, _ := startService(t, cfg, b, "a")
			waitFor(t, "connected with a long poll held open", 20*time.Second, func() bool {
				st, _ := s.Runner().State()
				return st == platform.StateConnected && f.Polling()
			})
			if err := s.Ready(context.Background()); err != nil {
				t.Fatalf("unready while connected: %v", err)
			}
			if tc.waiting > 0 {
				waitFor(t, "the waiting updates confirmed", 20*time.Second, func() bool { return f.Confirmed() > ids[len(ids)-1] })
			}
			checkExactlyOnce(t, inbound(t, b), ids)
		})
	}
}

func TestRestartLosesNothing(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	ids := injectText(f, 5)
	_, stop := startService(t, cfg, b, "first")
	waitFor(t, "the first batch on the bus", 20*time.Second, func() bool { return len(inbound(t, b)) == 5 })
	stop()
	// Published but (without a later poll) never confirmed: Telegram
	// hands them out again, and more arrived while no one polled.
	if f.Confirmed() > ids[len(ids)-1] {
		t.Logf("batch confirmed before the stop")
	}
	ids = append(ids, injectText(f, 5)...)
	startService(t, cfg, b, "second")
	waitFor(t, "every update on the bus", 20*time.Second, func() bool { return len(inbound(t, b)) >= 10 && f.Confirmed() > ids[len(ids)-1] })
	checkExactlyOnce(t, inbound(t, b), ids)
}

func TestBusOutageDoesNotConfirm(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, _ := startService(t, testConfig(f), b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	// Remove the inbound stream: publishing fails, so the update must stay
	// unconfirmed at Telegram until the stream is back.
	ctx := context.Background()
	name := b.Topology().Stream(bus.StreamInbound)
	st, _ := b.JetStream().Stream(ctx, name)
	info, _ := st.Info(ctx)
	if err := b.JetStream().DeleteStream(ctx, name); err != nil {
		t.Fatal(err)
	}
	id := f.Inject(obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "during outage"})})
	time.Sleep(2 * time.Second) // publish attempts fail meanwhile
	if f.Confirmed() > id {
		t.Fatalf("update %d confirmed (offset %d) although it never reached the bus", id, f.Confirmed())
	}
	if _, err := b.JetStream().CreateStream(ctx, info.Config); err != nil {
		t.Fatal(err)
	}
	// The gateway keeps trying the update where it is, without a
	// reconnect and its backoff: the bot answers as soon as the bus does.
	waitFor(t, "the update on the bus after recovery", 30*time.Second, func() bool { return len(inbound(t, b)) == 1 })
	waitFor(t, "the update confirmed", 30*time.Second, func() bool { return f.Confirmed() > id })
	checkExactlyOnce(t, inbound(t, b), []int64{id})
	if n := f.Calls("deleteWebhook"); n != 1 {
		t.Fatalf("the gateway connected %d times, want it to keep its connection", n)
	}
}

// A getUpdates that fails in passing (the connection cut, a 502 from
// Telegram) is polled again at once, not after the reconnect backoff
// (here a minute) with the bot deaf.
func TestPassingPollFailure(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(testConfig(f), Deps{Log: quietLog(), Bus: b, Instance: "a", Backoff: platform.Schedule(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	polls := f.Calls("getUpdates")
	f.FailNext("getUpdates", telegramfake.APIError{Code: 502, Description: "Bad Gateway"})
	f.Drop()
	// The update comes once the 502 was answered.
	waitFor(t, "a poll after the cut", 10*time.Second, func() bool { return f.Calls("getUpdates") > polls })
	id := f.Inject(obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "still there?"})})
	waitFor(t, "the update on the bus", 10*time.Second, func() bool { return len(inbound(t, b)) == 1 })
	checkExactlyOnce(t, inbound(t, b), []int64{id})
	if n := f.Calls("deleteWebhook"); n != 1 {
		t.Fatalf("the gateway connected %d times, want it to keep polling", n)
	}
}

// TestHandoverAfterKill runs the active poller in a child process, kills
// it with SIGKILL while updates flow, and checks that the in-process
// standby takes over within 15 s with every update on the bus once.
func TestHandoverAfterKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess test")
	}
	f := newFake(t)
	url := bustest.EmbeddedURL(t)
	b := bustest.New(t, url)
	cfg := testConfig(f)
	cfg.LeaseTTL = 2 * time.Second

	child := exec.Command(os.Args[0], "-test.run=^TestHelperActivePoller$", "-test.v")
	child.Env = append(os.Environ(), "TG_HELPER=1", "TG_NATS="+url, "TG_PREFIX="+b.Topology().Prefix, "TG_API="+f.URL)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	waitFor(t, "the child to poll", 30*time.Second, func() bool { return f.Calls("getUpdates") > 0 })

	standby, _ := startService(t, cfg, b, "standby")
	waitFor(t, "the standby", 20*time.Second, func() bool { st, _ := standby.Runner().State(); return st == platform.StateStandby })

	var ids []int64
	ids = append(ids, injectText(f, 10)...)
	waitFor(t, "the child to publish", 20*time.Second, func() bool { return len(inbound(t, b)) >= 10 })
	ids = append(ids, injectText(f, 5)...) // some may be in flight at the kill
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ids = append(ids, injectText(f, 5)...)
	waitFor(t, "the standby to take over", 15*time.Second, func() bool { st, _ := standby.Runner().State(); return st == platform.StateConnected })
	t.Logf("handover after %v", time.Since(killed).Round(time.Millisecond))
	ids = append(ids, injectText(f, 5)...)
	waitFor(t, "every update on the bus", 20*time.Second, func() bool { return len(inbound(t, b)) >= len(ids) && f.Confirmed() > ids[len(ids)-1] })
	checkExactlyOnce(t, inbound(t, b), ids)
	if f.Conflicts() > 0 {
		t.Errorf("%d getUpdates answered 409 during the handover", f.Conflicts())
	}
}

// TestHelperActivePoller is the child process of TestHandoverAfterKill.
func TestHelperActivePoller(t *testing.T) {
	if os.Getenv("TG_HELPER") != "1" {
		t.Skip("helper process")
	}
	nc, err := nats.Connect(os.Getenv("TG_NATS"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.New(nc, bus.Topology{Prefix: os.Getenv("TG_PREFIX"), Storage: jetstream.MemoryStorage, DedupeWindow: 2 * time.Minute}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.BotToken, cfg.APIBaseURL, cfg.PollTimeout, cfg.LeaseTTL = testToken, os.Getenv("TG_API"), 2*time.Second, 2*time.Second
	s, err := New(cfg, Deps{Log: quietLog(), Bus: b, Instance: "child"})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Run(context.Background()) // until SIGKILL
}

func sendReq(t *testing.T, b *bus.Bus, req *deliveryv1.SendRequested) *deliveryv1.SendReceipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	r := &deliveryv1.SendReceipt{}
	if err := b.Request(ctx, b.Topology().SendSubject("telegram"), req, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSending(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, _ := startService(t, testConfig(f), b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	target := func(chat, thread, reply string) *deliveryv1.Target {
		return &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: chat, ThreadId: thread, ReplyToMessageId: reply}
	}
	n := 0
	send := func(tg *deliveryv1.Target, text string, mod func(*deliveryv1.SendRequested)) *deliveryv1.SendReceipt {
		n++
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: fmt.Sprintf("k%d", n), Target: tg, Text: text,
			Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN}
		if mod != nil {
			mod(req)
		}
		return sendReq(t, b, req)
	}
	last := func(chat string) telegramfake.Message {
		ms := f.Messages(chat)
		if len(ms) == 0 {
			t.Fatalf("no message in %s", chat)
		}
		return ms[len(ms)-1]
	}

	t.Run("markdown rendered as MarkdownV2", func(t *testing.T) {
		r := send(target("1", "", ""), "**Done.** See `x.go` (v1.2)!", nil)
		m := last("1")
		if !r.GetOk() || m.ParseMode != "MarkdownV2" || m.Shown != "Done. See x.go (v1.2)!" {
			t.Fatalf("receipt %v, message %+v", r, m)
		}
	})
	t.Run("plain fallback when entities are rejected, markers stripped as in Hermes", func(t *testing.T) {
		f.FailNext("sendMessage", telegramfake.ErrParseEntities)
		r := send(target("2", "", ""), "a *b* **c** ~~d~~ [e](https://x.io) snake_case_name", nil)
		m := last("2")
		if !r.GetOk() || m.ParseMode != "" || m.Text != "a b c d e (https://x.io) snake_case_name" {
			t.Fatalf("receipt %v, message %+v", r, m)
		}
	})
	t.Run("reply threading on the first chunk only, forum thread kept", func(t *testing.T) {
		send(target("-1002285219668", "17585", "7"), "part one", func(r *deliveryv1.SendRequested) { r.ChunkCount = 2 })
		first := last("-1002285219668")
		send(target("-1002285219668", "17585", "7"), "part two", func(r *deliveryv1.SendRequested) { r.ChunkIndex, r.ChunkCount = 1, 2 })
		second := last("-1002285219668")
		if first.ReplyTo != 7 || second.ReplyTo != 0 || first.ThreadID != 17585 || second.ThreadID != 17585 {
			t.Fatalf("first %+v second %+v", first, second)
		}
		send(target("-1002285219668", "1", ""), "general", nil)
		if m := last("-1002285219668"); m.ThreadID != 0 {
			t.Fatalf("General topic sent with message_thread_id %d", m.ThreadID)
		}
	})
	t.Run("a deleted topic's answer goes to its group, not to a dead letter", func(t *testing.T) {
		f.DeleteTopic("-1002285219669", 33)
		r := send(target("-1002285219669", "33", "7"), "answer", nil)
		ms := f.Messages("-1002285219669")
		if !r.GetOk() || len(ms) != 1 || ms[0].ThreadID != 0 || ms[0].Shown != "answer" || ms[0].ReplyTo != 7 {
			t.Fatalf("receipt %v messages %+v", r, ms)
		}
		// A photo into the deleted topic too.
		r = send(target("-1002285219669", "33", ""), "chart", func(r *deliveryv1.SendRequested) {
			r.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}}}
		})
		if m := last("-1002285219669"); !r.GetOk() || m.Kind != "photo" || m.ThreadID != 0 {
			t.Fatalf("receipt %v message %+v", r, m)
		}
		// Once "not found" in passing: the topic is kept.
		f.FailNext("sendMessage", telegramfake.ErrThreadNotFound)
		if r := send(target("-1002285219669", "34", ""), "kept", nil); !r.GetOk() || last("-1002285219669").ThreadID != 34 {
			t.Fatalf("receipt %v message %+v", r, last("-1002285219669"))
		}
		// A private chat's topic is not left for the main conversation.
		f.DeleteTopic("77", 5)
		if r := send(target("77", "5", ""), "private", nil); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || len(f.Messages("77")) != 0 {
			t.Fatalf("receipt %v messages %+v", r, f.Messages("77"))
		}
	})
	t.Run("an answer in a private chat's topic stays in the topic", func(t *testing.T) {
		f.SetPrivateTopics(true, true)
		thread, err := f.OpenTopic("78", "Ideas")
		if err != nil {
			t.Fatal(err)
		}
		r := send(target("78", strconv.Itoa(thread), "7"), "in the topic", nil)
		if m := last("78"); !r.GetOk() || m.ThreadID != thread || m.ReplyTo != 7 || m.Shown != "in the topic" {
			t.Fatalf("receipt %v message %+v", r, m)
		}
	})
	t.Run("flood wait is RATE_LIMITED with retry_after", func(t *testing.T) {
		f.FailNext("sendMessage", telegramfake.FloodWait(7))
		r := send(target("3", "", ""), "hi", nil)
		if r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED || r.GetRetryAfterMs() != 7000 {
			t.Fatalf("receipt %v", r)
		}
	})
	t.Run("forbidden and chat not found are PERMANENT", func(t *testing.T) {
		for _, e := range []telegramfake.APIError{telegramfake.ErrForbidden, telegramfake.ErrChatNotFound} {
			f.FailNext("sendMessage", e)
			if r := send(target("4", "", ""), "hi", nil); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
				t.Fatalf("%s: receipt %v", e.Description, r)
			}
		}
	})
	t.Run("over 4096 UTF-16 units is PERMANENT", func(t *testing.T) {
		text := strings.Repeat("😀", 2049) // 4098 UTF-16 units, 2049 runes
		if r := send(target("5", "", ""), text, nil); r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			t.Fatalf("receipt %v", r)
		}
		if len(f.Messages("5")) != 0 {
			t.Fatal("over-long text reached telegram")
		}
	})
	t.Run("edit, typing, delete", func(t *testing.T) {
		r := send(target("6", "", ""), "draft", nil)
		edit := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_EDIT, IdempotencyKey: "e1", Target: target("6", "", ""), MessageId: r.GetPlatformMessageId(), Text: "final"}
		if er := sendReq(t, b, edit); !er.GetOk() || last("6").Shown != "final" {
			t.Fatalf("edit receipt %v message %+v", er, last("6"))
		}
		edit.IdempotencyKey = "e2" // same text again: "message is not modified" is fine
		if er := sendReq(t, b, edit); !er.GetOk() {
			t.Fatalf("unchanged edit receipt %v", er)
		}
		if tr := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target("6", "", "")}); !tr.GetOk() {
			t.Fatalf("typing receipt %v", tr)
		}
		if a := f.Actions(); len(a) == 0 || a[len(a)-1].Action != "typing" {
			t.Fatalf("actions %v", a)
		}
		del := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_DELETE, IdempotencyKey: "d1", Target: target("6", "", ""), MessageId: r.GetPlatformMessageId()}
		if dr := sendReq(t, b, del); !dr.GetOk() || !last("6").Deleted {
			t.Fatalf("delete receipt %v", dr)
		}
	})
	// A forum's General topic: a message goes without message_thread_id
	// (Telegram refuses 1), the typing action names it, or General's view
	// never shows the bot typing (Hermes's _message_thread_id_for_typing).
	t.Run("typing in a forum's General topic names it", func(t *testing.T) {
		if tr := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target("-1002285219670", "1", "")}); !tr.GetOk() {
			t.Fatalf("typing receipt %v", tr)
		}
		var got []telegramfake.Action
		for _, a := range f.Actions() {
			if a.ChatID == "-1002285219670" {
				got = append(got, a)
			}
		}
		if len(got) != 1 || got[0].ThreadID != 1 || got[0].Action != "typing" {
			t.Fatalf("actions %+v", got)
		}
		// Refused as not found, it goes without the thread.
		f.DeleteTopic("-1002285219671", 1)
		if tr := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING, Target: target("-1002285219671", "1", "")}); !tr.GetOk() {
			t.Fatalf("typing receipt %v", tr)
		}
		got = nil
		for _, a := range f.Actions() {
			if a.ChatID == "-1002285219671" {
				got = append(got, a)
			}
		}
		if len(got) != 1 || got[0].ThreadID != 0 {
			t.Fatalf("actions %+v", got)
		}
	})
	t.Run("photo and document", func(t *testing.T) {
		r := send(target("8", "", "3"), "chart", func(r *deliveryv1.SendRequested) {
			r.Attachments = []*eventsv1.Attachment{
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}},
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "https://example.com/r.pdf"}},
			}
		})
		ms := f.Messages("8")
		if !r.GetOk() || len(ms) != 2 || ms[0].Kind != "photo" || ms[0].Shown != "chart" || ms[0].ReplyTo != 3 || ms[1].Kind != "document" || ms[1].ReplyTo != 0 {
			t.Fatalf("receipt %v messages %+v", r, ms)
		}
	})
	t.Run("bytes are uploaded", func(t *testing.T) {
		png := "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
		r := send(target("10", "", ""), "generated", func(r *deliveryv1.SendRequested) {
			r.Attachments = []*eventsv1.Attachment{
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: png}},
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, FileName: "notes.txt", Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,aGk="}},
			}
		})
		ms := f.Messages("10")
		if !r.GetOk() || len(ms) != 2 || ms[0].Kind != "photo" || ms[0].File != "upload:file.png" || ms[0].Shown != "generated" ||
			ms[1].Kind != "document" || ms[1].File != "upload:notes.txt" {
			t.Fatalf("receipt %v messages %+v", r, ms)
		}
		// Kept bytes without the attachment store: refused, nothing sent.
		r = send(target("11", "", ""), "", func(r *deliveryv1.SendRequested) {
			r.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_BytesRef{BytesRef: "x.0"}}}
		})
		if r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || len(f.Messages("11")) != 0 {
			t.Fatalf("receipt %v messages %+v", r, f.Messages("11"))
		}
	})
	t.Run("a retry after a later attachment failed sends only what is missing", func(t *testing.T) {
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "media-retry", Target: target("9", "", ""),
			Text: "report", Attachments: []*eventsv1.Attachment{
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: "https://example.com/a.png"}},
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, Location: &eventsv1.Attachment_Url{Url: "https://example.com/r.pdf"}},
			}}
		f.FailNext("sendDocument", telegramfake.FloodWait(1))
		if r := sendReq(t, b, req); r.GetOk() || r.GetErrorClass() != deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED {
			t.Fatalf("first attempt: receipt %v", r)
		}
		r := sendReq(t, b, req) // delivery's retry, same idempotency key
		ms := f.Messages("9")
		if !r.GetOk() || len(ms) != 2 || ms[0].Kind != "photo" || ms[1].Kind != "document" {
			t.Fatalf("receipt %v messages %+v, want the photo once and then the document", r, ms)
		}
		if r.GetPlatformMessageId() != strconv.Itoa(ms[0].ID) {
			t.Fatalf("receipt names message %s, want the first part %d", r.GetPlatformMessageId(), ms[0].ID)
		}
	})
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	s, _ := startService(t, cfg, b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	if u, sec := f.Webhook(); u != cfg.WebhookURL || sec != "s3cret" {
		t.Fatalf("webhook registered as %q %q", u, sec)
	}
	id := f.Inject(obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": "via webhook"})})
	// Wrong secret: refused, nothing published.
	req, _ := http.NewRequest(http.MethodPost, cfg.WebhookURL, strings.NewReader(`{"update_id":1,"message":{"message_id":1,"date":1,"chat":{"id":5,"type":"private"},"text":"forged"}}`))
	req.Header.Set("X-Telegram-Bot-Api-Secret-Token", "wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong secret answered %d", resp.StatusCode)
	}
	for range 2 { // Telegram retrying: still one event
		code, err := f.Push(context.Background(), id)
		if err != nil || code != http.StatusOK {
			t.Fatalf("push: %d %v", code, err)
		}
	}
	checkExactlyOnce(t, inbound(t, b), []int64{id})
}

// Over the webhook, quick messages of one chat are published in the
// order they were sent: the webhook is registered with one connection,
// so Telegram posts an update only after the last one was answered
// (over its default 40 connections they would race).
func TestWebhookKeepsOrder(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	s, _ := startService(t, cfg, b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	if n := f.WebhookMaxConnections(); n != 1 {
		t.Fatalf("webhook registered for %d connections, want 1", n)
	}
	var ids []int64
	for i := range 12 {
		ids = append(ids, f.Inject(obj{"message": msg(obj{"from": alice, "chat": dmChat, "text": fmt.Sprintf("part %d", i)})}))
	}
	if err := f.PushAll(context.Background(), ids); err != nil {
		t.Fatal(err)
	}
	evs := inbound(t, b)
	checkExactlyOnce(t, evs, ids)
	for i, e := range evs {
		if i < len(ids) && e.GetEventId() != strconv.FormatInt(ids[i], 10) {
			t.Fatalf("event %d on the bus is update %s, want %d (the order sent)", i, e.GetEventId(), ids[i])
		}
	}
}

// Anyone can connect to the webhook: a connection left idle after its
// request (or never finishing one) is closed, so such connections
// cannot pile up until the gateway runs out of descriptors.
func TestWebhookClosesIdleConnections(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := webhookConfig(t, f)
	addr := cfg.WebhookListen
	s, err := New(cfg, Deps{Log: quietLog(), Bus: b, Instance: "a", Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	s.p.webhookBounds = connBounds{header: 300 * time.Millisecond, read: 300 * time.Millisecond, idle: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })

	closed := func(t *testing.T, c net.Conn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the connection is still open")
				}
				return
			}
		}
	}
	t.Run("idle after a request", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST /tg/hook HTTP/1.1\r\nHost: x\r\nX-Telegram-Bot-Api-Secret-Token: wrong\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
			t.Fatal(err)
		}
		closed(t, c)
	})
	t.Run("a body that never ends", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST /tg/hook HTTP/1.1\r\nHost: x\r\nX-Telegram-Bot-Api-Secret-Token: s3cret\r\nContent-Length: 100000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		closed(t, c)
	})
}
