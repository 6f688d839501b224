package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"unicode"
	"unicode/utf8"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"strings"
	"time"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-chat/switchboard/pkg/approvalmode"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/placeholder"
	"github.com/switchboard-chat/switchboard/pkg/reasoning"
	"github.com/switchboard-chat/switchboard/pkg/secret"
	"github.com/switchboard-chat/switchboard/pkg/sessionkey"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// loopState is the turn as far as it is committed.
type loopState struct {
	summary string
	prior   []store.Message // earlier turns
	turn    []store.Message // this turn's steps
	// unsaved is how many of turn's first steps (the inputs) are not
	// written yet: they go out with the turn's first write, so a simple
	// turn writes once.
	unsaved int
	// reply, when set, is the turn's whole answer, without the model
	// (an /undo, or a /retry with nothing to retry).
	reply string
	// partial is what a model call that was cut short (a stop, an
	// interrupt) had streamed to the user.
	partial string
	// The answer being continued past the output limit (callWhole):
	// cut are the texts of its calls that the limit cut (the empty ones
	// left out), cutMsgs the messages that carry them to the next call
	// (each part, then Hermes's request to go on), cutCalls how many
	// calls were cut. They are committed with the answer.
	cut      []string
	cutMsgs  []store.Message
	cutCalls int
	// toolCutRetries counts the times the answer was asked again because
	// the limit cut a tool call (callWhole).
	toolCutRetries int
	// limited: prior and summary are cut to the turn's context limit
	// (limitContext), so they are not the conversation's: compression
	// summarises them for this turn only.
	limited bool
}

// cutSoFar is the text of the answer's cut parts, joined.
func (ls *loopState) cutSoFar() string { return joinCut(ls.cut...) }

// takeCut ends the answer being continued, whose last call answered
// last: the steps to commit before it (its cut parts and the requests to
// go on) and its whole text.
func (ls *loopState) takeCut(last string) (steps []store.Message, text string) {
	steps, text = ls.cutMsgs, joinCut(append(ls.cut, last)...)
	ls.cut, ls.cutMsgs, ls.cutCalls, ls.toolCutRetries = nil, nil, 0, 0
	return steps, text
}

func (l *loopState) nextStep() int { return len(l.turn) }

// begin loads what is committed and records the turn's inputs once.
// A non-nil Final means an earlier attempt already decided the turn.
func (r *turnRun) begin(ctx context.Context) (*loopState, *store.Final, error) {
	ts, err := r.read(ctx)
	if err != nil {
		return nil, nil, err
	}
	// How an earlier attempt read the inputs, for this one's decisions
	// (lookUpAttachments), whether it resumes or republishes.
	r.keepReads(ts.History)
	if r.attempt > 1 {
		if err := r.fillSeqGap(ctx, ts.Final); err != nil {
			return nil, nil, err
		}
	}
	if ts.Final != nil {
		r.log.Info("turn already decided by an earlier attempt; republishing its reply")
		r.usageRecorded = true // with that attempt's final
		return nil, ts.Final, nil
	}
	r.prompt = ts.Prompt
	ls := &loopState{summary: ts.Summary}
	for _, m := range ts.History {
		if m.TurnID == r.req.GetTurnId() {
			ls.turn = append(ls.turn, m)
		} else {
			ls.prior = append(ls.prior, m)
		}
	}
	if sq := r.req.GetSideQuestion(); sq != nil {
		// A /btw side question's context is the chat's conversation as
		// committed now (its own session has nothing: it writes nothing).
		ls.summary, ls.prior, ls.turn = "", nil, nil
		if id := sq.GetSessionId(); id != "" {
			if ls.summary, ls.prior, err = r.s.store.History(ctx, id); err != nil {
				return nil, nil, err
			}
		}
	}
	if _, cmd := transcriptCommandOf(r.req); !cmd && r.req.GetSideQuestion() == nil {
		limitContext(ls, r.req)
	}
	if len(ls.turn) > 0 {
		r.log.Info("resuming turn from committed steps", "steps", len(ls.turn))
		return ls, nil, nil
	}
	if cmd, ok := transcriptCommandOf(r.req); ok {
		r.beginTranscriptCommand(ls, cmd)
		return ls, nil, nil
	}
	var inputs []store.Message
	read := func(ctx context.Context) error {
		for _, in := range r.req.GetInputs() {
			// A stateless client (the OpenAI API without a session header)
			// sends the conversation so far with each request.
			for _, c := range in.GetContext() {
				switch c.GetRole() {
				case llm.RoleUser, llm.RoleAssistant:
					inputs = append(inputs, store.Message{Role: c.GetRole(), Content: c.GetContent()})
				}
			}
			if err := r.fetchAttachments(ctx, in, r.readAtBegin); err != nil {
				return err
			}
			// How its attachments were read goes with it, for the turn's
			// later attempts (lookUpAttachments).
			inputs = append(inputs, store.Message{Role: llm.RoleUser, Content: r.inputText(ctx, in), Read: readOf(in)})
		}
		return nil
	}
	if r.hasAttachments() {
		err = r.cancellable(ctx, read)
	} else {
		err = read(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(inputs) == 0 {
		inputs = append(inputs, store.Message{Role: llm.RoleUser, Content: ""})
	}
	// Written with the turn's first write: until then a crash loses
	// nothing the request does not carry.
	for i := range inputs {
		inputs[i].Step = i
		inputs[i].TurnID = r.req.GetTurnId()
	}
	ls.turn, ls.unsaved = inputs, len(inputs)
	return ls, nil, nil
}

// limitContext cuts what the model is shown of the conversation to the
// turn's context limit (TurnRequested.context_limit: an API Responses
// request's truncation "auto"), as Hermes's _handle_responses keeps the
// latest 100 messages of its stored conversation_history and the
// input's earlier items (gateway/platforms/api_server.py): of the
// earlier messages (the summary counting as one, older than all) the
// latest that, with the inputs' context messages, make at most the
// limit. The cut never starts at a tool result, which without its call
// no model takes. The transcript keeps every message.
func limitContext(ls *loopState, req *turnsv1.TurnRequested) {
	limit := int(req.GetContextLimit())
	if limit <= 0 {
		return
	}
	inputs := 0
	for _, in := range req.GetInputs() {
		for _, c := range in.GetContext() {
			switch c.GetRole() {
			case llm.RoleUser, llm.RoleAssistant:
				inputs++ // a step of the turn: begin
			}
		}
	}
	keep := max(limit-inputs, 0)
	n := len(ls.prior)
	if ls.summary != "" {
		n++
	}
	if n <= keep {
		return
	}
	ls.summary, ls.limited = "", true
	start := len(ls.prior) - keep
	for start < len(ls.prior) && ls.prior[start].Role == llm.RoleTool {
		start++
	}
	ls.prior = ls.prior[start:]
}

// commit writes msgs as the turn's next steps, preceded by the inputs not
// written yet, and appends them to the turn.
func (r *turnRun) commit(ctx context.Context, ls *loopState, msgs ...store.Message) error {
	return r.commitSteered(ctx, ls, nil, msgs...)
}

// commitSteered is commit for steps that give the steering notes to the
// model: the same write removes their queued messages (store.Turn.Steered),
// so the text reaches the model once, either here or, when this write
// never commits, as the session's next input.
func (r *turnRun) commitSteered(ctx context.Context, ls *loopState, steer []steerNote, msgs ...store.Message) error {
	n := ls.unsaved
	all := append(append([]store.Message(nil), ls.unsavedInputs()...), msgs...)
	t := r.st
	t.Steered = steerQueued(steer)
	committed, err := r.s.store.Append(ctx, t, store.Durable, ls.nextStep()-n, all...)
	if err != nil {
		return err
	}
	copy(ls.turn[len(ls.turn)-n:], committed[:n])
	ls.turn = append(ls.turn, committed[n:]...)
	ls.unsaved = 0
	return nil
}

// unsavedInputs are the inputs the turn's first write must carry.
func (ls *loopState) unsavedInputs() []store.Message {
	return ls.turn[len(ls.turn)-ls.unsaved:]
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && (s[n]&0xC0) == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// runLoop is the built-in agent loop: model → tools → model … until the
// model answers, the budget runs out, or the turn is told to stop.
func (r *turnRun) runLoop(ctx context.Context) (store.Final, error) {
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
	if r.req.GetSideQuestion() != nil {
		return r.sideQuestion(ctx, ls)
	}
	if r.hasAttachments() {
		// A picture not read fails no turn: it is only named.
		_ = r.cancellable(ctx, func(ctx context.Context) error { r.attachImages(ctx, ls); return nil })
		// Reading attachments may have taken a while: a /stop or a newer
		// message meanwhile ends the turn before it shows any progress.
		if err := r.checkpoint(ctx); err != nil {
			if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
				return fin, serr
			}
			return store.Final{}, err
		}
	}
	backend, model := r.s.backendFor(r.req.GetModelOverride())
	r.model = model
	system, err := r.systemPrompt(ctx, backend, model)
	if err != nil {
		return store.Final{}, err
	}
	if extra := r.clientSystem(); extra != "" {
		system += "\n\n" + extra
	}
	if cmd, ok := transcriptCommandOf(r.req); ok && cmd.name == "compress" {
		return r.compressCommand(ctx, backend, model, system, ls)
	}
	if r.attempt == 1 || len(ls.turn) <= len(r.req.GetInputs()) {
		if err := r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Typing{Typing: &repliesv1.Typing{Active: true}}}); err != nil {
			return store.Final{}, err
		}
	}
	if _, err := r.compress(ctx, backend, model, system, ls, false, "", 0); err != nil {
		if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
			return fin, serr
		}
		return store.Final{}, err
	}
	if r.req.GetMoa() {
		return r.mixture(ctx, system, ls)
	}
	// The provider refused the prompt as too long, and the call asked
	// again after compressing has not answered yet: a second refusal of
	// it ends the turn. A long turn that grows past the provider's count
	// again later compresses again.
	overflowed := false
	// The model calls of the turn so far (a resumed turn's): its assistant
	// steps after its inputs, whose stateless client's conversation may
	// hold assistant messages of its own.
	iterations := 0
	steps := r.steps(ls)
	for i, m := range steps {
		if m.Role == llm.RoleAssistant && !continued(steps, i) {
			iterations++
		}
	}
	for {
		// Tool calls of the last assistant step that have no result yet
		// (a resumed turn, or the step just committed).
		if pending := pendingCalls(ls.turn); len(pending) > 0 {
			if err := r.runTools(ctx, ls, pending); err != nil {
				if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
					return fin, serr
				}
				return store.Final{}, err
			}
			continue
		}
		if err := r.checkpoint(ctx); err != nil {
			if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
				return fin, serr
			}
			return store.Final{}, err
		}
		// The turn's own steps may outgrow the window (a long tool loop
		// reading big files or pages): compress before each call, as
		// Hermes does between tool iterations.
		if _, err := r.compressMid(ctx, backend, model, system, ls, false); err != nil {
			if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
				return fin, serr
			}
			return store.Final{}, err
		}
		if iterations >= r.s.cfg.Agent.MaxIterations {
			return r.finishAtLimit(ctx, backend, model, system, ls, iterations)
		}
		resp, err := r.callWhole(ctx, backend, model, system, ls, true, true)
		if err != nil && llm.ClassOf(err) == llm.BadRequest && ls.dropImages() {
			// A model without vision refuses pictures: it answers from
			// the text, which names them.
			r.log.Warn("the model refused the turn's images; asking again without them", "err", err)
			resp, err = r.callWhole(ctx, backend, model, system, ls, true, true)
		}
		if err != nil && llm.ClassOf(err) == llm.ContextOverflow && !overflowed {
			// The estimate was short of the provider's count: summarise
			// the older messages and clear the turn's older tool results
			// now, and ask once more, as Hermes does.
			overflowed = true
			shorter, cerr := r.compressMid(ctx, backend, model, system, ls, true)
			if cerr != nil {
				if fin, stopped, serr := r.stopFinal(ctx, ls, cerr); stopped {
					return fin, serr
				}
				return store.Final{}, cerr
			}
			if shorter {
				r.log.Warn("the provider refused the prompt as too long; asking again after compressing", "err", err)
				resp, err = r.callWhole(ctx, backend, model, system, ls, true, true)
			}
		}
		iterations++
		if err == nil {
			overflowed = false
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, errLockLost) {
				return store.Final{}, err
			}
			if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
				return fin, serr
			}
			if errors.Is(err, errToolCallCut) {
				// Hermes refuses to run a call with half its arguments.
				r.log.Warn("a tool call was cut at the output limit on every try; ending the turn without running it", "err", err)
				return r.finish(ctx, ls, nil, store.Final{Status: store.StatusFailed, Kind: store.FinalError,
					ErrorCode: "provider", Text: toolCallCutText})
			}
			r.log.Warn("model call failed; ending the turn", "class", string(llm.ClassOf(err)), "err", err)
			return r.finish(ctx, ls, nil, store.Final{Status: store.StatusFailed, Kind: store.FinalError,
				ErrorCode: errorCode(err), Text: r.failureText(err, model)})
		}
		cutSteps, msg, answer := r.answered(ls, resp)
		for _, tc := range resp.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, store.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		r.uniqueCallIDs(ls, msg.ToolCalls)
		if len(msg.ToolCalls) == 0 {
			// Steering that found no tool call to ride on: give it to the
			// model now rather than drop it. Without any, the answer is
			// decided: later steering is refused (and queued).
			if steer := r.ctl.takeSteerOrClose(); len(steer) > 0 {
				if err := r.commitSteered(ctx, ls, steer, append(cutSteps, msg, store.Message{Role: llm.RoleUser, Content: strings.Join(steerTexts(steer), "\n")})...); err != nil {
					return store.Final{}, err
				}
				continue
			}
			return r.finishAfter(ctx, ls, cutSteps, &msg, store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: r.withReasoning(&answer)})
		}
		if err := r.commit(ctx, ls, append(cutSteps, msg)...); err != nil {
			return store.Final{}, err
		}
	}
}

