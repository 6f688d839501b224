package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	agentv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/agent/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// echoAgent is an AgentService: it streams two deltas and a tool progress,
// and answers with the input text and how much history it was given. A
// message containing "wait" makes it wait for a control message first.
type echoAgent struct {
	agentv1.UnimplementedAgentServiceServer
	starts chan *agentv1.StartTurn
}

func (a *echoAgent) RunTurn(stream grpc.BidiStreamingServer[agentv1.RunTurnRequest, agentv1.RunTurnResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return errors.New("first request is not a start")
	}
	a.starts <- start
	text := start.GetTurn().GetInputs()[0].GetText()
	status := turnsv1.TurnStatus_TURN_STATUS_COMPLETED
	if strings.Contains(text, "wait") {
		msg, err := stream.Recv()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if msg.GetControl().GetAction() == turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT {
			status = turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED
		}
	}
	send := func(r *agentv1.RunTurnResponse) error { return stream.Send(r) }
	answer := "remote: " + text
	for _, r := range []*agentv1.RunTurnResponse{
		{Event: &agentv1.RunTurnResponse_TextDelta{TextDelta: &repliesv1.TextDelta{Text: "remote: "}}},
		{Event: &agentv1.RunTurnResponse_ToolProgress{ToolProgress: &repliesv1.ToolProgress{ToolCallId: "c1", ToolName: "search", Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED}}},
		{Event: &agentv1.RunTurnResponse_TextDelta{TextDelta: &repliesv1.TextDelta{Text: text}}},
		{Event: &agentv1.RunTurnResponse_Completed{Completed: &agentv1.TurnResult{Status: status, FinalText: answer,
			Usage:    &turnsv1.Usage{ModelCalls: 1},
			Appended: []*agentv1.TranscriptMessage{{Role: "assistant", Content: answer}}}}},
	} {
		if err := send(r); err != nil {
			return err
		}
	}
	return nil
}

// startAgent serves an echoAgent and starts a worker whose backend it is,
// configured further by mods.
func startAgent(t *testing.T, h *harness, mods ...func(*worker.Config, *worker.Deps)) *echoAgent {
	t.Helper()
	agent := &echoAgent{starts: make(chan *agentv1.StartTurn, 4)}
	startAgentWorker(t, h, agent, mods...)
	return agent
}

// startAgentWorker serves agent and starts worker w1 with it as its
// backend, configured further by mods.
func startAgentWorker(t *testing.T, h *harness, agent agentv1.AgentServiceServer, mods ...func(*worker.Config, *worker.Deps)) {
	t.Helper()
	backend := serveAgent(t, agent)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.Agent.Backend = backend
		d.LLM = worker.Backend{}
		for _, mod := range mods {
			mod(c, d)
		}
	})
}

// serveAgent serves agent over gRPC until the test ends and returns its
// address as a worker's agent.backend.
func serveAgent(t *testing.T, agent agentv1.AgentServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentv1.RegisterAgentServiceServer(srv, agent)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "grpc://" + lis.Addr().String()
}

func TestExternalAgentBackend(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	agent := startAgent(t, h)
	req := h.requestTurn("s1", "first", turnOpts{})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v %s", c.GetStatus(), c.GetError())
	}
	evs := h.replies(req.TurnId)
	if got := checkReplies(t, evs).GetFinalText().GetText(); got != "remote: first" {
		t.Errorf("final %q", got)
	}
	if len(evs) != 5 { // typing, delta, tool progress, delta, final
		t.Errorf("%d events", len(evs))
	}
	s1 := <-agent.starts
	if s1.GetSystemPrompt() == "" || len(s1.GetTranscript()) != 0 {
		t.Errorf("first start: prompt %q, transcript %v", s1.GetSystemPrompt(), s1.GetTranscript())
	}
	if in := s1.GetInput(); len(in) != 1 || in[0].GetRole() != "user" || in[0].GetContent() != "first" {
		t.Errorf("first start: input %v", in)
	}

	// The second turn gets the transcript, and control messages reach the agent.
	req = h.requestTurn("s1", "please wait", turnOpts{})
	s2 := <-agent.starts
	if len(s2.GetTranscript()) != 2 || s2.GetSystemPrompt() != s1.GetSystemPrompt() {
		t.Errorf("second start: transcript %v", s2.GetTranscript())
	}
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Errorf("status %v", c.GetStatus())
	}
}

