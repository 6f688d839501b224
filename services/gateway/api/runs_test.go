package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// runAgent stands in for router, worker and delivery for runs: it reads
// the gateway's inbound events from the bus and answers over the real
// send contract, as delivery sends a turn's replies — text deltas, tool
// steps, the answer — and answers /stop, /approve and /deny as the
// router does, with a final notice to the command's message, stopping
// or resuming the chat's turn. What a run's input asks:
//
//	hello    two deltas, a tool call, the answer "hello!"
//	approve  a tool call that waits for /approve or /deny
//	slow     a delta every 30 ms until /stop
//	fail     a failed turn (error code provider)
type runAgent struct {
	t *testing.T
	b *bus.Bus

	mu       sync.Mutex
	runs     []*eventsv1.MessageReceived
	commands []*eventsv1.MessageReceived
	// answers and stops reach the chat's running turn.
	answers map[string]chan string
	stops   map[string]chan struct{}
}

func startRunAgent(t *testing.T, b *bus.Bus) *runAgent {
	t.Helper()
	a := &runAgent{t: t, b: b, answers: map[string]chan string{}, stops: map[string]chan struct{}{}}
	ctx, cancel := context.WithCancel(context.Background())
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Topology().Stream(bus.StreamInbound), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		stopped bool // under a.mu: no handler starts once the test ends
	)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev := &eventsv1.MessageReceived{}
		if err := proto.Unmarshal(m.Data(), ev); err != nil {
			a.t.Errorf("agent decode: %v", err)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if stopped {
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); a.handle(ctx, ev) }()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Stop()
		a.mu.Lock()
		stopped = true
		a.mu.Unlock()
		cancel()
		wg.Wait()
	})
	return a
}

func (a *runAgent) chan2(chat string) (chan string, chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.answers[chat] == nil {
		a.answers[chat], a.stops[chat] = make(chan string, 1), make(chan struct{})
	}
	return a.answers[chat], a.stops[chat]
}

func (a *runAgent) handle(ctx context.Context, ev *eventsv1.MessageReceived) {
	chat := ev.GetSource().GetChatId()
	answers, stops := a.chan2(chat)
	send := func(req *deliveryv1.SendRequested, turn string) {
		req.Target = &deliveryv1.Target{Platform: PlatformName, Account: ev.GetSource().GetAccount(), ChatId: chat}
		req.TurnId, req.InputMessageIds = turn, []string{ev.GetMessageId()}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		receipt := &deliveryv1.SendReceipt{}
		if err := a.b.Request(rctx, a.b.Topology().SendSubject(PlatformName), req, receipt); err != nil {
			if ctx.Err() == nil {
				a.t.Errorf("agent send: %v", err)
			}
			return
		}
		if !receipt.GetOk() {
			a.t.Errorf("agent receipt %v", receipt)
		}
	}
	if strings.HasPrefix(ev.GetText(), "/") {
		a.mu.Lock()
		a.commands = append(a.commands, ev)
		a.mu.Unlock()
		reply := "✅ Command approved. The agent is resuming..."
		switch {
		case ev.GetText() == "/stop":
			close(stops)
			reply = "⚡ Stopped. You can continue this session."
		default:
			select {
			case answers <- ev.GetText():
			default:
				reply = "No pending command."
			}
		}
		notice := "notice:" + ev.GetEventId()
		send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: reply, Final: true, IdempotencyKey: notice + ":0"}, notice)
		return
	}
	a.mu.Lock()
	a.runs = append(a.runs, ev)
	a.mu.Unlock()
	turn := "turn-" + ev.GetEventId()
	seq := 0
	key := func(suffix string) string { seq++; return fmt.Sprintf("%s:%d:%s", turn, seq, suffix) }
	delta := func(text string) {
		send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, Text: text, IdempotencyKey: key("d")}, turn)
	}
	// restart is the break before a later model call's text (Hermes's
	// paragraph break), as the worker streams it after a tool call.
	restart := func() {
		send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, Text: "\n\n", StreamRestart: true, IdempotencyKey: key("d")}, turn)
	}
	tool := func(phase, detail string) {
		send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_TOOL_PROGRESS, IdempotencyKey: key("t"),
			ToolStep: &deliveryv1.ToolStep{ToolCallId: "call-1", ToolName: "terminal", Phase: phase, Detail: detail}}, turn)
	}
	final := func(text, code string) {
		req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: text, Final: true, IdempotencyKey: key("0"), ErrorCode: code}
		if code == "" {
			req.Usage = &deliveryv1.TokenUsage{PromptTokens: 7, CompletionTokens: 3}
		}
		send(req, turn)
	}
	switch ev.GetText() {
	case "hello":
		delta("hel")
		delta("lo")
		tool("started", "ls")
		tool("finished", "")
		final("hello!", "")
	case "check the time":
		// The worker sends the text streamed since its last delta
		// interval with the final only: the final completes the stream.
		delta("Let me")
		delta(" check.")
		tool("started", "date")
		tool("finished", "")
		restart()
		delta("It is")
		final("It is 5 o'clock.", "")
	case "approve":
		tool("awaiting_approval", "terminal ls — reply /approve or /deny")
		select {
		case answer := <-answers:
			if answer == "/deny" {
				tool("failed", "")
				final("not run", "")
				return
			}
			tool("started", "ls")
			tool("finished", "")
			final("ran it", "")
		case <-ctx.Done():
		}
	case "slow":
		for i := 0; ; i++ {
			select {
			case <-stops:
				return // stopped: a fenced turn's replies never come
			case <-ctx.Done():
				return
			case <-time.After(30 * time.Millisecond):
				delta(fmt.Sprintf("%d ", i))
			}
		}
	case "fail":
		final("⚠️ The AI service is busy right now.", "provider")
	default:
		final("echo: "+ev.GetText(), "")
	}
}

func (a *runAgent) commandTexts() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, ev := range a.commands {
		out = append(out, ev.GetText())
	}
	return out
}

func (a *runAgent) received() []*eventsv1.MessageReceived {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*eventsv1.MessageReceived(nil), a.runs...)
}

