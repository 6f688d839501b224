package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// flushPrompt is Hermes's pre-reset memory flush request, in our words,
// without its skill step (no skill tool here): it follows the ended
// conversation as the last user message.
const flushPrompt = "[System: This conversation is about to be reset (by /new, or after inactivity or a " +
	"scheduled daily reset). Its context will be cleared after this turn.\n\n" +
	"Review the conversation above and save to memory any important facts, preferences or decisions " +
	"that would be useful in future sessions. If nothing is worth saving, that's fine — just skip.\n\n" +
	"Do NOT respond to the user. Just use the memory tool if needed, then stop.]"

// The flush's bounds: Hermes's eight iterations, and a deadline of our
// own (Hermes runs it beside the chat; here the new conversation's first
// turn waits for it).
const (
	flushIterations = 8
	flushTimeout    = 90 * time.Second
	// flushMinMessages: Hermes skips a conversation whose transcript
	// has fewer entries, every one counted (tool calls and results too),
	// though the model reads only the user and assistant messages with
	// text.
	flushMinMessages = 4
	flushTool        = "memory"
)

// memoryFlush runs Hermes's pre-reset memory flush
// (TurnRequested.memory_flush; services/router/flush.go) on the
// conversation that ended (the turn's session_id): the model reads it
// and Hermes's request, and may call the memory tool alone, for at most
// flushIterations calls and flushTimeout. Nothing is delivered (the turn
// has no reply target) and nothing is written to any transcript; the
// turn is recorded decided (worker_turns), usage included. At most once:
// a turn an earlier attempt began (it may have saved notes already),
// booked or decided, is not run again. It is skipped, without a model
// call, where the memory tool is off or an external agent runs the
// turns, and for a conversation too short to hold anything
// (flushMinMessages). A failed model call ends the flush (the reset goes
// on, as Hermes's does).
func (r *turnRun) memoryFlush(ctx context.Context) error {
	if _, ok := r.s.tools.Get(flushTool); !ok || r.s.agent != nil {
		// Its end is recorded all the same (a row with no usage, which
		// keeps one an earlier attempt booked), as a flush that ran
		// records it.
		r.log.Info("memory flush skipped: no memory tool")
		r.bookFlushUsage(ctx, store.StatusCompleted)
		return nil
	}
	ts, err := r.read(ctx)
	if err != nil {
		return err
	}
	if ts.Final != nil || ts.Booked || r.attempt > 1 {
		// An earlier attempt's usage is booked with its final, or with
		// the row BookUsage wrote when it ended without one (failed,
		// stale, handed back): that row stands, since deciding the turn
		// now would replace its counts with this attempt's none.
		r.log.Info("memory flush skipped: an earlier attempt ran it")
		r.usageRecorded = ts.Final != nil || ts.Booked
		return r.flushed(ctx)
	}
	// As Hermes's len(history) < 4 over the whole transcript; a summary
	// counts as one entry, the message that stands for those it
	// replaced, as in Hermes's compressed transcript.
	entries := len(ts.History)
	if ts.Summary != "" {
		entries++
	}
	if entries < flushMinMessages {
		r.log.Info("memory flush skipped: conversation too short", "entries", entries)
		return r.flushed(ctx)
	}
	var msgs []store.Message
	for _, m := range ts.History {
		if (m.Role == llm.RoleUser || m.Role == llm.RoleAssistant) && strings.TrimSpace(m.Content) != "" {
			msgs = append(msgs, store.Message{Role: m.Role, Content: m.Content})
		}
	}
	r.prompt = ts.Prompt
	backend, model := r.s.backendFor(r.req.GetModelOverride())
	r.model = model
	system, err := r.systemPrompt(ctx, backend, model)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	r.onlyTools = []string{flushTool}
	ls := &loopState{summary: ts.Summary, prior: msgs, turn: []store.Message{{Role: llm.RoleUser, Content: flushPrompt}}}
	saved := 0
	for i := 0; i < flushIterations; i++ {
		resp, err := r.callModel(fctx, backend, model, system, ls, true)
		if err != nil {
			if superseded(err) || ctx.Err() != nil {
				return err
			}
			r.log.Warn("memory flush ended by a failed model call", "class", string(llm.ClassOf(err)), "err", err)
			break
		}
		if len(resp.ToolCalls) == 0 {
			break
		}
		step := store.Message{Role: llm.RoleAssistant, Content: resp.Text, Thinking: resp.Thinking}
		for _, c := range resp.ToolCalls {
			step.ToolCalls = append(step.ToolCalls, store.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		ls.turn = append(ls.turn, step)
		for _, tc := range step.ToolCalls {
			result := "error: only the memory tool is available now"
			if tc.Name == flushTool {
				out, _, err := r.runTool(fctx, tc)
				if err != nil {
					if superseded(err) || ctx.Err() != nil {
						return err
					}
					r.log.Warn("memory flush ended by a tool call", "err", err)
					return r.flushed(ctx)
				}
				result = out
				saved++
			}
			ls.turn = append(ls.turn, store.Message{Role: llm.RoleTool, Content: result, ToolCallID: tc.ID, ToolName: tc.Name})
		}
	}
	r.log.Info("memory flush completed", "memory_calls", saved)
	return r.flushed(ctx)
}

// runFlush runs the memory flush; its panic (a provider SDK's, as
// runAgent recovers a turn's) fails it as any failure does (endFlush),
// which records its end, ends its lease and lets the session go on. Not
// recovered, the bus dead-lettered the flush unfinished, and the new
// conversation's first message waited for its lock and lease to lapse.
func (r *turnRun) runFlush(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("memory flush panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	return r.memoryFlush(ctx)
}

// flushed records the flush decided, unless an earlier attempt did: its
// usage goes with it, and no later attempt runs it. Its context size is
// not the session's (the session has a new conversation).
func (r *turnRun) flushed(ctx context.Context) error {
	if r.usageRecorded {
		return nil
	}
	t := r.withUsage()
	t.Usage.Context = 0
	t.EndLease = true // nothing follows a flush
	_, err := r.s.store.Finish(context.WithoutCancel(ctx), t, nil, 0, nil,
		store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Model: r.model})
	if err != nil {
		return err
	}
	r.usageRecorded = true
	r.finished(t)
	return nil
}

// toolSpecs are the tools a model call of the turn offers: all of them,
// or those of onlyTools (a memory flush's).
func (r *turnRun) toolSpecs() []llm.ToolSpec {
	specs := r.s.tools.Specs()
	if r.onlyTools == nil {
		return specs
	}
	var only []llm.ToolSpec
	for _, s := range specs {
		if slices.Contains(r.onlyTools, s.Name) {
			only = append(only, s)
		}
	}
	return only
}

// endFlush ends a memory flush's delivery as run ends a turn's, with the
// flush's error: superseded (a /stop, a newer turn) is stale; a
// shutdown or an unavailable database hands it back to the bus, whose
// next attempt skips it (at most once) and lets the session go on; any
// other failure completes it as failed, since a flush is not worth the
// new conversation's wait for a retry.
//
// A flush handed back after a model call books what its calls used
// first, even nothing (a provider that reports no usage): the row is
// what tells a later attempt that the flush began and may have saved
// notes, also one the bus numbers 1 again (a consumer recreated, the
// turn published anew), which would otherwise run it again and save
// them twice; the next attempt skips it, spends nothing and keeps that
// row. One whose booking fails (the database is down) is not handed
// back but ends failed, its usage going to the router (bookFlushUsage),
// since no later attempt could know of it. One handed back before any
// model call has nothing to book: its next attempt may run it whole.
func (r *turnRun) endFlush(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return r.complete(ctx, turnsv1.TurnStatus_TURN_STATUS_COMPLETED, "", true)
	case superseded(err):
		r.log.Warn("memory flush superseded; abandoning", "err", err)
		r.bookFlushUsage(ctx, store.StatusStale)
		return r.complete(ctx, turnsv1.TurnStatus_TURN_STATUS_STALE, "superseded by a newer turn", true)
	case ctx.Err() != nil && r.spent < r.s.cfg.MaxDeliver, pg.IsUnavailable(err) && r.spent < r.s.cfg.MaxDeliver:
		if !r.calledModel() || r.bookFlushUsage(ctx, store.StatusInterrupted) {
			r.log.Warn("memory flush handed back", "err", err)
			r.handLockBack(ctx)
			return err
		}
	}
	r.log.Warn("memory flush failed", "err", err)
	r.bookFlushUsage(ctx, store.StatusFailed)
	return r.complete(ctx, turnsv1.TurnStatus_TURN_STATUS_FAILED, "memory flush failed", true)
}

// calledModel reports whether the attempt made a model call (whose
// answer may have had a note saved) or used any tokens.
func (r *turnRun) calledModel() bool {
	u := &r.usage
	return u.GetModelCalls() > 0 || u.GetInputTokens() > 0 || u.GetOutputTokens() > 0 || u.GetCacheReadTokens() > 0 || u.GetCacheWriteTokens() > 0
}

// bookFlushUsage books the usage of a flush that ends without a final
// with the conversation it ran on, the one that ended (store.BookUsage):
// the router would add it to the session's row, which after the reset
// counts the new conversation. Booked, it goes to the router as
// recorded. Not booked (the database failed), it goes as before, to the
// session's row: counted, if in the wrong conversation. It reports
// whether the usage is recorded.
func (r *turnRun) bookFlushUsage(ctx context.Context, status string) bool {
	if r.usageRecorded {
		return true
	}
	t := r.withUsage()
	if err := r.s.store.BookUsage(context.WithoutCancel(ctx), t, status, r.model); err != nil {
		r.log.Warn("memory flush usage not booked with its conversation", "err", err)
		return false
	}
	r.usageRecorded = true
	return true
}
