package llm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// RetryPolicy bounds WithRetry. Zero fields take the defaults noted.
type RetryPolicy struct {
	MaxAttempts int           // total attempts including the first, default 4
	BaseDelay   time.Duration // first backoff, default 500ms, doubled per attempt
	MaxDelay    time.Duration // backoff cap, default 30s
	// MaxRetryAfter is the longest server-requested wait honoured; a longer
	// Retry-After returns the error at once. Default 2m.
	MaxRetryAfter time.Duration
	// CallTimeout bounds one attempt, streamed or not, default 10m (the
	// official SDKs' default). A provider that stalls, even one that
	// keeps its connection open, then ends the call with an error that
	// wraps context.DeadlineExceeded; it is not retried.
	CallTimeout time.Duration
	// StreamIdleTimeout bounds the wait for the next chunk of a streamed
	// call, the first one included: a provider that opens a stream and
	// then sends nothing (keep-alive pings and SSE comments do not count)
	// for that long has the attempt ended with a retryable Server error
	// wrapping ErrStreamIdle, instead of holding the turn until
	// CallTimeout. Like any retryable error it is retried only when no text
	// or reasoning was delivered yet (else ErrInterrupted). Time spent in the
	// caller's delta callback does not count. 0 turns it off.
	// As Hermes's stale-stream detector (HERMES_STREAM_STALE_TIMEOUT,
	// 180 s); unlike it, the value is not raised for large prompts nor
	// turned off for local endpoints: set it as the slowest model needs.
	StreamIdleTimeout time.Duration
	// Sleep waits d or until ctx ends; default a timer. Tests inject a fake.
	Sleep func(ctx context.Context, d time.Duration) error
	// Jitter returns a number in [0,1); default math/rand/v2.
	Jitter func() float64
	Log    *slog.Logger // default slog.Default()
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 4
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = 500 * time.Millisecond
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = 2 * time.Minute
	}
	if p.CallTimeout <= 0 {
		p.CallTimeout = 10 * time.Minute
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
	if p.Jitter == nil {
		p.Jitter = rand.Float64
	}
	if p.Log == nil {
		p.Log = slog.Default()
	}
	return p
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Backoff returns the wait before retry number attempt (1-based): the
// server's Retry-After when given, else exponential backoff with jitter in
// [d/2, d).
func (p RetryPolicy) Backoff(attempt int, retryAfter time.Duration) time.Duration {
	p = p.withDefaults()
	if retryAfter > 0 {
		return retryAfter
	}
	d := p.BaseDelay
	for i := 1; i < attempt && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	return d/2 + time.Duration(p.Jitter()*float64(d/2))
}

type retrying struct {
	p      Provider
	policy RetryPolicy
}

// WithRetry wraps p so that RateLimited and Server errors are retried with
// backoff, honouring Retry-After, for at most policy.MaxAttempts attempts and
// while ctx lasts; each attempt is bounded by policy.CallTimeout. A call
// that already delivered text or reasoning is not retried: its error is
// returned wrapped with ErrInterrupted. The start of a tool call is no
// output (nobody has read anything of the answer yet): a call that failed
// after one is retried, and the retry announces its tool calls again.
func WithRetry(p Provider, policy RetryPolicy) Provider {
	return &retrying{p: p, policy: policy.withDefaults()}
}

func (r *retrying) Stream(ctx context.Context, req Request, fn func(Delta) error) (*Response, error) {
	emitted := false
	var wrapped func(Delta) error
	if fn != nil {
		wrapped = func(d Delta) error {
			if d.Text != "" || d.Reasoning != "" {
				emitted = true
			}
			return fn(d)
		}
	}
	for attempt := 1; ; attempt++ {
		resp, err := r.attempt(ctx, req, wrapped)
		if err == nil {
			return resp, nil
		}
		var e *Error
		if !errors.As(err, &e) || !e.Retryable() {
			return nil, err
		}
		if emitted {
			return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		if attempt >= r.policy.MaxAttempts {
			return nil, fmt.Errorf("after %d attempts: %w", attempt, err)
		}
		if e.RetryAfter > r.policy.MaxRetryAfter {
			return nil, fmt.Errorf("retry-after %s exceeds limit: %w", e.RetryAfter, err)
		}
		wait := r.policy.Backoff(attempt, e.RetryAfter)
		r.policy.Log.LogAttrs(ctx, slog.LevelWarn, "llm call failed, retrying",
			slog.String("class", string(e.Class)), slog.Int("status", e.Status),
			slog.Int("attempt", attempt), slog.Duration("wait", wait))
		if err := r.policy.Sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("wait to retry llm call: %w", err)
		}
	}
}

// errCallTimeout is the cause of an attempt's context that ran out.
var errCallTimeout = errors.New("llm call timed out")

// ErrStreamIdle is wrapped by the Server error of a streamed attempt that
// went StreamIdleTimeout without a chunk.
var ErrStreamIdle = errors.New("llm stream idle")

// attempt is one call, bounded by the policy's CallTimeout and, streamed,
// by its StreamIdleTimeout between chunks.
func (r *retrying) attempt(ctx context.Context, req Request, fn func(Delta) error) (*Response, error) {
	actx, cancel := context.WithTimeoutCause(ctx, r.policy.CallTimeout, errCallTimeout)
	defer cancel()
	if idle := r.policy.StreamIdleTimeout; fn != nil && idle > 0 {
		var w *idleWatch
		actx, w = watchIdle(actx, idle)
		defer w.stop()
		fn = w.callback(fn)
	}
	resp, err := r.p.Stream(actx, req, fn)
	if err != nil && ctx.Err() == nil {
		switch context.Cause(actx) {
		case errCallTimeout:
			return nil, fmt.Errorf("no answer within %s: %w", r.policy.CallTimeout, context.DeadlineExceeded)
		case ErrStreamIdle:
			return nil, &Error{Class: Server, Message: fmt.Sprintf("no data from the stream for %s", r.policy.StreamIdleTimeout), Err: ErrStreamIdle}
		}
	}
	return resp, err
}

// idleWatch cancels a streamed call's context with ErrStreamIdle when no
// chunk arrived for its timeout. Providers report each chunk they read
// with chunkRead(ctx); the SDKs' stream readers skip keep-alive pings and
// SSE comments, so those never count as progress (the point of Hermes's
// stale-stream detector: a socket read timeout is defeated by pings).
type idleWatch struct {
	d time.Duration
	t *time.Timer
}

type idleKey struct{}

func watchIdle(ctx context.Context, d time.Duration) (context.Context, *idleWatch) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &idleWatch{d: d}
	w.t = time.AfterFunc(d, func() { cancel(ErrStreamIdle) })
	context.AfterFunc(ctx, func() { w.t.Stop() })
	return context.WithValue(ctx, idleKey{}, w), w
}

func (w *idleWatch) touch() { w.t.Reset(w.d) }
func (w *idleWatch) stop()  { w.t.Stop() }

// callback wraps the caller's delta callback: the watch is paused while
// it runs (a slow consumer of deltas is not a stalled provider) and
// restarted when it returns.
func (w *idleWatch) callback(fn func(Delta) error) func(Delta) error {
	return func(d Delta) error {
		w.t.Stop()
		err := fn(d)
		w.t.Reset(w.d)
		return err
	}
}

// chunkRead tells the idle watch of ctx's call, if any, that the provider
// sent a chunk.
func chunkRead(ctx context.Context) {
	if w, ok := ctx.Value(idleKey{}).(*idleWatch); ok {
		w.touch()
	}
}
