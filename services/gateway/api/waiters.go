package api

import (
	"sync"
	"sync/atomic"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// piece is one reply operation for a waiting HTTP request.
type piece struct {
	delta string // SEND_OP_STREAM_DELTA text
	// restart: the delta is the break before a later model call's text
	// (SendRequested.stream_restart); the answer continues what streams
	// after it.
	restart bool
	text    string // SEND_OP_SEND text (a chunk of the final answer)
	// media links to the media a send carried (mediaLinks); the answer
	// shows them after its text.
	media string
	final bool
	// errorCode is set on the text explaining a failed turn
	// (SendRequested.error_code): the request is answered with an error.
	errorCode string
	// hops are the hand-on times of the turn's final reply (on the final
	// piece), for the Server-Timing header.
	hops *deliveryv1.HopTimes
	// usage is the turn's model tokens (on the final piece).
	usage *deliveryv1.TokenUsage
	// at is the turn that answered and where it ran (on the final piece).
	at answerPoint
	// tool is a step of one of the turn's tool calls
	// (SEND_OP_TOOL_PROGRESS), which a stream shows as it comes.
	tool *deliveryv1.ToolStep
	// alive says the turn is producing (a keyed request's retry, which
	// shows none of the deltas it missed the start of): it holds off the
	// stream's silence bound and shows nothing.
	alive bool
}

// answerPoint is where an answer's exchange ends in the transcript: the
// turn that answered and the session key it ran under, as the final
// send names them; what a Responses request continuing that answer from
// an earlier point than its conversation's latest branches off from.
type answerPoint struct {
	turn, sessionKey string
}

// reply is a waiting request's whole reply.
type reply struct {
	text string
	// errorCode is set when the text explains a failed turn.
	errorCode string
	hops      *deliveryv1.HopTimes
	usage     *deliveryv1.TokenUsage
	at        answerPoint
}

// waiter collects the reply pieces of one waiting request.
type waiter struct {
	mu     sync.Mutex
	pieces []piece
	notify chan struct{}
	// answered is set when the final piece arrived.
	answered atomic.Bool
}

func newWaiter() *waiter { return &waiter{notify: make(chan struct{}, 1)} }

func (w *waiter) push(p piece) {
	if p.final {
		w.answered.Store(true)
	}
	w.mu.Lock()
	w.pieces = append(w.pieces, p)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// take returns the pieces that arrived since the last take.
func (w *waiter) take() []piece {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pieces
	w.pieces = nil
	return p
}

// waiters maps request (input message) ids to the requests waiting on them.
type waiters struct {
	mu sync.Mutex
	m  map[string][]*waiter
}

func (ws *waiters) add(id string, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.m == nil {
		ws.m = map[string][]*waiter{}
	}
	ws.m[id] = append(ws.m[id], w)
}

func (ws *waiters) remove(id string, w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	list := ws.m[id]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(ws.m, id)
	} else {
		ws.m[id] = list
	}
}

// deliver hands p to every request waiting on any of ids and reports
// whether one was waiting.
func (ws *waiters) deliver(ids []string, p piece) bool {
	ws.mu.Lock()
	var found []*waiter
	for _, id := range ids {
		found = append(found, ws.m[id]...)
	}
	ws.mu.Unlock()
	for _, w := range found {
		w.push(p)
	}
	return len(found) > 0
}
