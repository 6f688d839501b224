package router

import (
	"context"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/command"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/redisx"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /moa answers Hermes's usage without a prompt and says so where no
// preset is configured, starting nothing either way.
func TestMoAUsageAndNotConfigured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	if got := e.ask("bob", "/moa compare these"); got != moaNotConfigured {
		t.Fatalf("/moa without a preset: %q", got)
	}
	if got := e.ask("bob", "/moa"); got != command.MoAUsage {
		t.Fatalf("bare /moa: %q", got)
	}
	if turns, _ := w.snapshot(); len(turns) != 0 {
		t.Fatalf("%d turns started", len(turns))
	}
}

// /moa <prompt> starts a turn of the chat's own conversation whose one
// input is the prompt and which carries moa, after an acknowledgement
// naming the preset; the session's model is left as it was, and the
// next message is an ordinary turn. While the chat's agent runs, /moa
// is refused with Hermes's text (busy_policy reject): nothing is queued,
// nothing interrupted.
func TestMoAStartsATurnAndRespectsBusy(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MoAReferences, cfg.MoAAggregator = []string{"ref-a", "openai:ref-b"}, "agg"
	e, g, w := busySession(t, cfg, "alice", "long job")
	ctx := context.Background()
	store := sessionstore.New(e.db)
	const key = "agent:main:telegram:dm:chat-alice"
	if err := store.SetModel(ctx, key, "gpt-mine"); err != nil {
		t.Fatal(err)
	}
	if got := e.ask("alice", "/moa while busy"); got != moaBusy {
		t.Fatalf("/moa mid-turn: %q", got)
	}
	if got := e.ask("alice", "/moa"); got != command.MoAUsage {
		t.Fatalf("bare /moa mid-turn: %q", got)
	}
	if n := len(e.controls(controlStop)) + len(e.controls(controlInterrupt)); n != 0 {
		t.Fatalf("/moa sent %d stops or interrupts", n)
	}
	if n, _ := store.QueueLen(ctx, key); n != 0 {
		t.Fatalf("%d queued", n)
	}
	g.open()
	waitFor(t, "the session is free", func() bool {
		owner, _ := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, key)
		return owner == ""
	})

	want := "🧠 Mixture of Agents: ref-a, openai:ref-b, then agg. Your model is restored after this turn."
	if got := e.ask("alice", "/moa  compare\nthese two "); got != want {
		t.Fatalf("/moa's acknowledgement %q, want %q", got, want)
	}
	var moa *turnsv1.TurnRequested
	waitFor(t, "the /moa turn", func() bool {
		turns, _ := w.snapshot()
		for _, tr := range turns {
			if tr.GetMoa() {
				moa = tr
			}
		}
		return moa != nil
	})
	if moa.GetSessionKey() != key || len(moa.GetInputs()) != 1 || moa.GetInputs()[0].GetText() != "compare\nthese two" ||
		moa.GetInputs()[0].GetTranscriptCommand() != "" {
		t.Fatalf("the /moa turn: key %q, inputs %v", moa.GetSessionKey(), moa.GetInputs())
	}
	if moa.GetModelOverride() != "gpt-mine" {
		t.Errorf("the /moa turn carries model %q, want the session's", moa.GetModelOverride())
	}
	waitFor(t, "the session is free", func() bool {
		owner, _ := redisx.NewLocker(e.rdb, e.prefix).Owner(ctx, key)
		return owner == ""
	})
	e.publish(dm("alice", "and now?"))
	waitFor(t, "the next turn", func() bool { turns, _ := w.snapshot(); return len(turns) == 3 })
	turns, _ := w.snapshot()
	if last := turns[2]; last.GetMoa() || last.GetModelOverride() != "gpt-mine" || last.GetInputs()[0].GetText() != "and now?" {
		t.Fatalf("the turn after /moa: moa %v, model %q, inputs %v", last.GetMoa(), last.GetModelOverride(), last.GetInputs())
	}
	sess, err := store.Get(ctx, key)
	if err != nil || sess.ModelOverride != "gpt-mine" {
		t.Fatalf("the session's model after /moa: %q, %v", sess.ModelOverride, err)
	}
}
