package worker_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
)

var (
	spansOnce sync.Once
	spansSeen *tracetest.InMemoryExporter
)

// recordSpans installs an in-memory exporter as the global tracer
// provider, once for the package: the worker's spans of every test
// running meanwhile land in it too, so a test finds its own by their
// parents and attributes.
func recordSpans() *tracetest.InMemoryExporter {
	spansOnce.Do(func() {
		spansSeen = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spansSeen)))
	})
	return spansSeen
}

func spanAttr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A /moa turn is a span of its own ("moa": how many references, how
// many answered), parent of each reference call's span and of the
// aggregator's, named and attributed as any model call's ("llm <kind>",
// gen_ai.system, gen_ai.request.model, the tokens), with moa.role, the
// reference's configured name and outcome, and an error status saying
// why a reference gave no answer.
func TestMoASpans(t *testing.T) {
	t.Parallel()
	spans := recordSpans()
	h := newHarness(t)
	h.startWorker("w1", moaPreset("span-agg", 1, 8, "span-ok", "span-fails", "span-empty"))
	const key = "agent:main:telegram:dm:moa-spans"
	h.setGeneration(key, 1)
	serverError := fakellm.Reply{Failure: &fakellm.Failure{Status: http.StatusInternalServerError, Message: "boom"}}
	h.fake.EnqueueFor("span-ok", fakellm.Reply{Text: "answer", Usage: &fakellm.Usage{InputTokens: 11, OutputTokens: 7}})
	h.fake.EnqueueFor("span-fails", serverError, serverError)
	h.fake.EnqueueFor("span-empty", fakellm.Reply{Text: " "})
	h.fake.EnqueueFor("span-agg", fakellm.Reply{Text: "the synthesis", Usage: &fakellm.Usage{InputTokens: 30, OutputTokens: 5}})
	req := h.requestTurn(key, "Name three risks.", turnOpts{moa: true})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the /moa turn: %v (%s)", c.GetStatus(), c.GetError())
	}

	var moa *tracetest.SpanStub
	all := spans.GetSpans()
	for i, s := range all {
		if s.Name == "moa" && spanAttr(s, "moa.reference_models").AsInt64() == 3 && s.Parent.IsValid() {
			// The turn's: its children are this test's models.
			for _, c := range all {
				if c.Parent.SpanID() == s.SpanContext.SpanID() && spanAttr(c, "gen_ai.request.model").AsString() == "span-ok" {
					moa = &all[i]
				}
			}
		}
	}
	if moa == nil {
		t.Fatal("no moa span parent of the references' spans")
	}
	if got := spanAttr(*moa, "moa.references_answered").AsInt64(); got != 1 || moa.Status.Code == codes.Error {
		t.Errorf("moa span: %d answered, status %v", got, moa.Status)
	}
	type want struct {
		role, outcome, status string
		in, out               int64
	}
	wants := map[string]want{
		"span-ok":    {"reference", "ok", "", 11, 7},
		"span-fails": {"reference", "failed", "server", 0, 0},
		"span-empty": {"reference", "empty", "empty answer", -1, -1},
		"span-agg":   {"aggregator", "", "", 30, 5},
	}
	seen := map[string]bool{}
	for _, s := range all {
		if s.Parent.SpanID() != moa.SpanContext.SpanID() {
			continue
		}
		model := spanAttr(s, "gen_ai.request.model").AsString()
		w, ok := wants[model]
		if !ok {
			t.Errorf("unexpected child span %q of model %q", s.Name, model)
			continue
		}
		seen[model] = true
		if s.Name != "llm openai" || spanAttr(s, "gen_ai.system").AsString() != "openai" || spanAttr(s, "moa.role").AsString() != w.role {
			t.Errorf("%s: span %q, system %q, role %q", model, s.Name, spanAttr(s, "gen_ai.system").AsString(), spanAttr(s, "moa.role").AsString())
		}
		if w.role == "reference" && (spanAttr(s, "moa.reference").AsString() != model || spanAttr(s, "moa.outcome").AsString() != w.outcome) {
			t.Errorf("%s: reference %q, outcome %q, want %q", model, spanAttr(s, "moa.reference").AsString(), spanAttr(s, "moa.outcome").AsString(), w.outcome)
		}
		if w.status == "" && s.Status.Code == codes.Error || w.status != "" && (s.Status.Code != codes.Error || s.Status.Description != w.status) {
			t.Errorf("%s: status %v, want %q", model, s.Status, w.status)
		}
		if w.in >= 0 && (spanAttr(s, "gen_ai.usage.input_tokens").AsInt64() != w.in || spanAttr(s, "gen_ai.usage.output_tokens").AsInt64() != w.out) {
			t.Errorf("%s: tokens %d/%d, want %d/%d", model, spanAttr(s, "gen_ai.usage.input_tokens").AsInt64(),
				spanAttr(s, "gen_ai.usage.output_tokens").AsInt64(), w.in, w.out)
		}
	}
	if len(seen) != len(wants) {
		t.Errorf("child spans for %v, want one for each of %d models", seen, len(wants))
	}
}

// A /moa turn that took a /reload-skills note: as in Hermes, whose
// references read the run's messages, the note stands before the
// prompt for the references and the aggregator alike; the transcript
// keeps the prompt as sent.
func TestMoASkillsNote(t *testing.T) {
	t.Parallel()
	const note = "[USER INITIATED SKILLS RELOAD:\n\nAdded Skills:\n    - deploy: Ship the build\n\nThe user runs a skill by typing /<name>.]"
	h := newHarness(t)
	h.startWorker("w1", moaPreset("agg", 1, 8, "ref-a", "ref-b"))
	const key = "agent:main:telegram:dm:moa-note"
	h.setGeneration(key, 1)
	h.fake.EnqueueFor("ref-a", fakellm.Reply{Text: "answer A"})
	h.fake.EnqueueFor("ref-b", fakellm.Reply{Text: "answer B"})
	h.fake.EnqueueFor("agg", fakellm.Reply{Text: "the synthesis"})
	req := h.requestTurn(key, "Name three risks.", turnOpts{moa: true, skillsNote: note})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("the /moa turn: %v (%s)", c.GetStatus(), c.GetError())
	}
	for _, m := range []string{"ref-a", "ref-b", "agg"} {
		rs := requestsFor(h, m)
		if len(rs) != 1 || rs[0].LastUserText() != note+"\n\nName three risks." {
			t.Errorf("%s's requests %d: want one whose message is the note, a blank line and the prompt", m, len(rs))
			for _, r := range rs {
				t.Logf("%s: %q", m, r.LastUserText())
			}
		}
	}
	rows, err := h.db.Query(t.Context(), `SELECT content FROM transcript_messages WHERE turn_id = $1 AND role = 'user'`, req.TurnId)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || strings.Contains(stored[0], "SKILLS RELOAD") {
		t.Errorf("transcript user messages %q, want the prompt as sent", stored)
	}
}
