package platformtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Memory is an in-process platform with a JSON wire format, for testing
// the kit itself (and as the smallest example of a Platform). Its fake
// side delivers raw JSON updates over a channel and waits for the
// gateway's acknowledgement, like a long-poll platform.
type Memory struct {
	account   string
	single    bool
	ephemeral bool

	mu          sync.Mutex
	updates     chan update // current connection's wire; nil when down
	drop        chan struct{}
	connections int
	sent        map[string][]string
	texts       map[string]string // message id → chat, for edits
	nextID      int
	failNext    error
	typing      int
	lastByID    map[string]rawUpdate
	ids         atomic.Int64
	connectedCh chan struct{}
	emoji       platform.Reactions
	reactions   map[string][]string // chat/message → the bot's reactions
	reactCalls  int
	reactPanic  bool
	reactErr    error
}

type update struct {
	raw []byte
	ack chan error
}

type rawUpdate struct {
	ID    string `json:"update_id"`
	Chat  string `json:"chat"`
	User  string `json:"user"`
	Type  string `json:"chat_type"`
	Text  string `json:"text"`
	Photo string `json:"photo,omitempty"`
	Reply string `json:"reply_to,omitempty"`
	// Panic makes the update's handling panic, as a gateway's bug on a
	// payload would (DeliverPoison).
	Panic bool `json:"panic,omitempty"`
}

// NewMemory returns a memory platform for bot identity account; single
// makes it a single-consumer platform (leased).
func NewMemory(account string, single bool) *Memory {
	return &Memory{account: account, single: single, sent: map[string][]string{}, texts: map[string]string{}, lastByID: map[string]rawUpdate{}, connectedCh: make(chan struct{}, 16),
		reactions: map[string][]string{}}
}

func (m *Memory) Name() string         { return "memory" }
func (m *Memory) Account() string      { return m.account }
func (m *Memory) SingleConsumer() bool { return m.single }

// Ephemeral reports what SetEphemeral set: whether the platform keeps
// nothing for a next connection (platform.Ephemeral).
func (m *Memory) Ephemeral() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ephemeral
}

// SetEphemeral makes the platform ephemeral (before the runner starts).
func (m *Memory) SetEphemeral(on bool) {
	m.mu.Lock()
	m.ephemeral = on
	m.mu.Unlock()
}
func (m *Memory) Capabilities() platform.Capabilities {
	return platform.Capabilities{MaxLength: 4096, Measure: platform.MeasureRunes, CanSend: true, CanEdit: true, CanDelete: true, CanTyping: true,
		MediaKinds: []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE}, CommandPrefix: "/"}
}

// FailNext makes the next Connect fail with err (wrap with platform.Fatal
// for a fatal failure).
func (m *Memory) FailNext(err error) {
	m.mu.Lock()
	m.failNext = err
	m.mu.Unlock()
}

// Connected returns a channel that receives once per accepted connection.
func (m *Memory) ConnectedC() <-chan struct{} { return m.connectedCh }

func (m *Memory) Connect(ctx context.Context, conn platform.Conn) error {
	m.mu.Lock()
	if err := m.failNext; err != nil {
		m.failNext = nil
		m.mu.Unlock()
		return err
	}
	ups := make(chan update)
	drop := make(chan struct{})
	m.updates, m.drop = ups, drop
	m.connections++
	m.mu.Unlock()
	conn.Connected()
	select {
	case m.connectedCh <- struct{}{}:
	default:
	}
	defer func() {
		m.mu.Lock()
		if m.updates == ups {
			m.updates = nil
		}
		m.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-drop:
			return errors.New("connection reset by platform")
		case u := <-ups:
			// As the gateways do: an update whose handling panics is
			// skipped, counted, and acknowledged.
			var err error
			platform.Receive(ctx, conn, slog.New(slog.DiscardHandler), "memory", "", u.raw, func() { err = m.handle(ctx, conn, u.raw) })
			u.ack <- err
		}
	}
}

func (m *Memory) handle(ctx context.Context, conn platform.Conn, raw []byte) error {
	var u rawUpdate
	if err := json.Unmarshal(raw, &u); err != nil {
		conn.Reject(ctx, "malformed update", err)
		return nil
	}
	if u.Panic {
		var ev *eventsv1.MessageReceived
		_ = ev.Source.ChatId // a nil dereference, as a gateway's bug
	}
	_, err := conn.Deliver(ctx, m.normalize(u))
	if errors.Is(err, platform.ErrRejected) {
		return nil // acknowledged: the platform must not resend it
	}
	return err
}