// The external agent gets the turn's messages as the model would: a
// document's text and a voice message's transcript, read by the worker.
func TestExternalAgentGetsWhatTheWorkerRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
	for name, data := range map[string]string{"notes": "# Plan\n- buy milk", "speech": "lights off"} {
		if _, err := store.Keep(context.Background(), name, "", strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	h.setGeneration("s1", 1)
	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	agent := startAgent(t, h, func(c *worker.Config, d *worker.Deps) {
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
			return stt.Transcribe(ctx, "", audio, filename, mime)
		})
	})
	req := h.requestTurn("s1", "summarise", turnOpts{attachments: []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, MimeType: "text/markdown", FileName: "notes.md", Location: &eventsv1.Attachment_BytesRef{BytesRef: "notes"}},
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, MimeType: "audio/ogg", Location: &eventsv1.Attachment_BytesRef{BytesRef: "speech"}},
	}})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v %s", c.GetStatus(), c.GetError())
	}
	in := (<-agent.starts).GetInput()
	if len(in) != 1 {
		t.Fatalf("input %v, want one message", in)
	}
	for _, want := range []string{"summarise", "# Plan\n- buy milk", `Here's what they said: "lights off"`} {
		if !strings.Contains(in[0].GetContent(), want) {
			t.Errorf("the agent got %q, without %q", in[0].GetContent(), want)
		}
	}
	var stored string
	if err := h.db.QueryRow(context.Background(), `SELECT content FROM transcript_messages WHERE turn_id = $1 AND role = 'user'`, req.TurnId).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != in[0].GetContent() {
		t.Errorf("stored %q, the agent got %q", stored, in[0].GetContent())
	}
}

// An external agent's turn whose end failed to commit runs again, and the
// agent's messages land in the transcript once: they commit with the final.
func TestExternalAgentMessagesCommitOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	agent := startAgent(t, h)
	ctx := context.Background()
	req := h.requestTurn("s1", "please wait", turnOpts{lockTTL: shortLockTTL})
	<-agent.starts
	// The turn's end cannot be written: the first attempt fails after the
	// agent answered, and the turn runs again.
	if _, err := h.db.Exec(ctx, `ALTER TABLE worker_turns RENAME TO worker_turns_away`); err != nil {
		t.Fatal(err)
	}
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	time.Sleep(500 * time.Millisecond)
	if _, err := h.db.Exec(ctx, `ALTER TABLE worker_turns_away RENAME TO worker_turns`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-agent.starts:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not run again")
	}
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	h.waitCompleted(req.TurnId)
	var n int
	if err := h.db.QueryRow(ctx, `SELECT count(*) FROM transcript_messages WHERE turn_id = $1 AND role = 'assistant'`, req.TurnId).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d assistant messages in the transcript, want 1", n)
	}
}

// /compress with an external agent: the agent keeps its own context, so
// the turn answers that and never starts the agent.
func TestExternalAgentCompressCommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	agent := startAgent(t, h)
	req := h.requestTurn("s1", "/compress", turnOpts{command: "compress"})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v %s", c.GetStatus(), c.GetError())
	}
	want := "Compression is not available: the agent behind this gateway manages its own context."
	if got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText(); got != want {
		t.Errorf("final %q, want %q", got, want)
	}
	if n := len(agent.starts); n != 0 {
		t.Errorf("the agent was started %d times", n)
	}
}

// pausingAgent streams "remote: ", then waits for a control message (or
// the end of the call) before it streams the input text and answers.
type pausingAgent struct {
	agentv1.UnimplementedAgentServiceServer
	starts chan struct{}
}

func (a *pausingAgent) RunTurn(stream grpc.BidiStreamingServer[agentv1.RunTurnRequest, agentv1.RunTurnResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	text := first.GetStart().GetTurn().GetInputs()[0].GetText()
	if err := stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_TextDelta{TextDelta: &repliesv1.TextDelta{Text: "remote: "}}}); err != nil {
		return err
	}
	a.starts <- struct{}{}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	for _, r := range []*agentv1.RunTurnResponse{
		{Event: &agentv1.RunTurnResponse_TextDelta{TextDelta: &repliesv1.TextDelta{Text: text}}},
		{Event: &agentv1.RunTurnResponse_Completed{Completed: &agentv1.TurnResult{Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED,
			FinalText: "remote: " + text, Appended: []*agentv1.TranscriptMessage{{Role: "assistant", Content: "remote: " + text}}}}},
	} {
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	return nil
}