// Hermes's bounds on an answer cut at the output limit: a text answer is
// asked to go on until maxCutCalls of its calls were cut (its parts are
// then the answer); an answer whose tool call was cut is asked again,
// with a higher limit each time, maxToolCutRetries times, and never run
// with half its arguments.
const (
	maxCutCalls       = 4
	maxToolCutRetries = 4
)

// continuePrompt is Hermes's request to go on with an answer the output
// limit cut (_LENGTH_CONTINUATION_OUTPUT_LIMIT).
const continuePrompt = "[System: Your previous response was truncated by the output length limit. Continue exactly " +
	"where you left off. Do not restart or repeat prior text. Finish the answer directly.]"

// cutNoText is Hermes's answer when every continuation was cut before any
// text (_CEILING_NO_TEXT): the reasoning used up the limit each time.
const cutNoText = "⚠️ **No visible answer was produced.** The model hit its output-token limit on every " +
	"continuation attempt — its reasoning consumed the entire budget each time.\n\nTo fix this:\n" +
	"→ Lower reasoning effort: `/reasoning low` or `/reasoning none`\n→ Or raise max_tokens for this model"

// toolCallCutText tells the user of a turn that ended because the output
// limit cut the model's tool call on every try (Hermes's "Response
// truncated due to output length limit").
const toolCallCutText = "Response truncated due to output length limit: the model was cut off while writing a tool call, " +
	"so the call did not run. Try asking for smaller steps."

// errToolCallCut ends an answer whose tool call the output limit cut on
// every try.
var errToolCallCut = errors.New("tool call cut at the output limit")