func (m *Memory) normalize(u rawUpdate) *eventsv1.MessageReceived {
	ev := &eventsv1.MessageReceived{
		EventId:   u.ID,
		MessageId: "m" + u.ID,
		Source:    &eventsv1.SessionSource{Platform: "memory", Account: m.account, ChatId: u.Chat, ChatType: u.Type, UserId: u.User},
		Text:      u.Text,
	}
	if u.Photo != "" {
		ev.Attachments = []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: u.Photo}}}
	}
	if u.Reply != "" {
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: u.Reply}
	}
	return ev
}

func (m *Memory) Send(_ context.Context, req *deliveryv1.SendRequested) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	chat := req.GetTarget().GetChatId()
	if strings.HasPrefix(chat, "missing") {
		return "", platform.Permanent(fmt.Errorf("chat %s not found", chat))
	}
	m.nextID++
	id := fmt.Sprintf("sent-%d", m.nextID)
	m.sent[chat] = append(m.sent[chat], req.GetText())
	m.texts[id] = chat
	return id, nil
}

func (m *Memory) Edit(_ context.Context, req *deliveryv1.SendRequested) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.texts[req.GetMessageId()]; !ok {
		return platform.Permanent(fmt.Errorf("message %s not found", req.GetMessageId()))
	}
	return nil
}

func (m *Memory) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	return m.Edit(ctx, req)
}

func (m *Memory) Typing(context.Context, *deliveryv1.SendRequested) error {
	m.mu.Lock()
	m.typing++
	m.mu.Unlock()
	return nil
}

// Typings is how many typing indicators the platform showed.
func (m *Memory) Typings() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.typing
}

// SetReactions turns reactions on with these emoji (before the runner
// starts; platform.Reactor).
func (m *Memory) SetReactions(e platform.Reactions) {
	m.mu.Lock()
	m.emoji = e
	m.mu.Unlock()
}

// FailReactions makes every React and Unreact fail with err (nil: succeed
// again).
func (m *Memory) FailReactions(err error) {
	m.mu.Lock()
	m.reactErr = err
	m.mu.Unlock()
}

// PanicReactions makes every React and Unreact panic (false: work
// again), as a platform's code reaching a nil pointer would.
func (m *Memory) PanicReactions(on bool) {
	m.mu.Lock()
	m.reactPanic = on
	m.mu.Unlock()
}

// Reactions is platform.Reactor: what SetReactions set.
func (m *Memory) Reactions() platform.Reactions {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.emoji
}

// React adds emoji to the bot's reactions on the message; with
// Reactions.Replace it replaces them.
func (m *Memory) React(_ context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reactCalls++
	if m.reactPanic {
		var nothing map[string]*deliveryv1.Target
		return errors.New(nothing[messageID].ChatId) // nil dereference
	}
	if m.reactErr != nil {
		return m.reactErr
	}
	k := t.GetChatId() + "/" + messageID
	switch {
	case m.emoji.Replace:
		m.reactions[k] = []string{emoji}
	case !slices.Contains(m.reactions[k], emoji):
		m.reactions[k] = append(m.reactions[k], emoji)
	}
	return nil
}

// Unreact removes emoji from the bot's reactions on the message; with
// Reactions.Replace it removes them all.
func (m *Memory) Unreact(_ context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reactCalls++
	if m.reactPanic {
		var nothing map[string]*deliveryv1.Target
		return errors.New(nothing[messageID].ChatId) // nil dereference
	}
	if m.reactErr != nil {
		return m.reactErr
	}
	k := t.GetChatId() + "/" + messageID
	if m.emoji.Replace {
		delete(m.reactions, k)
		return nil
	}
	m.reactions[k] = slices.DeleteFunc(m.reactions[k], func(e string) bool { return e == emoji })
	return nil
}

// ReactionCalls counts React and Unreact calls, failed ones included.
func (m *Memory) ReactionCalls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reactCalls
}

