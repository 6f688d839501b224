package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/cron"
	adminv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/admin/v1"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/reasoning"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
	"github.com/switchboard-chat/switchboard/services/delivery"
)

func TestFinalIsChunkedAndSentInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	long := strings.Repeat("word ", 1800) // 9000 runes: three messages
	e.publish(t, event("t1", 1, "s1", &repliesv1.Typing{Active: true}))
	// Typing goes out from its own goroutine, and a final that comes
	// first cancels it: wait for it so the order below is the test's.
	eventually(t, e.clock, 0, "typing", func() bool {
		calls, _ := e.gw.snapshot()
		return len(calls) > 0
	})
	fin := event("t1", 2, "s1", final(long))
	fin.NoReactionMessageIds = fin.InputMessageIds // the gateway leaves the input unmarked
	e.publish(t, fin)
	e.publish(t, event("", 0, "s1", &repliesv1.Notice{Text: "queued notice"}))
	eventually(t, e.clock, 0, "three chunks and a notice", func() bool {
		_, posted := e.gw.snapshot()
		return len(posted) == 4
	})
	calls, posted := e.gw.snapshot()
	if calls[0].Op != deliveryv1.SendOp_SEND_OP_TYPING {
		t.Errorf("first op %v, want typing", calls[0].Op)
	}
	for i, p := range posted[:3] {
		r := p.Req
		if r.GetIdempotencyKey() != fmt.Sprintf("t1:2:%d", i) || r.GetChunkIndex() != int32(i) || r.GetChunkCount() != 3 ||
			r.GetFinal() != (i == 2) || r.GetInputMessageIds()[0] != "in-t1" || !strings.HasSuffix(r.GetText(), fmt.Sprintf("(%d/3)", i+1)) ||
			len(r.GetNoReactionMessageIds()) != 1 || r.GetNoReactionMessageIds()[0] != "in-t1" {
			t.Errorf("chunk %d: key %s index %d/%d final %v suffix %q", i, r.GetIdempotencyKey(), r.GetChunkIndex(), r.GetChunkCount(), r.GetFinal(), r.GetText()[len(r.GetText())-6:])
		}
	}
	if posted[3].Req.GetText() != "queued notice" || !posted[3].Req.GetFinal() {
		t.Errorf("notice %q, final %v", posted[3].Req.GetText(), posted[3].Req.GetFinal())
	}
}

// The API answers a request with one body: a long answer goes out whole,
// without a cut or a counter, however long it is.
func TestAPIAnswerIsNotChunked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	long := strings.Repeat("```go\nx := 1\n```\nword word\n", 600) // 16,800 runes
	ev := event("t1", 1, "s1", final(long))
	ev.Target.Platform = "api"
	e.publish(t, ev)
	e.consumed(t, "s1")
	eventually(t, e.clock, 0, "the final send", func() bool {
		_, posted := e.gw.snapshot()
		return len(posted) > 0 && posted[len(posted)-1].Req.GetFinal()
	})
	_, posted := e.gw.snapshot()
	if len(posted) != 1 {
		t.Fatalf("%d sends, want the answer in one", len(posted))
	}
	if r := posted[0].Req; r.GetText() != long || r.GetChunkCount() != 1 {
		t.Errorf("sent %d runes as chunk %d/%d, want the %d-rune answer whole",
			len([]rune(r.GetText())), r.GetChunkIndex()+1, r.GetChunkCount(), len([]rune(long)))
	}
}

// The steps of a tool call reach a platform that streams natively (the
// API gateway's runs show them) as SEND_OP_TOOL_PROGRESS, an approval
// the call waits for included; a chat platform gets nothing of them. A
// start carries what the API gateway shows of the call as chats' lines
// do: its one-line preview (an external agent's detail stands for it),
// the tool's emoji, and its arguments; an end its result's preview.
func TestToolProgressReachesNativeStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	steps := []*repliesv1.ToolProgress{
		{ToolCallId: "c1", ToolName: "terminal", Phase: repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL, Detail: "terminal ls — reply /approve or /deny"},
		{ToolCallId: "c1", ToolName: "terminal", Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED, Detail: "ls -l",
			Preview: "ls -l", Emoji: "💻", Arguments: `{"command":"ls -l"}`},
		{ToolCallId: "c1", ToolName: "terminal", Phase: repliesv1.ToolPhase_TOOL_PHASE_FAILED, Detail: "error: exit status 2"},
		{ToolCallId: "c2", ToolName: "remote", Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED, Detail: "lookup"},
	}
	for _, platform := range []string{"test", "api"} {
		for i, st := range steps {
			ev := event("t-"+platform, int64(i+1), "s-"+platform, st)
			ev.Target.Platform = platform
			e.publish(t, ev)
		}
		ev := event("t-"+platform, int64(len(steps)+1), "s-"+platform, final("done"))
		ev.Target.Platform = platform
		e.publish(t, ev)
	}
	eventually(t, e.clock, 0, "both answers", func() bool { return e.gw.postedTexts()["done"] == 2 })
	calls, _ := e.gw.snapshot()
	var got []string
	for _, c := range calls {
		if c.Op != deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS {
			continue
		}
		if p := c.Req.GetTarget().GetPlatform(); p != "api" {
			t.Errorf("tool progress sent to %s", p)
		}
		s := c.Req.GetToolStep()
		got = append(got, fmt.Sprintf("%s %s %s %q %q %q %s", c.Key, s.GetToolCallId(), s.GetPhase(), s.GetDetail(), s.GetEmoji(), s.GetArguments(), c.Req.GetInputMessageIds()))
	}
	want := []string{
		`t-api:1:t c1 awaiting_approval "terminal ls — reply /approve or /deny" "" "" [in-t-api]`,
		`t-api:2:t c1 started "ls -l" "💻" "{\"command\":\"ls -l\"}" [in-t-api]`,
		`t-api:3:t c1 failed "error: exit status 2" "" "" [in-t-api]`,
		`t-api:4:t c2 started "lookup" "" "" [in-t-api]`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tool progress sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A notice that answers its message (a command's reply, a refusal) is the
// final send of that answer: the API gateway completes the request with
// it. Busy acknowledgements and reset notices precede an answer.
func TestNoticeFinality(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	kinds := map[string]bool{"command": true, "queue_full": true, "pairing": true, "busy": false, "reset": false}
	seq := int64(0)
	for kind := range kinds {
		seq++
		e.publish(t, event("", seq, "s-"+kind, &repliesv1.Notice{Text: "notice " + kind, Kind: kind}))
	}
	eventually(t, e.clock, 0, "every notice", func() bool {
		_, posted := e.gw.snapshot()
		return len(posted) == len(kinds)
	})
	_, posted := e.gw.snapshot()
	for _, p := range posted {
		kind := strings.TrimPrefix(p.Req.GetText(), "notice ")
		if p.Req.GetFinal() != kinds[kind] {
			t.Errorf("%s notice: final %v, want %v", kind, p.Req.GetFinal(), kinds[kind])
		}
	}
}

// A notice goes in the format the router wrote it in: Markdown for the
// answers to commands (Hermes's **bold** and `code`, which the platform
// renders), plain text otherwise.
func TestNoticeFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	tests := []struct {
		session string
		format  deliveryv1.TextFormat
		want    deliveryv1.TextFormat
	}{
		{"s-plain", deliveryv1.TextFormat_TEXT_FORMAT_UNSPECIFIED, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN},
		{"s-markdown", deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN},
		{"s-plain-said", deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN},
	}
	for i, tc := range tests {
		e.publish(t, event("", int64(i+1), tc.session, &repliesv1.Notice{Text: "**" + tc.session + "**", Kind: "command", Format: tc.format}))
	}
	eventually(t, e.clock, 0, "every notice", func() bool {
		_, posted := e.gw.snapshot()
		return len(posted) == len(tests)
	})
	_, posted := e.gw.snapshot()
	got := map[string]deliveryv1.TextFormat{}
	for _, p := range posted {
		got[strings.Trim(p.Req.GetText(), "*")] = p.Req.GetFormat()
	}
	for _, tc := range tests {
		if got[tc.session] != tc.want {
			t.Errorf("%s: format %v, want %v", tc.session, got[tc.session], tc.want)
		}
	}
}

// A send that times out after the platform accepted it is retried with
// the same idempotency key and is not posted twice.
func TestTimeoutAfterAcceptIsNotPostedTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(_ *deliveryv1.SendRequested, try int) behaviour { return behaviour{hang: try == 1} })
	e.start(t, testConfig(), "a")
	e.publish(t, event("t1", 1, "s1", final("hello once")))
	eventually(t, e.clock, 0, "row sent", func() bool { return rowState(t, e.db, "t1:1:0") == "sent" })
	calls, posted := e.gw.snapshot()
	if len(calls) < 2 {
		t.Fatalf("calls %d, want a retry", len(calls))
	}
	for _, c := range calls {
		if c.Key != "t1:1:0" {
			t.Errorf("retry used key %s", c.Key)
		}
	}
	if len(posted) != 1 {
		t.Fatalf("posted %d times", len(posted))
	}
}

// A 429 with retry-after 2 s is retried no sooner than 2 s later, by the
// clock the service runs on.
func TestRateLimitedHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(_ *deliveryv1.SendRequested, try int) behaviour {
		if try == 1 {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, Error: "Too Many Requests", RetryAfterMs: 2000}}
		}
		return behaviour{}
	})
	e.start(t, testConfig(), "a")
	e.publish(t, event("t1", 1, "s1", final("after a pause")))
	// The clock stands still until the first attempt's outcome is recorded:
	// run ahead earlier, it would let the claimed row's lease lapse first.
	eventually(t, e.clock, 0, "first attempt recorded", func() bool { return rowState(t, e.db, "t1:1:0") == "queued" })
	eventually(t, e.clock, 100*time.Millisecond, "retry", func() bool { calls, _ := e.gw.snapshot(); return len(calls) == 2 })
	calls, posted := e.gw.snapshot()
	if gap := calls[1].At.Sub(calls[0].At); gap < 2*time.Second {
		t.Fatalf("retried after %v, want at least 2s", gap)
	}
	if len(posted) != 1 {
		t.Fatalf("posted %d", len(posted))
	}
}