// A turn run again after its worker stopped mid-stream streams nothing
// from the external agent either (as the built-in loop's later attempts):
// its deltas would be spliced onto what the first attempt streamed (an
// API client's stream then no longer matches the final, which ends it
// with an error). The final carries the whole answer.
func TestExternalAgentRedeliveredTurnStreamsNoDeltas(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	agent := &pausingAgent{starts: make(chan struct{}, 4)}
	backend := serveAgent(t, agent)
	remote := func(c *worker.Config, d *worker.Deps) {
		c.Agent.Backend = backend
		c.DrainTimeout = 50 * time.Millisecond
		d.LLM = worker.Backend{}
	}
	w1 := h.startWorker("w1", remote)
	req := h.requestTurn("s1", "hello", turnOpts{})
	<-agent.starts
	waitFor(t, 10*time.Second, "the first attempt's delta", func() bool { return h.deltas(req.TurnId) == 1 })
	w1.stop(t)
	h.startWorker("w2", remote)
	select {
	case <-agent.starts:
	case <-time.After(30 * time.Second):
		t.Fatal("the turn was not run again")
	}
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STEER, "go on")
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if n := h.deltas(req.TurnId); n != 1 {
		t.Fatalf("%d text deltas, want the first attempt's one alone", n)
	}
	if final := checkReplies(t, h.replies(req.TurnId)); final.GetFinalText().GetText() != "remote: hello" {
		t.Fatalf("final %v", final)
	}
}

// The lock's loss ends the external agent's call, as it ends a model
// call or a tool of the built-in loop: a worker that no longer holds the
// session must not let its agent go on acting for it, nor wait for an
// agent that may take minutes before it gives the session up.
func TestExternalAgentCallEndsWhenTheLockIsLost(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	agent := &pausingAgent{starts: make(chan struct{}, 4)}
	startAgentWorker(t, h, agent)
	req := h.requestTurn("s1", "hello", turnOpts{lockTTL: shortLockTTL})
	<-agent.starts
	// A stalled attempt's lock, taken over by another attempt of the turn.
	if err := h.rdb.Set(context.Background(), h.locker.Key("s1"), redisx.Holder(req.LockToken, "w2.2"), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	var c *turnsv1.TurnCompleted
	// A renewal comes every 2 s / 3.
	waitFor(t, 15*time.Second, "the turn to end once its lock is lost", func() bool {
		c = h.completed(req.TurnId)
		return c != nil
	})
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v, want STALE", c.GetStatus())
	}
}

// stepAgent is an AgentService that reports one tool call's steps and
// answers "done".
type stepAgent struct {
	agentv1.UnimplementedAgentServiceServer
	steps []*repliesv1.ToolProgress
}

func (a *stepAgent) RunTurn(stream grpc.BidiStreamingServer[agentv1.RunTurnRequest, agentv1.RunTurnResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	for _, st := range a.steps {
		if err := stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_ToolProgress{ToolProgress: st}}); err != nil {
			return err
		}
	}
	return stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_Completed{Completed: &agentv1.TurnResult{
		Status: turnsv1.TurnStatus_TURN_STATUS_COMPLETED, FinalText: "done", Usage: &turnsv1.Usage{ModelCalls: 1},
		Appended: []*agentv1.TranscriptMessage{{Role: "assistant", Content: "done"}}}}})
}

// An external agent's tool steps reach the gateways as the built-in
// loop's do: a result's preview masked and bounded, arguments bounded
// and parsing — the API gateway lists them in responses and keeps them,
// and a step past NATS's max payload would fail the turn.
func TestExternalAgentToolStepsAreMaskedAndBounded(t *testing.T) {
	t.Parallel()
	const key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
	huge := strings.Repeat("x", 3<<19) // past NATS's 1 MiB, within gRPC's 4
	tests := []struct {
		name string
		step *repliesv1.ToolProgress
	}{
		{"secret in result", &repliesv1.ToolProgress{Phase: repliesv1.ToolPhase_TOOL_PHASE_FINISHED, Detail: "OPENAI_API_KEY=" + key}},
		{"huge result", &repliesv1.ToolProgress{Phase: repliesv1.ToolPhase_TOOL_PHASE_FAILED, Detail: huge}},
		{"huge arguments", &repliesv1.ToolProgress{Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED,
			Arguments: `{"q":"` + huge + `"}`, Preview: huge[:1<<20], Detail: huge[:1<<20]}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			session := fmt.Sprintf("s%d", i)
			h.setGeneration(session, 1)
			tt.step.ToolCallId, tt.step.ToolName = "c1", "search"
			startAgentWorker(t, h, &stepAgent{steps: []*repliesv1.ToolProgress{tt.step}})
			req := h.requestTurn(session, "go", turnOpts{})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v %s", c.GetStatus(), c.GetError())
			}
			var got *repliesv1.ToolProgress
			for _, ev := range h.replies(req.TurnId) {
				if tp := ev.GetToolProgress(); tp != nil {
					got = tp
				}
			}
			if got == nil {
				t.Fatal("no tool progress published")
			}
			if strings.Contains(got.GetDetail(), "abcdefghijklmnopqrstuvwxyz") {
				t.Errorf("detail %q shows the key", got.GetDetail())
			}
			for what, s := range map[string]string{"detail": got.GetDetail(), "preview": got.GetPreview(), "arguments": got.GetArguments()} {
				if len(s) > 4000 {
					t.Errorf("%s is %d bytes", what, len(s))
				}
			}
			if a := got.GetArguments(); a != "" && !json.Valid([]byte(a)) {
				t.Errorf("arguments %q do not parse", a)
			}
		})
	}
}