// push sends raw over the current connection and waits for the ack.
func (m *Memory) push(ctx context.Context, raw []byte) error {
	for {
		m.mu.Lock()
		ups := m.updates
		m.mu.Unlock()
		if ups != nil {
			u := update{raw: raw, ack: make(chan error, 1)}
			select {
			case ups <- u:
				return <-u.ack
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.connectedCh:
		}
	}
}

// Push delivers one update as the platform would (for kit tests).
func (m *Memory) Push(ctx context.Context, id, chat, text string) error {
	raw, _ := json.Marshal(rawUpdate{ID: id, Chat: chat, User: "u1", Type: "dm", Text: text})
	return m.push(ctx, raw)
}

// Fake returns the suite's driver for this platform.
func (m *Memory) Fake() Fake { return memoryFake{m} }

type memoryFake struct{ m *Memory }

func (f memoryFake) Kinds() []string { return []string{"text", "photo", "reply", "group"} }

func (f memoryFake) Deliver(t *testing.T, ctx context.Context, kind string) *eventsv1.MessageReceived {
	t.Helper()
	id := fmt.Sprintf("%d", f.m.ids.Add(1))
	u := rawUpdate{ID: id, Chat: "c" + id, User: "u1", Type: "dm", Text: "hello " + kind}
	switch kind {
	case "photo":
		u.Photo = "https://example.test/p.jpg"
	case "reply":
		u.Reply = "m1"
	case "group":
		u.Type = "group"
	}
	f.m.mu.Lock()
	f.m.lastByID[id] = u
	f.m.mu.Unlock()
	raw, _ := json.Marshal(u)
	if err := f.m.push(ctx, raw); err != nil {
		t.Fatalf("deliver %s: %v", kind, err)
	}
	return f.m.normalize(u)
}

func (f memoryFake) Redeliver(t *testing.T, ctx context.Context, eventID string) {
	t.Helper()
	f.m.mu.Lock()
	u := f.m.lastByID[eventID]
	f.m.mu.Unlock()
	raw, _ := json.Marshal(u)
	if err := f.m.push(ctx, raw); err != nil {
		t.Fatalf("redeliver: %v", err)
	}
}

func (f memoryFake) DeliverOversized(t *testing.T, ctx context.Context) {
	raw, _ := json.Marshal(rawUpdate{ID: "big", Chat: "c", Type: "dm", Text: strings.Repeat("x", 1<<20)})
	if err := f.m.push(ctx, raw); err != nil {
		t.Fatalf("deliver oversized: %v", err)
	}
}

func (f memoryFake) DeliverMalformed(t *testing.T, ctx context.Context) {
	if err := f.m.push(ctx, []byte(`{"update_id": 12, "chat": [`)); err != nil {
		t.Fatalf("deliver malformed: %v", err)
	}
}

// DeliverPoison sends an update whose handling panics (rawUpdate.Panic):
// the memory platform keeps the suite's check of platform.Receive with
// the runner, which no real gateway's fake has a payload for.
func (f memoryFake) DeliverPoison(t *testing.T, ctx context.Context) {
	raw, _ := json.Marshal(rawUpdate{ID: fmt.Sprintf("poison%d", f.m.ids.Add(1)), Chat: "c", User: "u1", Type: "dm", Text: "poison", Panic: true})
	if err := f.m.push(ctx, raw); err != nil {
		t.Fatalf("deliver poison: %v", err)
	}
}

func (f memoryFake) Drop(*testing.T) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.drop != nil {
		close(f.m.drop)
		f.m.drop = nil
		f.m.updates = nil
	}
}

func (f memoryFake) Connections() int {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.m.connections
}

func (f memoryFake) Answer(ev *eventsv1.MessageReceived) *deliveryv1.SendRequested {
	return &deliveryv1.SendRequested{
		Target:          &deliveryv1.Target{Platform: "memory", Account: ev.GetSource().GetAccount(), ChatId: ev.GetSource().GetChatId(), ReplyToMessageId: ev.GetMessageId()},
		InputMessageIds: []string{ev.GetMessageId()},
	}
}

func (f memoryFake) Sent(_ *testing.T, _ context.Context, target *deliveryv1.Target) []string {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return append([]string(nil), f.m.sent[target.GetChatId()]...)
}

func (f memoryFake) Reactions(_ *testing.T, _ context.Context, target *deliveryv1.Target, messageID string) []string {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return append([]string(nil), f.m.reactions[target.GetChatId()+"/"+messageID]...)
}