// Rows one 429 stopped together (a bot-wide limit) do not all come back
// in the same instant: each waits the retry-after, as a lower bound, plus
// a random part of up to half of it.
func TestRateLimitedRetriesAreSpreadOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(_ *deliveryv1.SendRequested, try int) behaviour {
		if try == 1 {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, Error: "Too Many Requests", RetryAfterMs: 2000}}
		}
		return behaviour{}
	})
	e.start(t, testConfig(), "a")
	const chats = 12
	for i := range chats {
		e.publish(t, event(fmt.Sprint("t", i), 1, fmt.Sprint("s", i), final("hello")))
	}
	// next_attempt_at − updated_at is the delay each retry was given (both
	// are set from the same instant).
	var delays []time.Duration
	eventually(t, e.clock, 0, "every first attempt recorded", func() bool {
		rows, err := e.db.Query(context.Background(), `SELECT (extract(epoch FROM next_attempt_at - updated_at) * 1e6)::bigint
FROM delivery_outbox WHERE state = 'queued' AND attempts = 1`)
		if err != nil {
			t.Fatal(err)
		}
		us, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		delays = delays[:0]
		for _, u := range us {
			delays = append(delays, time.Duration(u)*time.Microsecond)
		}
		return len(delays) == chats
	})
	distinct := map[time.Duration]bool{}
	for _, d := range delays {
		if d < 2*time.Second || d > 3*time.Second {
			t.Fatalf("a retry after %v, want within 2s (the retry-after) to 3s: %v", d, delays)
		}
		distinct[d] = true
	}
	if len(distinct) < chats/2 {
		t.Fatalf("%d rows retry at %d distinct delays, want them spread: %v", chats, len(distinct), delays)
	}
}

// adminServer is the admin service's delivery part as the router's admin
// service will serve it: the outbox adapter behind real gRPC.
type adminServer struct {
	adminv1.UnimplementedAdminServiceServer
	a *outbox.Admin
}

func (s adminServer) ListDeliveries(ctx context.Context, r *adminv1.ListDeliveriesRequest) (*adminv1.ListDeliveriesResponse, error) {
	return s.a.ListDeliveries(ctx, r)
}

func (s adminServer) RetryDeliveries(ctx context.Context, r *adminv1.RetryDeliveriesRequest) (*adminv1.RetryDeliveriesResponse, error) {
	return s.a.RetryDeliveries(ctx, r)
}

func (s adminServer) PurgeDeliveries(ctx context.Context, r *adminv1.PurgeDeliveriesRequest) (*adminv1.PurgeDeliveriesResponse, error) {
	return s.a.PurgeDeliveries(ctx, r)
}

// A permanent error dead-letters the row at once; an operator's retry
// through the admin API sends it.
func TestPermanentErrorDeadLettersAndAdminRetrySends(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	broken := true
	e.gw.setBehaviour(func(_ *deliveryv1.SendRequested, _ int) behaviour {
		if broken {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "Forbidden: bot was blocked by the user"}}
		}
		return behaviour{}
	})
	e.start(t, testConfig(), "a")
	e.publish(t, event("t1", 1, "s1", final("try me later")))
	eventually(t, e.clock, 0, "dead letter", func() bool { return rowState(t, e.db, "t1:1:0") == "failed" })
	if calls, _ := e.gw.snapshot(); len(calls) != 1 {
		t.Fatalf("permanent error was tried %d times", len(calls))
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	adminv1.RegisterAdminServiceServer(srv, adminServer{a: &outbox.Admin{Store: outbox.New(e.db), Now: e.clock.Now}})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := adminv1.NewAdminServiceClient(conn)
	ctx := context.Background()
	list, err := client.ListDeliveries(ctx, &adminv1.ListDeliveriesRequest{})
	if err != nil || len(list.GetDeliveries()) != 1 {
		t.Fatalf("list %v %v", list, err)
	}
	d := list.GetDeliveries()[0]
	if d.GetState() != deliveryv1.DeliveryState_DELIVERY_STATE_FAILED || !strings.Contains(d.GetLastError(), "blocked") {
		t.Fatalf("dead letter %v", d)
	}
	e.gw.mu.Lock()
	broken = false
	e.gw.mu.Unlock()
	resp, err := client.RetryDeliveries(ctx, &adminv1.RetryDeliveriesRequest{Ids: []string{d.GetId()}})
	if err != nil || resp.GetRequeued() != 1 {
		t.Fatalf("retry %v %v", resp, err)
	}
	eventually(t, e.clock, 0, "sent after retry", func() bool { return rowState(t, e.db, "t1:1:0") == "sent" })
	if n := e.gw.postedTexts()["try me later"]; n != 1 {
		t.Fatalf("posted %d times", n)
	}
}

// A formatting error is retried once as plain text.
func TestFormatErrorFallsBackToPlainText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.gw.setBehaviour(func(r *deliveryv1.SendRequested, _ int) behaviour {
		if r.GetFormat() != deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_FORMAT, Error: "can't parse entities"}}
		}
		return behaviour{}
	})
	e.start(t, testConfig(), "a")
	e.publish(t, event("t1", 1, "s1", &repliesv1.FinalText{Text: "*bold", Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN}))
	eventually(t, e.clock, 0, "sent as plain", func() bool { return rowState(t, e.db, "t1:1:0") == "sent" })
}

// A message no gateway can take within the TTL expires instead of being
// sent late.
func TestExpiresAfterTTL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.TTL = time.Minute
	// The clock runs fast here: attempts must not run out before the TTL.
	cfg.MaxAttempts = 1000
	e.start(t, cfg, "a")
	ev := event("t1", 1, "s1", final("nobody listens"))
	ev.Target.Platform = "nowhere"
	e.publish(t, ev)
	eventually(t, e.clock, 0, "queued", func() bool { return rowState(t, e.db, "t1:1:0") != "" })
	eventually(t, e.clock, 5*time.Second, "expired", func() bool { return rowState(t, e.db, "t1:1:0") == "expired" })
}

// Kill a replica while a send is in flight: another replica takes over
// its partitions and its claimed rows, and every reply arrives exactly
// once.
func TestKilledMidSendEveryReplyExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hung := make(chan struct{}, 1)
	e.gw.setBehaviour(func(_ *deliveryv1.SendRequested, try int) behaviour {
		if try == 1 {
			select {
			case hung <- struct{}{}:
				return behaviour{hang: true} // the platform got it, the answer never comes
			default:
			}
		}
		return behaviour{}
	})
	cfg := testConfig()
	cfg.SendTimeout = 5 * time.Second // the kill comes first
	cfg.Lease = 6 * time.Second
	a := e.start(t, cfg, "a")
	const n = 12
	for i := range n {
		e.publish(t, event(fmt.Sprint("t", i), 1, fmt.Sprint("s", i), final(fmt.Sprint("answer ", i))))
	}
	<-hung
	a.kill()
	e.start(t, cfg, "b")
	// The killed sender's lease must run out (clock time) before b resends.
	eventually(t, e.clock, 200*time.Millisecond, "every answer", func() bool { return len(e.gw.postedTexts()) == n })
	for text, c := range e.gw.postedTexts() {
		if c != 1 {
			t.Errorf("%q posted %d times", text, c)
		}
	}
}

// A row being sent by a replica that was killed (its NATS connection
// closed: no one answers on its alive subject) is taken over at once,
// not when its lease (30 s) runs out, and the chat's next row follows;
// a row of a replica that answers waits out its lease.
func TestRowsOfAGoneReplicaAreTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		alive bool
	}{{"gone", false}, {"alive", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.SendTimeout, cfg.Lease = 5*time.Second, 30*time.Second
			var asked atomic.Int32
			if tc.alive {
				sub, err := e.bus.Conn().Subscribe(e.bus.Topology().DeliveryAliveSubject("x"), func(m *nats.Msg) {
					asked.Add(1)
					_ = m.Respond(nil)
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sub.Unsubscribe() })
			}
			ctx := context.Background()
			ev := event("t1", 1, "s1", final("first"))
			req := func(key, text string) *deliveryv1.SendRequested {
				return &deliveryv1.SendRequested{IdempotencyKey: key, Op: deliveryv1.SendOp_SEND_OP_SEND, Target: ev.GetTarget(),
					TurnId: "t1", SessionKey: "s1", Text: text, ChunkCount: 1}
			}
			store := outbox.New(e.db)
			// Replica x claimed the first and died mid-send; the second
			// waits behind it in the chat.
			if _, ok, err := store.EnqueueClaimed(ctx, e.clock.Now(), cfg.TTL, cfg.Lease, "x", req("t1:1:0", "first")); err != nil || !ok {
				t.Fatalf("claimed row: %v %v", ok, err)
			}
			if _, err := store.Enqueue(ctx, e.clock.Now(), cfg.TTL, req("t1:2:0", "second")); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			e.start(t, cfg, "b")
			if tc.alive {
				eventually(t, e.clock, 0, "replica x asked twice", func() bool { return asked.Load() >= 2 })
				if got := len(e.gw.postedTexts()); got != 0 || rowState(t, e.db, "t1:1:0") != "sending" {
					t.Fatalf("%d posted, row %s: want the live replica's row left to its lease", got, rowState(t, e.db, "t1:1:0"))
				}
				return
			}
			eventually(t, e.clock, 0, "both rows sent", func() bool { return len(e.gw.postedTexts()) == 2 })
			if took := time.Since(began); took > 10*time.Second {
				t.Fatalf("the rows were sent %v after the replica started, want well within the lease (30 s)", took)
			}
		})
	}
}

