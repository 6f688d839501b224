package platformtest

import (
	"context"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Gateway is a chat gateway's service as its tests drive it (every
// gateway's Service embeds platform.Service).
type Gateway interface {
	Run(ctx context.Context) error
	Ready(ctx context.Context) error
	Runner() *platform.Runner
}

// Start runs g until t ends; then it stops g, fails t if Run returned an
// error and deletes the kit's buckets of b. The context is g's.
func Start(t *testing.T, b *bus.Bus, g Gateway) context.Context {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		DeleteBuckets(b)
	})
	return ctx
}

// ComeUp is a platform's outage seen by g, which was pointed at o's
// address: it waits for g to fail an attempt whose reason holds failure
// ("" for any), checks g is unready, ends the outage by forwarding to
// target (host:port) and waits for g to connect.
func (o *Outage) ComeUp(t *testing.T, g Gateway, failure, target string) {
	t.Helper()
	WaitFor(t, "a failed attempt to reach the platform", func() bool {
		_, reason := g.Runner().State()
		return reason != "" && strings.Contains(reason, failure)
	})
	if err := g.Ready(context.Background()); err == nil {
		t.Fatal("ready while the platform is out of reach")
	}
	o.End(t, target)
	WaitFor(t, "the gateway to connect", func() bool {
		st, _ := g.Runner().State()
		return st == platform.StateConnected
	})
}