// callWhole is callModel for an answer the output limit may cut (OpenAI's
// finish_reason "length", Anthropic's stop_reason "max_tokens"), as
// Hermes handles one (agent/turn_truncation.py). Text cut short is
// followed by continuePrompt, and the next call goes on from it (its
// first delta starts with the separator joinCut puts between the two, so
// the deltas stream the joined answer), until maxCutCalls calls were cut:
// the answer then comes back still cut (StopMaxTokens), to be answered
// with its parts (answered). When the caller runs the answer's tool calls
// (runsCalls), an answer whose tool call was cut is dropped and asked
// again with a higher output limit (maxTokens), its deltas not streamed
// (the dropped answer's were); a call never runs with half its
// arguments: after maxToolCutRetries tries, or a provider refusing the
// higher limit, errToolCallCut. A caller that ignores tool calls (the
// /moa aggregator, the summary at agent.max_iterations) has such an
// answer's text continued. The parts so far stay in ls (takeCut;
// stopFinal shows them when a stop ends the answer).
func (r *turnRun) callWhole(ctx context.Context, b Backend, model, system string, ls *loopState, withTools, runsCalls bool) (*llm.Response, error) {
	for {
		resp, err := r.callModel(ctx, b, model, system, ls, withTools)
		if err != nil {
			if ls.toolCutRetries > 0 && llm.ClassOf(err) == llm.BadRequest {
				return nil, fmt.Errorf("%w: the higher limit was refused: %w", errToolCallCut, err)
			}
			return nil, err
		}
		if resp.StopReason != llm.StopMaxTokens {
			return resp, nil
		}
		if len(resp.ToolCalls) > 0 && runsCalls {
			if ls.toolCutRetries >= maxToolCutRetries {
				return nil, errToolCallCut
			}
			ls.toolCutRetries++
			r.log.Warn("the output limit cut a tool call; asking again with a higher limit",
				"try", ls.toolCutRetries, "max_tokens", r.maxTokens(ls))
			continue
		}
		ls.cutCalls++
		if ls.cutCalls >= maxCutCalls {
			return resp, nil
		}
		if resp.Text != "" {
			// An empty part is not sent back: strict providers refuse an
			// assistant message without content.
			ls.cut = append(ls.cut, resp.Text)
			ls.cutMsgs = append(ls.cutMsgs, store.Message{Role: llm.RoleAssistant, Content: resp.Text})
		}
		ls.cutMsgs = append(ls.cutMsgs, store.Message{Role: llm.RoleUser, Content: continuePrompt})
		r.log.Info("the output limit cut the answer; asking the model to go on", "continuation", ls.cutCalls)
	}
}

// answered ends the answer resp completes (callWhole): the steps to
// commit before its message (the parts the output limit cut and the
// requests to go on), its message, and the answer as the user gets it
// (the parts joined, as streamed). An answer still cut after the
// continuations Hermes asks for is its parts joined, kept as one message
// without the requests to go on (unanswered, they would draw later turns
// back into the cut answer).
func (r *turnRun) answered(ls *loopState, resp *llm.Response) (steps []store.Message, msg store.Message, answer llm.Response) {
	msg = store.Message{Role: llm.RoleAssistant, Content: resp.Text, Thinking: resp.Thinking}
	steps, text := ls.takeCut(resp.Text)
	if resp.StopReason == llm.StopMaxTokens {
		r.log.Warn("the answer was still cut at the output limit after its continuations; answering with its parts", "calls", maxCutCalls)
		steps, msg = nil, store.Message{Role: llm.RoleAssistant, Content: text}
		if strings.TrimSpace(text) == "" {
			text = cutNoText
		}
	}
	answer = *resp
	answer.Text = text
	return steps, msg, answer
}

// continued reports whether steps[i] is a part of an answer the output
// limit cut (callWhole): the request to go on follows it.
func continued(steps []store.Message, i int) bool {
	return i+1 < len(steps) && steps[i].Role == llm.RoleAssistant && len(steps[i].ToolCalls) == 0 &&
		steps[i+1].Role == llm.RoleUser && steps[i+1].Content == continuePrompt
}

// joinCut is Hermes's _join_truncated_parts: the parts of a cut answer
// in order, with a newline between two that would glue together.
func joinCut(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(cutSeparator(b.String(), p))
		b.WriteString(p)
	}
	return b.String()
}

// cutSeparator is what joinCut puts between text so far and the next part:
// a newline when neither has white space where they meet.
func cutSeparator(sofar, next string) string {
	if sofar == "" || next == "" {
		return ""
	}
	last, _ := utf8.DecodeLastRuneInString(sofar)
	first, _ := utf8.DecodeRuneInString(next)
	if unicode.IsSpace(last) || unicode.IsSpace(first) {
		return ""
	}
	return "\n"
}

// maxTokens is the output limit of the turn's next model call:
// agent.max_tokens, or, when the answer is asked again because the limit
// cut a tool call, Hermes's higher one: agent.max_tokens (4096 when
// unset) doubled with each try, up to 32768 or agent.max_tokens if
// higher.
func (r *turnRun) maxTokens(ls *loopState) int {
	n := r.s.cfg.Agent.MaxTokens
	if ls.toolCutRetries == 0 {
		return n
	}
	base := n
	if base <= 0 {
		base = 4096
	}
	return min(base<<ls.toolCutRetries, max(32768, n))
}

// closedSegment is what the break closing the current segment carries
// (TextDelta.segment_text, segment_reasoning), within half the bus's
// maximum payload, the rest of the event's room: the segment's text
// can be longer than one delta (up to maxCutCalls cut calls' worth), and
// a break that did not fit would fail the call. Reasoning that does not
// fit beside the text is cut to its start, the lines the block shows;
// text that does not fit is not carried, as by an older worker (the
// message keeps what it last showed).
func (r *turnRun) closedSegment() (*string, string) {
	budget := 512 << 10 // NATS's default maximum payload is 1 MiB
	if n := r.s.bus.Conn().MaxPayload(); n > 0 {
		budget = int(n / 2)
	}
	text, thought := r.sinceBreak.String(), r.sinceRestart.String()
	if len(text) > budget {
		r.log.Warn("the segment is too long for its break to carry; a delivery replica taking the turn over keeps its messages as they are", "bytes", len(text))
		return nil, ""
	}
	if room := budget - len(text); len(thought) > room {
		for room > 0 && !utf8.RuneStart(thought[room]) {
			room--
		}
		thought = thought[:room]
	}
	return &text, thought
}

// uniqueCallIDs gives each call an id no other call of the turn has:
// some OpenAI-compatible servers send none, or number each answer's calls
// from call_0 again. A call whose id repeats would never run (its twin's
// result counts for it), and send_message's idempotency key would drop it.
// The id goes into the transcript with the call, so a resumed turn keeps it.
func (r *turnRun) uniqueCallIDs(ls *loopState, calls []store.ToolCall) {
	seen := map[string]bool{}
	for _, m := range ls.turn {
		for _, tc := range m.ToolCalls {
			seen[tc.ID] = true
		}
	}
	for i := range calls {
		if calls[i].ID == "" || seen[calls[i].ID] {
			h := fnv.New32a()
			h.Write([]byte(r.req.GetTurnId()))
			calls[i].ID = fmt.Sprintf("call_%08x_%d_%d", h.Sum32(), ls.nextStep(), i)
		}
		seen[calls[i].ID] = true
	}
}

// limitRequest is what Hermes asks the model when a turn used its
// iterations (MAX_ITERATIONS_SUMMARY_REQUEST).
const limitRequest = "You've reached the maximum number of tool-calling iterations allowed. " +
	"Please provide a final response summarizing what you've found and accomplished so far, without calling any more tools."

// finishAtLimit ends a turn that used its iterations as Hermes does: the
// model is asked, without tools, for a final answer from what it found
// so far. When that call fails the user gets the last text the model
// wrote, with a note.
//
// Steering still pending goes with the question; later steering is
// refused (the router queues it), as no model call of the turn would
// read it.
func (r *turnRun) finishAtLimit(ctx context.Context, b Backend, model, system string, ls *loopState, iterations int) (store.Final, error) {
	steer := r.ctl.takeSteerAndClose()
	var added string
	if len(steer) > 0 {
		added = "[The user adds while you work: " + strings.Join(steerTexts(steer), "\n") + "]"
	}
	// Committed, so a resumed turn asks the same question once; steering
	// a resumed turn took before it asks again goes after it.
	ask := limitRequest
	if askedAtLimit(ls.turn) {
		ask = added
	} else if added != "" {
		ask += "\n\n" + added
	}
	if ask != "" {
		if err := r.commitSteered(ctx, ls, steer, store.Message{Role: llm.RoleUser, Content: ask}); err != nil {
			return store.Final{}, err
		}
	}
	// Without tools, as Hermes asks; Anthropic's API is given their
	// definitions all the same, as a history holding tool_use blocks may
	// be refused without them. A tool call in the answer is ignored.
	// An answer the output limit cut goes on as the loop's do (callWhole).
	resp, err := r.callWhole(ctx, b, model, system, ls, b.Kind == "anthropic", false)
	if err == nil {
		steps, msg, answer := r.answered(ls, resp)
		if strings.TrimSpace(answer.Text) != "" {
			msg.Thinking, msg.ToolCalls = nil, nil
			return r.finishAfter(ctx, ls, steps, &msg, store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: r.withReasoning(&answer)})
		}
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, errLockLost) {
			return store.Final{}, err
		}
		if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
			return fin, serr
		}
		r.log.Warn("the summary at the iteration limit failed", "class", string(llm.ClassOf(err)), "err", err)
	}
	text := lastAssistantText(r.steps(ls))
	note := fmt.Sprintf("(I stopped after %d steps, the limit for one request.)", iterations)
	if text != "" {
		text += "\n\n" + note
	} else {
		text = note
	}
	return r.finishWith(ctx, ls, text)
}