// A row being sent by a replica whose NATS connection dropped (its
// server restarted, its cluster node left) is not taken over while the
// replica reconnects: NATS answers no responders for it until then, as
// for a killed one, though its send goes on. The replica answers again
// a moment later, and its row waits out its lease.
func TestRowsOfAReconnectingReplicaAreNotTakenOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 30*time.Second
	relay := bustest.NewCuttable(t, e.url)
	nc, err := nats.Connect(relay.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var asked atomic.Int32
	if _, err := nc.Subscribe(e.bus.Topology().DeliveryAliveSubject("x"), func(m *nats.Msg) {
		asked.Add(1)
		_ = m.Respond(nil)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ev := event("t1", 1, "s1", final("first"))
	store := outbox.New(e.db)
	req := &deliveryv1.SendRequested{IdempotencyKey: "t1:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: ev.GetTarget(),
		TurnId: "t1", SessionKey: "s1", Text: "first", ChunkCount: 1}
	if _, ok, err := store.EnqueueClaimed(ctx, e.clock.Now(), cfg.TTL, cfg.Lease, "x", req); err != nil || !ok {
		t.Fatalf("claimed row: %v %v", ok, err)
	}
	// Replica x's connection drops mid-send; it is back 2.5 s later, after
	// replica b asked it at least once meanwhile.
	relay.Cut()
	eventually(t, e.clock, 0, "the server to drop replica x", func() bool {
		_, err := e.bus.Conn().Request(e.bus.Topology().DeliveryAliveSubject("x"), nil, time.Second)
		return errors.Is(err, nats.ErrNoResponders)
	})
	e.start(t, cfg, "b")
	time.Sleep(2500 * time.Millisecond)
	relay.Restore()
	eventually(t, e.clock, 0, "replica x to answer again, or its row to be sent", func() bool {
		return asked.Load() >= 2 || len(e.gw.postedTexts()) > 0
	})
	if got := len(e.gw.postedTexts()); got != 0 || rowState(t, e.db, "t1:1:0") != "sending" {
		t.Fatalf("%d posted, row %s: want the reconnecting replica's row left to its lease", got, rowState(t, e.db, "t1:1:0"))
	}
}

// A replica killed mid-send (no responders on its alive subject from
// the first question on) is found gone on the first round whose question
// goes out at or after bus.GoneGrace (less its 50 ms for the ticks) from
// the answer to its first silent question: silence is measured to when
// the last question was sent, not to when its answer came back, which
// cost one more round (goneEvery) at random: the takeover came 3 to 4 s
// after the kill. Judged by when the questions went out, as the hook
// sees them, not by their number: a round held up on a busy machine
// (CI's, racing) moves the question that finds the replica gone.
func TestAGoneReplicaIsFoundOnTheRoundAfterGoneGrace(t *testing.T) {
	t.Parallel()
	type gone struct {
		late time.Duration // how late the first question goes out after its round began
		mu   sync.Mutex
		at   []time.Time // when each question went out, after the hook
	}
	cases := map[string]*gone{
		"x-prompt": {},
		// The first question goes out a quarter of a round late: the
		// silence is counted from its answer, not from its round, so
		// the replica is found gone a round later than a prompt one.
		"x-late": {late: time.Second / 4},
	}
	// One hook for both cases: it is the package's.
	t.Cleanup(delivery.SetGoneHook(func(replica string) {
		c := cases[replica]
		if c == nil {
			return
		}
		c.mu.Lock()
		first := len(c.at) == 0
		c.mu.Unlock()
		if first {
			time.Sleep(c.late)
		}
		c.mu.Lock()
		c.at = append(c.at, time.Now())
		c.mu.Unlock()
	}))
	for replica, c := range cases {
		t.Run(replica, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.SendTimeout, cfg.Lease = 5*time.Second, 30*time.Second
			claimedRow(t, e, cfg, replica)
			e.start(t, cfg, "b")
			eventually(t, e.clock, 0, "the gone replica's row sent", func() bool { return len(e.gw.postedTexts()) == 1 })
			c.mu.Lock()
			at := slices.Clone(c.at)
			c.mu.Unlock()
			bustest.FoundGoneOnTime(t, at)
		})
	}
}

// A replica reconnecting (no responders once) whose question goes out
// long after its round began (questions to other replicas that timed
// out first, a slow look-up of the senders) is not taken over on that
// one answer: its silence is counted from the round of its first silent
// question to the round of the last, not to when the answer is read.
// Not parallel: the gone hook is the package's, and another test sets it.
func TestAReconnectingReplicaAskedLateInItsRoundIsNotTakenOver(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 30*time.Second
	var asked atomic.Int32
	back := make(chan struct{})
	t.Cleanup(delivery.SetGoneHook(func(replica string) {
		if replica != "x" {
			return
		}
		switch asked.Add(1) {
		case 1: // its first question goes out a grace after its round began
			time.Sleep(bus.GoneGrace + 200*time.Millisecond)
		case 2: // and replica x is back by the next
			answerAlive(t, e, "x")
			close(back)
		}
	}))
	claimedRow(t, e, cfg, "x")
	e.start(t, cfg, "b")
	eventually(t, e.clock, 0, "replica x asked after it is back, or its row sent", func() bool {
		select {
		case <-back:
			return asked.Load() >= 3
		default:
			return len(e.gw.postedTexts()) > 0
		}
	})
	if got := len(e.gw.postedTexts()); got != 0 || rowState(t, e.db, "t1:1:0") != "sending" {
		t.Fatalf("%d posted, row %s: want the reconnecting replica's row left to its lease", got, rowState(t, e.db, "t1:1:0"))
	}
}

// A gone replica whose first silent question goes out late in its round
// (questions to other replicas that timed out first) is taken over only
// once GoneGrace has passed since that question went out: the rounds'
// due times, a stale tick among them, would count 3 s from questions
// half a second apart, and a reconnecting replica be taken for gone.
// Not parallel: the gone hook is the package's, and another test sets it.
func TestAGoneReplicaAskedLateIsGivenItsWholeGrace(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 30*time.Second
	var asked atomic.Int32
	var first atomic.Int64 // when its first question went out, Unix ns
	t.Cleanup(delivery.SetGoneHook(func(replica string) {
		if replica == "x" && asked.Add(1) == 1 {
			time.Sleep(bus.GoneGrace - 500*time.Millisecond)
			first.Store(time.Now().UnixNano())
		}
	}))
	claimedRow(t, e, cfg, "x")
	e.start(t, cfg, "b")
	eventually(t, e.clock, 0, "the gone replica's row sent", func() bool { return len(e.gw.postedTexts()) == 1 })
	// A lower bound only: a slow machine makes it longer, never shorter.
	if silent := time.Since(time.Unix(0, first.Load())); silent < bus.GoneGrace-100*time.Millisecond {
		t.Errorf("taken over %v after its first silent question went out, want GoneGrace (%v) at least", silent, bus.GoneGrace)
	}
}

// A replica whose alive subject got no responders for less than
// bus.GoneGrace is not taken over, however late the answer to the first
// silent question came back: silence is counted from when that answer
// came (the server found no one subscribed before it), not from when the
// question was sent, which may reach the server well after (held in the
// asker's connection: a congested link, a stalled write, a reconnect).
// Here replica b's first question reaches the server 0.9 s late; replica
// x, silent from then, is back after the question 2.1 s later, sent 3 s
// after the first: counted from the first one's sending, x was taken
// over and its row sent again.
// Not parallel: the gone hook is the package's, and another test sets it.
func TestASilenceIsCountedFromTheFirstSilentAnswer(t *testing.T) {
	e := newEnv(t)
	cfg := testConfig()
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 30*time.Second
	relay := bustest.NewCuttable(t, e.url)
	var asked atomic.Int32
	back := make(chan struct{})
	t.Cleanup(delivery.SetGoneHook(func(replica string) {
		if replica != "x" {
			return
		}
		switch asked.Add(1) {
		case 1: // the first question reaches the server late
			relay.Hold(900 * time.Millisecond)
		case int32(bus.GoneGrace/time.Second) + 2: // x is back the round after GoneGrace from the first
			answerAlive(t, e, "x")
			close(back)
		}
	}))
	claimedRow(t, e, cfg, "x")
	via := *e
	via.url = relay.URL() // replica b asks through the relay
	via.start(t, cfg, "b")
	eventually(t, e.clock, 0, "replica x asked after it is back, or its row sent", func() bool {
		select {
		case <-back:
			return asked.Load() >= int32(bus.GoneGrace/time.Second)+3
		default:
			return len(e.gw.postedTexts()) > 0
		}
	})
	if got := len(e.gw.postedTexts()); got != 0 || rowState(t, e.db, "t1:1:0") != "sending" {
		t.Fatalf("%d posted, row %s: want the row of replica x, silent for less than GoneGrace, left to its lease",
			got, rowState(t, e.db, "t1:1:0"))
	}
}

// claimedRow puts turn t1's reply in the outbox claimed by replica under
// cfg's lease, as a replica that was sending it leaves it.
func claimedRow(t *testing.T, e *env, cfg delivery.Config, replica string) {
	t.Helper()
	ev := event("t1", 1, "s1", final("first"))
	req := &deliveryv1.SendRequested{IdempotencyKey: "t1:1:0", Op: deliveryv1.SendOp_SEND_OP_SEND, Target: ev.GetTarget(),
		TurnId: "t1", SessionKey: "s1", Text: "first", ChunkCount: 1}
	if _, ok, err := outbox.New(e.db).EnqueueClaimed(context.Background(), e.clock.Now(), cfg.TTL, cfg.Lease, replica, req); err != nil || !ok {
		t.Fatalf("claimed row: %v %v", ok, err)
	}
}

// Two replicas share the outbox without double sends.
func TestTwoReplicasShareTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Senders = 2
	// A send answered after the send timeout is asked again under its key
	// ("maybe delivered"): under -race on a loaded machine 300 ms was
	// exceeded (41 requests for 40). The lease outlasts the timeout, as
	// in production, so no row is taken over from a sender that is only
	// slow, and each key must be asked once.
	cfg.SendTimeout, cfg.Lease = 5*time.Second, 10*time.Second
	e.start(t, cfg, "a")
	e.start(t, cfg, "b")
	const n = 40
	for i := range n {
		e.publish(t, event(fmt.Sprint("t", i), 1, fmt.Sprint("s", i%7), final(fmt.Sprint("answer ", i))))
	}
	eventually(t, e.clock, 0, "every answer", func() bool { return len(e.gw.postedTexts()) == n })
	for text, c := range e.gw.postedTexts() {
		if c != 1 {
			t.Errorf("%q posted %d times", text, c)
		}
	}
	calls, _ := e.gw.snapshot()
	perKey := map[string]int{}
	for _, c := range calls {
		perKey[c.Key]++
	}
	for key, c := range perKey {
		if c != 1 {
			t.Errorf("%s requested %d times", key, c)
		}
	}
	if len(perKey) != n {
		t.Errorf("%d keys requested for %d messages", len(perKey), n)
	}
}