// quietAgent is an AgentService that says nothing until a control
// message comes, then ends the turn with the status in want for that
// action, without text.
type quietAgent struct {
	agentv1.UnimplementedAgentServiceServer
	starts chan struct{}
}

func (a *quietAgent) RunTurn(stream grpc.BidiStreamingServer[agentv1.RunTurnRequest, agentv1.RunTurnResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	a.starts <- struct{}{}
	msg, err := stream.Recv()
	if err != nil {
		return err
	}
	status := turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED
	if msg.GetControl().GetAction() == turnsv1.ControlAction_CONTROL_ACTION_STOP {
		status = turnsv1.TurnStatus_TURN_STATUS_STOPPED
	}
	return stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_Completed{Completed: &agentv1.TurnResult{
		Status: status, Usage: &turnsv1.Usage{ModelCalls: 1}}}})
}

// An external agent's turn that a newer message interrupted before it
// said anything ends silently, as the built-in loop's does: the router
// acknowledged the interrupt and the next turn answers; one stopped says
// "Stopped.", as the built-in loop's. Neither is an error ("The agent
// could not complete this request.", which marked the user's message as
// failed).
func TestExternalAgentEndedBeforeItSaidAnything(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		action     turnsv1.ControlAction
		status     turnsv1.TurnStatus
		wantNotice string
	}{
		{turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED, ""},
		{turnsv1.ControlAction_CONTROL_ACTION_STOP, turnsv1.TurnStatus_TURN_STATUS_STOPPED, "Stopped."},
	} {
		t.Run(tt.action.String(), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.setGeneration("s1", 1)
			agent := &quietAgent{starts: make(chan struct{}, 4)}
			startAgentWorker(t, h, agent)
			req := h.requestTurn("s1", "hello", turnOpts{})
			<-agent.starts
			h.control("s1", tt.action, "")
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != tt.status {
				t.Fatalf("status %v (%s), want %v", c.GetStatus(), c.GetError(), tt.status)
			}
			final := checkReplies(t, h.replies(req.TurnId))
			if e := final.GetError(); e.GetCode() != "interrupted" || e.GetMessage() != tt.wantNotice {
				t.Fatalf("final %v, want an interrupted error saying %q", final, tt.wantNotice)
			}
		})
	}
}

// saidThenStoppedAgent streams a delta, then waits for a control
// message and ends the turn stopped, without final text.
type saidThenStoppedAgent struct {
	agentv1.UnimplementedAgentServiceServer
	starts chan struct{}
}

func (a *saidThenStoppedAgent) RunTurn(stream grpc.BidiStreamingServer[agentv1.RunTurnRequest, agentv1.RunTurnResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_TextDelta{TextDelta: &repliesv1.TextDelta{Text: "Let me think"}}}); err != nil {
		return err
	}
	a.starts <- struct{}{}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return stream.Send(&agentv1.RunTurnResponse{Event: &agentv1.RunTurnResponse_Completed{Completed: &agentv1.TurnResult{
		Status: turnsv1.TurnStatus_TURN_STATUS_STOPPED, Usage: &turnsv1.Usage{ModelCalls: 1}}}})
}

// A chat's /stop (the next generation, then the control) of an external
// agent's turn that streamed text ends the stream as the built-in loop's
// does: an interrupted error without text, which takes the cursor off
// the streamed message. Before, the worker did not count the agent's
// deltas as streamed text, published nothing once the stopped turn's
// final was fenced, and the chat's message kept its cursor.
func TestExternalAgentStoppedAfterItStreamedEndsTheStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	agent := &saidThenStoppedAgent{starts: make(chan struct{}, 4)}
	startAgentWorker(t, h, agent)
	origin := &eventsv1.SessionSource{Platform: "telegram", Account: "a1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "hello", turnOpts{origin: origin})
	<-agent.starts
	waitFor(t, 10*time.Second, "the agent's delta", func() bool { return h.deltas(req.TurnId) == 1 })
	h.setGeneration("s1", 2) // the router's /stop: the next generation, then the control
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_STOP, "")
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_STALE {
		t.Fatalf("status %v (%s), want STALE", c.GetStatus(), c.GetError())
	}
	evs := h.replies(req.TurnId)
	if last := evs[len(evs)-1].GetError(); last.GetCode() != "interrupted" || last.GetMessage() != "" {
		t.Fatalf("last reply %v, want an interrupted error without text (events %v)", evs[len(evs)-1], evs)
	}
}