// askedAtLimit reports whether the turn asked the iteration limit's
// question already: it is among the user messages that end the turn.
func askedAtLimit(turn []store.Message) bool {
	for i := len(turn) - 1; i >= 0 && turn[i].Role == llm.RoleUser; i-- {
		if strings.HasPrefix(turn[i].Content, limitRequest) {
			return true
		}
	}
	return false
}

func errorCode(err error) string {
	switch c := llm.ClassOf(err); c {
	case llm.Quota, llm.Auth, llm.ContextOverflow, llm.RateLimited:
		return string(c)
	case "":
		if errors.Is(err, context.DeadlineExceeded) {
			return "timeout"
		}
		return "internal"
	}
	return "provider"
}

// finish commits the turn's end: its last message and the final reply.
func (r *turnRun) finish(ctx context.Context, ls *loopState, last *store.Message, f store.Final) (store.Final, error) {
	return r.finishAfter(ctx, ls, nil, last, f)
}

// finishAfter is finish with steps appended before the last message in
// the same transaction (an external agent's messages): a turn whose end
// failed to commit runs again without its steps already written.
func (r *turnRun) finishAfter(ctx context.Context, ls *loopState, steps []store.Message, last *store.Message, f store.Final) (store.Final, error) {
	return r.finishSteered(ctx, ls, steps, last, f, nil)
}

// finishSteered is finishAfter for a final that also gives steering to
// the model: the write removes the queued messages steered
// (store.Turn.Steered), an external agent's (remoteCompleted).
func (r *turnRun) finishSteered(ctx context.Context, ls *loopState, steps []store.Message, last *store.Message, f store.Final, steered []string) (store.Final, error) {
	if r.lockLost.Load() {
		return store.Final{}, errLockLost
	}
	if f.Kind == store.FinalText && strings.TrimSpace(f.Text) == "" {
		// A model that said nothing: Hermes's words, as delivery's for a
		// blank final, and as its /background and /btw notices have them.
		f.Text = placeholder.NoResponse
	}
	if f.Kind == store.FinalText {
		r.breakBeforeFinal(ctx, f.Text)
	}
	seq, err := r.finalSeq(ctx)
	if err != nil {
		return store.Final{}, err
	}
	f.Seq = seq
	f.Model = r.model
	before := ls.unsavedInputs()
	if r.req.GetSideQuestion() != nil {
		// A /btw side question writes nothing to any transcript: its
		// final alone is stored (worker_turns), so that it answers once.
		before, steps, last = nil, nil, nil
	}
	next := ls.nextStep()
	if len(steps) > 0 {
		before = append(append([]store.Message(nil), before...), steps...)
		for i := range steps {
			before[len(before)-len(steps)+i].Step = next + i
		}
		next += len(steps)
	}
	f.ReturnNote = r.noteToReturn(ls)
	t := r.finishing()
	t.Steered = steered
	f, err = r.s.store.Finish(ctx, t, before, next, last, f)
	if err == nil {
		ls.unsaved = 0
		r.usageRecorded = true
		r.finished(t)
		if f.ReturnNote != "" {
			r.log.Info("reload-skills note given back: no model read it", "returned", f.NoteReturned)
		}
	}
	return f, err
}

// finishWith ends the turn with text as its answer.
func (r *turnRun) finishWith(ctx context.Context, ls *loopState, text string) (store.Final, error) {
	return r.finish(ctx, ls, nil, store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: text})
}

// stopFinal ends a turn that was interrupted or stopped with what it has;
// stopped is false when reason is neither. Tool calls that will not run
// get a result saying so, which keeps the transcript valid for the next
// turn. When recording the end fails, err says why: a stale generation
// (the /stop or /new that stopped the turn moved the session on, so the
// turn is superseded), or an outage the caller handles as any other.
func (r *turnRun) stopFinal(ctx context.Context, ls *loopState, reason error) (fin store.Final, stopped bool, err error) {
	status := store.StatusInterrupted
	switch {
	case errors.Is(reason, errStopped):
	case errors.Is(reason, errInterrupted):
	default:
		return store.Final{}, false, nil
	}
	if errors.Is(reason, errStopped) {
		status = store.StatusStopped
	}
	ctx = context.WithoutCancel(ctx)
	var skipped []store.Message
	for _, tc := range pendingCalls(ls.turn) {
		text := "Not run: the user interrupted the request."
		if tc.ID == r.toolRunning {
			text = "Cut short: the user interrupted the request while it ran; it may have done part of its work."
		}
		skipped = append(skipped, store.Message{Role: llm.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name, Content: text})
	}
	if len(skipped) > 0 {
		if err := r.commit(ctx, ls, skipped...); err != nil {
			return store.Final{}, true, fmt.Errorf("record the tool calls a stop skipped: %w", err)
		}
	}
	f := store.Final{Status: status, Kind: store.FinalError, ErrorCode: "interrupted", Text: "Stopped."}
	if status == store.StatusInterrupted {
		// A newer message interrupted the turn: the router acknowledged it
		// (at most once per busy_ack_interval) and the next turn answers.
		// A "Stopped." per interrupted turn would defeat that throttle.
		f.Text = ""
	}
	var said *store.Message
	if partial := ls.cutSoFar() + ls.partial; partial != "" {
		// A model call cut short: its streamed part, after the parts of
		// the answer it continued (callWhole), is what the user saw, and
		// what the transcript keeps.
		said = &store.Message{Role: llm.RoleAssistant, Content: partial}
		f = store.Final{Status: status, Kind: store.FinalText, Text: partial}
	} else if text := lastAssistantText(r.steps(ls)); text != "" {
		f = store.Final{Status: status, Kind: store.FinalText, Text: text}
	}
	fin, err = r.finish(ctx, ls, said, f)
	if err != nil {
		return store.Final{}, true, fmt.Errorf("record the stopped turn: %w", err)
	}
	r.log.Info("turn stopped at a safe point", "reason", reason.Error())
	return fin, true, nil
}

func lastAssistantText(msgs []store.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleAssistant && strings.TrimSpace(msgs[i].Content) != "" {
			return msgs[i].Content
		}
	}
	return ""
}

// pendingCalls are the tool calls of the last assistant message that have
// no committed result.
func pendingCalls(msgs []store.Message) []store.ToolCall {
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleAssistant {
			last = i
			break
		}
	}
	if last < 0 || len(msgs[last].ToolCalls) == 0 {
		return nil
	}
	done := map[string]bool{}
	for _, m := range msgs[last+1:] {
		if m.Role == llm.RoleTool {
			done[m.ToolCallID] = true
		}
	}
	var out []store.ToolCall
	for _, tc := range msgs[last].ToolCalls {
		if !done[tc.ID] {
			out = append(out, tc)
		}
	}
	return out
}

// runTools runs pending calls one by one, committing each result before
// reporting it. A committed result is never run again.
//
// One by one on purpose: Hermes runs the calls of one answer concurrently
// (up to 8) only when all are read-only tools of its parallel-safe list,
// which of the tools here holds session_search (and clock) alone, both
// quick; concurrency would save nothing yet, while the per-call commit
// (a crash re-runs at most one call), the one approval prompt, the one
// cancel slot (ctl.duringCall) and steering on the next result assume
// one call at a time. docs/architecture.md (agent loop) has the plan for
// when slow read-only tools arrive.
func (r *turnRun) runTools(ctx context.Context, ls *loopState, pending []store.ToolCall) error {
	r.deniedAll = nil // a "/deny all" covers the calls of one answer
	r.stepCalls = r.stepCalls[:0]
	for _, tc := range pending {
		r.stepCalls = append(r.stepCalls, tc.ID)
	}
	for _, tc := range pending {
		if err := r.checkpoint(ctx); err != nil {
			return err
		}
		result, failed, err := r.runTool(ctx, tc)
		if err != nil {
			return err
		}
		// The finished step shows the tool's result, not the steer's.
		raw := result
		result = capResult(result, r.s.cfg.Agent.MaxToolResultBytes) // an error's text too
		steer := r.ctl.takeSteer()
		if len(steer) > 0 {
			result += "\n\n[The user adds while you work: " + strings.Join(steerTexts(steer), "\n") + "]"
		}
		if err := r.commitSteered(ctx, ls, steer, store.Message{Role: llm.RoleTool, ToolCallID: tc.ID, ToolName: tc.Name, Content: result}); err != nil {
			return err
		}
		r.usage.ToolCalls++
		if err := r.toolFinished(ctx, tc, raw, failed); err != nil {
			return err
		}
	}
	return nil
}