// Streaming by edit, driven by the service's clock: the first message
// appears with a cursor, edits wait for the interval, the final answer
// replaces the stream without a cursor, and deltas after it are dropped.
func TestStreamingByEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	e.start(t, cfg, "a")
	stream := func(seq int64, body any) { e.publishStream(t, "t1", seq, "s1", body) }
	ops := e.gw.sends
	chunk := strings.Repeat("x", 30)
	stream(1, &repliesv1.TextDelta{Text: chunk})
	eventually(t, e.clock, 0, "first message", func() bool { return len(ops()) == 1 })
	stream(2, &repliesv1.TextDelta{Text: chunk}) // within 0.8 s: buffered
	e.consumed(t, "s1")
	if n := len(ops()); n != 1 {
		t.Fatalf("%d ops before the interval passed", n)
	}
	e.clock.Advance(time.Second)
	stream(3, &repliesv1.TextDelta{Text: chunk}) // interval passed: edit
	eventually(t, e.clock, 0, "edit", func() bool { return len(ops()) == 2 })
	finalText := strings.Repeat("x", 90) + " done"
	stream(4, final(finalText))
	stream(5, &repliesv1.TextDelta{Text: "late"})
	eventually(t, e.clock, 0, "final edit", func() bool { return len(ops()) == 3 })
	got := ops()
	want := []struct {
		op   deliveryv1.SendOp
		text string
	}{
		{deliveryv1.SendOp_SEND_OP_SEND, chunk + " ▉"},
		{deliveryv1.SendOp_SEND_OP_EDIT, strings.Repeat("x", 90) + " ▉"},
		{deliveryv1.SendOp_SEND_OP_EDIT, finalText},
	}
	for i, w := range want {
		if got[i].Op != w.op || got[i].Req.GetText() != w.text {
			t.Errorf("op %d: %v %q, want %v %q", i, got[i].Op, got[i].Req.GetText(), w.op, w.text)
		}
	}
	if got[2].Req.GetMessageId() != "m1" || !got[2].Req.GetFinal() {
		t.Errorf("final edit of %q final=%v", got[2].Req.GetMessageId(), got[2].Req.GetFinal())
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(ops()); n != 3 {
		t.Errorf("%d ops after the final", n)
	}
}

// A turn with /reasoning show streams like any other: the message shows
// the reasoning's block (Hermes's "💭 **Reasoning:**") while the model
// thinks, then the answer after it, and the final edit writes the final
// text, the same a turn that streamed nothing gets in one message, over
// that one message: nothing is sent twice. An API stream gets the
// answer's text deltas and never the reasoning.
func TestStreamingReasoningByEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	stream := func(seq int64, body any) { e.publishStream(t, "t1", seq, "s1", body) }
	ops := e.gw.sends
	thought := "Six times seven: count it out.\nThat is 42."
	answer := "The answer is 42, six times seven."
	stream(1, &repliesv1.ReasoningDelta{Text: thought[:20]})
	eventually(t, e.clock, 0, "first message", func() bool { return len(ops()) == 1 })
	e.clock.Advance(time.Second)
	stream(2, &repliesv1.ReasoningDelta{Text: thought[20:]})
	eventually(t, e.clock, 0, "the reasoning", func() bool { return len(ops()) == 2 })
	e.clock.Advance(time.Second)
	stream(3, &repliesv1.TextDelta{Text: answer})
	eventually(t, e.clock, 0, "the answer", func() bool { return len(ops()) == 3 })
	finalText := reasoning.WithAnswer(thought, answer)
	stream(4, final(finalText))
	eventually(t, e.clock, 0, "final edit", func() bool { return len(ops()) == 4 })
	block := "💭 **Reasoning:**\n```\n"
	want := []struct {
		op   deliveryv1.SendOp
		text string
	}{
		{deliveryv1.SendOp_SEND_OP_SEND, block + thought[:20] + "\n```" + " ▉"},
		{deliveryv1.SendOp_SEND_OP_EDIT, block + thought + "\n```" + " ▉"},
		{deliveryv1.SendOp_SEND_OP_EDIT, block + thought + "\n```\n\n" + answer + " ▉"},
		{deliveryv1.SendOp_SEND_OP_EDIT, finalText},
	}
	got := ops()
	for i, w := range want {
		if got[i].Op != w.op || got[i].Req.GetText() != w.text {
			t.Errorf("op %d: %v %q, want %v %q", i, got[i].Op, got[i].Req.GetText(), w.op, w.text)
		}
	}
	if got[3].Req.GetMessageId() != "m1" || !got[3].Req.GetFinal() {
		t.Errorf("final edit of %q final=%v", got[3].Req.GetMessageId(), got[3].Req.GetFinal())
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(ops()); n != 4 {
		t.Errorf("%d ops, want the 4 above", n)
	}

	// The API: text deltas only.
	for i, body := range []any{&repliesv1.ReasoningDelta{Text: thought}, &repliesv1.TextDelta{Text: answer}, final(finalText)} {
		ev := event("t-api", int64(i+1), "s2", body)
		ev.Target.Platform = "api"
		e.publish(t, ev)
	}
	var deltas []string
	for _, d := range apiStreamDeltas(t, e, "t-api") {
		deltas = append(deltas, d.GetText())
	}
	if len(deltas) != 1 || deltas[0] != answer {
		t.Errorf("API stream deltas %q, want the answer's text alone", deltas)
	}
}

// apiStreamDeltas waits for the API turn's final and returns the stream
// deltas sent before it, in order.
func apiStreamDeltas(t *testing.T, e *env, turn string) []*deliveryv1.SendRequested {
	t.Helper()
	eventually(t, e.clock, 0, "the API's answer", func() bool {
		calls, _ := e.gw.snapshot()
		for _, c := range calls {
			if c.Req.GetTurnId() == turn && c.Req.GetFinal() {
				return true
			}
		}
		return false
	})
	calls, _ := e.gw.snapshot()
	var deltas []*deliveryv1.SendRequested
	for _, c := range calls {
		if c.Req.GetTurnId() == turn && c.Op == deliveryv1.SendOp_SEND_OP_STREAM_DELTA {
			deltas = append(deltas, c.Req)
		}
	}
	return deltas
}

// The break before a later model call's text (TextDelta.restart) reaches
// the API marked (SendRequested.stream_restart): the API's final, the
// last call's answer alone, continues what streams after it.
func TestAPIStreamDeltaKeepsTheRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	for i, body := range []any{&repliesv1.TextDelta{Text: "Let me check."}, &repliesv1.TextDelta{Text: "\n\n", Restart: true},
		&repliesv1.TextDelta{Text: "It's 5pm."}, final("It's 5pm.")} {
		ev := event("t-api", int64(i+1), "s2", body)
		ev.Target.Platform = "api"
		e.publish(t, ev)
	}
	var deltas []string
	for _, d := range apiStreamDeltas(t, e, "t-api") {
		deltas = append(deltas, fmt.Sprintf("%q:%v", d.GetText(), d.GetStreamRestart()))
	}
	if got, want := strings.Join(deltas, " "), `"Let me check.":false "\n\n":true "It's 5pm.":false`; got != want {
		t.Errorf("API stream deltas %s, want %s", got, want)
	}
}

