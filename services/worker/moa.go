package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// moaAggregatorPrompt is what the aggregator is told, Hermes's (the
// Mixture-of-Agents paper's): the reference answers follow it, numbered.
const moaAggregatorPrompt = "You have been provided with a set of responses from various open-source models to the latest user query. " +
	"Your task is to synthesize these responses into a single, high-quality response. " +
	"It is crucial to critically evaluate the information provided in these responses, recognizing that some of it may be biased or incorrect. " +
	"Your response should not simply replicate the given answers but should offer a refined, accurate, and comprehensive reply to the instruction. " +
	"Ensure your response is well-structured, coherent, and adheres to the highest standards of accuracy and reliability.\n\n" +
	"Responses from models:"

// moaReference is one reference model's part of a mixture.
type moaReference struct {
	name string // as configured: "model" or "kind:model"
	text string
	err  error
}

// moaOutcome is a reference call's outcome, the metric's label: ok,
// empty (an answer without text), failed, timeout, cancelled (/stop, a
// newer message, the lock's loss).
func moaOutcome(stopped bool, ref moaReference) string {
	switch {
	case ref.err == nil && strings.TrimSpace(ref.text) == "":
		return "empty"
	case ref.err == nil:
		return "ok"
	case stopped:
		return "cancelled"
	case errors.Is(ref.err, context.DeadlineExceeded):
		return "timeout"
	}
	return "failed"
}

// mixture answers a /moa turn (TurnRequested.moa) with the Mixture of
// Agents of agent.moa, as Hermes's mixture_of_agents does: each
// reference model answers the prompt in parallel (at most
// max_concurrency at once, each within reference_timeout, all ended at
// once by /stop, a newer message or the lock's loss), without tools, at
// reference_temperature; when at least min_successful_references
// answered, the aggregator (aggregator_model, else the session's model)
// writes the answer from the conversation and their answers, numbered
// after Hermes's aggregator prompt, at aggregator_temperature, streamed
// as any answer. The turn is recorded as any other: its prompt, then the
// aggregator's answer. Too few answers fail the turn with a clear
// answer; a provider's refusal (quota, rate limit, key) is reported as
// on any other turn. The session's model is never changed: the mixture
// is this turn's alone.
//
// The mixture is a span of the turn's trace ("moa"), whose children are
// each reference call's and the aggregator's model call ("llm <kind>",
// as any model call's, with moa.role reference or aggregator).
func (r *turnRun) mixture(ctx context.Context, system string, ls *loopState) (store.Final, error) {
	cfg := r.s.cfg.Agent.MoA
	minOK := max(cfg.MinSuccessfulReferences, 1)
	mctx, span := otel.Tracer(tracerName).Start(ctx, "moa", trace.WithAttributes(
		attribute.Int("moa.reference_models", len(cfg.ReferenceModels)),
		attribute.Int("moa.min_successful_references", minOK)))
	defer span.End()
	prompt := r.moaPrompt(ls)
	refs := make([]moaReference, len(cfg.ReferenceModels))
	err := r.cancellable(mctx, func(ctx context.Context) error {
		r.askReferences(ctx, cfg, prompt, refs)
		return context.Cause(ctx)
	})
	for _, ref := range refs {
		moaReferenceCalls.WithLabelValues(moaOutcome(err != nil || ctx.Err() != nil, ref)).Inc()
	}
	if err != nil {
		telemetry.SpanError(span, err)
		if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
			return fin, serr
		}
		return store.Final{}, err
	}
	var answers []string
	var failed []string
	var refusal error
	for _, ref := range refs {
		switch {
		case ref.err == nil && strings.TrimSpace(ref.text) != "":
			answers = append(answers, ref.text)
		case ref.err == nil:
			failed = append(failed, ref.name+": empty answer")
		default:
			failed = append(failed, ref.name+": "+moaReason(ref.err))
			switch llm.ClassOf(ref.err) {
			case llm.Quota, llm.RateLimited, llm.Auth:
				if refusal == nil {
					refusal = ref.err
				}
			}
		}
	}
	if len(failed) > 0 {
		r.log.Warn("moa reference models failed", "failed", len(failed), "answered", len(answers), "models", strings.Join(failed, "; "))
	}
	span.SetAttributes(attribute.Int("moa.references_answered", len(answers)))
	if len(answers) < minOK {
		telemetry.SpanFailed(span, "too few reference models answered")
		f := store.Final{Status: store.StatusFailed, Kind: store.FinalError, ErrorCode: "moa_references",
			Text: fmt.Sprintf("Mixture of Agents failed: %d of %d reference models answered, at least %d needed (%s). "+
				"Try again, or send the message without /moa.", len(answers), len(refs), minOK, strings.Join(failed, "; "))}
		if refusal != nil {
			// The provider refused (quota, rate limit, key): said as on
			// any other turn.
			f.ErrorCode, f.Text = errorCode(refusal), r.failureText(refusal, "")
		}
		return r.finish(ctx, ls, nil, f)
	}

	backend, model := r.s.backendFor(r.aggregatorModel())
	r.model = model
	numbered := make([]string, len(answers))
	for i, a := range answers {
		numbered[i] = fmt.Sprintf("%d. %s", i+1, a)
	}
	aggSystem := system + "\n\n" + moaAggregatorPrompt + "\n\n" + strings.Join(numbered, "\n")
	temp := cfg.AggregatorTemperature
	r.temperature = &temp
	r.callAttrs = []attribute.KeyValue{attribute.String("moa.role", "aggregator")}
	defer func() { r.temperature, r.callAttrs = nil, nil }()
	// Without tools, as Hermes's aggregator; Anthropic's API is given
	// their definitions all the same, as a history holding tool_use
	// blocks may be refused without them. A tool call is ignored.
	resp, err := r.callWhole(mctx, backend, model, aggSystem, ls, backend.Kind == "anthropic", false)
	if err != nil {
		telemetry.SpanFailed(span, "aggregator failed")
		if ctx.Err() != nil || errors.Is(err, errLockLost) {
			return store.Final{}, err
		}
		if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
			return fin, serr
		}
		r.log.Warn("moa aggregator call failed; ending the turn", "class", string(llm.ClassOf(err)), "err", err)
		return r.finish(ctx, ls, nil, store.Final{Status: store.StatusFailed, Kind: store.FinalError,
			ErrorCode: errorCode(err), Text: r.failureText(err, model)})
	}
	// An answer the output limit cut went on as the loop's do (callWhole).
	steps, msg, answer := r.answered(ls, resp)
	return r.finishAfter(ctx, ls, steps, &msg, store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: r.withReasoning(&answer)})
}

