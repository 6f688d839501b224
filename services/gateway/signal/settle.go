package signal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/panics"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// signal-cli's send takes no idempotency key and no timestamp of ours:
// the daemon picks the message's timestamp (its id) when it sends, and
// keeps no list of sent messages to look one up by. It also goes on
// sending when its HTTP client gives up. So a send whose caller stopped
// waiting (the Runner's send timeout, 30 s by default) may still reach
// the user, and a blind retry would send it twice.
//
// The gateway therefore does not give up on the daemon when its caller
// does: the call goes on in the background (up to maxSendWait) and its
// outcome is kept as a mark beside the send's receipt, seen by every
// replica. The retry reads the marks first: an earlier attempt that went
// through answers its message id (nothing is sent again); one still at
// the daemon makes the retry wait (a retryable error with the time left);
// only an attempt that failed, or whose outcome cannot be known, is sent
// again. What is left is the daemon or the connection dying after the
// request was written, or the replica holding the call dying (its retry
// then waits out the call's bound, 5 minutes): the message may or may
// not have gone, and it is sent again; the user may then get it twice. Sends without an idempotency key keep no marks
// and are not retried safely. Hermes keeps no record of an attempt whose
// answer it did not get (it knows only the timestamps signal-cli
// answered, to filter echoes).

const (
	// markTry + n: the caller of attempt n left before the daemon
	// answered; its value is "<nonce> <until, Unix ms>": the call runs
	// until then at most. A send answered in time writes no marks.
	markTry = "signal-try-"
	// markDone + n: attempt n's outcome: "sent <timestamp>", "failed"
	// (the daemon answered an error: nothing went out) or "unsure"
	// (no answer came).
	markDone = "signal-done-"
	// maxTries bounds the attempts a send keeps marks for; later ones
	// post without.
	maxTries = 16
	// maxSendWait bounds a send call that goes on after its caller gave
	// up (signal-cli's own network timeouts end it well before).
	maxSendWait = 5 * time.Minute
)

// sendOutcome is a finished send call.
type sendOutcome struct {
	res sendResult
	err error
}

// mark is the outcome as markDone keeps it.
func (o sendOutcome) mark() string {
	switch {
	case o.err == nil && delivered(&o.res) && o.res.Timestamp > 0:
		return "sent " + strconv.FormatInt(o.res.Timestamp, 10)
	case o.err == nil:
		return "failed" // an answer naming no recipient reached
	}
	var re *rpcError
	var he *httpError
	if errors.As(o.err, &re) || errors.As(o.err, &he) {
		return "failed"
	}
	return "unsure"
}

// earlier reads what the send's earlier attempts did: the message id of
// one that went through, or how long one still at the daemon may run;
// next is the slot this attempt claims (maxTries: none).
func (p *Platform) earlier(ctx context.Context, now time.Time) (id string, wait time.Duration, next int) {
	for n := range maxTries {
		try, ok := platform.SendMarked(ctx, markTry+strconv.Itoa(n))
		if !ok {
			return "", 0, n
		}
		done, ok := platform.SendMarked(ctx, markDone+strconv.Itoa(n))
		if ts, found := strings.CutPrefix(done, "sent "); ok && found {
			if t, err := strconv.ParseInt(ts, 10, 64); err == nil && t > 0 {
				return messageID(p.cfg.Account, t), 0, n
			}
		}
		if ok {
			continue // failed or unsure: post again
		}
		_, until, _ := strings.Cut(try, " ")
		if ms, err := strconv.ParseInt(until, 10, 64); err == nil {
			if left := time.UnixMilli(ms).Sub(now); left > 0 {
				return "", left, n
			}
		}
		// Past its bound without an outcome: the replica that held the
		// call stopped. Unknown; post again.
	}
	return "", 0, maxTries
}

// post makes the send call. An earlier attempt's outcome (marks of a
// send with an idempotency key) is taken first; the call outlives its
// caller, whose leaving is marked: see above.
func (p *Platform) post(ctx context.Context, params map[string]any) (string, error) {
	now := time.Now()
	id, wait, n := p.earlier(ctx, now)
	switch {
	case id != "":
		p.log.Info("signal: an earlier attempt of this message went through; not sent again", "message_id", pseudonym.Personal(id))
		return id, nil
	case wait > 0:
		return "", &platform.SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, RetryAfter: min(wait, 30*time.Second),
			Err: errors.New("signal-cli is still sending an earlier attempt of this message")}
	}
	// The call outlives its caller. Marks are written only when the
	// caller leaves first (so a send answered in time costs one read):
	// the try mark before the caller returns, the outcome once the daemon
	// answers.
	var (
		mu     sync.Mutex
		left   bool // the caller returned without the outcome
		slot   = -1 // the try mark written, when left
		done   = make(chan sendOutcome, 1)
		detach = context.WithoutCancel(ctx)
	)
	go func() {
		cctx, cancel := context.WithTimeout(detach, maxSendWait)
		defer cancel()
		var o sendOutcome
		// This goroutine is the send's own: a panic here would end the
		// process. It fails the send instead (logged, counted).
		o.err = panics.Recover(p.log, "gateway_send", func() error {
			return p.client.callWith(cctx, p.client.stream, "send", params, &o.res)
		}, "platform", "signal")
		p.record(detach, o)
		mu.Lock()
		defer mu.Unlock()
		if left {
			if slot >= 0 {
				mctx, mcancel := context.WithTimeout(detach, 10*time.Second)
				platform.SendMark(mctx, markDone+strconv.Itoa(slot), o.mark())
				mcancel()
			}
			if o.mark() != "failed" {
				p.log.Info("signal: a send answered after its caller left", "outcome", o.mark(), "kept", slot >= 0)
			}
			return
		}
		done <- o
	}()
	select {
	case o := <-done:
		return p.result(o)
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case o := <-done:
		return p.result(o) // answered while the caller was leaving
	default:
	}
	left = true
	mctx, mcancel := context.WithTimeout(detach, 10*time.Second)
	defer mcancel()
	v := hex.EncodeToString(nonce()) + " " + strconv.FormatInt(now.Add(maxSendWait).UnixMilli(), 10)
	for m := n; m < maxTries; m++ {
		kept, ok := platform.SendMark(mctx, markTry+strconv.Itoa(m), v)
		if !ok {
			break // no marks: a send without an idempotency key
		}
		if kept == v {
			slot = m
			break
		}
	}
	return "", fmt.Errorf("signal-cli send: no answer yet (it goes on, and a retry takes its outcome): %w", ctx.Err())
}

// nonce tells one attempt's try mark from another's.
func nonce() []byte {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return b
}

// result turns a send call's outcome into the message id or the error.
func (p *Platform) result(o sendOutcome) (string, error) {
	if o.err != nil {
		return "", classify(o.err)
	}
	if !delivered(&o.res) {
		return "", resultError("send", &o.res)
	}
	if o.res.Timestamp <= 0 {
		return "", errors.New("signal-cli send: answer without a timestamp")
	}
	return messageID(p.cfg.Account, o.res.Timestamp), nil
}

// record notes a message that went out as the bot's: a sync copy of it
// (Note to Self) is not the user's. Done as soon as the daemon answers,
// whether or not the caller still waits.
func (p *Platform) record(ctx context.Context, o sendOutcome) {
	if p.sent == nil || o.err != nil || !delivered(&o.res) || o.res.Timestamp <= 0 {
		return
	}
	if err := p.sent(context.WithoutCancel(ctx), messageID(p.cfg.Account, o.res.Timestamp)); err != nil {
		p.log.Warn("signal: recording a sent message failed", "err", err)
	}
}
