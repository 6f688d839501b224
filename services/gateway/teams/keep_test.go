package teams

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// busHolder holds presses on the bus as a replica's connection does.
type busHolder struct{ b *bus.Bus }

func (h busHolder) HoldPress(id string) (*platform.PressHold, error) {
	return platform.HoldPress(h.b, "teams", id)
}

// keepPresses holds n presses as invokes answered one after another
// would (holdInvoke, keepForRetry, the handler's release) and returns
// them, oldest first.
func keepPresses(t *testing.T, p *Platform, b *bus.Bus, prefix string, n int) []*heldInvoke {
	t.Helper()
	invs := make([]*heldInvoke, n)
	for i := range invs {
		inv, _ := p.holdInvoke(busHolder{b}, fmt.Sprintf("%s-%03d", prefix, i))
		if inv.hold == nil {
			t.Fatalf("press %d not held", i)
		}
		p.keepForRetry(inv)
		p.releaseInvoke(inv)
		invs[i] = inv
	}
	return invs
}

// heldOnBus reports whether a replica answers a retry of the press id
// (platform.RetryPress): whether it is held anywhere.
func heldOnBus(t *testing.T, b *bus.Bus, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held, err := platform.RetryPress(ctx, b, "teams", id)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// allLetGo checks that every press of invs was let go exactly once: no
// user left (a second release would go below zero, or panic closing
// released twice), its answer's goroutine ended (released closed), and
// the replica holds none.
func allLetGo(t *testing.T, p *Platform, b *bus.Bus, invs []*heldInvoke) {
	t.Helper()
	p.invokesMu.Lock()
	defer p.invokesMu.Unlock()
	if n := len(p.invokes); n != 0 {
		t.Errorf("%d presses still held", n)
	}
	if n := p.keeps.Len(); n != 0 {
		t.Errorf("%d presses still kept", n)
	}
	for i, inv := range invs {
		if inv.users != 0 {
			t.Errorf("press %d has %d users, want 0", i, inv.users)
		}
		select {
		case <-inv.released:
		default:
			t.Errorf("press %d not released", i)
		}
	}
}

// The presses kept for a retry (keepForRetry) are capped per replica:
// past the cap the oldest kept is let go, once, and a flood of presses
// holds no more than the cap on the bus. Uncapped, every press of the
// flood stayed held (a subscription, a goroutine and a timer each) for
// retryHold.
func TestKeptPressesAreCapped(t *testing.T) {
	t.Parallel()
	const maxKeeps, over = 4, 3
	f := teamsfake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	newPlatform := func(keepFor time.Duration) *Platform {
		p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		p.maxKeeps, p.keepFor = maxKeeps, keepFor
		p.startKeeps()
		return p
	}

	t.Run("oldest let go first, the rest by endKeeps", func(t *testing.T) {
		p := newPlatform(time.Hour)
		invs := keepPresses(t, p, b, "flood", maxKeeps+over)
		for i, inv := range invs {
			if got, want := heldOnBus(t, b, inv.id), i >= over; got != want {
				t.Errorf("press %d of %d held %v, want %v (cap %d)", i, len(invs), got, want, maxKeeps)
			}
		}
		for i, inv := range invs[:over] {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			req, err := platform.AskPress(ctx, b, "teams", inv.id)
			cancel()
			if err != nil || req != nil {
				t.Errorf("asking for let-go press %d: %v, %v; want no holder", i, req, err)
			}
		}
		p.invokesMu.Lock()
		held := len(p.invokes)
		p.invokesMu.Unlock()
		if held != maxKeeps {
			t.Errorf("%d presses held, want the cap %d", held, maxKeeps)
		}
		p.endKeeps()
		allLetGo(t, p, b, invs)
		for i, inv := range invs {
			if heldOnBus(t, b, inv.id) {
				t.Errorf("press %d held after endKeeps", i)
			}
		}
	})

	t.Run("the rest let go by their timers", func(t *testing.T) {
		p := newPlatform(50 * time.Millisecond)
		invs := keepPresses(t, p, b, "timed", maxKeeps+over)
		platformtest.WaitFor(t, "the kept presses' timers", func() bool {
			p.invokesMu.Lock()
			defer p.invokesMu.Unlock()
			return p.keeps.Len() == 0
		})
		allLetGo(t, p, b, invs)
		// Stopping after the timers let go releases nothing again.
		p.endKeeps()
		allLetGo(t, p, b, invs)
	})
}
