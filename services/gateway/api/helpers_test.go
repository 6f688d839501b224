package api

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

const testKey = "sk-test-key"

// startService runs an API gateway on a random loopback port.
func startService(t *testing.T, b *bus.Bus, mutate func(*Config)) *Service {
	t.Helper()
	s, _ := runService(t, b, mutate)
	return s
}

// runService runs an API gateway on a random loopback port; stop ends it
// (it ends at cleanup otherwise).
func runService(t *testing.T, b *bus.Bus, mutate func(*Config)) (*Service, func()) {
	t.Helper()
	return runServiceWith(t, b, mutate, nil)
}

// runServiceWith is runService with runner options of the test's.
func runServiceWith(t *testing.T, b *bus.Bus, mutate func(*Config), runner func(*platform.Options)) (*Service, func()) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Key = testKey
	cfg.RateLimit = 0
	if mutate != nil {
		mutate(&cfg)
	}
	opts := platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), Attachments: attachment.Config{Enabled: true}}
	if runner != nil {
		runner(&opts)
	}
	s, err := New(cfg, Deps{Bus: b, Log: slog.Default(), RunnerOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-s.Listening():
	case <-time.After(20 * time.Second):
		t.Fatal("gateway did not listen")
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.Ready(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("gateway not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s, stop
}

// responder stands in for router + worker + delivery: it reads the API
// gateway's inbound events from the bus and answers each over the real
// send contract with streamed deltas and a final send.
type responder struct {
	mu    sync.Mutex
	chats []string // chat id of each event, in order
	turns map[string]int
	// events are the inbound events answered, in arrival order.
	events []*eventsv1.MessageReceived
	// before, when set, is called before piece i is sent (and may hold it).
	before func(i int)
	// answered counts the final sends the gateway took, per chat id.
	answered map[string]int
	// answer makes the reply pieces for an event.
	answer func(ev *eventsv1.MessageReceived, turn int) []string
	// gate, when set, holds every answer until it is closed.
	gate chan struct{}
	// hops, when set, stamps the final send's hop times.
	hops func() *deliveryv1.HopTimes
	// final, when set, makes the final's text from the pieces streamed
	// (default: all of them).
	final func(pieces []string) string
	// restart, when set, marks the pieces sent as the break before a
	// later model call's text (SendRequested.stream_restart).
	restart func(i int) bool
	// failure, when set, fails every turn with this error code
	// (ReplyError.code): its final send explains it.
	failure string
	// pace, when set, is the time before each piece and the final: a
	// turn whose answer takes a while to write.
	pace time.Duration
	// media, when set, is sent (one send each, as delivery sends a
	// ReplyEvent's media) after the streamed text, before the final.
	media []*eventsv1.Attachment
	// tools, when set, are the steps of tool calls sent before the piece
	// they are keyed by (SEND_OP_TOOL_PROGRESS, as delivery passes them).
	tools map[int][]*deliveryv1.ToolStep
}

// failureText is how the responder's failed turns explain themselves.
const failureText = "⚠️ The AI service is busy right now. Please try again in a minute."

func startResponder(t *testing.T, b *bus.Bus) *responder {
	t.Helper()
	r := &responder{turns: map[string]int{}}
	r.answer = func(ev *eventsv1.MessageReceived, turn int) []string {
		return []string{"echo", ": " + ev.GetText(), fmt.Sprintf(" (turn %d)", turn)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			t.Errorf("responder decode: %v", err)
			return
		}
		go r.reply(ctx, t, b, ev)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Stop(); cancel() })
	return r
}

func (r *responder) reply(ctx context.Context, t *testing.T, b *bus.Bus, ev *eventsv1.MessageReceived) {
	r.mu.Lock()
	chat := ev.GetSource().GetChatId()
	r.chats = append(r.chats, chat)
	r.events = append(r.events, ev)
	r.turns[chat]++
	turn := r.turns[chat]
	gate := r.gate
	r.mu.Unlock()
	pieces := r.answer(ev, turn)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return
		}
	}
	target := &deliveryv1.Target{Platform: PlatformName, Account: ev.GetSource().GetAccount(), ChatId: chat}
	turnID := "turn-" + ev.GetEventId()
	send := func(req *deliveryv1.SendRequested) {
		req.Target, req.TurnId, req.InputMessageIds = target, turnID, []string{ev.GetMessageId()}
		req.SessionKey = "agent:main:api:dm:" + chat
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		receipt := &deliveryv1.SendReceipt{}
		if err := b.Request(rctx, b.Topology().SendSubject(PlatformName), req, receipt); err != nil {
			if ctx.Err() == nil {
				t.Errorf("responder send: %v", err)
			}
			return
		}
		if !receipt.GetOk() {
			t.Errorf("responder receipt %v", receipt)
		}
	}
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TYPING})
	r.mu.Lock()
	restart, pace, tools, before := r.restart, r.pace, r.tools, r.before
	r.mu.Unlock()
	wait := func() {
		if pace == 0 {
			return
		}
		select {
		case <-time.After(pace):
		case <-ctx.Done():
		}
	}
	for i, p := range pieces {
		wait()
		if before != nil {
			before(i)
		}
		for j, step := range tools[i] {
			send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS, ToolStep: step, IdempotencyKey: fmt.Sprintf("%s:tool:%d:%d", turnID, i, j)})
		}
		send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, Text: p, IdempotencyKey: fmt.Sprintf("%s:delta:%d", turnID, i),
			StreamRestart: restart != nil && restart(i)})
	}
	text := strings.Join(pieces, "")
	r.mu.Lock()
	if r.final != nil {
		text = r.final(pieces)
	}
	failure, media := r.failure, r.media
	r.mu.Unlock()
	for i, a := range media {
		send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Attachments: []*eventsv1.Attachment{a},
			IdempotencyKey: fmt.Sprintf("%s:media:%d", turnID, i)})
	}
	// The tokens the fake model "used": the input's and the answer's length.
	final := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: text, Final: true, IdempotencyKey: turnID + ":1:0",
		Usage: &deliveryv1.TokenUsage{PromptTokens: int64(len(ev.GetText())), CompletionTokens: int64(len(text))}}
	if failure != "" {
		final.Text, final.ErrorCode, final.Usage = failureText, failure, nil
	}
	if r.hops != nil {
		final.HopTimes = r.hops()
	}
	wait()
	send(final)
	r.mu.Lock()
	if r.answered == nil {
		r.answered = map[string]int{}
	}
	r.answered[chat]++
	r.mu.Unlock()
}

// delivered reports whether the gateway took the final send of an
// answer in chat.
func (r *responder) delivered(chat string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.answered[chat] > 0
}

// hold makes the responder wait for the returned release before it
// answers.
func (r *responder) hold() (release func()) {
	gate := make(chan struct{})
	r.mu.Lock()
	r.gate = gate
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

func (r *responder) received() []*eventsv1.MessageReceived {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*eventsv1.MessageReceived(nil), r.events...)
}

func (r *responder) userIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.events))
	for i, ev := range r.events {
		out[i] = ev.GetSource().GetUserId()
	}
	return out
}

func (r *responder) chatIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.chats...)
}

func newBus(t *testing.T) *bus.Bus { return bustest.New(t, bustest.EmbeddedURL(t)) }