// In a turn that called tools, each model call's reasoning restarts the
// block (ReasoningDelta.restart): the stream shows the current call's
// reasoning, never the earlier calls' added up, as the final shows the
// last call's; a last call without reasoning takes the block away. A
// call that streamed answer text keeps it in its message with its
// reasoning's block (the segment closes at the break before the next
// call's reasoning and text), and the next call streams into a new
// message; a call that goes on with a cut answer (no break) goes on in
// the same message.
func TestStreamingReasoningRestartsWithEachCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	ops := func(turn string) []call {
		var out []call
		for _, c := range e.gw.sends() {
			if c.Req.GetTurnId() == turn {
				out = append(out, c)
			}
		}
		return out
	}
	const (
		looked = "I should look at the clock first."
		said   = "The clock said 12:00."
		asked  = "Let me check the clock for you."
		answer = "It is noon, twelve o'clock sharp."
	)
	block := func(thought string) string { return "💭 **Reasoning:**\n```\n" + thought + "\n```" }
	type op struct {
		op   deliveryv1.SendOp
		text string
	}
	tests := []struct {
		name   string
		events []any
		want   []op
	}{
		{"the last call reasons", []any{
			&repliesv1.ReasoningDelta{Text: looked},
			&repliesv1.TextDelta{Text: asked},
			&repliesv1.TextDelta{Text: "\n\n", Restart: true},
			&repliesv1.ReasoningDelta{Text: said, Restart: true},
			&repliesv1.TextDelta{Text: answer},
			final(reasoning.WithAnswer(said, answer)),
		}, []op{
			{deliveryv1.SendOp_SEND_OP_SEND, block(looked) + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(looked) + "\n\n" + asked + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(looked) + "\n\n" + asked},
			{deliveryv1.SendOp_SEND_OP_SEND, block(said) + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + answer + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + answer},
		}},
		{"only the last call reasons", []any{
			&repliesv1.TextDelta{Text: asked},
			&repliesv1.TextDelta{Text: "\n\n", Restart: true},
			&repliesv1.ReasoningDelta{Text: said},
			&repliesv1.TextDelta{Text: answer},
			final(reasoning.WithAnswer(said, answer)),
		}, []op{
			{deliveryv1.SendOp_SEND_OP_SEND, asked + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, asked},
			{deliveryv1.SendOp_SEND_OP_SEND, block(said) + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + answer + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + answer},
		}},
		{"a cut answer goes on", []any{
			// No break: the next call continues the answer, and the
			// final carries it joined, written over the one message.
			&repliesv1.ReasoningDelta{Text: looked},
			&repliesv1.TextDelta{Text: asked},
			&repliesv1.ReasoningDelta{Text: said, Restart: true},
			&repliesv1.TextDelta{Text: " " + answer},
			final(reasoning.WithAnswer(said, asked+" "+answer)),
		}, []op{
			{deliveryv1.SendOp_SEND_OP_SEND, block(looked) + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(looked) + "\n\n" + asked + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + asked + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + asked + " " + answer + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, block(said) + "\n\n" + asked + " " + answer},
		}},
		{"the last call does not", []any{
			&repliesv1.ReasoningDelta{Text: looked},
			&repliesv1.ReasoningDelta{Restart: true},
			&repliesv1.TextDelta{Text: answer},
			final(answer),
		}, []op{
			{deliveryv1.SendOp_SEND_OP_SEND, block(looked) + " ▉"},
			// The emptied stream makes no edit; the answer's text does.
			{deliveryv1.SendOp_SEND_OP_EDIT, answer + " ▉"},
			{deliveryv1.SendOp_SEND_OP_EDIT, answer},
		}},
	}
	for i, tt := range tests {
		turn, session := fmt.Sprint("t", i), fmt.Sprint("s", i)
		for j, body := range tt.events {
			e.publishStream(t, turn, int64(j+1), session, body)
			e.consumed(t, session)
			e.clock.Advance(time.Second)
		}
		eventually(t, e.clock, 0, tt.name+": final edit", func() bool {
			got := ops(turn)
			return len(got) > 0 && got[len(got)-1].Req.GetFinal()
		})
		got := ops(turn)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %d ops, want %d", tt.name, len(got), len(tt.want))
		}
		for k, w := range tt.want {
			if k < len(got) && (got[k].Op != w.op || got[k].Req.GetText() != w.text) {
				t.Errorf("%s: op %d: %v %q, want %v %q", tt.name, k, got[k].Op, got[k].Req.GetText(), w.op, w.text)
			}
		}
	}
}

// A streamed delta the bus hands over again (its ack was lost, or came
// after the ack wait on a loaded replica) is not taken twice: once the
// update interval has passed it would make an edit early, showing its
// text twice, before the delta that is due.
func TestRedeliveredDeltaMakesNoEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, streamConfig(), "a")
	ops := e.gw.sends
	chunk := strings.Repeat("x", 30)
	e.publishStream(t, "t1", 1, "s1", &repliesv1.TextDelta{Text: chunk})
	eventually(t, e.clock, 0, "first message", func() bool { return len(ops()) == 1 })
	e.publishStream(t, "t1", 2, "s1", &repliesv1.TextDelta{Text: chunk}) // buffered
	e.consumed(t, "s1")
	e.clock.Advance(time.Second)
	// Delta 2 again, as the consumer gets a redelivery: same turn and seq.
	again := event("t1", 2, "s1", &repliesv1.TextDelta{Text: chunk})
	again.Target.Platform = "stream"
	if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject("s1"), "reply:t1:2:again", again); err != nil {
		t.Fatal(err)
	}
	e.consumed(t, "s1")
	if got := ops(); len(got) != 1 {
		t.Fatalf("the redelivered delta made %d more updates (%q)", len(got)-1, got[len(got)-1].Req.GetText())
	}
	e.publishStream(t, "t1", 3, "s1", &repliesv1.TextDelta{Text: chunk})
	eventually(t, e.clock, 0, "edit", func() bool { return len(ops()) == 2 })
	if got, want := ops()[1].Req.GetText(), strings.Repeat("x", 90)+" ▉"; got != want {
		t.Fatalf("edit %q, want %q", got, want)
	}
}

// The end of a failed turn reaches the gateway, which marks the user's
// message with the outcome: every message of the failure carries its
// code (the edit that takes the cursor off the streamed text too), and
// a turn interrupted before it said anything ends with a final typing
// request.
func TestTheEndOfAFailedTurnReachesTheGateway(t *testing.T) {
	t.Parallel()
	type sent struct {
		op    deliveryv1.SendOp
		text  string
		final bool
		code  string
	}
	tests := []struct {
		name   string
		stream bool
		events []any
		want   []sent
	}{
		{"interrupted before it said anything", false,
			[]any{&repliesv1.Typing{Active: true}, &repliesv1.ReplyError{Code: "interrupted"}},
			[]sent{{op: deliveryv1.SendOp_SEND_OP_TYPING}, {op: deliveryv1.SendOp_SEND_OP_TYPING, final: true, code: "interrupted"}}},
		{"failed after streaming", true,
			[]any{&repliesv1.TextDelta{Text: "a partial answer, long enough to show"}, &repliesv1.ReplyError{Code: "timeout", Message: "The model took too long."}},
			[]sent{{op: deliveryv1.SendOp_SEND_OP_SEND, text: "a partial answer, long enough to show ▉"},
				{op: deliveryv1.SendOp_SEND_OP_EDIT, text: "a partial answer, long enough to show", final: true, code: "timeout"},
				{op: deliveryv1.SendOp_SEND_OP_SEND, text: "⚠️ The model took too long.", final: true, code: "timeout"}}},
		{"failed before it said anything", false,
			[]any{&repliesv1.ReplyError{Code: "provider", Message: "The model is down."}},
			[]sent{{op: deliveryv1.SendOp_SEND_OP_SEND, text: "⚠️ The model is down.", final: true, code: "provider"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			if tt.stream {
				cfg = streamConfig()
			}
			cfg.TypingInterval = time.Hour // one typing request per turn
			e.start(t, cfg, "a")
			for i, body := range tt.events {
				ev := event("t1", int64(i+1), "s1", body)
				if tt.stream {
					ev.Target.Platform = "stream"
				}
				e.publish(t, ev)
				if _, ok := body.(*repliesv1.TextDelta); ok {
					eventually(t, e.clock, 0, "the streamed message", func() bool { return len(e.gw.sends()) == 1 })
				}
			}
			var got []sent
			eventually(t, e.clock, 0, "every call", func() bool {
				calls, _ := e.gw.snapshot()
				got = nil
				for _, c := range calls {
					got = append(got, sent{c.Op, c.Req.GetText(), c.Req.GetFinal(), c.Req.GetErrorCode()})
				}
				return len(got) >= len(tt.want)
			})
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("the gateway got\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

// A turn whose end reaches the replica before its typing indicator made
// its first request (a busy machine had not run the indicator yet) still
// sends that request, and before the end's: the end used to cut the
// indicator short, and the gateway got the interrupted turn's final
// typing request alone (TestTheEndOfAFailedTurnReachesTheGateway timed
// out under load waiting for the first).
func TestTheEndOfATurnWaitsForItsFirstTypingRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.TypingInterval = time.Hour // one typing request per turn
	const turn = "t-typing-overtaken"
	ctx := context.Background()
	delivered := make(chan struct{})
	// The indicator runs once the turn's end reached the replica, or
	// once the end stopped it.
	restore := delivery.SetTypingHook(func(ictx context.Context, id string) {
		if id != turn {
			return
		}
		select {
		case <-ictx.Done():
		case <-delivered:
		}
	})
	defer restore()
	e.start(t, cfg, "a")
	e.publish(t, event(turn, 1, "s1", &repliesv1.Typing{Active: true}))
	end, err := e.bus.Publish(ctx, e.bus.Topology().ReplySubject("s1"), "reply:"+turn+":2", event(turn, 2, "s1", &repliesv1.ReplyError{Code: "interrupted"}))
	if err != nil {
		t.Fatal(err)
	}
	durable := fmt.Sprintf("delivery-replies-%d", e.bus.Topology().Partition("s1"))
	eventually(t, e.clock, 0, "the end handed to the replica", func() bool {
		st, err := e.bus.JetStream().Stream(ctx, e.bus.Topology().Stream(bus.StreamReplies))
		if err != nil {
			return false
		}
		c, err := st.Consumer(ctx, durable)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.Delivered.Stream >= end.Sequence
	})
	close(delivered)
	e.consumed(t, "s1")
	calls, _ := e.gw.snapshot()
	var got []string
	for _, c := range calls {
		got = append(got, fmt.Sprintf("%v final=%v", c.Op, c.Req.GetFinal()))
	}
	if want := []string{"SEND_OP_TYPING final=false", "SEND_OP_TYPING final=true"}; !slices.Equal(got, want) {
		t.Fatalf("the gateway got %q, want %q", got, want)
	}
}

// A gateway that hangs on typing requests holds a quick turn's end only
// briefly: the end waits for its indicator's first request to go out,
// and then for its answer at most a moment, not the send timeout (the
// turn's partition waited with it).
func TestTheEndOfATurnDoesNotWaitOutAHungTypingRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.TypingInterval = time.Hour // one typing request per turn
	cfg.SendTimeout, cfg.Lease, cfg.AckWait = 20*time.Second, 30*time.Second, 30*time.Second
	e.start(t, cfg, "a")
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
		return behaviour{hang: req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING}
	})
	e.publish(t, event("t1", 1, "s1", &repliesv1.Typing{Active: true}))
	eventually(t, e.clock, 0, "the typing request", func() bool {
		calls, _ := e.gw.snapshot()
		return len(calls) == 1
	})
	start := time.Now()
	e.publish(t, event("t1", 2, "s1", final("a quick answer")))
	eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
	if took, most := time.Since(start), cfg.SendTimeout/4; took > most {
		t.Errorf("the answer went out %v after the turn's end, want at most %v", took, most)
	}
}

// checkNoTypingAfterTheAnswer waits for the gateway to be done with
// every request, and fails for each typing indicator it showed after the
// answer.
func checkNoTypingAfterTheAnswer(t *testing.T, e *env) {
	t.Helper()
	eventually(t, e.clock, 0, "the gateway done with every request", func() bool {
		e.gw.mu.Lock()
		defer e.gw.mu.Unlock()
		return len(e.gw.inflight) == 0
	})
	e.gw.mu.Lock()
	shown := append([]call(nil), e.gw.shownAt...)
	e.gw.mu.Unlock()
	answered := false
	for _, c := range shown {
		switch {
		case c.Op == deliveryv1.SendOp_SEND_OP_SEND:
			answered = true
		case answered:
			t.Errorf("typing request %s showed after the answer", c.Key)
		}
	}
}

// A gateway that is slow on typing requests (its platform takes two
// seconds on them) never shows the indicator after the answer: the
// answer goes out a moment after the turn's end, and the typing request
// still unanswered then is one the gateway gives up (its
// bus.HeaderStartWithin) rather than carries out after the answer, which
// would show "typing…" under it for 5–10 s. Every typing request is
// answered or given up before the answer is sent, the ticking ones too.
func TestALateTypingRequestNeverShowsAfterTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		interval time.Duration
		late     func(n int) bool // whether typing request n (from 1) is slow
	}{
		{"the first request", time.Hour, func(int) bool { return true }},
		{"a later request", 200 * time.Millisecond, func(n int) bool { return n >= 3 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.TypingInterval = tt.interval
			cfg.SendTimeout, cfg.Lease, cfg.AckWait = 20*time.Second, 30*time.Second, 30*time.Second
			e.start(t, cfg, "a")
			var typings atomic.Int32
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if req.GetOp() != deliveryv1.SendOp_SEND_OP_TYPING {
					return behaviour{}
				}
				if tt.late(int(typings.Add(1))) {
					return behaviour{late: 2 * time.Second}
				}
				return behaviour{}
			})
			e.publish(t, event("t1", 1, "s1", &repliesv1.Typing{Active: true}))
			eventually(t, e.clock, 0, "the slow typing request", func() bool {
				calls, _ := e.gw.snapshot()
				n := 0
				for _, c := range calls {
					if c.Op == deliveryv1.SendOp_SEND_OP_TYPING && tt.late(n+1) {
						return true
					} else if c.Op == deliveryv1.SendOp_SEND_OP_TYPING {
						n++
					}
				}
				return false
			})
			e.publish(t, event("t1", 2, "s1", final("a quick answer")))
			eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
			// Whatever the slow request would show, it shows before the
			// gateway is done with it.
			checkNoTypingAfterTheAnswer(t, e)
		})
	}
}

