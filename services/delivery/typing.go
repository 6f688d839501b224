package delivery

import (
	"context"
	"fmt"
	"sync"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// typing keeps typing indicators up while turns run: SEND_OP_TYPING every
// TypingInterval until the final answer, an error or an interrupt, and at
// most TypingMax.
type typing struct {
	s  *Service
	mu sync.Mutex
	m  map[string]context.CancelFunc
	wg sync.WaitGroup
}

func newTyping(s *Service) *typing { return &typing{s: s, m: map[string]context.CancelFunc{}} }

// start begins the indicator; its sends stay in the trace of ctx (the
// reply that started the turn) but outlive ctx.
func (t *typing) start(ctx context.Context, ev *repliesv1.ReplyEvent) {
	turn := ev.GetTurnId()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[turn]; ok || turn == "" {
		return
	}
	// ctx is the reply consumer's: it ends when this replica lets go of
	// the partition, and the indicator stops with it (the next owner
	// shows its own). It outlives the event's handler.
	ctx, cancel := context.WithTimeout(ctx, t.s.cfg.TypingMax)
	t.m[turn] = cancel
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer t.stop(turn)
		tick := time.NewTicker(t.s.cfg.TypingInterval)
		defer tick.Stop()
		for n := 0; ; n++ {
			req := t.s.request(ev, fmt.Sprintf("%s:typing:%d", turn, n), deliveryv1.SendOp_SEND_OP_TYPING)
			_, _ = t.s.progress(ctx, req)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

func (t *typing) stop(turn string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cancel, ok := t.m[turn]; ok {
		cancel()
		delete(t.m, turn)
	}
}

func (t *typing) stopAll() {
	t.mu.Lock()
	for turn, cancel := range t.m {
		cancel()
		delete(t.m, turn)
	}
	t.mu.Unlock()
	t.wg.Wait()
}
