package worker

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/agent/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// AgentClient is the part of agentv1.AgentServiceClient the worker uses.
type AgentClient interface {
	RunTurn(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[agentv1.RunTurnRequest, agentv1.RunTurnResponse], error)
}

// DialAgent connects to an external AgentService (plaintext; put it on a
// private network or behind a mesh).
func DialAgent(addr string) (AgentClient, func() error, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	if err != nil {
		return nil, nil, fmt.Errorf("dial agent %s: %w", addr, err)
	}
	return agentv1.NewAgentServiceClient(cc), cc.Close, nil
}

// runRemote forwards the turn to the external agent and relays its events.
// Control messages are passed on as they arrive. The agent's appended
// messages are committed when it completes; a redelivered turn starts the
// agent again from the committed transcript.
func (r *turnRun) runRemote(ctx context.Context) (store.Final, error) {
	ls, decided, err := r.begin(ctx)
	if err != nil {
		return store.Final{}, err
	}
	if decided != nil {
		return *decided, nil
	}
	if ls.reply != "" {
		return r.finishWith(ctx, ls, ls.reply)
	}
	if cmd, ok := transcriptCommandOf(r.req); ok && cmd.name == "compress" {
		// The external agent keeps its own context; Switchboard has no
		// model of its own to summarise with.
		return r.finishWith(ctx, ls, "Compression is not available: the agent behind this gateway manages its own context.")
	}
	b := Backend{Kind: "external", BaseURL: r.s.cfg.Agent.Backend}
	r.model = "external"
	system, err := r.systemPrompt(ctx, b, r.req.GetModelOverride())
	if err != nil {
		return store.Final{}, err
	}
	if err := r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Typing{Typing: &repliesv1.Typing{Active: true}}}); err != nil {
		return store.Final{}, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, err := r.s.agent.RunTurn(sctx)
	if err != nil {
		return r.remoteFailed(ctx, ls, err)
	}
	// The agent reads the turn's input as a model would: with the
	// /reload-skills note, which its transcript of later turns lacks.
	start := &agentv1.StartTurn{Turn: r.req, SystemPrompt: system,
		Transcript: transcriptOf(toLLM(ls.summary, ls.prior)), Input: transcriptOf(toLLM("", r.modelTurn(ls)))}
	if err := stream.Send(&agentv1.RunTurnRequest{Request: &agentv1.RunTurnRequest_Start{Start: start}}); err != nil {
		return r.remoteFailed(ctx, ls, err)
	}
	r.ctl.setForward(func(m *turnsv1.TurnControlRequested) {
		_ = stream.Send(&agentv1.RunTurnRequest{Request: &agentv1.RunTurnRequest_Control{Control: m}})
	})
	defer r.ctl.setForward(nil)
	// The lock's loss ends the agent's call (r.ctl.abortCall), as it ends
	// a model call: the agent must not go on acting for a worker that no
	// longer holds the session. (A stop or an interrupt reaches the agent
	// as a control: with a forward set, it cancels nothing.)
	_ = r.ctl.duringCall(cancel)
	defer func() { _ = r.ctl.duringCall(nil) }()
	if r.lockLost.Load() {
		return store.Final{}, errLockLost
	}
	var lastErr *repliesv1.ReplyError
	for {
		resp, err := stream.Recv()
		if r.lockLost.Load() {
			return store.Final{}, errLockLost
		}
		if errors.Is(err, io.EOF) {
			return r.remoteFailed(ctx, ls, errors.New("agent closed the stream without a result"))
		}
		if err != nil {
			return r.remoteFailed(ctx, ls, err)
		}
		switch ev := resp.GetEvent().(type) {
		case *agentv1.RunTurnResponse_TextDelta:
			if r.mayFollowStream() {
				// As the built-in loop's later attempts: an earlier one
				// may have streamed part of its answer, onto which these
				// deltas would be spliced. The final carries the whole
				// answer.
				continue
			}
			delta := &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: ev.TextDelta}}
			err = r.publish(ctx, delta)
			// A turn fenced after it streamed (a /stop) ends the stream
			// (endStream), as the built-in loop's does.
			r.textStreamed = r.textStreamed || (err == nil && r.sends(delta) && ev.TextDelta.GetText() != "")
		case *agentv1.RunTurnResponse_ToolProgress:
			// The agent asks for approvals itself: its progress says when
			// an answer is awaited, so that only then is one forwarded.
			r.ctl.await(ev.ToolProgress.GetPhase() == repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL, ev.ToolProgress.GetToolCallId())
			err = r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_ToolProgress{ToolProgress: agentStep(ev.ToolProgress)}})
		case *agentv1.RunTurnResponse_Media:
			err = r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Media{Media: ev.Media}})
		case *agentv1.RunTurnResponse_Error:
			lastErr = ev.Error
		case *agentv1.RunTurnResponse_Completed:
			_ = stream.CloseSend()
			return r.remoteCompleted(ctx, ls, ev.Completed, lastErr)
		}
		if err != nil {
			return store.Final{}, err
		}
	}
}

