package sessionstore

import (
	"context"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// The settings of /personality and /reasoning belong to the key, as
// Hermes keeps them per session key: a new conversation (/new, an
// automatic reset) and a resumed one keep them, and a turn carries them.
func TestSettingsOutliveTheConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	key := "agent:main:telegram:dm:1"
	if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTitle(ctx, key, "first"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPersonality(ctx, key, "pirate"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetReasoningEffort(ctx, key, "high"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetShowReasoning(ctx, key, true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetServiceTier(ctx, key, "fast"); err != nil {
		t.Fatal(err)
	}
	check := func(step string, sess Session) {
		t.Helper()
		if sess.Personality != "pirate" || sess.ReasoningEffort != "high" || !sess.ShowReasoning || sess.ServiceTier != "fast" {
			t.Fatalf("%s: personality %q, effort %q, show %v, tier %q; want pirate, high, true, fast", step,
				sess.Personality, sess.ReasoningEffort, sess.ShowReasoning, sess.ServiceTier)
		}
	}
	sess, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	check("set", sess)
	if sess, err = s.Reset(ctx, key, "new"); err != nil {
		t.Fatal(err)
	}
	check("after /new", sess)
	if sess, err = s.Resume(ctx, key, "first", nil); err != nil {
		t.Fatal(err)
	}
	check("after /resume", sess)
	if _, err := s.Enqueue(ctx, key, 1, false, &eventsv1.MessageReceived{EventId: "e"}, 32); err != nil {
		t.Fatal(err)
	}
	var turn Turn
	if _, err := s.StartTurn(ctx, key, "t", 32, 0, func(_ context.Context, tt Turn) error { turn = tt; return nil }); err != nil {
		t.Fatal(err)
	}
	check("turn", turn.Session)
	for _, set := range []func() error{
		func() error { return s.SetPersonality(ctx, key, "") },
		func() error { return s.SetReasoningEffort(ctx, key, "") },
		func() error { return s.SetShowReasoning(ctx, key, false) },
		func() error { return s.SetServiceTier(ctx, key, "") },
	} {
		if err := set(); err != nil {
			t.Fatal(err)
		}
	}
	if sess, err = s.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	if sess.Personality != "" || sess.ReasoningEffort != "" || sess.ShowReasoning || sess.ServiceTier != "" {
		t.Fatalf("cleared: %q %q %v %q", sess.Personality, sess.ReasoningEffort, sess.ShowReasoning, sess.ServiceTier)
	}
	if err := s.SetServiceTier(ctx, key, "priority"); err == nil {
		t.Fatal("service_tier 'priority' stored; the column takes '', fast and normal")
	}
	if err := s.SetPersonality(ctx, "no such key", "x"); err != ErrNotFound {
		t.Fatalf("unknown key: %v", err)
	}
}

// SetTurnSettings writes a key's model, personality and effort at once
// and leaves its display alone; QueuedKeys names the keys with messages
// waiting among those asked about.
func TestSetTurnSettingsAndQueuedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	keys := []string{"agent:main:background:telegram:dm:1:bg_1", "agent:main:background:telegram:dm:1:bg_2", "agent:main:background:telegram:dm:1:bg_3"}
	for _, key := range keys {
		if _, _, _, err := s.Arrive(ctx, key, "", &eventsv1.SessionSource{Platform: "telegram", ChatId: "1"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetShowReasoning(ctx, keys[0], true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTurnSettings(ctx, keys[0], "gpt-fast", "coder", "high"); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Get(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if sess.ModelOverride != "gpt-fast" || sess.Personality != "coder" || sess.ReasoningEffort != "high" || !sess.ShowReasoning {
		t.Fatalf("settings: %q %q %q %v", sess.ModelOverride, sess.Personality, sess.ReasoningEffort, sess.ShowReasoning)
	}
	if err := s.SetTurnSettings(ctx, "no such key", "", "", ""); err != ErrNotFound {
		t.Fatalf("unknown key: %v", err)
	}
	if _, err := s.Enqueue(ctx, keys[1], 1, true, &eventsv1.MessageReceived{EventId: "e"}, 32); err != nil {
		t.Fatal(err)
	}
	queued, err := s.QueuedKeys(ctx, append(keys, "no such key"))
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 1 || !queued[keys[1]] {
		t.Fatalf("queued: %v", queued)
	}
}
