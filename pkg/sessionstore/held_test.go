package sessionstore

import (
	"context"
	"errors"
	"sync"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestResumeOfAConversationAnotherKeyIsOn: a conversation is one session
// key's at a time (turns are locked per key). A resume, among the
// chat's conversations (ResumeInChat) or the key's own (ResumeOwn), of
// one another key of the chat is on is refused naming that key; once
// that key left it, it moves; two keys resuming it at once get it once.
func TestResumeOfAConversationAnotherKeyIsOn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(pgtest.New(t))
	const root = "agent:main:slack:dm:T0WS:D1"
	a, b, c := root+":1700000001.000100", root+":1700000002.000100", root+":1700000003.000100"
	for _, k := range []string{a, b, c} {
		if _, _, _, err := s.Arrive(ctx, k, "", &eventsv1.SessionSource{Platform: "slack", ChatId: "D1"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	on := func(key string) string {
		t.Helper()
		sess, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return sess.ID
	}
	held := func(err error, want string) bool {
		var h *HeldError
		return errors.As(err, &h) && h.Key == want
	}
	x := on(a)
	if _, err := s.ResumeInChat(ctx, b, root, x, nil); !held(err, a) {
		t.Fatalf("resume in another thread of the one a is on: %v, want it held by %s", err, a)
	}
	if _, err := s.Reset(ctx, a, "new"); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ResumeInChat(ctx, b, root, x, nil); err != nil || r.ID != x {
		t.Fatalf("resume once a left it: %+v %v", r, err)
	}
	if _, err := s.ResumeOwn(ctx, a, root, x, nil); !held(err, b) {
		t.Fatalf("a's resume of its own former conversation b is on: %v, want it held by %s", err, b)
	}
	for round := range 5 {
		holder := b
		if round > 0 {
			holder = on(a)
			if holder != x {
				holder = c
			} else {
				holder = a
			}
		}
		if _, err := s.Reset(ctx, holder, "new"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, k := range []string{a, c} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.ResumeInChat(ctx, k, root, x, nil)
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) || !(held(errs[0], c) || held(errs[1], a)) {
			t.Fatalf("round %d: two resumes at once: %v, %v; want one, the other held by it", round, errs[0], errs[1])
		}
	}
}