// toolFinished publishes the finished (or failed) step of call tc, with
// a preview of result, the tool's output. A step that is not published
// (sends) masks nothing: the preview's masking is CPU spent on a large
// result's head, for a turn whose answer shows no step.
func (r *turnRun) toolFinished(ctx context.Context, tc store.ToolCall, result string, failed bool) error {
	phase := repliesv1.ToolPhase_TOOL_PHASE_FINISHED
	if failed {
		phase = repliesv1.ToolPhase_TOOL_PHASE_FAILED
	}
	step := &repliesv1.ToolProgress{ToolCallId: tc.ID, ToolName: tc.Name, Phase: phase}
	ev := &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_ToolProgress{ToolProgress: step}}
	if !r.sends(ev) {
		return nil
	}
	step.Detail = resultPreview(shownResult(result, r.s.cfg.Agent.MaxToolResultBytes))
	return r.publish(ctx, ev)
}

// runTool runs one call (after approval when the tool is dangerous). Tool
// failures become results the model sees; err is for turn-level failures.
func (r *turnRun) runTool(ctx context.Context, tc store.ToolCall) (result string, failed bool, err error) {
	t, ok := r.s.tools.Get(tc.Name)
	if !ok {
		toolCalls.WithLabelValues("unknown", "unknown").Inc()
		return fmt.Sprintf("error: unknown tool %q", tc.Name), true, nil
	}
	if !isObject(tc.Arguments) {
		// Cut short or garbled: neither asked about nor run.
		toolCalls.WithLabelValues(tc.Name, "failed").Inc()
		return fmt.Sprintf("error: the arguments are not a JSON object, so the call did not run: %s. Call %s again with a JSON object of its parameters.",
			truncate(tc.Arguments, 200), tc.Name), true, nil
	}
	call := tools.Call{ID: tc.ID, TurnID: r.req.GetTurnId(), SessionKey: r.req.GetSessionKey(),
		SessionID: r.req.GetSessionId(), UserKey: r.st.UserKey, Origin: origin(r.target), Target: r.target}
	args := json.RawMessage(tc.Arguments)
	if reason, ask := t.Approval(call, args); ask {
		approved, reason, err := r.approveOnce(ctx, tc, t.ApprovalPattern(args), reason, &repliesv1.ToolProgress{
			ToolCallId: tc.ID, ToolName: tc.Name, Phase: repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL,
			Detail:  fmt.Sprintf("%s %s — reply /approve or /deny", tc.Name, preview(tc.Arguments)),
			Command: truncate(tc.Name+" "+compact(tc.Arguments), 1000), Reason: truncate(reason, 300),
			Emoji: t.Emoji, Preview: truncate(t.PreviewOf(args), 500),
		})
		if err != nil {
			return "", false, err
		}
		if !approved {
			toolCalls.WithLabelValues(tc.Name, "denied").Inc()
			breaker, err := r.breakerAddendum(ctx, tc)
			if err != nil {
				return "", false, err
			}
			return deniedResult(reason) + breaker, true, nil
		}
	}
	// The tool's side effects are fenced here, not by the write of its
	// result: an attempt that lost its session runs nothing.
	if err := r.fenceTool(ctx); err != nil {
		return "", false, err
	}
	// The detail is the one-line preview too (not the arguments' JSON):
	// what the API gateway labels the call with, as Hermes does.
	oneLine := truncate(t.PreviewOf(args), 500)
	if err := r.toolProgress(ctx, &repliesv1.ToolProgress{ToolCallId: tc.ID, ToolName: tc.Name, Phase: repliesv1.ToolPhase_TOOL_PHASE_STARTED,
		Detail: oneLine, Preview: oneLine, Arguments: boundedArguments(tc.Arguments, argumentsMax),
		Emoji: t.Emoji}); err != nil {
		return "", false, err
	}
	tctx, span := otel.Tracer(tracerName).Start(ctx, "tool "+tc.Name, trace.WithAttributes(attribute.String("tool.name", tc.Name)))
	defer span.End()
	tctx, cancel := context.WithTimeout(tctx, r.s.cfg.Agent.ToolTimeout)
	defer cancel()
	// A /stop, an interrupting message or the lock's loss ends the tool
	// as it ends a model call (Hermes kills a running command likewise).
	tctx, abort := context.WithCancelCause(tctx)
	defer abort(nil)
	if err := r.ctl.duringCall(abort); err != nil {
		return "", false, err
	}
	r.toolRunning = tc.ID
	out, terr := r.callTool(tctx, t, call, args)
	_ = r.ctl.duringCall(nil)
	if ctx.Err() != nil {
		return "", false, ctx.Err()
	}
	if cause := context.Cause(tctx); errors.Is(cause, errStopped) || errors.Is(cause, errInterrupted) || errors.Is(cause, errLockLost) {
		toolCalls.WithLabelValues(tc.Name, "interrupted").Inc()
		return "", false, cause
	}
	r.toolRunning = ""
	if terr != nil {
		result := "failed"
		if tctx.Err() != nil {
			result = "timeout"
		}
		toolCalls.WithLabelValues(tc.Name, result).Inc()
		telemetry.SpanFailed(span, "tool failed")
		r.log.Info("tool failed", "tool", tc.Name, "err", terr)
		return "error: " + terr.Error(), true, nil
	}
	toolCalls.WithLabelValues(tc.Name, "ok").Inc()
	return out, false, nil
}

// callTool runs t in a goroutine of its own, so that a tool's panic
// becomes its call's error instead of killing the worker (and, the turn
// being redelivered, the next worker too), and a tool that ignores its
// context is left behind when ctx ends instead of holding the turn.
func (r *turnRun) callTool(ctx context.Context, t tools.Tool, call tools.Call, args json.RawMessage) (string, error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1) // a tool left behind still returns
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.log.Error("tool panicked", "tool", t.Name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				done <- result{err: fmt.Errorf("the tool crashed: %v", p)}
			}
		}()
		out, err := t.Run(ctx, call, args)
		done <- result{out, err}
	}()
	select {
	case res := <-done:
		return res.out, res.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", fmt.Errorf("the tool did not finish within %s", r.s.cfg.Agent.ToolTimeout)
		}
		return "", ctx.Err()
	}
}

// capResult cuts a tool's output longer than max bytes (on a character
// boundary) and says so: one huge result (a page, a log) would otherwise
// fill the context window of every later model call of the session.
func capResult(out string, max int) string { return cutResult(out, max, len(out)) }

// cutResult is capResult of out, the head of an output of total bytes.
func cutResult(out string, max, total int) string {
	if max <= 0 || len(out) <= max {
		return out
	}
	n := max
	for n > 0 && (out[n]&0xC0) == 0x80 {
		n--
	}
	return out[:n] + fmt.Sprintf("\n\n[Output truncated: %d of %d bytes shown.]", n, total)
}

// shownResult is a tool's result as its finished step shows it: cut at
// max bytes as the model's copy is, and masked before it is cut (a key cut
// in half at the bound is no longer a key to the masking patterns;
// resultPreview masks again, which changes nothing). Only what the cut
// keeps is masked, and secret.MaxMatch bytes past it, so that a secret
// crossing the cut is masked whole: masking runs every pattern over the
// text, CPU that a large result (a page, a log) would spend on text no
// step shows. Masking shortens what it masks (but a URL's password of
// one or two characters), so while it leaves less than the cut and the
// margin, twice as much of the result is masked: at most twice the work
// of masking it whole.
func shownResult(result string, max int) string {
	if max <= 0 {
		return secret.Redact(result)
	}
	for head := max + secret.MaxMatch; head < len(result); head *= 2 {
		if masked := secret.Redact(result[:head]); len(masked) >= max+secret.MaxMatch {
			return cutResult(masked, max, len(result))
		}
	}
	return cutResult(secret.Redact(result), max, len(result))
}