// A typing refresh that waited at the gateway for a send slot past its
// start bound (the chat busy, its sends waiting on a rate limit) is
// given up there, and asked again at once while the turn runs: it was
// dropped, and the indicator lapsed until the next refresh (a whole
// interval). Asked again, each request keeps its bound, so none still
// shows after the answer, however long every one of them waits.
func TestATypingRefreshQueuedPastItsBoundIsAskedAgain(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		queued func(n int) bool // whether typing request n (from 1) waits past its bound
		shown  bool             // whether the indicator shows before the answer
	}{
		{"the first request", func(n int) bool { return n == 1 }, true},
		{"every request", func(int) bool { return true }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			cfg := testConfig()
			cfg.TypingInterval = time.Hour // one refresh per turn, unless asked again
			cfg.SendTimeout, cfg.Lease, cfg.AckWait = 20*time.Second, 30*time.Second, 30*time.Second
			e.start(t, cfg, "a")
			var typings atomic.Int32
			e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
				if req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING && tt.queued(int(typings.Add(1))) {
					return behaviour{queued: time.Second}
				}
				return behaviour{}
			})
			typingShown := func() bool {
				e.gw.mu.Lock()
				defer e.gw.mu.Unlock()
				for _, c := range e.gw.shownAt {
					if c.Op == deliveryv1.SendOp_SEND_OP_TYPING {
						return true
					}
				}
				return false
			}
			e.publish(t, event("t1", 1, "s1", &repliesv1.Typing{Active: true}))
			if tt.shown {
				eventually(t, e.clock, 0, "the typing indicator", typingShown)
			} else {
				eventually(t, e.clock, 0, "two typing requests given up", func() bool { return typings.Load() >= 2 })
			}
			e.publish(t, event("t1", 2, "s1", final("a quick answer")))
			eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
			checkNoTypingAfterTheAnswer(t, e)
		})
	}
}

// A gateway that stays saturated gives every typing request up (each
// waits for a send slot past its bound): the indicator asks again once
// per interval, not on every answer, which sent typing requests several
// times as often as the interval to a gateway already short of slots.
func TestATypingIndicatorAsksAgainOncePerInterval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.TypingInterval = time.Hour // one refresh per turn, and one asked again
	cfg.SendTimeout, cfg.Lease, cfg.AckWait = 20*time.Second, 30*time.Second, 30*time.Second
	e.start(t, cfg, "a")
	var typings atomic.Int32
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, _ int) behaviour {
		if req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING && !req.GetFinal() {
			typings.Add(1)
			return behaviour{queued: time.Second}
		}
		return behaviour{}
	})
	e.publish(t, event("t1", 1, "s1", &repliesv1.Typing{Active: true}))
	eventually(t, e.clock, 0, "two typing requests given up", func() bool {
		e.gw.mu.Lock()
		defer e.gw.mu.Unlock()
		return typings.Load() >= 2 && len(e.gw.inflight) == 0
	})
	// Asked again on every answer, the third would follow at once.
	time.Sleep(500 * time.Millisecond)
	e.publish(t, event("t1", 2, "s1", final("a quick answer")))
	eventually(t, e.clock, 0, "the answer", func() bool { return len(e.gw.sends()) == 1 })
	if n := typings.Load(); n != 2 {
		t.Errorf("%d typing requests in the interval, want 2 (the tick's, asked again once)", n)
	}
	checkNoTypingAfterTheAnswer(t, e)
}

// A streamed answer's final that could not be queued the first time (its
// outbox write failed) is queued by the retry: the stream plans its final
// edits once, so the retry must reuse them rather than plan nothing.
func TestStreamedFinalSurvivesAFailedEnqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	e.start(t, cfg, "a")
	stream := func(seq int64, body any) { e.publishStream(t, "t1", seq, "s1", body) }
	ops := e.gw.sends
	stream(1, &repliesv1.TextDelta{Text: strings.Repeat("x", 30)})
	eventually(t, e.clock, 0, "first message", func() bool { return len(ops()) == 1 })
	ctx := context.Background()
	if _, err := e.db.Exec(ctx, `ALTER TABLE delivery_outbox RENAME TO delivery_outbox_away`); err != nil {
		t.Fatal(err)
	}
	stream(2, final("the whole answer"))
	durable := fmt.Sprintf("delivery-replies-%d", e.bus.Topology().Partition("s1"))
	eventually(t, e.clock, 0, "a failed attempt and its retry", func() bool {
		c, err := e.bus.JetStream().Consumer(ctx, e.bus.Topology().Stream(bus.StreamReplies), durable)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && (info.NumRedelivered > 0 || info.NumAckPending == 0)
	})
	if _, err := e.db.Exec(ctx, `ALTER TABLE delivery_outbox_away RENAME TO delivery_outbox`); err != nil {
		t.Fatal(err)
	}
	eventually(t, e.clock, 0, "the final edit", func() bool { return len(ops()) == 2 })
	if got := ops()[1]; got.Op != deliveryv1.SendOp_SEND_OP_EDIT || got.Req.GetText() != "the whole answer" || !got.Req.GetFinal() {
		t.Errorf("final: %v %q final=%v", got.Op, got.Req.GetText(), got.Req.GetFinal())
	}
}

// A stream's partition moves to another replica mid-answer (a rolling
// restart): the new owner streams nothing more into a message of its own,
// and the final answer is written over the message the first one
// streamed, so the chat shows one answer, not a stale half and a whole.
func TestStreamMovesToAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	stream := func(seq int64, body any) { e.publishStream(t, "t1", seq, "s1", body) }
	posted := e.gw.sends
	a := e.start(t, cfg, "a")
	first := strings.Repeat("first part ", 4)
	stream(1, &repliesv1.TextDelta{Text: first})
	eventually(t, e.clock, 0, "the stream's message", func() bool { return len(posted()) == 1 })
	e.consumed(t, "s1")
	a.stop(t)
	e.start(t, cfg, "b")
	e.clock.Advance(time.Second)
	second := strings.Repeat("second part ", 4)
	stream(2, &repliesv1.TextDelta{Text: second})
	stream(3, final(first+second+"done"))
	eventually(t, e.clock, 0, "the final", func() bool {
		p := posted()
		return len(p) > 0 && p[len(p)-1].Req.GetFinal()
	})
	sends := 0
	for _, c := range posted() {
		if c.Op == deliveryv1.SendOp_SEND_OP_SEND {
			sends++
		}
	}
	p := posted()
	last := p[len(p)-1]
	if sends != 1 || last.Op != deliveryv1.SendOp_SEND_OP_EDIT || last.Req.GetMessageId() != "m1" {
		t.Errorf("%d messages sent (want 1); final %v of %q", sends, last.Op, last.Req.GetMessageId())
	}
	if last.Req.GetText() != first+second+"done" {
		t.Errorf("final text %q", last.Req.GetText())
	}
}

// A streamed answer does not start its message ahead of an earlier
// answer still waiting in the outbox (paced or retried): the chat keeps
// the answers in order.
func TestStreamWaitsForEarlierAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := streamConfig()
	e.start(t, cfg, "a")
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetIdempotencyKey() == "t1:0:m0" && try == 1 {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, RetryAfterMs: 60_000}}
		}
		return behaviour{}
	})
	first := event("t1", 1, "s1", final("the first answer"))
	first.Target.Platform = "stream"
	e.publish(t, first)
	eventually(t, e.clock, 0, "the first answer queued for retry", func() bool { return rowState(t, e.db, "t1:0:m0") == "queued" })
	delta := event("t2", 1, "s1", &repliesv1.TextDelta{Text: strings.Repeat("the second answer ", 3)})
	delta.Target.Platform = "stream"
	e.publish(t, delta)
	e.consumed(t, "s1")
	for _, c := range func() []call { _, p := e.gw.snapshot(); return p }() {
		if c.Req.GetTurnId() == "t2" {
			t.Fatalf("the second answer's stream posted %v %q before the first answer went out", c.Op, c.Req.GetText())
		}
	}
}