// eventStream reads GET /v1/runs/{id}/events as it comes.
type eventStream struct {
	events chan map[string]any
	// closed is set when the stream ended with ": stream closed".
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

func followRun(t *testing.T, s *Service, id string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr()+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	es := &eventStream{events: make(chan map[string]any, 100), done: make(chan struct{})}
	go func() {
		defer close(es.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if line == ": stream closed" {
				es.mu.Lock()
				es.closed = true
				es.mu.Unlock()
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Errorf("event %q: %v", data, err)
				continue
			}
			es.events <- ev
		}
	}()
	return es
}

// next is the next event other than a text delta (deltas are counted).
func (es *eventStream) next(t *testing.T, deltas *[]string) map[string]any {
	t.Helper()
	for {
		select {
		case ev := <-es.events:
			if ev["event"] == "message.delta" {
				*deltas = append(*deltas, ev["delta"].(string))
				continue
			}
			return ev
		case <-time.After(20 * time.Second):
			t.Fatal("no run event in time")
			return nil
		}
	}
}

// rest reads the stream to its end and reports whether it ended as a
// run's stream ends (": stream closed").
func (es *eventStream) rest(t *testing.T) (events []map[string]any, closed bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
wait:
	for {
		select {
		case ev := <-es.events: // a long stream fills the buffer
			events = append(events, ev)
		case <-es.done:
			break wait
		case <-timeout:
			t.Fatal("run stream did not end")
		}
	}
	for {
		select {
		case ev := <-es.events:
			events = append(events, ev)
		default:
			es.mu.Lock()
			defer es.mu.Unlock()
			return events, es.closed
		}
	}
}

func names(events []map[string]any) []string {
	var out []string
	for _, ev := range events {
		out = append(out, ev["event"].(string))
	}
	return out
}

func startRun(t *testing.T, s *Service, body string, headers map[string]string) (string, httpResult) {
	t.Helper()
	r := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/runs", testKey, body, headers)
	if r.code != http.StatusAccepted {
		t.Fatalf("POST /v1/runs: %d %s", r.code, r.body)
	}
	var acc struct {
		RunID    string `json:"run_id"`
		Status   string `json:"status"`
		Replayed bool   `json:"replayed"`
	}
	if err := json.Unmarshal(r.body, &acc); err != nil || !runIDPattern.MatchString(acc.RunID) {
		t.Fatalf("accepted %s: %v", r.body, err)
	}
	return acc.RunID, r
}

func runStatusOf(t *testing.T, s *Service, id string) runStatus {
	t.Helper()
	r := do(t, http.MethodGet, "http://"+s.Addr()+"/v1/runs/"+id, testKey, "", nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET run: %d %s", r.code, r.body)
	}
	var st runStatus
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// A run starts at once (202), streams its events — text deltas, the tool
// call's steps — and ends with run.completed, after which its stream
// closes; its status says completed, with the answer and the usage. Its
// events can be read again, from the start, after it ended.
func TestRunCompletes(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)

	id, acc := startRun(t, s, `{"input":"hello","instructions":"be brief"}`, nil)
	if !strings.Contains(string(acc.body), `"status":"started"`) || acc.header.Get(HeaderHermesSession) != id {
		t.Errorf("accepted %s, session header %q", acc.body, acc.header.Get(HeaderHermesSession))
	}
	es := followRun(t, s, id)
	events, closed := es.rest(t)
	got := strings.Join(names(events), " ")
	if got != "message.delta message.delta tool.started tool.completed message.delta run.completed" || !closed {
		t.Fatalf("events %s (closed %v)", got, closed)
	}
	for _, ev := range events {
		if ev["run_id"] != id || ev["timestamp"].(float64) < float64(time.Now().Add(-time.Minute).Unix()) {
			t.Errorf("event %v", ev)
		}
	}
	if events[0]["delta"] != "hel" || events[1]["delta"] != "lo" {
		t.Errorf("deltas %v %v", events[0], events[1])
	}
	if ev := events[2]; ev["tool"] != "terminal" || ev["preview"] != "ls" {
		t.Errorf("tool.started %v", ev)
	}
	if ev := events[3]; ev["tool"] != "terminal" || ev["error"] != false || ev["duration"] == nil {
		t.Errorf("tool.completed %v", ev)
	}
	// The final send's text the deltas did not carry is the last delta.
	if events[4]["delta"] != "!" {
		t.Errorf("last delta %v", events[4])
	}
	end := events[5]
	if end["output"] != "hello!" || fmt.Sprint(end["usage"]) != "map[input_tokens:7 output_tokens:3 total_tokens:10]" {
		t.Errorf("run.completed %v", end)
	}
	st := runStatusOf(t, s, id)
	if st.Object != "hermes.run" || st.Status != runCompleted || st.Output == nil || *st.Output != "hello!" || st.Usage.TotalTokens != 10 ||
		st.SessionID != id || st.Model != "switchboard" || st.LastEvent != "run.completed" || st.CreatedAt > st.UpdatedAt {
		t.Errorf("status %+v", st)
	}
	// The run's message: its id is the run's, its session too (a later
	// run continues it with session_id), the instructions its context.
	evs := agent.received()
	if len(evs) != 1 || evs[0].GetMessageId() != id || evs[0].GetSource().GetChatId() != id || evs[0].GetAnswerOnly() ||
		len(evs[0].GetContext()) != 1 || evs[0].GetContext()[0].GetContent() != "be brief" {
		t.Errorf("run message %v", evs)
	}
	again, closed := followRun(t, s, id).rest(t)
	if strings.Join(names(again), " ") != got || !closed {
		t.Errorf("events read again: %v (closed %v)", names(again), closed)
	}
}

// A run's text deltas add up to its output, as a chat completion's
// stream does: the worker streams the answer at most every
// worker.delta_interval and leaves the rest of it to the final send,
// whose text the deltas did not carry goes out as the last delta before
// run.completed (its timestamp not after the end's). A later model call's text (after the break a tool call
// makes) is the answer; the text before the break stays in the stream.
func TestRunDeltasAddUpToTheOutput(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startRunAgent(t, b)
	for _, c := range []struct {
		input, output, stream string
	}{
		{"hello", "hello!", "hello!"},
		{"check the time", "It is 5 o'clock.", "Let me check.\n\nIt is 5 o'clock."},
		{"no deltas", "echo: no deltas", "echo: no deltas"},
	} {
		id, _ := startRun(t, s, `{"input":"`+c.input+`"}`, nil)
		events, closed := followRun(t, s, id).rest(t)
		if n := len(events); n == 0 || events[n-1]["event"] != "run.completed" || !closed {
			t.Fatalf("%s: events %v (closed %v)", c.input, names(events), closed)
		}
		var stream string
		end := events[len(events)-1]
		for _, ev := range events {
			if ev["event"] == "message.delta" {
				stream += ev["delta"].(string)
				// Every delta comes before the end, in time too.
				if ev["timestamp"].(float64) > end["timestamp"].(float64) {
					t.Errorf("%s: delta %q at %v, after run.completed at %v", c.input, ev["delta"], ev["timestamp"], end["timestamp"])
				}
			}
		}
		if out := end["output"]; out != c.output || stream != c.stream {
			t.Errorf("%s: deltas %q, output %q", c.input, stream, out)
		}
	}
}

// During a rolling upgrade the deltas of a run may be written by a
// replica of a release before this one, and its final send reach a
// newer one:
//   - one from before the deltas were counted writes their events and
//     leaves the record alone, or rewrites the record without the
//     fields it does not know: the answer's rest must not then stream
//     the text those deltas carried again; what was not counted streams
//     nothing more (the output says the whole answer), as before;
//   - one that counted them in the record by every key (Streams,
//     Streamed), or in a tally whose events it did not mark, leaves out
//     of it what this one counts (deltaTally's mark): what it counted is
//     counted on, and the deltas add up to the output, but what it
//     dropped is not streamed again.
func TestRunDeltasOfAnOlderReplicaAreNotStreamedAgain(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// rewrite writes the record as a replica of a release before this
	// one does: with the fields it knows, which fn changes.
	rewrite := func(id string, known []string, fn func(rec map[string]json.RawMessage)) {
		kv, err := s.runs.bucket(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, kvKey(id))
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		for field := range rec {
			if !slices.Contains(known, field) {
				delete(rec, field)
			}
		}
		fn(rec)
		data, _ := json.Marshal(rec)
		if _, err := kv.Update(ctx, kvKey(id), data, e.Revision()); err != nil {
			t.Fatal(err)
		}
	}
	uncounted := []string{"owner", "chat", "scope", "request", "status", "answer", "sent", "media", "links", "tools", "slot"}
	running := func(rec map[string]json.RawMessage) {
		var st runStatus
		_ = json.Unmarshal(rec["status"], &st)
		if st.Status == runQueued {
			st.Status = runRunning
		}
		rec["status"], _ = json.Marshal(st)
	}
	written := func(id, key, text string) {
		if err := s.runs.emit(ctx, id, key, runEvent{Event: "message.delta", Delta: text}); err != nil {
			t.Fatal(err)
		}
	}
	// older writes a delta as a replica from before the count did
	// (runProgress with no change): the run runs from its first event,
	// the event is written, the record keeps no text.
	older := func(id, key, text string) {
		rewrite(id, uncounted, running)
		written(id, key, text)
	}
	// keyed writes a delta as a replica that kept every key did.
	keyed := func(id, key, text string) {
		rewrite(id, append(uncounted, "streamed", "streams"), func(rec map[string]json.RawMessage) {
			var streamed string
			var streams []string
			_ = json.Unmarshal(rec["streamed"], &streamed)
			_ = json.Unmarshal(rec["streams"], &streams)
			if !slices.Contains(streams, key) {
				running(rec)
				streamed, streams = streamed+text, append(streams, key)
			}
			rec["streamed"], _ = json.Marshal(streamed)
			rec["streams"], _ = json.Marshal(streams)
		})
		written(id, key, text)
	}
	// tallied writes a delta as a replica with a tally but no mark did:
	// its events are unmarked, and it drops the mark and the folded
	// range of a record it rewrites.
	tallied := func(id, key, text string) {
		rewrite(id, append(uncounted, "deltas"), func(rec map[string]json.RawMessage) {
			var d deltaTally
			_ = json.Unmarshal(rec["deltas"], &d)
			d.Mark, d.Folded = "", deltaRange{}
			if !d.has(key) {
				running(rec)
				d.add(key)
				d.stream(text)
			}
			rec["deltas"], _ = json.Marshal(d)
		})
		written(id, key, text)
	}
	send := func(id string, req *deliveryv1.SendRequested) {
		req.InputMessageIds = []string{id}
		if err := s.runSend(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	delta := func(id, key, text string) {
		send(id, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, Text: text, IdempotencyKey: key})
	}
	for _, c := range []struct {
		name   string
		stream func(id string)
		want   string
	}{
		{"all deltas by an older replica", func(id string) {
			older(id, "d1", "hel")
			older(id, "d2", "lo")
		}, "hello"},
		{"the record rewritten by an older replica", func(id string) {
			delta(id, "d1", "hel")
			delta(id, "d2", "lo")
			// A replica of that time rewrites the record (a tool's
			// step) as it knows it: without the text counted so far.
			rewrite(id, uncounted, func(map[string]json.RawMessage) {})
		}, "hello"},
		{"a later delta by an older replica", func(id string) {
			delta(id, "d1", "hel")
			older(id, "d2", "lo")
		}, "hello"},
		{"a record that kept every key, counted on", func(id string) {
			keyed(id, "t:1:d", "hel")
			delta(id, "t:1:d", "hel") // delivered again, to this one
			delta(id, "t:2:d", "lo")
		}, "hello!"},
		{"every delta in a record that kept every key", func(id string) {
			keyed(id, "t:1:d", "hel")
			keyed(id, "t:2:d", "lo")
		}, "hello!"},
		{"a record that kept every key out of seq order, counted on", func(id string) {
			keyed(id, "t:2:d", "hel")
			keyed(id, "t:1:d", "lo")
			delta(id, "t:2:d", "hel") // delivered again, to this one
		}, "hello!"},
		{"a record that kept every key, delivered again after this one counted", func(id string) {
			keyed(id, "t:1:d", "hel")
			delta(id, "t:2:d", "lo")
			delta(id, "t:1:d", "hel") // delivered again, to this one: its event is written
		}, "hello!"},
		{"a record that kept keys naming no seq, counted on", func(id string) {
			keyed(id, "a", "hel")
			delta(id, "b", "lo")
		}, "hello!"},
		{"a later delta in a record that kept every key", func(id string) {
			delta(id, "t:1:d", "hel")
			keyed(id, "t:2:d", "lo")
		}, "hello"},
		{"a tally without a mark, counted on", func(id string) {
			tallied(id, "t:1:d", "hel")
			delta(id, "t:1:d", "hel") // delivered again, to this one
			delta(id, "t:2:d", "lo")
		}, "hello!"},
		{"a later delta in a tally without a mark", func(id string) {
			delta(id, "t:1:d", "hel")
			tallied(id, "t:2:d", "lo")
		}, "hello"},
	} {
		id, _ := startRun(t, s, `{"input":"hi"}`, nil)
		c.stream(id)
		send(id, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "hello!", Final: true, IdempotencyKey: "f"})
		runStreams(t, s, id, c.name, "hello!", c.want)
	}
}

// A text delta delivered again (delivery's event redelivered after a
// crash, a send retried) is counted once, whenever it comes: the deltas
// add up to the output.
func TestRunDeltaDeliveredAgainIsCountedOnce(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type delta struct {
		key, text string
	}
	for _, c := range []struct {
		name   string
		deltas []delta
		final  string
		want   string
	}{
		{"at once", []delta{{"t:1:d", "hel"}, {"t:1:d", "hel"}, {"t:2:d", "lo"}}, "hello!", "hello!"},
		{"after later deltas", []delta{{"t:1:d", "hel"}, {"t:2:d", "lo"}, {"t:1:d", "hel"}, {"t:2:d", "lo"}}, "hello!", "hello!"},
		{"keys naming no seq", []delta{{"a", "hel"}, {"a", "hel"}, {"b", "lo"}, {"a", "hel"}}, "hello!", "hello!"},
		{"a break", []delta{{"t:1:d", "Let me"}, {"t:2:d", "\n\n"}, {"t:3:d", "hel"}, {"t:2:d", "\n\n"}, {"t:4:d", "lo"}},
			"hello!", "Let me\n\nhello!"},
	} {
		id, _ := startRun(t, s, `{"input":"hi"}`, nil)
		for _, d := range c.deltas {
			if err := s.runSend(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, InputMessageIds: []string{id},
				Text: d.text, StreamRestart: d.text == "\n\n", IdempotencyKey: d.key}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.runSend(ctx, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, InputMessageIds: []string{id},
			Text: c.final, Final: true, IdempotencyKey: "t:9:0"}); err != nil {
			t.Fatal(err)
		}
		runStreams(t, s, id, c.name, c.final, c.want)
	}
}

// A run's delta events are not kept as long as its record: each expires
// run_ttl after its write, and the bucket evicts the oldest at
// runs_max_bytes, while the record, written again at each delta, stays
// (a run longer than run_ttl loses its first ones). A follower that
// read them before they went still gets the answer's rest at the end:
// the deltas it read add up to the output.
func TestRunDeltasAddUpWhenSomeOfTheirEventsAreGone(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := s.runs.bucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string, req *deliveryv1.SendRequested) {
		req.InputMessageIds = []string{id}
		if err := s.runSend(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	deltas := []string{"hel", "lo", " there"}
	for _, c := range []struct {
		name string
		gone []int // the deltas whose events are gone
	}{
		{"the first", []int{0}},
		{"one between", []int{1}},
		{"the last", []int{2}},
		{"all of them", []int{0, 1, 2}},
	} {
		id, _ := startRun(t, s, `{"input":"hi"}`, nil)
		var (
			es     *eventStream
			stream string
		)
		for i, text := range deltas {
			send(id, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, Text: text,
				IdempotencyKey: fmt.Sprintf("turn-%s:%d:d", id, i+1)})
			if es == nil {
				es = followRun(t, s, id) // its answer's header comes with the first event
			}
			select {
			case ev := <-es.events:
				if ev["event"] != "message.delta" || ev["delta"] != text {
					t.Fatalf("%s: event %v, want the delta %q", c.name, ev, text)
				}
				stream += text
			case <-ctx.Done():
				t.Fatalf("%s: no delta %q", c.name, text)
			}
		}
		// The events the follower read go, as an expired or evicted
		// KV entry does (a purge leaves a marker, which watchers skip).
		w, err := kv.Watch(ctx, kvKey(id)+".*")
		if err != nil {
			t.Fatal(err)
		}
		var written []jetstream.KeyValueEntry
		for e := range w.Updates() {
			if e == nil {
				break
			}
			written = append(written, e)
		}
		_ = w.Stop()
		for _, i := range c.gone {
			j := slices.IndexFunc(written, func(e jetstream.KeyValueEntry) bool {
				var ev runEvent
				return json.Unmarshal(e.Value(), &ev) == nil && ev.Delta == deltas[i]
			})
			if j < 0 {
				t.Fatalf("%s: no event of the delta %q", c.name, deltas[i])
			}
			if err := kv.Purge(ctx, written[j].Key()); err != nil {
				t.Fatal(err)
			}
		}
		send(id, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: "hello there!", Final: true,
			IdempotencyKey: fmt.Sprintf("turn-%s:9:0", id)})
		events, closed := es.rest(t)
		if n := len(events); n == 0 || events[n-1]["output"] != "hello there!" || !closed {
			t.Fatalf("%s: events %v (closed %v)", c.name, names(events), closed)
		}
		if stream += deltasOf(events); stream != "hello there!" {
			t.Errorf("%s: deltas %q, output %q", c.name, stream, "hello there!")
		}
	}
}