func preview(args string) string { return truncate(args, 200) }

// isObject reports whether args is a JSON object, as tool arguments must be.
func isObject(args string) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal([]byte(args), &v) == nil && v != nil
}

// compact is JSON arguments without insignificant white space (as they
// are when they are not JSON).
func compact(args string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(args)) != nil {
		return args
	}
	return b.String()
}

// origin is t as a send target ("platform:chat_id[:thread_id]"; "" for
// none).
func origin(t *deliveryv1.Target) string {
	if t == nil || t.GetPlatform() == "" || t.GetChatId() == "" {
		return ""
	}
	o := t.GetPlatform() + ":" + t.GetChatId()
	if t.GetThreadId() != "" {
		o += ":" + t.GetThreadId()
	}
	return o
}

// deniedResult is what the model reads for a call the user denied (or
// did not answer in time): with the reason of "/deny <reason>", in
// Hermes's words, so that the agent can adapt instead of only hearing
// "denied". Once the judge denied enough calls in a row, Hermes's
// circuit-breaker text follows it (breakerAddendum).
func deniedResult(reason string) string {
	if reason == "" {
		return "The user denied this tool call. Do not retry it; continue without it."
	}
	return fmt.Sprintf("The user denied this tool call. Reason given by the user: \"%s\". Do not retry it; continue without it, taking the reason into account.", reason)
}

// approveOnce reports whether the call may run: the chat is in YOLO mode
// (/yolo, unless the turn says router.yolo_command is off), the approval
// mode is off (/approvals), approved before for good (pattern, in this
// conversation or for this user), by the smart-approval judge (mode
// smart: approvals.go), or now by the user,
// whose "/approve session" or "/approve always" makes the approval stand.
// A denied call comes with the reason the user gave ("" for none). After
// a "/deny all", the rest of the model's calls of that answer that would
// ask are denied at once with the same reason (r.deniedAll), also by a
// worker that resumes the turn after this one died: the answer is stored
// for those calls (store.DenyAll) before the first denial is committed.
func (r *turnRun) approveOnce(ctx context.Context, tc store.ToolCall, pattern, flagged string, ask *repliesv1.ToolProgress) (approved bool, reason string, err error) {
	sessionID, userKey := r.req.GetSessionId(), r.st.UserKey
	standing, yolo, err := r.s.store.ApprovedOrYolo(ctx, sessionID, userKey, pattern, r.yoloKey())
	if err != nil {
		return false, "", err
	}
	if yolo {
		// /yolo: the chat runs dangerous calls without asking (read at
		// each call, so a /yolo mid-turn counts from the next one).
		r.log.Info("tool call approved: yolo mode", "tool", tc.Name, "pattern", pattern)
		return true, "", nil
	}
	mode := r.s.approvalMode()
	if mode == approvalmode.Off {
		// /approvals off: no dangerous call asks, in any chat (approvals.go).
		r.log.Info("tool call approved: approval mode off", "tool", tc.Name, "pattern", pattern)
		return true, "", nil
	}
	if standing {
		r.log.Info("tool call approved before", "tool", tc.Name, "pattern", pattern)
		return true, "", nil
	}
	if r.deniedAll == nil {
		// Given to an earlier call of this answer before the turn
		// moved to this worker?
		denied, reason, err := r.s.store.DeniedAll(ctx, r.req.GetTurnId(), tc.ID)
		if err != nil {
			return false, "", err
		}
		if denied {
			r.deniedAll = &answer{all: true, reason: reason}
		}
	}
	if r.deniedAll != nil {
		r.log.Info("tool call denied: /deny all", "tool", tc.Name, "pattern", pattern)
		return false, r.deniedAll.reason, nil
	}
	judgedDangerous := false
	if mode == approvalmode.Smart {
		v, label, err := r.judgeCall(ctx, tc, flagged)
		if err != nil {
			// Stopped, interrupted or the lock lost mid-call: no verdict
			// (not counted), no prompt, no run; the turn stops on err.
			return false, "", err
		}
		approvalVerdicts.WithLabelValues(label).Inc()
		if ctx.Err() != nil {
			return false, "", ctx.Err()
		}
		switch v {
		case approvalmode.Approve:
			// This call only: no approval stands for later ones.
			r.log.Info("tool call approved: smart approval", "tool", tc.Name, "pattern", pattern)
			if err := r.resetJudgeDenials(ctx); err != nil {
				return false, "", err
			}
			return true, "", nil
		case approvalmode.Deny:
			// The user may still run it, this once (Hermes's owner
			// override of a smart denial): an /approve session or always
			// grants nothing. The denial counts toward the breaker
			// whatever the user answers (breaker.go).
			if err := r.countJudgeDenial(ctx, tc); err != nil {
				return false, "", err
			}
			judgedDangerous = true
			ask.Reason = truncate("the smart-approval judge found it genuinely dangerous; /approve runs it this once. "+flagged, 300)
		}
		r.log.Info("smart approval: asking the user", "tool", tc.Name, "verdict", label)
	}
	a, err := r.approve(ctx, tc, ask)
	if err != nil {
		return false, "", err
	}
	if judgedDangerous {
		a.scope = ""
	}
	if !a.approved {
		if a.all {
			if err := r.s.store.DenyAll(ctx, r.req.GetTurnId(), r.req.GetSessionId(), a.reason, r.stepCalls); err != nil {
				return false, "", err
			}
			r.deniedAll = &a
		}
		return false, a.reason, nil
	}
	// A user's approval ends a run of judge denials, as Hermes's
	// _user_approved does (a judge's DENY the user overrides included).
	if err := r.resetJudgeDenials(ctx); err != nil {
		return false, "", err
	}
	subject := map[string]string{store.ApproveSession: sessionID, store.ApproveUser: userKey}[a.scope]
	if a.scope != "" && subject != "" {
		if err := r.s.store.GrantApproval(ctx, a.scope, subject, pattern); err != nil {
			return false, "", err
		}
	}
	return true, "", nil
}

// yoloKey is the session key whose /yolo the turn's dangerous calls
// follow: the turn's own, or, for a /background task, the chat's it was
// asked in (sessionkey.BackgroundChat), as it is when each call comes,
// so a task of a chat in YOLO mode runs them without asking, and a /yolo
// off in the chat counts from the task's next one; "" (none) while
// router.yolo_command is off.
func (r *turnRun) yoloKey() string {
	key := r.req.GetSessionKey()
	switch {
	case r.req.GetYoloDisabled():
		return ""
	case r.req.GetBackgroundTaskId() != "":
		chat, ok := sessionkey.BackgroundChat(key, r.req.GetProfile())
		if !ok {
			// Not a key the router derives: no chat's mode to follow.
			r.log.Warn("background task key names no chat; yolo mode not followed", "session_key", key)
			return ""
		}
		return chat
	}
	return key
}

// approve asks the user (ask, an AWAITING_APPROVAL step that delivery
// turns into the chat's approval prompt; the router takes /approve and
// /deny) and waits; no answer within the timeout is a denial.
func (r *turnRun) approve(ctx context.Context, tc store.ToolCall, ask *repliesv1.ToolProgress) (answer, error) {
	if r.req.GetBackgroundTaskId() != "" {
		// A /background task shows no prompt (it publishes its answer
		// alone) and the chat's /approve goes to the chat's session: no
		// answer can come, so it is a denial now rather than at the
		// timeout. (A task of a chat in YOLO mode does not get here:
		// approveOnce, yoloKey.)
		r.log.Info("tool approval denied: a background task cannot ask", "tool", tc.Name)
		return answer{}, nil
	}
	if r.req.GetMemoryFlush() {
		// A memory flush (flush.go) shows the chat nothing, and the
		// chat's /approve meets no running task: no answer can come
		// before its deadline, which the next message waits out.
		r.log.Info("tool approval denied: a memory flush cannot ask", "tool", tc.Name)
		return answer{}, nil
	}
	if r.req.GetOrigin().GetPlatform() == "cron" {
		// A cron run is answer_only (its prompt would reach no chat) and
		// its session is its own (no chat's /approve reaches it): denied
		// now, as Hermes's approvals.cron_mode deny (its default), rather
		// than after agent.approval_timeout, holding the run and its job.
		r.log.Info("tool approval denied: a cron run cannot ask", "tool", tc.Name)
		return answer{}, nil
	}
	r.ctl.await(true, tc.ID)
	defer r.ctl.await(false, "")
	if err := r.toolProgress(ctx, ask); err != nil {
		return answer{}, err
	}
	timer := time.NewTimer(r.s.cfg.Agent.ApprovalTimeout)
	defer timer.Stop()
	for {
		select {
		case a := <-r.ctl.approvals:
			r.log.Info("tool approval answered", "tool", tc.Name, "approved", a.approved, "scope", a.scope, "all", a.all, "reason_given", a.reason != "")
			return a, nil
		case <-timer.C:
			r.log.Info("tool approval timed out", "tool", tc.Name)
			return answer{}, nil
		case <-r.ctl.wake:
			if err := r.checkpoint(ctx); err != nil {
				return answer{}, err
			}
		case <-ctx.Done():
			return answer{}, ctx.Err()
		}
	}
}