// A replica that loses a reply partition stops the typing indicators of
// the turns it showed there: the replica that takes the partition over
// starts and stops its own, and the old ones must not run on for minutes.
func TestTypingStopsWithThePartition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.TypingInterval = 50 * time.Millisecond
	e.start(t, cfg, "a")
	e.publish(t, event("t1", 1, "s1", &repliesv1.Typing{Active: true}))
	eventually(t, e.clock, 0, "typing", func() bool { return e.typings() > 1 })
	// Another holder takes the partition's lease: the renewal fails and
	// the replica lets go of the partition.
	name := fmt.Sprintf("replies-partition:%d", e.bus.Topology().Partition("s1"))
	if err := e.rdb.Set(context.Background(), redisx.NewLocker(e.rdb, e.rpref+"delivery:").Key(name), "another-replica", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Renewals run every third of the lease; the consumer ends within a
	// poll (cfg.PollWait) after.
	time.Sleep(cfg.PartitionLease + 2*time.Second)
	before := e.typings()
	time.Sleep(10 * cfg.TypingInterval)
	if after := e.typings(); after != before {
		t.Errorf("typing went on after the partition was lost: %d sends, then %d", before, after)
	}
}

// DeliveryService.Send resolves targets and queues proactive messages.
func TestProactiveSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.GRPCAddr = "127.0.0.1:0"
	cfg.Token = "s3cret"
	cfg.Platforms["test"] = delivery.Platform{Home: "home-chat:7"}
	in := e.start(t, cfg, "a")
	if err := outbox.New(e.db).UpsertChannel(context.Background(), outbox.Channel{Platform: "test", Account: "acc", ChatID: "C42", Name: "ops"}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(in.svc.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := deliveryv1.NewDeliveryServiceClient(conn)
	if _, err := client.Send(context.Background(), &deliveryv1.SendRequest{Target: "test", Text: "x"}); err == nil {
		t.Fatal("send without token accepted")
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	cases := []struct {
		target string
		want   *deliveryv1.Target
	}{
		{"test", &deliveryv1.Target{Platform: "test", ChatId: "home-chat", ThreadId: "7"}},
		{"test:123", &deliveryv1.Target{Platform: "test", ChatId: "123"}},
		{"test:123:9", &deliveryv1.Target{Platform: "test", ChatId: "123", ThreadId: "9"}},
		{"test:#OPS", &deliveryv1.Target{Platform: "test", Account: "acc", ChatId: "C42"}},
	}
	for i, c := range cases {
		resp, err := client.Send(ctx, &deliveryv1.SendRequest{Target: c.target, Text: fmt.Sprint("proactive ", i), IdempotencyKey: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		if !proto.Equal(resp.GetResolvedTarget(), c.want) {
			t.Errorf("%s resolved to %v", c.target, resp.GetResolvedTarget())
		}
	}
	if _, err := client.Send(ctx, &deliveryv1.SendRequest{Target: "test:#nope", Text: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown channel: %v", err)
	}
	// The same idempotency key again sends nothing new.
	if _, err := client.Send(ctx, &deliveryv1.SendRequest{Target: "test:123", Text: "proactive 1", IdempotencyKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, e.clock, 0, "four messages", func() bool { return len(e.gw.postedTexts()) == 4 })
	time.Sleep(100 * time.Millisecond)
	for text, n := range e.gw.postedTexts() {
		if n != 1 {
			t.Errorf("%q posted %d times", text, n)
		}
	}
}

// A lone reply to an idle chat is sent straight from the reply consumer
// and recorded as sent; a redelivery of the same event posts nothing more;
// a reply to a chat with an older message still waiting goes behind it.
func TestLoneReplyIsSentThroughOnceAndInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	e.publish(t, event("t1", 1, "s1", final("straight through")))
	eventually(t, e.clock, 0, "row recorded sent", func() bool { return rowState(t, e.db, "t1:1:0") == "sent" })
	var attempts int
	if err := e.db.QueryRow(context.Background(), `SELECT attempts FROM delivery_outbox WHERE idempotency_key = 't1:1:0'`).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts %d %v, want 1", attempts, err)
	}
	// The same event again (a redelivery after a crash before the ack).
	ev := event("t1", 1, "s1", final("straight through"))
	if _, err := e.bus.Publish(context.Background(), e.bus.Topology().ReplySubject("s1"), "reply:t1:1:again", ev); err != nil {
		t.Fatal(err)
	}
	e.consumed(t, "s1")
	if _, posted := e.gw.snapshot(); len(posted) != 1 {
		t.Fatalf("posted %d times, want once", len(posted))
	}

	// An older message of the chat waits (rate limited): the next reply
	// must not overtake it.
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetIdempotencyKey() == "t2:1:0" && try == 1 {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, RetryAfterMs: 1000}}
		}
		return behaviour{}
	})
	e.publish(t, event("t2", 1, "s1", final("first")))
	eventually(t, e.clock, 0, "first queued for retry", func() bool {
		return rowState(t, e.db, "t2:1:0") == "queued"
	})
	e.publish(t, event("t3", 1, "s1", final("second")))
	e.consumed(t, "s1")
	eventually(t, e.clock, 100*time.Millisecond, "both sent", func() bool {
		return rowState(t, e.db, "t2:1:0") == "sent" && rowState(t, e.db, "t3:1:0") == "sent"
	})
	_, posted := e.gw.snapshot()
	var order []string
	for _, p := range posted {
		order = append(order, p.Req.GetText())
	}
	if strings.Join(order, "|") != "straight through|first|second" {
		t.Fatalf("posted %q", order)
	}
}

// On a per-request platform (the API) a reply answers its own request:
// it goes straight through even while an older reply to the same chat
// waits in the outbox, and leaves no sent row (its request took it).
func TestPerRequestReplyDoesNotWaitForItsChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	cfg.Platforms["test"] = delivery.Platform{PerRequest: true}
	e.start(t, cfg, "a")
	e.gw.setBehaviour(func(req *deliveryv1.SendRequested, try int) behaviour {
		if req.GetIdempotencyKey() == "t1:1:0" && try == 1 {
			return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, RetryAfterMs: 60_000}}
		}
		return behaviour{}
	})
	e.publish(t, event("t1", 1, "s1", final("first")))
	eventually(t, e.clock, 0, "first queued for retry", func() bool { return rowState(t, e.db, "t1:1:0") == "queued" })
	e.publish(t, event("t2", 1, "s1", final("second")))
	e.consumed(t, "s1")
	if _, posted := e.gw.snapshot(); len(posted) != 1 || posted[0].Req.GetText() != "second" {
		t.Fatalf("posted %v", posted)
	}
	if st := rowState(t, e.db, "t2:1:0"); st != "" {
		t.Fatalf("second left a %s row, want none", st)
	}
	if st := rowState(t, e.db, "t1:1:0"); st != "queued" {
		t.Fatalf("first is %s, want still queued", st)
	}
}

// Replicas share the reply partitions: a second replica takes half of
// them from the first, replies still go out once each, and when the
// second stops the first owns them all again.
func TestReplicasBalanceThePartitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := testConfig()
	a := e.start(t, cfg, "a")
	parts := e.bus.Topology().PartitionCount()
	eventually(t, e.clock, 0, "a owning every partition", func() bool { return a.svc.Partitions() == parts })
	b := e.start(t, cfg, "b")
	eventually(t, e.clock, 0, "half each", func() bool {
		return a.svc.Partitions() == parts/2 && b.svc.Partitions() == parts/2
	})
	const n = 30
	for i := range n {
		e.publish(t, event(fmt.Sprint("t", i), 1, fmt.Sprint("s", i), final(fmt.Sprint("answer ", i))))
	}
	eventually(t, e.clock, 0, "every answer", func() bool { return len(e.gw.postedTexts()) == n })
	for text, c := range e.gw.postedTexts() {
		if c != 1 {
			t.Errorf("%q posted %d times", text, c)
		}
	}
	b.stop(t)
	eventually(t, e.clock, 0, "a owning every partition again", func() bool { return a.svc.Partitions() == parts })
}