// deltasOf is the text of a run's message.delta events.
// runStreams follows run id to its end: it must end with output, its
// deltas adding up to want.
func runStreams(t *testing.T, s *Service, id, name, output, want string) {
	t.Helper()
	events, closed := followRun(t, s, id).rest(t)
	if n := len(events); n == 0 || events[n-1]["output"] != output || !closed {
		t.Fatalf("%s: events %v (closed %v)", name, names(events), closed)
	}
	if stream := deltasOf(events); stream != want {
		t.Errorf("%s: deltas %q, want %q", name, stream, want)
	}
}

func deltasOf(events []map[string]any) string {
	var stream string
	for _, ev := range events {
		if ev["event"] == "message.delta" {
			stream += ev["delta"].(string)
		}
	}
	return stream
}

// A run's record is written again at each of its text deltas: its size
// must not grow with them, or a long streamed answer would near NATS's
// 1 MB payload (the record is a KV entry) and cost O(n²) bytes written
// over the run. The deltas still add up to the output.
func TestRunRecordDoesNotGrowWithItsDeltas(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, _ := startRun(t, s, `{"input":"hi"}`, nil)
	size := func() int {
		kv, err := s.runs.bucket(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, kvKey(id))
		if err != nil {
			t.Fatal(err)
		}
		return len(e.Value())
	}
	var answer strings.Builder
	send := func(req *deliveryv1.SendRequested) {
		req.InputMessageIds, req.TurnId = []string{id}, "turn-"+id
		if err := s.runSend(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// As delivery keys a turn's deltas: <turn id>:<reply seq>:d.
	deltas := func(from, to int) {
		for i := from; i < to; i++ {
			text := fmt.Sprintf("word%d ", i)
			answer.WriteString(text)
			send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_STREAM_DELTA, Text: text,
				IdempotencyKey: fmt.Sprintf("turn-%s:%d:d", id, i+1)})
		}
	}
	deltas(0, 20)
	early := size()
	deltas(20, 300)
	late := size()
	if late > early+32 {
		t.Errorf("record of %d bytes after 20 deltas, %d after 300: it grows with them", early, late)
	}
	t.Logf("record of %d bytes after 20 deltas, %d after 300", early, late)
	answer.WriteString("and the rest.")
	send(&deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, Text: answer.String(), Final: true,
		IdempotencyKey: fmt.Sprintf("turn-%s:301:0", id)})
	events, closed := followRun(t, s, id).rest(t)
	if n, stream := len(events), deltasOf(events); n == 0 || events[n-1]["output"] != answer.String() || !closed || stream != answer.String() {
		t.Errorf("events %d (closed %v), deltas add up to %q", len(events), closed, stream)
	}
}

