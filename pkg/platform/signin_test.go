package platform_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// signingMemory learns its account by signing in, failing with the
// errors queued first.
type signingMemory struct {
	*platformtest.Memory
	mu       sync.Mutex
	fail     []error
	calls    int
	signedIn bool
}

func (s *signingMemory) SignIn(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(s.fail) > 0 {
		err := s.fail[0]
		s.fail = s.fail[1:]
		return err
	}
	s.signedIn = true
	return nil
}

func (s *signingMemory) signIns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *signingMemory) Account() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.signedIn {
		return ""
	}
	return s.Memory.Account()
}

// A platform out of reach at the start is signed in to again on the
// backoff schedule, the gateway unready with the last error meanwhile,
// then runs as usual (the lease is the account's, learnt by signing in).
func TestSignInRetriedUntilThePlatformAnswers(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	release := make(chan struct{})
	m := &signingMemory{Memory: platformtest.NewMemory("bot", true),
		fail: []error{errors.New("dial tcp: connection refused"), errors.New("HTTP 502")}}
	var mu sync.Mutex
	var asked []int
	h := startRunner(t, m, b, platform.Options{Backoff: func(n int) time.Duration {
		mu.Lock()
		asked = append(asked, n)
		mu.Unlock()
		if n == 1 {
			<-release // hold the second wait until the test looked
		}
		return time.Millisecond
	}})
	platformtest.WaitFor(t, "a second sign-in failure", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(asked) == 2
	})
	if err := h.r.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Ready = %v while signing in, want unready with the last error", err)
	}
	close(release)
	platformtest.WaitFor(t, "connected", func() bool { return state(h.r) == platform.StateConnected })
	if err := h.r.Ready(context.Background()); err != nil {
		t.Fatalf("Ready = %v once connected", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(asked) != "[0 1]" || m.signIns() != 3 {
		t.Fatalf("backoff attempts %v, %d sign-ins; want [0 1] and 3", asked, m.signIns())
	}
}

// Credentials the platform refuses end Run at once with the reason.
func TestSignInRefusedEndsRun(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := &signingMemory{Memory: platformtest.NewMemory("bot", false),
		fail: []error{platform.Fatal(errors.New("HTTP 401: check THE_TOKEN"))}}
	r, err := platform.NewRunner(m, b, platform.Options{Backoff: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Run(ctx); err == nil || !strings.Contains(err.Error(), "THE_TOKEN") {
		t.Fatalf("Run = %v, want the refusal", err)
	}
	if s, reason := r.State(); s != platform.StateFatal || !strings.Contains(reason, "401") {
		t.Fatalf("state %s (%q), want fatal with the reason", s, reason)
	}
	if m.signIns() != 1 || m.Fake().Connections() != 0 {
		t.Fatalf("%d sign-ins, %d connections; want 1 and none", m.signIns(), m.Fake().Connections())
	}
}

// A gateway waiting for its platform stops at once on SIGTERM.
func TestSignInWaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	b := bustest.New(t, bustest.EmbeddedURL(t))
	m := &signingMemory{Memory: platformtest.NewMemory("bot", false), fail: []error{errors.New("connection refused")}}
	r, err := platform.NewRunner(m, b, platform.Options{Backoff: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	platformtest.WaitFor(t, "a failed sign-in", func() bool {
		_, reason := r.State()
		return reason != ""
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if s := state(r); s != platform.StateStopped {
		t.Fatalf("state %s, want stopped", s)
	}
}