// aggregatorModel is the model the aggregator runs on, as /model names
// one: agent.moa.aggregator_model, else the session's.
func (r *turnRun) aggregatorModel() string {
	if m := r.s.cfg.Agent.MoA.AggregatorModel; m != "" {
		return m
	}
	return r.req.GetModelOverride()
}

// moaPrompt is what each reference model is asked: the turn's prompt,
// after the conversation so far rendered as a transcript (as a /btw
// side question renders it) when there is one, so that a reference
// answers in context without being handed tool calls it has no tools
// for.
//
// The prompt is the model's copy of the turn (modelTurn): a pending
// /reload-skills note the turn took stands before it for the
// references as for the aggregator. Hermes does the same: its gateway
// prepends the note to the message of the agent run, and its MoA
// builds the references' advisory view from that run's API messages
// (agent/moa_loop.py _reference_messages), which hold the message with
// the note; only the transcript keeps the message as sent.
func (r *turnRun) moaPrompt(ls *loopState) string {
	var asked []string
	for _, m := range r.modelTurn(ls) {
		if m.Role == llm.RoleUser && strings.TrimSpace(m.Content) != "" {
			asked = append(asked, m.Content)
		}
	}
	prompt := strings.Join(asked, "\n")
	if ls.summary == "" && len(ls.prior) == 0 {
		return prompt
	}
	return "Conversation so far, for context:\n-----\n" + renderTranscript(ls.summary, ls.prior) + "\n-----\n\n" + prompt
}

// askReferences asks every reference model the prompt, at most
// cfg.MaxConcurrency at once, and fills refs in the configured order.
func (r *turnRun) askReferences(ctx context.Context, cfg MoAConfig, prompt string, refs []moaReference) {
	sem := make(chan struct{}, max(cfg.MaxConcurrency, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxTokens := cfg.ReferenceMaxTokens
	if maxTokens <= 0 {
		maxTokens = r.s.cfg.Agent.MaxTokens
	}
	temp := cfg.ReferenceTemperature
	for i, name := range cfg.ReferenceModels {
		refs[i].name = name
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				refs[i].err = context.Cause(ctx)
				return
			}
			defer func() { <-sem }()
			backend, model := r.s.backendFor(name)
			if backend.Provider == nil {
				refs[i].err = errors.New("no model provider")
				return
			}
			sctx, span := otel.Tracer(tracerName).Start(ctx, "llm "+backend.Kind, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("gen_ai.system", backend.Kind), attribute.String("gen_ai.request.model", model),
					attribute.String("moa.role", "reference"), attribute.String("moa.reference", name)))
			defer span.End()
			cctx, cancel := sctx, context.CancelFunc(func() {})
			if cfg.ReferenceTimeout > 0 {
				cctx, cancel = context.WithTimeout(sctx, cfg.ReferenceTimeout)
			}
			defer cancel()
			resp, err := llm.Complete(cctx, backend.Provider, llm.Request{Model: model,
				Messages:  []llm.Message{{Role: llm.RoleUser, Content: prompt}},
				MaxTokens: maxTokens, Temperature: &temp})
			defer func() { endReferenceSpan(ctx, span, refs[i]) }() // after the answer is read
			mu.Lock()
			defer mu.Unlock()
			r.usage.ModelCalls++
			if err != nil {
				refs[i].err = err
				return
			}
			r.addUsage(resp.Usage)
			refs[i].text = resp.Text
			span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", resp.Usage.InputTokens),
				attribute.Int("gen_ai.usage.output_tokens", resp.Usage.OutputTokens))
		}()
	}
	wg.Wait()
}

// endReferenceSpan records a reference call's outcome on its span: the
// metric's label (moaOutcome) and, unless it answered, an error status
// saying why (the cause of a /stop, a newer message or the lock's loss,
// "empty answer", or moaReason).
func endReferenceSpan(ctx context.Context, span trace.Span, ref moaReference) {
	stopped := ctx.Err() != nil
	outcome := moaOutcome(stopped, ref)
	span.SetAttributes(attribute.String("moa.outcome", outcome))
	switch {
	case outcome == "ok":
	case outcome == "empty":
		telemetry.SpanFailed(span, "empty answer")
	case stopped:
		telemetry.SpanError(span, context.Cause(ctx))
	default:
		telemetry.SpanFailed(span, telemetry.Reason(moaReason(ref.err)))
	}
}

// moaReason is a reference's failure as the failure answer names it.
func moaReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	if c := llm.ClassOf(err); c != "" {
		return string(c)
	}
	return "failed"
}