// A run's events can be followed on another replica than the one that
// started it: they are kept in the bus, written by whichever replica
// delivery's sends reached.
func TestRunFollowedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	first := startService(t, b, nil)
	second := startService(t, b, nil)
	startRunAgent(t, b)
	for range 3 {
		id, _ := startRun(t, first, `{"input":"hello"}`, nil)
		events, closed := followRun(t, second, id).rest(t)
		if got := strings.Join(names(events), " "); got != "message.delta message.delta tool.started tool.completed message.delta run.completed" || !closed {
			t.Fatalf("events on the other replica: %s (closed %v)", got, closed)
		}
		if st := runStatusOf(t, second, id); st.Status != runCompleted {
			t.Errorf("status on the other replica %+v", st)
		}
	}
}

// Stop mid-run: the run's session gets /stop, as a chat user would send
// it; the router's answer to it ends the run as cancelled. Stopping it
// again answers its status.
func TestRunStopped(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)
	id, _ := startRun(t, s, `{"input":"slow","session_id":"stop-chat"}`, nil)
	es := followRun(t, s, id)
	select {
	case ev := <-es.events:
		if ev["event"] != "message.delta" {
			t.Fatalf("first event %v", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not start")
	}
	if st := runStatusOf(t, s, id); st.Status != runRunning {
		t.Errorf("status while it streams: %s", st.Status)
	}
	r := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/runs/"+id+"/stop", testKey, "", nil)
	if r.code != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"run_id":"`+id+`","status":"stopping"}` {
		t.Fatalf("stop: %d %s", r.code, r.body)
	}
	events, closed := es.rest(t)
	if len(events) == 0 || events[len(events)-1]["event"] != "run.cancelled" || !closed {
		t.Fatalf("events after stop: %v (closed %v)", names(events), closed)
	}
	for _, ev := range events[:len(events)-1] {
		if ev["event"] != "message.delta" {
			t.Errorf("event %v", ev)
		}
	}
	if st := runStatusOf(t, s, id); st.Status != runCancelled || st.LastEvent != "run.cancelled" {
		t.Errorf("status %+v", st)
	}
	cmds := agent.commandTexts()
	if len(cmds) != 1 || cmds[0] != "/stop" {
		t.Errorf("commands %v", cmds)
	}
	agent.mu.Lock()
	stop := agent.commands[0]
	agent.mu.Unlock()
	if stop.GetSource().GetChatId() != "stop-chat" || stop.GetSource().GetUserId() != agent.received()[0].GetSource().GetUserId() {
		t.Errorf("/stop went to %v", stop.GetSource())
	}
	r = do(t, http.MethodPost, "http://"+s.Addr()+"/v1/runs/"+id+"/stop", testKey, "", nil)
	var st runStatus
	if r.code != http.StatusOK || json.Unmarshal(r.body, &st) != nil || st.Status != runCancelled {
		t.Errorf("stop after the end: %d %s", r.code, r.body)
	}
	if cmds := agent.commandTexts(); len(cmds) != 1 {
		t.Errorf("a stopped run got another /stop: %v", cmds)
	}
}

// A tool call that waits for the user's approval parks the run
// (waiting_for_approval, approval.request); the approval goes to the
// run's session as /approve (or /approve session, /approve always,
// /deny) and the run goes on.
func TestRunApproval(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)
	url := "http://" + s.Addr() + "/v1/runs/"

	for _, c := range []struct {
		choice, command, want string
		events                string
	}{
		{"approve", "/approve", "once", "approval.responded tool.started tool.completed message.delta run.completed"},
		{"session", "/approve session", "session", "approval.responded tool.started tool.completed message.delta run.completed"},
		{"always", "/approve always", "always", "approval.responded tool.started tool.completed message.delta run.completed"},
		{" DENY", "/deny", "deny", "approval.responded tool.completed message.delta run.completed"},
	} {
		id, _ := startRun(t, s, `{"input":"approve"}`, nil)
		es := followRun(t, s, id)
		var deltas []string
		req := es.next(t, &deltas)
		if req["event"] != "approval.request" || req["tool"] != "terminal" || req["description"] != "terminal ls — reply /approve or /deny" ||
			fmt.Sprint(req["choices"]) != "[once session always deny]" {
			t.Fatalf("approval request %v", req)
		}
		st := runStatusOf(t, s, id)
		if st.Status != runApproval || st.Approval == nil || st.Approval.Event != "approval.request" || st.LastEvent != "approval.request" {
			t.Fatalf("waiting status %+v", st)
		}
		if r := do(t, http.MethodPost, url+id+"/approval", testKey, `{"choice":"maybe"}`, nil); r.code != 400 || errorCode(t, r) != "invalid_approval_choice" {
			t.Errorf("bad choice: %d %s", r.code, r.body)
		}
		r := do(t, http.MethodPost, url+id+"/approval", testKey, `{"choice":"`+c.choice+`"}`, nil)
		want := `{"choice":"` + c.want + `","object":"hermes.run.approval_response","resolved":1,"run_id":"` + id + `"}`
		if r.code != http.StatusOK || strings.TrimSpace(string(r.body)) != want {
			t.Fatalf("approval: %d %s", r.code, r.body)
		}
		events, closed := es.rest(t)
		if got := strings.Join(names(events), " "); got != c.events || !closed {
			t.Errorf("%s: events %s (closed %v)", c.choice, got, closed)
		}
		if events[0]["choice"] != c.want || events[0]["resolved"] != 1.0 {
			t.Errorf("approval.responded %v", events[0])
		}
		cmds := agent.commandTexts()
		if cmds[len(cmds)-1] != c.command {
			t.Errorf("%s: command %q, want %q", c.choice, cmds[len(cmds)-1], c.command)
		}
		// Nothing pending any more.
		if r := do(t, http.MethodPost, url+id+"/approval", testKey, `{"choice":"once"}`, nil); r.code != http.StatusConflict || errorCode(t, r) != "approval_not_active" {
			t.Errorf("approval of an ended run: %d %s", r.code, r.body)
		}
	}
	// A run that waits for nothing has no pending approval.
	id, _ := startRun(t, s, `{"input":"slow"}`, nil)
	es := followRun(t, s, id)
	<-es.events
	if r := do(t, http.MethodPost, url+id+"/approval", testKey, `{"choice":"once"}`, nil); r.code != http.StatusConflict || errorCode(t, r) != "approval_not_pending" {
		t.Errorf("approval of a run not waiting: %d %s", r.code, r.body)
	}
}

// A failed turn fails the run, with the explanation as its error.
func TestRunFails(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	startRunAgent(t, b)
	id, _ := startRun(t, s, `{"input":"fail"}`, nil)
	events, closed := followRun(t, s, id).rest(t)
	if len(events) != 1 || events[0]["event"] != "run.failed" || events[0]["error"] != "The AI service is busy right now." || !closed {
		t.Fatalf("events %v (closed %v)", events, closed)
	}
	if st := runStatusOf(t, s, id); st.Status != runFailed || st.Error != "The AI service is busy right now." {
		t.Errorf("status %+v", st)
	}
}

// Which conversation a run continues: session_id, or the session
// header; a run naming none starts one named by its id.
func TestRunSessions(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)
	_, r := startRun(t, s, `{"input":"one","session_id":"conv-1"}`, nil)
	if r.header.Get(HeaderSession) != "conv-1" || r.header.Get(HeaderHermesSession) != "conv-1" {
		t.Errorf("session headers %v", r.header)
	}
	startRun(t, s, `{"input":"two"}`, map[string]string{HeaderHermesSession: "conv-1"})
	first, _ := startRun(t, s, `{"input":"three"}`, nil)
	startRun(t, s, `{"input":"four","session_id":"`+first+`"}`, nil)
	var chats []string
	for range 100 {
		if len(agent.received()) == 4 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, ev := range agent.received() {
		chats = append(chats, ev.GetText()+"@"+ev.GetSource().GetChatId())
	}
	want := map[string]bool{"one@conv-1": true, "two@conv-1": true, "three@" + first: true, "four@" + first: true}
	for _, c := range chats {
		if !want[c] {
			t.Errorf("run %s", c)
		}
	}
	if len(chats) != 4 {
		t.Errorf("runs %v", chats)
	}
}

// A run's conversation_history wins over its previous_response_id, as
// in Hermes (api_server.py, _handle_runs): the response is not continued,
// the run is a conversation of its own with the history as its context.
func TestRunConversationHistoryWinsOverPreviousResponse(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	resp := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey, `{"input":"one"}`, nil)
	var created struct {
		ID string `json:"id"`
	}
	if resp.code != http.StatusOK || json.Unmarshal(resp.body, &created) != nil {
		t.Fatalf("response: %d %s", resp.code, resp.body)
	}
	chat := resp.header.Get(HeaderSession)
	id, run := startRun(t, s, `{"input":"two","previous_response_id":"`+created.ID+`","conversation_history":[{"role":"user","content":"h1"},{"role":"assistant","content":"a1"}]}`, nil)
	if got := run.header.Get(HeaderSession); got != id || got == chat {
		t.Fatalf("run in session %q, want its own (%s), not the response's %q", got, id, chat)
	}
	var ev *eventsv1.MessageReceived
	for range 200 {
		if evs := r.received(); len(evs) == 2 {
			ev = evs[1]
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if ev == nil {
		t.Fatal("the run's message was not published")
	}
	var ctx []string
	for _, c := range ev.GetContext() {
		ctx = append(ctx, c.GetRole()+":"+c.GetContent())
	}
	if ev.GetSource().GetChatId() != id || strings.Join(ctx, ",") != "user:h1,assistant:a1" {
		t.Fatalf("run in chat %q with context %q", ev.GetSource().GetChatId(), ctx)
	}
}

// A run continuing a response without instructions of its own takes
// those the response was answered with, as Hermes's run does
// (api_server.py, _handle_runs); its own, even "", replace them. A run
// naming its session_id too goes on in that session and takes them the
// same; one whose response is not found, or that sends a
// conversation_history, takes none (Hermes reads no response then).
func TestRunCarriesTheInstructionsOfItsPreviousResponse(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	resp := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey, `{"input":"one","instructions":"be brief"}`, nil)
	var created struct {
		ID string `json:"id"`
	}
	if resp.code != http.StatusOK || json.Unmarshal(resp.body, &created) != nil {
		t.Fatalf("response: %d %s", resp.code, resp.body)
	}
	previous := `,"previous_response_id":"` + created.ID + `"`
	for i, c := range []struct{ instructions, context string }{
		{previous, "system:be brief"},
		{previous + `,"instructions":null`, "system:be brief"},
		{previous + `,"instructions":"be kind"`, "system:be kind"},
		{previous + `,"instructions":""`, ""},
		{previous + `,"session_id":"s-1"`, "system:be brief"},
		{previous + `,"session_id":"s-1","instructions":"be kind"`, "system:be kind"},
		{`,"previous_response_id":"resp_unknown","session_id":"s-1"`, ""},
		{previous + `,"session_id":"s-1","conversation_history":[{"role":"user","content":"h"}]`, "user:h"},
	} {
		startRun(t, s, `{"input":"two"`+c.instructions+`}`, nil)
		var ev *eventsv1.MessageReceived
		for range 200 {
			if evs := r.received(); len(evs) == i+2 {
				ev = evs[i+1]
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if ev == nil {
			t.Fatalf("run %d: its message was not published", i)
		}
		var ctx []string
		for _, m := range ev.GetContext() {
			ctx = append(ctx, m.GetRole()+":"+m.GetContent())
		}
		if got := strings.Join(ctx, ","); got != c.context {
			t.Errorf("run with%s: context %q, want %q", c.instructions, got, c.context)
		}
	}
}

// A run naming both session_id and previous_response_id takes the
// conversation of that response, as Hermes's _handle_runs takes the
// stored response's conversation_history (and instructions) while the
// run goes on in the session it names: the run's session, when another,
// opens as a copy of that conversation up to the response's answer
// (fork_from). In the response's own conversation, with a history of
// its own, or with a response not found, nothing is copied.
func TestRunWithSessionTakesTheConversationOfItsPreviousResponse(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	resp := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/responses", testKey, `{"input":"one","instructions":"be brief"}`, nil)
	var created struct {
		ID string `json:"id"`
	}
	if resp.code != http.StatusOK || json.Unmarshal(resp.body, &created) != nil {
		t.Fatalf("response: %d %s", resp.code, resp.body)
	}
	first := r.received()[0]
	own := resp.header.Get(HeaderSession)
	fork := &eventsv1.ForkFrom{SessionKey: "agent:main:api:dm:" + first.GetSource().GetChatId(), TurnId: "turn-" + first.GetEventId()}
	previous := `,"previous_response_id":"` + created.ID + `"`
	for _, c := range []struct {
		name, body string
		fork       *eventsv1.ForkFrom
	}{
		{"another session", previous + `,"session_id":"s-other"`, fork},
		{"another session and instructions", previous + `,"session_id":"s-kind","instructions":"be kind"`, fork},
		{"the response's own session", previous + `,"session_id":"` + own + `"`, nil},
		{"no session", previous, nil},
		{"a history of its own", previous + `,"session_id":"s-history","conversation_history":[{"role":"user","content":"h"}]`, nil},
		{"a response not found", `,"previous_response_id":"resp_unknown","session_id":"s-unknown"`, nil},
	} {
		id, _ := startRun(t, s, `{"input":"two"`+c.body+`}`, nil)
		var ev *eventsv1.MessageReceived
		for range 200 {
			for _, e := range r.received() {
				if e.GetEventId() == id {
					ev = e
				}
			}
			if ev != nil {
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
		if ev == nil {
			t.Fatalf("%s: the run's message was not published", c.name)
		}
		if !proto.Equal(ev.GetForkFrom(), c.fork) {
			t.Errorf("%s: fork_from %v, want %v", c.name, ev.GetForkFrom(), c.fork)
		}
	}
}

// The errors of the runs API: Hermes's codes in OpenAI's error body.
func TestRunErrors(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) {
		c.MaxBodyBytes = 1 << 10
		c.Keys = map[string]string{"other": strings.Repeat("o", 32)}
	})
	startRunAgent(t, b)
	url := "http://" + s.Addr() + "/v1/runs"
	id, _ := startRun(t, s, `{"input":"hello"}`, nil)
	followRun(t, s, id).rest(t)
	unknown := "run_" + strings.Repeat("0", 32)
	for _, c := range []struct {
		name, method, path, key, body string
		headers                       map[string]string
		status                        int
		code                          string
	}{
		{"unknown run", "GET", "/" + unknown, testKey, "", nil, 404, "run_not_found"},
		{"unknown run's events", "GET", "/" + unknown + "/events", testKey, "", nil, 404, "run_not_found"},
		{"unknown run stopped", "POST", "/" + unknown + "/stop", testKey, "", nil, 404, "run_not_found"},
		{"unknown run approved", "POST", "/" + unknown + "/approval", testKey, `{"choice":"once"}`, nil, 404, "run_not_found"},
		{"not a run id", "GET", "/run_x", testKey, "", nil, 404, "run_not_found"},
		{"another client's run", "GET", "/" + id, strings.Repeat("o", 32), "", nil, 404, "run_not_found"},
		{"no key", "GET", "/" + id, "", "", nil, 401, "invalid_api_key"},
		{"no input", "POST", "", testKey, `{"model":"m"}`, nil, 400, "invalid_request"},
		{"not JSON", "POST", "", testKey, `{"input":`, nil, 400, "invalid_request"},
		{"bad session_id", "POST", "", testKey, `{"input":"x","session_id":"a b"}`, nil, 400, "invalid_session_id"},
		{"two sessions", "POST", "", testKey, `{"input":"x","session_id":"a"}`, map[string]string{HeaderSession: "b"}, 400, "invalid_request"},
		{"unknown previous response", "POST", "", testKey, `{"input":"x","previous_response_id":"resp_nope"}`, nil, 400, "previous_response_not_found"},
		{"too large", "POST", "", testKey, `{"input":"` + strings.Repeat("x", 2<<10) + `"}`, nil, 413, "body_too_large"},
		{"approval body not JSON", "POST", "/" + id + "/approval", testKey, `once`, nil, 400, "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, c.method, url+c.path, c.key, c.body, c.headers)
			if r.code != c.status || errorCode(t, r) != c.code {
				t.Errorf("%d %s, want %d %s", r.code, r.body, c.status, c.code)
			}
		})
	}
}

// With an Idempotency-Key every attempt is the same run: a retry gets
// its id (replayed), another request under the key is a conflict.
func TestRunIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)
	key := map[string]string{HeaderIdempotencyKey: "k-1"}
	id, first := startRun(t, s, `{"input":"hello"}`, key)
	followRun(t, s, id).rest(t)
	again, retry := startRun(t, s, `{"input":"hello"}`, key)
	if again != id || retry.header.Get("Idempotency-Replayed") != "true" || first.header.Get("Idempotency-Replayed") != "" ||
		!strings.Contains(string(retry.body), `"replayed":true`) || !strings.Contains(string(retry.body), `"status":"completed"`) {
		t.Errorf("retry: %s %s %v", again, retry.body, retry.header)
	}
	r := do(t, http.MethodPost, "http://"+s.Addr()+"/v1/runs", testKey, `{"input":"other"}`, key)
	if r.code != http.StatusConflict || errorCode(t, r) != "idempotency_key_conflict" {
		t.Errorf("another request: %d %s", r.code, r.body)
	}
	if n := len(agent.received()); n != 1 {
		t.Errorf("%d runs published, want 1", n)
	}
}

// GET /v1/capabilities says what the API serves, in Hermes's shape.
func TestCapabilities(t *testing.T) {
	t.Parallel()
	s := startService(t, newBus(t), nil)
	r := do(t, http.MethodGet, "http://"+s.Addr()+"/v1/capabilities", testKey, "", nil)
	var caps struct {
		Object   string                       `json:"object"`
		Auth     map[string]any               `json:"auth"`
		Features map[string]any               `json:"features"`
		Ends     map[string]map[string]string `json:"endpoints"`
	}
	if r.code != 200 || json.Unmarshal(r.body, &caps) != nil || caps.Object != "hermes.api_server.capabilities" || caps.Auth["required"] != true {
		t.Fatalf("%d %s", r.code, r.body)
	}
	for _, f := range []string{"run_submission", "run_status", "run_events_sse", "run_stop", "run_approval_response", "run_steer", "approval_events"} {
		if caps.Features[f] != true {
			t.Errorf("feature %s: %v", f, caps.Features[f])
		}
	}
	if caps.Features["session_key_header"] != HeaderSessionKey {
		t.Errorf("session_key_header %v", caps.Features["session_key_header"])
	}
	if e := caps.Ends["run_events"]; e["method"] != "GET" || e["path"] != "/v1/runs/{run_id}/events" {
		t.Errorf("run_events endpoint %v", e)
	}
	if e := caps.Ends["run_steer"]; e["method"] != "POST" || e["path"] != "/v1/runs/{run_id}/steer" {
		t.Errorf("run_steer endpoint %v", e)
	}
	// The links to the files answers send are served too.
	if e := caps.Ends["media"]; e["method"] != "GET" || e["path"] != "/v1/media/{media_id}" {
		t.Errorf("media endpoint %v", e)
	}
	if r := do(t, http.MethodGet, "http://"+s.Addr()+"/v1/capabilities", "", "", nil); r.code != 401 {
		t.Errorf("without a key: %d", r.code)
	}
}

// FuzzRunMessageIDs: the ids of a run's messages name it, and no other
// message id (a request's, a keyed request's) is taken for a run's.
func FuzzRunMessageIDs(f *testing.F) {
	f.Add("run_0123456789abcdef0123456789abcdef", "stop", "beef")
	f.Add("run_0123456789abcdef0123456789abcdef", "approval", "")
	f.Add("req_abcd_0123", "stop", "x")
	f.Add("idem_0123456789abcdef0123456789abcdef", "", "")
	f.Fuzz(func(t *testing.T, id, command, suffix string) {
		full := id
		if command != "" {
			full += "_" + command + "_" + suffix
		}
		run, cmd, ok := runMessage(full)
		if !ok {
			if runIDPattern.MatchString(id) && (command == "" || (suffix != "" && (command == runStop || command == runApproved))) {
				t.Fatalf("%q not taken for a run's message", full)
			}
			return
		}
		if !runIDPattern.MatchString(run) || !strings.HasPrefix(full, run) {
			t.Fatalf("%q: run %q", full, run)
		}
		if cmd != "" && cmd != runStop && cmd != runApproved {
			t.Fatalf("%q: command %q", full, cmd)
		}
		if isKeyed(full) || strings.HasPrefix(full, "req_") {
			t.Fatalf("%q is a request's id", full)
		}
		if _, err := parseApproval([]byte(`{"choice":` + fmt.Sprintf("%q", suffix) + `}`)); err == nil {
			if _, ok := runChoices[strings.ToLower(openai.PythonStrip(suffix))]; !ok {
				if _, alias := choiceAliases[strings.ToLower(openai.PythonStrip(suffix))]; !alias {
					t.Fatalf("choice %q taken", suffix)
				}
			}
		}
	})
}