// The messages of a turn's final reply carry its hop times to the
// gateway (for the API's Server-Timing header): when the router published
// the turn, when the worker published the reply, and when delivery sent
// the message, through the outbox or straight through; and the answer's
// messages carry the turn's model tokens (for the API's usage). Progress
// and notices carry none.
func TestFinalRepliesCarryHopTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(), "a")
	requested := timestamppb.New(e.clock.Now().Add(-3 * time.Millisecond))
	stamped := func(ev *repliesv1.ReplyEvent) *repliesv1.ReplyEvent {
		ev.TurnRequestedAt = requested
		return ev
	}
	used := &deliveryv1.TokenUsage{PromptTokens: 30, CompletionTokens: 7}
	withUsage := func(f *repliesv1.FinalText) *repliesv1.FinalText { f.Usage = used; return f }
	lone := stamped(event("t1", 2, "s1", withUsage(final("short answer"))))
	long := stamped(event("t2", 2, "s2", withUsage(final(strings.Repeat("word ", 1800)))))
	failed := stamped(event("t3", 2, "s3", &repliesv1.ReplyError{Code: "provider", Message: "the model failed"}))
	e.publish(t, stamped(event("t4", 1, "s4", &repliesv1.Typing{Active: true})))
	e.publish(t, stamped(event("t5", 1, "s5", &repliesv1.Notice{Text: "a notice"})))
	for _, ev := range []*repliesv1.ReplyEvent{lone, long, failed} {
		e.publish(t, ev)
	}
	eventually(t, e.clock, 0, "every message posted", func() bool {
		_, posted := e.gw.snapshot()
		return len(posted) == 6 // 1 + 3 chunks + 1 + the notice
	})
	created := map[string]*timestamppb.Timestamp{"t1": lone.GetCreatedAt(), "t2": long.GetCreatedAt(), "t3": failed.GetCreatedAt()}
	calls, _ := e.gw.snapshot()
	for _, c := range calls {
		h := c.Req.GetHopTimes()
		want, final := created[c.Req.GetTurnId()]
		// The turn's tokens go with every message of its final answer.
		if answer := final && c.Req.GetTurnId() != "t3" && c.Op != deliveryv1.SendOp_SEND_OP_TYPING; answer != proto.Equal(c.Req.GetUsage(), used) {
			t.Errorf("%s %v carries usage %v", c.Key, c.Op, c.Req.GetUsage())
		}
		switch {
		case !final || c.Op == deliveryv1.SendOp_SEND_OP_TYPING:
			if h != nil {
				t.Errorf("%s %v carries hop times %v", c.Key, c.Op, h)
			}
		case h == nil:
			t.Errorf("%s has no hop times", c.Key)
		case !proto.Equal(h.GetTurnRequestedAt(), requested) || !proto.Equal(h.GetReplyCreatedAt(), want) ||
			h.GetDispatchedAt().AsTime().Before(want.AsTime()) || h.GetDispatchedAt().AsTime().After(c.At):
			t.Errorf("%s hop times %v, want requested %v, created %v, dispatched by %v", c.Key, h, requested, want, c.At)
		}
	}
}

// Housekeeping keeps the outbox gauge current and deletes sent rows past
// their retention. Not parallel: it sets the package's intervals and reads
// a process-wide gauge.
func TestHousekeepingCountsAndPrunesTheOutbox(t *testing.T) {
	restore := delivery.SetHousekeeping(50*time.Millisecond, 50*time.Millisecond)
	defer restore()
	e := newEnv(t)
	cfg := testConfig()
	cfg.SentRetention = time.Hour
	cfg.TTL = 10 * time.Hour
	cfg.MaxAttempts = 1000
	e.start(t, cfg, "a")
	stuck := event("t1", 1, "s1", final("nobody listens"))
	stuck.Target.Platform = "nowhere"
	e.publish(t, stuck)
	e.publish(t, event("t2", 1, "s2", final("hello")))
	queued := map[string]string{"state": "queued"}
	eventually(t, e.clock, 0, "the stuck row counted", func() bool {
		return telemetrytest.Value(t, "switchboard_delivery_outbox_rows", queued) == 1
	})
	eventually(t, e.clock, 0, "the sent row recorded", func() bool { return rowState(t, e.db, "t2:1:0") == "sent" })
	e.clock.Advance(2 * time.Hour)
	eventually(t, e.clock, 0, "the sent row pruned", func() bool {
		var n int
		if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM delivery_outbox WHERE idempotency_key = 't2:1:0'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if st := rowState(t, e.db, "t1:1:0"); st != "queued" && st != "sending" {
		t.Errorf("the waiting row is %q", st)
	}
}

// A cron run's answer that is given up (dead-lettered, expired) is
// recorded on its job, as Hermes's last_delivery_error: last_status
// delivery_failed with the reason, which names the deliver target that
// failed as Hermes's _deliver_result does ("delivery to
// <platform>:<chat> failed: …"; the thread too, as a deliver value
// names it), so that the owner of a job with several targets can tell
// which one (a copy to another target fails alike). A failed typing
// indicator of the run is not its answer; another session's failure
// touches no job.
func TestCronRunUndeliveredRecordedOnItsJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		platform       string
		chat, thread   string // the target's; "" keeps event's
		body           any
		status         string
		target, reason string // "delivery to <target> failed: <reason…>"
	}{
		{"dead-lettered", "test", "", "", final("the morning report"), cron.StatusDeliveryFailed, "test:chat-agent:main:cron:dm:", "Forbidden: bot was blocked by the user"},
		{"dead-lettered copy to another target", "test", "room-2", "7", final("the morning report"), cron.StatusDeliveryFailed, "test:room-2:7", "Forbidden: bot was blocked by the user"},
		{"expired", "nowhere", "", "", final("the morning report"), cron.StatusDeliveryFailed, "nowhere:chat-agent:main:cron:dm:", "expired"},
		{"typing", "test", "", "", &repliesv1.Typing{}, "ok", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := newEnv(t)
			e.gw.setBehaviour(func(*deliveryv1.SendRequested, int) behaviour {
				return behaviour{fail: &deliveryv1.SendReceipt{ErrorClass: deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, Error: "Forbidden: bot was blocked by the user"}}
			})
			// A job whose run the scheduler fired and recorded.
			now := time.Date(2026, 3, 10, 8, 0, 0, 0, time.UTC)
			jobs := cron.New(e.db, time.UTC, func() time.Time { return now })
			j, err := jobs.Create(ctx, cron.NewJob{Owner: "test:u1", Prompt: "report", Schedule: "every 1h", Deliver: "local"})
			if err != nil {
				t.Fatal(err)
			}
			other, err := jobs.Create(ctx, cron.NewJob{Owner: "test:u1", Prompt: "other", Schedule: "every 1h", Deliver: "local"})
			if err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Hour)
			var run string
			for range 2 {
				tx, err := e.db.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				c, ok, err := cron.ClaimDue(ctx, tx, now, nil)
				if err != nil || !ok {
					t.Fatalf("claim: %v %v", ok, err)
				}
				id := cron.RunID(c.ID, c.NextRunAt, false)
				if c.ID == j.ID {
					run = id
				}
				c.RepeatCompleted, c.NextRunAt, c.LastRunAt, c.LastStatus = 1, now.Add(time.Hour), now, "ok"
				if err := cron.SaveRun(ctx, tx, c, id, now); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cfg := testConfig()
			cfg.TTL = time.Minute
			cfg.MaxAttempts = 1000
			e.start(t, cfg, "a")
			ev := event("t1", 1, "agent:main:cron:dm:"+run, tc.body)
			ev.Target.Platform = tc.platform
			if tc.chat != "" {
				ev.Target.ChatId, ev.Target.ThreadId = tc.chat, tc.thread
			}
			e.publish(t, ev)
			// A message of an ordinary session fails alike.
			plain := event("t2", 1, "agent:main:test:dm:u1", final("hello"))
			e.publish(t, plain)
			eventually(t, e.clock, 0, "the ordinary message failed", func() bool { return rowState(t, e.db, "t2:1:0") == "failed" })
			if tc.status != "ok" {
				eventually(t, e.clock, 5*time.Second, "the job records it", func() bool {
					got, err := jobs.Resolve(ctx, "test:u1", j.ID)
					return err == nil && got.LastStatus == tc.status
				})
			}
			want := ""
			if tc.target != "" {
				want = "delivery to " + tc.target
				if tc.chat == "" {
					want += run // the event's chat is chat-<session key>
				}
				want += " failed: "
			}
			got, err := jobs.Resolve(ctx, "test:u1", j.ID)
			if err != nil || got.LastStatus != tc.status || !strings.HasPrefix(got.LastDeliveryError, want) || !strings.Contains(got.LastDeliveryError, tc.reason) || (tc.reason == "") != (got.LastDeliveryError == "") {
				t.Errorf("job after its run's answer failed: status %q, delivery error %q (%v); want %q, %q beginning %q", got.LastStatus, got.LastDeliveryError, err, tc.status, tc.reason, want)
			}
			if o, err := jobs.Resolve(ctx, "test:u1", other.ID); err != nil || o.LastStatus != "ok" || o.LastDeliveryError != "" {
				t.Errorf("another job: %+v %v", o, err)
			}
		})
	}
}

// A panic while the outbox sends a row is recovered: the row is counted
// as a failed attempt and sent on its retry, and the replica lives on.
func TestSenderPanicRetriesTheRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const key = "panic-t1:1:0"
	e.gw.setBehaviour(func(r *deliveryv1.SendRequested, try int) behaviour {
		if r.GetIdempotencyKey() == key && try == 1 {
			// The direct send fails: the outbox takes the row.
			return behaviour{fail: &deliveryv1.SendReceipt{Error: "try again"}}
		}
		return behaviour{}
	})
	var panicked atomic.Bool
	restore := delivery.SetSendHook(func(r outbox.Row) {
		if r.Key == key && panicked.CompareAndSwap(false, true) {
			var rows []outbox.Row
			_ = rows[r.Attempts] // index out of range: a real runtime panic
		}
	})
	t.Cleanup(restore)
	labels := map[string]string{"component": "delivery_sender"}
	before := telemetrytest.Value(t, "switchboard_panics_total", labels)
	in := e.start(t, testConfig(), "a")
	e.publish(t, event("panic-t1", 1, "s1", final("survives a panic")))
	eventually(t, e.clock, 0, "sent after the panic", func() bool { return rowState(t, e.db, key) == "sent" })
	if !panicked.Load() {
		t.Fatal("the outbox never sent the row")
	}
	if got := telemetrytest.Value(t, "switchboard_panics_total", labels) - before; got < 1 {
		t.Errorf("panics counted %v, want at least 1", got)
	}
	if n := e.gw.postedTexts()["survives a panic"]; n != 1 {
		t.Fatalf("posted %d times, want 1", n)
	}
	select {
	case err := <-in.done:
		t.Fatalf("the replica stopped: %v", err)
	default:
	}
}

// answerAlive makes replica answer on its liveness subject from now on,
// as a replica back from a reconnect does (on e's connection). Called
// from a gone hook, off the test's goroutine: it reports with t.Error.
func answerAlive(t *testing.T, e *env, replica string) {
	if _, err := e.bus.Conn().Subscribe(e.bus.Topology().DeliveryAliveSubject(replica), func(m *nats.Msg) {
		_ = m.Respond(nil)
	}); err != nil {
		t.Error(err)
	}
	if err := e.bus.Conn().Flush(); err != nil {
		t.Error(err)
	}
}
