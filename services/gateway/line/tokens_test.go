package line

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/line/linefake"
)

// Of sends racing for a chat's reply token on several replicas (one bus,
// one bucket), exactly one gets it.
func TestReplyTokenClaimRace(t *testing.T) {
	t.Parallel()
	f := linefake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	t.Cleanup(func() { platformtest.DeleteBuckets(b) })
	var replicas []*Platform
	for range 4 {
		p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, p)
	}
	ctx := context.Background()
	for round := range 20 {
		if err := replicas[0].keepReplyToken(ctx, alice, "tok"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		got := 0
		var wg sync.WaitGroup
		for _, p := range replicas {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tok, err := p.claimReplyToken(ctx, alice)
					if err != nil {
						t.Error(err)
					}
					if tok != "" {
						mu.Lock()
						got++
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		if got != 1 {
			t.Fatalf("round %d: the token was claimed %d times", round, got)
		}
	}
}