// transcriptOf is msgs as an external agent receives them: one transcript
// message per tool call keeps the schema flat.
func transcriptOf(msgs []llm.Message) []*agentv1.TranscriptMessage {
	var out []*agentv1.TranscriptMessage
	for _, m := range msgs {
		if len(m.ToolCalls) == 0 {
			out = append(out, &agentv1.TranscriptMessage{Role: m.Role, Content: m.Content, ToolCallId: m.ToolCallID, ToolName: m.Name})
			continue
		}
		for _, tc := range m.ToolCalls {
			out = append(out, &agentv1.TranscriptMessage{Role: m.Role, Content: m.Content,
				ToolCallId: tc.ID, ToolName: tc.Name, ToolArguments: tc.Arguments})
			m.Content = ""
		}
	}
	return out
}

func (r *turnRun) remoteCompleted(ctx context.Context, ls *loopState, res *agentv1.TurnResult, lastErr *repliesv1.ReplyError) (store.Final, error) {
	if u := res.GetUsage(); u != nil {
		r.usage.InputTokens += u.GetInputTokens()
		r.usage.OutputTokens += u.GetOutputTokens()
		r.usage.CacheReadTokens += u.GetCacheReadTokens()
		r.usage.CacheWriteTokens += u.GetCacheWriteTokens()
		r.usage.ModelCalls += u.GetModelCalls()
		r.usage.ToolCalls += u.GetToolCalls()
	}
	var msgs []store.Message
	for _, m := range res.GetAppended() {
		sm := store.Message{Role: m.GetRole(), Content: m.GetContent(), ToolCallID: m.GetToolCallId(), ToolName: m.GetToolName()}
		if m.GetRole() == llm.RoleAssistant && m.GetToolArguments() != "" {
			sm.ToolCalls = []store.ToolCall{{ID: m.GetToolCallId(), Name: m.GetToolName(), Arguments: m.GetToolArguments()}}
			sm.ToolCallID, sm.ToolName = "", ""
		}
		msgs = append(msgs, sm)
	}
	f := store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: res.GetFinalText()}
	switch res.GetStatus() {
	case turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED:
		f.Status = store.StatusInterrupted
	case turnsv1.TurnStatus_TURN_STATUS_STOPPED:
		f.Status = store.StatusStopped
	case turnsv1.TurnStatus_TURN_STATUS_FAILED:
		f.Status = store.StatusFailed
	case turnsv1.TurnStatus_TURN_STATUS_STALE:
		return store.Final{}, store.ErrStaleGeneration
	}
	switch {
	case f.Text != "" || (f.Status == store.StatusCompleted && lastErr == nil):
		// The agent's answer, or a completed turn with nothing to say:
		// the final as it is.
	case lastErr != nil:
		f.Kind, f.ErrorCode, f.Text = store.FinalError, lastErr.GetCode(), lastErr.GetMessage()
	case f.Status == store.StatusInterrupted:
		// A newer message interrupted the turn before the agent said
		// anything: the router acknowledged it and the next turn answers,
		// so the end is silent, as the built-in loop's (stopFinal), not
		// an error that marks the user's message as failed.
		f.Kind, f.ErrorCode = store.FinalError, "interrupted"
	case f.Status == store.StatusStopped:
		f.Kind, f.ErrorCode, f.Text = store.FinalError, "interrupted", "Stopped."
	default:
		f.Kind = store.FinalError
		f.ErrorCode, f.Text = "agent", "The agent could not complete this request."
	}
	// The agent's messages commit with the final: a turn run again after
	// a failed end (the agent runs it whole again) writes them once. The
	// final removes the queued messages of the steering the agent read;
	// the rest stay queued and run as the session's next input. (An agent
	// that broke the stream, remoteFailed, leaves them all queued.)
	return r.finishSteered(ctx, ls, msgs, nil, f, steeringRead(r.ctl.takeForwarded(), res))
}

// steeringRead are the queued messages of forwarded, the steering passed
// on to the agent, that the agent says it read (TurnResult.steering_read);
// an agent that does not say read them all, as before it could.
func steeringRead(forwarded []string, res *agentv1.TurnResult) []string {
	if res.GetSteeringRead() == nil {
		return forwarded
	}
	read := map[string]bool{}
	for _, id := range res.GetSteeringRead().GetQueuedEventIds() {
		read[id] = true
	}
	var out []string
	for _, id := range forwarded {
		if read[id] {
			out = append(out, id)
		}
	}
	return out
}

// remoteFailed ends the turn with an error reply when the agent is
// unreachable or broke the stream; a shutdown hands the turn back instead.
func (r *turnRun) remoteFailed(ctx context.Context, ls *loopState, err error) (store.Final, error) {
	if ctx.Err() != nil {
		return store.Final{}, ctx.Err()
	}
	r.log.Warn("external agent failed", "err", err)
	return r.finish(ctx, ls, nil, store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "agent",
		Text: "The agent is unavailable right now. Please try again shortly."})
}
