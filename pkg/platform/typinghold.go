package platform

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// defaultTypingHold is Options.TypingHold's default: longer than a
// platform's typing call takes when it is well (a fraction of a second),
// long enough for one that is slow (a far-away API, a second and more),
// and short enough that a hung one delays the answer only a moment.
const defaultTypingHold = 2 * time.Second

// typingCalls are a runner's typing calls in flight, by chat. A message
// to a chat waits for the chat's typing calls before it goes to the
// platform (hold): a typing call that started near its bound
// (startWithin) and is slow at the platform would otherwise reach it
// after the turn's answer, whose sender stopped waiting for the typing
// request, and show "typing…" under the answer for 5–10 s (a new
// message is what ends the indicator on Telegram and Discord). The
// runner serves each request on a goroutine of its own, out of the order
// it got them, and replicas share nothing: nothing else puts a chat's
// typing call before its message.
//
// What waits is what puts a message in the chat: a send, a stream
// delta. An edit or a delete changes what the chat shows already: the
// platforms end the indicator on a new message only, so holding them
// would change nothing the user sees, and streaming edits, which run
// while the indicator refreshes, would wait behind each refresh. A tool
// step shows nothing in the chat.
//
// Keyed by the chat alone, not its thread: typing is per chat on some
// platforms (a Matrix room) and per thread on others (a Telegram forum
// topic), and a Discord typing request for a thread not yet opened types
// in its channel; a message to another thread of a chat whose typing is
// in flight waits a moment for nothing, which is rare and bounded.
type typingCalls struct {
	mu sync.Mutex
	m  map[string][]*typingCall
}

// typingCall is one typing call in flight.
type typingCall struct {
	// done is closed once the call returned (or was never made: the
	// request was given up, late).
	done chan struct{}
	// cancel cancels the call's context: a message that waited for it
	// past the bound gives it up.
	cancel context.CancelFunc
	// cut: a message waited for it past the bound and cancelled it. No
	// message waits for it any more: a platform that hangs on it (one
	// that ignores the context) would hold each later message to the
	// chat for the bound again.
	cut atomic.Bool
}

// typingCallKey is the context key of the typingCall a request's
// context was made for (typingCalls.add).
type typingCallKey struct{}

// typingChat is the key of a typing request that will call the
// platform's Typing (not a turn's final one, which only ends the
// processing reactions); ok is false for any other request.
func typingChat(req *deliveryv1.SendRequested) (chat string, ok bool) {
	chat = req.GetTarget().GetChatId()
	return chat, req.GetOp() == deliveryv1.SendOp_SEND_OP_TYPING && !req.GetFinal() && chat != ""
}

// add notes a typing call to chat in flight until end is called. The
// call is to be made with the returned context, which a message to the
// chat that waited for it past the bound cancels.
func (c *typingCalls) add(ctx context.Context, chat string) (_ context.Context, end func()) {
	ctx, cancel := context.WithCancel(ctx)
	call := &typingCall{done: make(chan struct{}), cancel: cancel}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string][]*typingCall{}
	}
	c.m[chat] = append(c.m[chat], call)
	c.mu.Unlock()
	var once sync.Once
	return context.WithValue(ctx, typingCallKey{}, call), func() {
		once.Do(func() {
			c.mu.Lock()
			calls := slices.DeleteFunc(c.m[chat], func(o *typingCall) bool { return o == call })
			if len(calls) == 0 {
				delete(c.m, chat)
			} else {
				c.m[chat] = calls
			}
			c.mu.Unlock()
			close(call.done)
			cancel()
		})
	}
}

// added reports whether ctx was made for a typing call by add.
func added(ctx context.Context) bool {
	_, ok := ctx.Value(typingCallKey{}).(*typingCall)
	return ok
}

// hold waits until the typing calls to chat in flight now have
// returned, for bound at most: past it, it cancels those still going
// (a hung platform call must not hold the chat's answer) and returns
// without waiting for them to return; a call cut so waits for no later
// message. It returns ctx's error if ctx ends first. Without a typing
// call in flight it costs a map lookup.
func (c *typingCalls) hold(ctx context.Context, name, chat string, bound time.Duration) error {
	c.mu.Lock()
	var calls []*typingCall
	for _, call := range c.m[chat] {
		if !call.cut.Load() {
			calls = append(calls, call)
		}
	}
	c.mu.Unlock()
	if len(calls) == 0 {
		return nil
	}
	typingHolds.WithLabelValues(name).Inc()
	defer typingHolds.WithLabelValues(name).Dec()
	t := time.NewTimer(bound)
	defer t.Stop()
	for i, call := range calls {
		select {
		case <-call.done:
		case <-t.C:
			for _, rest := range calls[i:] {
				select {
				case <-rest.done:
				default:
					if rest.cut.CompareAndSwap(false, true) {
						rest.cancel()
						typingCutTotal.WithLabelValues(name).Inc()
					}
				}
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("wait for the chat's typing call: %w", ctx.Err())
		}
	}
	return nil
}