const tracerName = "github.com/switchboard-chat/switchboard/services/worker"

// callModel makes one streamed model call, publishing text deltas as they
// arrive (coalesced to one event per DeltaInterval); offers the model the tools (not when it must answer).
func (r *turnRun) callModel(ctx context.Context, b Backend, model, system string, ls *loopState, withTools bool) (*llm.Response, error) {
	req := llm.Request{Model: model, System: system, Messages: r.messages(ls),
		MaxTokens: r.maxTokens(ls), CacheSystem: true, ReasoningEffort: r.reasoningEffort(), Fast: r.fast(),
		Temperature: r.temperature}
	if withTools {
		req.Tools = r.toolSpecs()
	}
	var buf, thinking, streamed strings.Builder
	var last time.Time
	// The final shows the last call's reasoning alone: after a call that
	// streamed reasoning, this call's first delta restarts the block,
	// emptied when this call streams text without reasoning.
	restart := r.reasoningStreamed
	// An earlier call streamed answer text ("Let me check." before a tool
	// call): this call's text goes after Hermes's paragraph break, a delta
	// of its own marked restart, since the final carries this call's
	// answer alone (set below, once the call is known not to continue a
	// cut answer).
	var textBreak bool
	flush := func() error {
		if textBreak && (buf.Len() > 0 || thinking.Len() > 0) {
			// The break goes before the call's reasoning too (a chat
			// that shows it): where the answer streams by editing a
			// message, it closes the message of the text before the
			// tool call, and this call's reasoning and text stream
			// into a new one. A call that goes on with a cut answer
			// has no break: its reasoning restarts the block in place.
			// It carries what the message it closes shows (the
			// text since the last break, the block of the reasoning
			// since the last restart): a delivery replica that takes
			// the turn over at the break finishes that message,
			// streamed by the one that stopped, with it.
			textBreak = false
			brk := &repliesv1.TextDelta{Text: "\n\n", Restart: true}
			if !r.answerStreamed {
				brk.Text = "" // only reasoning before it: no text to part from
			}
			brk.SegmentText, brk.SegmentReasoning = r.closedSegment()
			if err := r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: brk}}); err != nil {
				return err
			}
			r.sinceBreak.Reset()
		}
		if thinking.Len() > 0 || restart && buf.Len() > 0 {
			// The reasoning came first: it goes first.
			text := thinking.String()
			thinking.Reset()
			last = time.Now()
			r.textStreamed = true
			if text != "" {
				r.reasoningStreamed = true
			}
			d := &repliesv1.ReasoningDelta{Text: text, Restart: restart}
			if restart {
				r.sinceRestart.Reset()
			}
			r.sinceRestart.WriteString(text)
			restart = false
			if err := r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_ReasoningDelta{ReasoningDelta: d}}); err != nil {
				return err
			}
		}
		if buf.Len() == 0 {
			return nil
		}
		text := buf.String()
		buf.Reset()
		streamed.WriteString(text)
		last = time.Now()
		r.textStreamed = true
		r.answerStreamed = true
		r.sinceBreak.WriteString(text)
		return r.publish(ctx, &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_TextDelta{TextDelta: &repliesv1.TextDelta{Text: text}}})
	}
	// An earlier step streamed text: the answer's text then does not
	// start with everything the client was streamed, so the final cannot
	// complete the stream and the tail must go out as a delta too.
	streamedBefore := r.textStreamed
	ctx, span := otel.Tracer(tracerName).Start(ctx, "llm "+b.Kind, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.system", b.Kind), attribute.String("gen_ai.request.model", model)),
		trace.WithAttributes(r.callAttrs...))
	defer span.End()
	// A call that goes on with a cut answer streams the separator the
	// joined answer has before its text (joinCut).
	sofar := ls.cutSoFar()
	// A call that goes on with a cut answer continues its text: the final
	// carries the joined answer, which starts with what the cut call
	// streamed. A call after one that only streamed reasoning (/reasoning
	// show: its block alone in a message, above its tools' progress
	// lines) has a break too, with no text: the block it carries lets a
	// delivery replica that took the turn over, which never streamed
	// that block, finish its message without the cursor; a replica that
	// streamed it closes nothing there, as at any break after a segment
	// without answer text.
	textBreak = (r.answerStreamed || r.reasoningStreamed) && sofar == ""
	onDelta := func(d llm.Delta) error {
		if d.Text == "" && d.Reasoning == "" {
			return nil
		}
		if d.Text != "" && sofar != "" {
			buf.WriteString(cutSeparator(sofar, d.Text))
			sofar = ""
		}
		buf.WriteString(d.Text)
		thinking.WriteString(d.Reasoning)
		if time.Since(last) >= r.s.cfg.DeltaInterval {
			return flush()
		}
		return nil
	}
	switch {
	case r.answerOnly:
		onDelta = nil // nobody reads the deltas: one response, not a stream
	case ls.toolCutRetries > 0:
		// The answer is asked again because the output limit cut its
		// tool call: the dropped answer streamed its text already.
		onDelta = nil
	case r.mayFollowStream():
		// An earlier attempt, or an earlier run of this delivery, may
		// have streamed part of another answer: deltas now would be
		// spliced onto it. The final carries the whole answer (edits
		// rewrite the message; an API stream ends with an error when
		// the final does not continue it).
		onDelta = nil
	case r.req.GetShowReasoning() && r.target.GetPlatform() == "api":
		// The answer's final text starts with the reasoning's block
		// (withReasoning): an API stream, whose content the final must
		// continue, gets it whole, as before, and no reasoning delta
		// (reasoning is never streamed into an API's content).
		onDelta = nil
	case r.req.GetShowReasoning():
		// The chat sees the model's reasoning before the answer: it
		// streams too (ReasoningDelta, before the text's deltas), and
		// delivery shows the block the final text starts with while
		// both stream; the final edit completes it.
		req.StreamReasoning = true
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := r.ctl.duringCall(cancel); err != nil {
		return nil, err
	}
	resp, err := b.Provider.Stream(callCtx, req, onDelta)
	_ = r.ctl.duringCall(nil)
	r.usage.ModelCalls++
	if err != nil {
		if cause := context.Cause(callCtx); ctx.Err() == nil && callCtx.Err() != nil &&
			(errors.Is(cause, errStopped) || errors.Is(cause, errInterrupted) || errors.Is(cause, errLockLost)) {
			// Ended by the user (/stop, a newer message) or by the lock's
			// loss: what it streamed so far is all the answer there is.
			ls.partial = streamed.String()
			telemetry.SpanError(span, cause)
			return nil, cause
		}
		telemetry.SpanFailed(span, telemetry.Reason(llm.ClassOf(err)))
		return nil, err
	}
	span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", resp.Usage.InputTokens),
		attribute.Int("gen_ai.usage.output_tokens", resp.Usage.OutputTokens))
	// Text still buffered goes out as a delta when more steps follow,
	// earlier steps streamed text or the output limit cut the answer
	// (the next call's deltas go on from it); otherwise the answer's
	// final event carries the whole text, which starts with what was
	// streamed.
	if len(resp.ToolCalls) > 0 || streamedBefore || resp.StopReason == llm.StopMaxTokens {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	r.addUsage(resp.Usage)
	if resp.Model != "" {
		r.model = resp.Model
	}
	return resp, nil
}

