package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/redisx/redistest"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// harness is one isolated world: a bus prefix, a Postgres schema, a Redis
// prefix and a fake LLM over HTTP.
type harness struct {
	t        *testing.T
	url      string
	bus      *bus.Bus
	db       *pgxpool.Pool
	rdb      *redis.Client
	prefix   string
	locker   *redisx.Locker
	fake     *fakellm.Server
	fakeURL  string
	inflight atomic.Int32 // concurrent model requests
	maxIn    atomic.Int32
	seq      atomic.Int64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	url := bustest.EmbeddedURL(t)
	h := &harness{t: t, url: url, bus: bustest.New(t, url), db: pgtest.New(t)}
	h.rdb, h.prefix = redistest.New(t)
	h.locker = redisx.NewLocker(h.rdb, h.prefix)
	ensureSessionsTable(t, h.db)
	h.fake = fakellm.New(fakellm.Config{Log: slog.Default()})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := h.inflight.Add(1)
		for {
			m := h.maxIn.Load()
			if n <= m || h.maxIn.CompareAndSwap(m, n) {
				break
			}
		}
		defer h.inflight.Add(-1)
		h.fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h.fakeURL = srv.URL
	return h
}

// ensureSessionsTable creates the router's sessions table when its
// migration is not in this build. Test-only: the real table comes from the
// router's migration (session_key text, generation bigint).
func ensureSessionsTable(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS sessions (
		session_key text PRIMARY KEY, session_id text NOT NULL, platform text NOT NULL,
		generation bigint NOT NULL DEFAULT 0)`)
	if err != nil {
		t.Fatal(err)
	}
}

func (h *harness) setGeneration(key string, gen int64) {
	h.t.Helper()
	_, err := h.db.Exec(context.Background(), `INSERT INTO sessions (session_key, session_id, platform, generation)
		VALUES ($1, 'sid-' || $1, 'telegram', $2)
		ON CONFLICT (session_key) DO UPDATE SET generation = EXCLUDED.generation`, key, gen)
	if err != nil {
		h.t.Fatal(err)
	}
}

// callTimeout bounds the harness's model calls: far above a fake's answer,
// short enough for a test of a stalled provider.
const callTimeout = 3 * time.Second

func (h *harness) openAI() worker.Backend { return h.openAIWithin(callTimeout) }

// openAIWithin is openAI whose calls are bounded by timeout instead.
func (h *harness) openAIWithin(timeout time.Duration) worker.Backend {
	p := llm.WithRetry(llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1", Model: "fake-model"}),
		llm.RetryPolicy{MaxAttempts: 2, CallTimeout: timeout, Sleep: func(context.Context, time.Duration) error { return nil }})
	return worker.Backend{Provider: p, Kind: "openai", Model: "fake-model", BaseURL: h.fakeURL + "/v1", KeyHash: "none"}
}

func (h *harness) anthropic() worker.Backend {
	p := llm.WithRetry(llm.NewAnthropic(llm.AnthropicConfig{BaseURL: h.fakeURL, Model: "fake-claude", APIKey: "k"}),
		llm.RetryPolicy{MaxAttempts: 2, CallTimeout: callTimeout, Sleep: func(context.Context, time.Duration) error { return nil }})
	return worker.Backend{Provider: p, Kind: "anthropic", Model: "fake-claude", BaseURL: h.fakeURL, KeyHash: "k"}
}

type runningWorker struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

// stop ends the worker gracefully and waits for it.
func (w *runningWorker) stop(t *testing.T) {
	t.Helper()
	w.cancel()
	select {
	case <-w.done:
		if w.err != nil {
			t.Errorf("worker run: %v", w.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not stop")
	}
}

// startWorker runs a worker with its own NATS connection.
func (h *harness) startWorker(id string, mod func(*worker.Config, *worker.Deps)) *runningWorker {
	h.t.Helper()
	nc, err := nats.Connect(h.url, nats.Name(id))
	if err != nil {
		h.t.Fatal(err)
	}
	b, err := bus.New(nc, h.bus.Topology(), slog.Default())
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := worker.DefaultConfig()
	cfg.ID = id
	cfg.RedisPrefix = h.prefix
	cfg.AckWait = 3 * time.Second
	cfg.DrainTimeout = 5 * time.Second
	// A stop waits for the pull in hand: at the default (1 s) every
	// worker a test stops or leaves running held it up by a second.
	cfg.PollWait = 200 * time.Millisecond
	cfg.DeltaInterval = time.Nanosecond
	deps := worker.Deps{Log: slog.Default(), Bus: b, DB: h.db, Redis: h.rdb, LLM: h.openAI()}
	if mod != nil {
		mod(&cfg, &deps)
	}
	w, err := worker.New(cfg, deps)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{cancel: cancel, done: make(chan struct{})}
	go func() {
		rw.err = w.Run(ctx)
		nc.Close()
		close(rw.done)
	}()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-rw.done:
		case <-time.After(30 * time.Second):
		}
	})
	return rw
}

// shortLockTTL is the session lock's TTL in tests that wait for a lock
// to expire or to be renewed. A failed attempt stops renewing its lock
// but does not give it back, so the next attempt waits for it to expire:
// about 4 s at the default 5 s TTL (less the 1 s redelivery backoff), 1 s
// at this one; and a renewal, which notices a lost or vanished lock,
// comes every TTL/3: 0.67 s apart instead of 1.67 s. A lock a stalled
// renewal let expire on a loaded machine is claimed again at the next
// one, as no other grant wants it.
const shortLockTTL = 2 * time.Second

// turnOpts customises a turn request.
type turnOpts struct {
	generation  int64 // 0: the session's current one
	token       string
	noLock      bool
	lockTTL     time.Duration // the lock's TTL a worker holds it with; 0: 5 s
	override    string
	sessionID   string
	origin      *eventsv1.SessionSource
	answerOnly  bool   // the input's sender shows no progress
	listsCalls  bool   // the input's answer lists the turn's tool calls (a Responses request)
	noReaction  bool   // the input's gateway marks it with no reaction
	command     string // the transcript command the router marked ("undo 2")
	attachments []*eventsv1.Attachment
	context     []*eventsv1.ContextMessage // a stateless client's conversation so far
	personality string                     // the session's personality prompt (/personality)
	effort      string                     // the session's reasoning effort (/reasoning)
	show        bool                       // the session shows the model's reasoning
	toolMode    string                     // the tool progress mode /verbose chose
	background  string                     // the /background task the turn runs
	noYolo      bool                       // router.yolo_command is off (yolo_disabled)
	focus       string                     // the focus topic of /compress <focus>
	keep        int32                      // /compress here N
	preview     bool                       // /compress --preview
	footer      bool                       // the chat's runtime footer is on (/footer)
	side        string                     // a /btw side question about this conversation (session id)
	voiceMode   string                     // the chat's voice reply mode (/voice)
	tier        string                     // the session's fast mode (/fast)
	moa         bool                       // a /moa prompt: answered by the Mixture of Agents
	skillsNote  string                     // Hermes's /reload-skills note the turn carries
	goal        bool                       // the conversation has an active standing goal (/goal)
	flush       bool                       // a pre-reset memory flush: no input, on the ended conversation
	route       *eventsv1.ReplyRoute       // where the replies go instead of the origin (a cron run's first target)
	// voiceByDownload: the input's gateway types it a voice message by
	// the files downloaded (Slack, Mattermost).
	voiceByDownload bool
	// merged are the attachments of further messages merged into the
	// turn, one message each.
	merged [][]*eventsv1.Attachment
	limit  int32 // the turn's context limit (an API request's truncation "auto")
	// turnID is the turn's id as the router's start named it (its lease's,
	// migration 00148); "": turn-<key>-<n>.
	turnID string
}

// requestTurn does what the router does: wait for and take the session
// lock, then publish the turn.
func (h *harness) requestTurn(key, text string, o turnOpts) *turnsv1.TurnRequested {
	h.t.Helper()
	ctx := context.Background()
	if o.token == "" {
		o.token = redisx.NewToken()
	}
	if !o.noLock {
		waitFor(h.t, 60*time.Second, "session lock", func() bool {
			ok, err := h.locker.Acquire(ctx, key, o.token, 5*time.Second)
			if err != nil {
				h.t.Fatal(err)
			}
			return ok
		})
	}
	if o.generation == 0 {
		if err := h.db.QueryRow(ctx, `SELECT generation FROM sessions WHERE session_key = $1`, key).Scan(&o.generation); err != nil {
			h.t.Fatal(err)
		}
	}
	if o.sessionID == "" {
		o.sessionID = "sid-" + key
	}
	if o.origin == nil {
		o.origin = &eventsv1.SessionSource{Platform: "telegram", Account: "bot1", ChatId: "99", ChatType: "dm",
			UserId: "u-" + key, UserName: "Alice"}
	}
	if o.lockTTL == 0 {
		o.lockTTL = 5 * time.Second
	}
	n := h.seq.Add(1)
	if o.turnID == "" {
		o.turnID = fmt.Sprintf("turn-%s-%d", key, n)
	}
	req := &turnsv1.TurnRequested{
		TurnId: o.turnID, SessionKey: key, SessionId: o.sessionID, Generation: o.generation,
		LockToken: o.token, LockTtlMs: o.lockTTL.Milliseconds(), GrantTtlMs: 60000, Origin: o.origin, ModelOverride: o.override, RequestedAt: timestamppb.Now(),
		Inputs: []*eventsv1.MessageReceived{{EventId: fmt.Sprintf("ev%d", n), MessageId: fmt.Sprintf("m%d", n), Text: text,
			Source: o.origin, AnswerOnly: o.answerOnly, ListsToolCalls: o.listsCalls, TranscriptCommand: o.command, Attachments: o.attachments, Context: o.context,
			NoReaction: o.noReaction, VoiceByDownload: o.voiceByDownload}},
		PersonalityPrompt: o.personality, ReasoningEffort: o.effort, ShowReasoning: o.show,
		ToolProgressMode: o.toolMode,
		BackgroundTaskId: o.background,
		YoloDisabled:     o.noYolo,
		CompressFocus:    o.focus,
		CompressKeepLast: o.keep,
		CompressPreview:  o.preview,
		RuntimeFooter:    o.footer,
		VoiceMode:        o.voiceMode,
		ServiceTier:      o.tier,
		Moa:              o.moa,
		SkillsNote:       o.skillsNote,
		GoalActive:       o.goal,
		ContextLimit:     o.limit,
	}
	for i, atts := range o.merged {
		req.Inputs = append(req.Inputs, &eventsv1.MessageReceived{EventId: fmt.Sprintf("ev%d.%d", n, i+1),
			MessageId: fmt.Sprintf("m%d.%d", n, i+1), Source: o.origin, Attachments: atts})
	}
	if o.flush {
		req.MemoryFlush, req.Inputs = true, nil
	}
	if o.route != nil {
		req.ReplyRoute = o.route
		req.Inputs[0].ReplyRoute = o.route
	}
	if o.side != "" {
		req.SideQuestion = &turnsv1.SideQuestion{SessionId: o.side}
	}
	if _, err := h.bus.Publish(ctx, h.bus.Topology().Subject(bus.SubjectTurnRequested), "turn:"+req.TurnId, req); err != nil {
		h.t.Fatal(err)
	}
	return req
}

// streamMsgs reads every message of a stream whose subject matches.
func streamMsgs[T any, P interface {
	*T
	proto.Message
}](t *testing.T, b *bus.Bus, stream, subject string) []P {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.JetStream().Stream(ctx, b.Topology().Stream(stream))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []P
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (work queue)
		}
		if subject != "" && m.Subject != subject {
			continue
		}
		var v T
		if err := proto.Unmarshal(m.Data, P(&v)); err != nil {
			t.Fatal(err)
		}
		out = append(out, P(&v))
	}
	return out
}

func (h *harness) replies(turnID string) []*repliesv1.ReplyEvent {
	var out []*repliesv1.ReplyEvent
	for _, ev := range streamMsgs[repliesv1.ReplyEvent](h.t, h.bus, bus.StreamReplies, "") {
		if ev.GetTurnId() == turnID {
			out = append(out, ev)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetSeq() < out[j].GetSeq() })
	return out
}

func (h *harness) completed(turnID string) *turnsv1.TurnCompleted {
	topo := h.bus.Topology()
	evs := streamMsgs[turnsv1.TurnCompleted](h.t, h.bus, bus.StreamTurnEvents, topo.Subject(bus.SubjectTurnCompleted))
	evs = append(evs, streamMsgs[turnsv1.TurnCompleted](h.t, h.bus, bus.StreamTurnEvents, topo.Subject(bus.SubjectTurnCompletedIdle))...)
	for _, ev := range evs {
		if ev.GetTurnId() == turnID {
			return ev
		}
	}
	return nil
}

func (h *harness) waitCompleted(turnID string) *turnsv1.TurnCompleted {
	h.t.Helper()
	var c *turnsv1.TurnCompleted
	waitFor(h.t, 60*time.Second, "turn "+turnID+" completed", func() bool {
		c = h.completed(turnID)
		return c != nil
	})
	return c
}

// control sends a control message the way the router does.
func (h *harness) control(key string, action turnsv1.ControlAction, text string) {
	h.t.Helper()
	h.controlEvent(key, action, text, "")
}

// controlEvent is control with the sender's event id (the router's
// inbound event, or the admin API's "admin-reset:<session id>").
func (h *harness) controlEvent(key string, action turnsv1.ControlAction, text, eventID string) {
	h.t.Helper()
	data, err := proto.Marshal(&turnsv1.TurnControlRequested{SessionKey: key, Action: action, Text: text, EventId: eventID})
	if err != nil {
		h.t.Fatal(err)
	}
	// A request, so the test knows the running turn has it.
	if _, err := h.bus.Conn().Request(h.bus.Topology().ControlSubject(key), data, 10*time.Second); err != nil {
		h.t.Fatal(err)
	}
}

// checkReplies asserts the reply invariants of a finished turn: seq from 1
// without gaps, exactly one final (text or error) and it is last.
func checkReplies(t *testing.T, evs []*repliesv1.ReplyEvent) (final *repliesv1.ReplyEvent) {
	t.Helper()
	for i, ev := range evs {
		if ev.GetSeq() != int64(i+1) {
			t.Fatalf("reply seqs not 1..n without gaps: event %d has seq %d", i, ev.GetSeq())
		}
		if ev.GetFinalText() != nil || ev.GetError() != nil {
			if final != nil {
				t.Fatalf("two finals: %v and %v", final, ev)
			}
			final = ev
		}
	}
	if final == nil {
		t.Fatalf("no final reply among %d events", len(evs))
	}
	if final != evs[len(evs)-1] {
		t.Fatalf("final is not the last event")
	}
	return final
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gate is a tool that blocks until released (or its context ends).
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 16), release: make(chan struct{})} }

// hookedRedis is a client of the test Redis whose commands go through
// hook (a fault to inject), for a worker's Deps.Redis.
func hookedRedis(t *testing.T, hook redis.Hook) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hook)
	return rdb
}