// withReasoning is the answer's text as the chat gets it: with the
// session's /reasoning show, Hermes's block of the model's reasoning
// before the answer (reasoning.WithAnswer). The transcript keeps the
// answer alone, and the model never sees its reasoning again.
func (r *turnRun) withReasoning(resp *llm.Response) string {
	if !r.req.GetShowReasoning() {
		return resp.Text
	}
	return reasoning.WithAnswer(resp.Reasoning, resp.Text)
}

// reasoningEffort is the effort of the turn's model calls: the session's
// (/reasoning), else agent.reasoning_effort ("" sends none).
func (r *turnRun) reasoningEffort() string {
	if e := r.req.GetReasoningEffort(); e != "" {
		return e
	}
	return r.s.cfg.Agent.ReasoningEffort
}

// fast reports whether the turn's model calls ask for fast processing:
// the session's /fast, else agent.service_tier. The provider sends it
// only for a model that has it (llm.FastModeSupported).
func (r *turnRun) fast() bool {
	tier := r.req.GetServiceTier()
	if tier == "" {
		tier = r.s.cfg.Agent.ServiceTier
	}
	t, _ := llm.ParseServiceTier(tier)
	return t == llm.TierFast
}

// failureText is what the user is told of a model call that failed with
// err. A provider refusing the fast tier (a 400 naming service_tier or
// speed) is named as such, with how to turn /fast off: the turn fails
// rather than run at the standard tier unasked, which Hermes's users
// would not see either (Hermes offers /fast only for the models that
// have it; a provider that refuses it still fails the turn there).
func (r *turnRun) failureText(err error, model string) string {
	if !r.fast() || llm.ClassOf(err) != llm.BadRequest {
		return llm.UserMessage(err)
	}
	if model == "" {
		model = r.s.llm.Model
	}
	if llm.FastRefused(err) {
		return "⚡ The AI service refused fast mode (Priority Processing) for `" + model + "`, so this message was not answered. " +
			"Send `/fast normal` to turn it off for this chat, then send your message again."
	}
	return llm.UserMessage(err) + " Fast mode is on for this chat (`/fast`); if the model does not offer it, `/fast normal` turns it off."
}

// addUsage counts a model call's tokens for the turn.
func (r *turnRun) addUsage(u llm.Usage) {
	r.usage.InputTokens += int64(u.InputTokens)
	r.usage.OutputTokens += int64(u.OutputTokens)
	r.usage.CacheReadTokens += int64(u.CacheReadTokens)
	r.usage.CacheWriteTokens += int64(u.CacheWriteTokens)
	// The prompt of the latest call is how full the context window is
	// (the runtime footer's context percentage).
	r.lastPrompt = int64(u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens)
}

// messages renders the summary, the transcript and this turn for the
// model. Tool calls left without a result by an abandoned earlier turn get
// a placeholder result so the providers accept the history.
func (r *turnRun) messages(ls *loopState) []llm.Message {
	return toLLM(ls.summary, ls.prior, r.modelTurn(ls), ls.cutMsgs)
}

// modelTurn is this turn's steps as the model reads them: with Hermes's
// one-shot /reload-skills note (TurnRequested.skills_note) and a blank
// line before the text of the turn's first user message, as Hermes's
// gateway prepends its pending note to the message of the next agent
// run. It is a copy: ls.turn, and with it the transcript, keeps what the
// user sent, so the note reaches every model call of this turn (a turn
// resumed by another attempt included) and no later turn.
func (r *turnRun) modelTurn(ls *loopState) []store.Message {
	note := r.req.GetSkillsNote()
	if note == "" {
		return ls.turn
	}
	// The first input's own message follows the conversation a
	// stateless client sent with it (its context, recorded first); a
	// /retry's turn holds the message it sends again.
	i := 0
	if ins := r.req.GetInputs(); len(ins) > 0 {
		for _, c := range ins[0].GetContext() {
			if c.GetRole() == llm.RoleUser || c.GetRole() == llm.RoleAssistant {
				i++
			}
		}
	}
	if i >= len(ls.turn) || ls.turn[i].Role != llm.RoleUser {
		return ls.turn
	}
	out := append([]store.Message(nil), ls.turn...)
	out[i].Content = note + "\n\n" + out[i].Content
	r.noteSent = true
	return out
}

// noteToReturn is the /reload-skills note the turn took and gives back
// as it ends ("": none), because no model read it: Hermes consumes its
// note where it prepends it to the message of an agent run, so a command
// answered without one leaves it pending, and here the transcript keeps
// what the user sent, without the note, so a note no model call of its
// turn read would reach no model at all. That is:
//
//   - a /retry with nothing to retry ("Nothing to retry."), answered
//     without the model (ls.reply: no request carries the note);
//   - a turn stopped or interrupted (/stop, a newer message) before its
//     first model call, or whose external agent could not be reached:
//     no model read the note, and with nothing of it in the transcript
//     the next turn's message is the only place it can still reach one.
//     A /stop that moved the session to a new generation fails the
//     turn's fence, and the note is dropped with everything the turn
//     would write.
//
// It is not given back once a request carrying it was made, by this
// attempt (noteSent) or an earlier one whose model answered (an
// assistant step of the turn is committed): a model call that then
// failed for good (answered with an error), a /moa whose references
// failed (they were asked with it), an external agent that failed after
// it was sent the turn. Hermes consumed its note with that run too, and
// a provider that failed may have read it (a timeout). A /btw side
// question writes no session state. Router-side refusals (/moa without
// a preset or while busy, a refused skill command) start no turn and
// take no note.
func (r *turnRun) noteToReturn(ls *loopState) string {
	note := r.req.GetSkillsNote()
	if note == "" || r.noteSent || r.req.GetSideQuestion() != nil {
		return ""
	}
	// The turn's steps after its inputs (a stateless client's context,
	// recorded first, may hold assistant messages of its own).
	for _, m := range r.steps(ls) {
		if m.Role == llm.RoleAssistant {
			return ""
		}
	}
	return note
}

// inputSteps is how many of the turn's first steps are its inputs: each
// input's message, after the conversation a stateless client sent with
// it (its user and assistant messages, recorded first).
func (r *turnRun) inputSteps() int {
	n := 0
	for _, in := range r.req.GetInputs() {
		n++
		for _, c := range in.GetContext() {
			if c.GetRole() == llm.RoleUser || c.GetRole() == llm.RoleAssistant {
				n++
			}
		}
	}
	return n
}

// steps are the turn's steps after its inputs: what its model calls and
// tools wrote.
func (r *turnRun) steps(ls *loopState) []store.Message {
	return ls.turn[min(r.inputSteps(), len(ls.turn)):]
}

// toLLM is the conversation as the model takes it: the summary, then the
// messages of parts in order.
func toLLM(summary string, parts ...[]store.Message) []llm.Message {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	out := make([]llm.Message, 0, n)
	if summary != "" {
		out = append(out, llm.Message{Role: llm.RoleUser, Content: "[Summary of the earlier conversation]\n" + summary})
	}
	var open []store.ToolCall
	closeOpen := func() {
		for _, tc := range open {
			out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Name: tc.Name, Content: "(no result: interrupted)"})
		}
		open = nil
	}
	for _, part := range parts {
		for i := range part {
			m := &part[i]
			switch m.Role {
			case llm.RoleTool:
				content := m.Content
				if m.Compacted != "" {
					content = m.Compacted // cleared by mid-turn compression
				}
				found := false
				for j, tc := range open {
					if tc.ID == m.ToolCallID {
						open = append(open[:j], open[j+1:]...)
						found = true
						break
					}
				}
				if !found {
					continue // a result without its call would be refused
				}
				out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: m.ToolCallID, Name: m.ToolName, Content: content})
			case llm.RoleAssistant:
				closeOpen()
				lm := llm.Message{Role: llm.RoleAssistant, Content: m.Content, Thinking: m.Thinking}
				for _, tc := range m.ToolCalls {
					args := tc.Arguments
					if !isObject(args) {
						// The transcript keeps what the model wrote (its
						// result says why it did not run); servers that
						// parse the history would refuse it for good.
						args = "{}"
					}
					lm.ToolCalls = append(lm.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: args})
				}
				open = append(open, m.ToolCalls...)
				out = append(out, lm)
			default:
				closeOpen()
				out = append(out, llm.Message{Role: m.Role, Content: m.Content, Images: m.Images})
			}
		}
	}
	// Calls still open at the end are this turn's pending ones: the caller
	// runs them before the next model call, so they never reach here.
	return out
}
