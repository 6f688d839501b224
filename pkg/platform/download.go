package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// DownloadTries is how many times Download asks for a file answered 429
// or 5xx, or lost to the transport: three attempts, as Hermes's media
// downloads (cache_image_from_url and cache_audio_from_url, two retries;
// Slack's _download_slack_file).
const DownloadTries = 3

// StatusError is a download's last answer when it was not 200: its
// status after any retries, and, when the platform asked for a wait the
// download's ctx would not have lasted, that wait.
type StatusError struct {
	Code   int    // 404, 429, 503 …
	Status string // "503 Service Unavailable"
	// Wait is the wait the platform asked for before another attempt,
	// when it was longer than ctx had left (Download did not wait);
	// 0 otherwise.
	Wait time.Duration
}

func (e *StatusError) Error() string {
	if e.Wait > 0 {
		return fmt.Sprintf("download: %s, asked to wait %s", e.Status, e.Wait)
	}
	return "download: " + e.Status
}

// Download gets a platform's file: it sends the request newReq builds
// (within ctx) with hc (nil: http.DefaultClient) and returns the answer
// when it is 200, its body for the caller to read and close. A 429 (a
// rate limit) or a 5xx is asked again, a new request from newReq, after
// the answer's Retry-After (seconds or a date), else 1.5 s then 3 s,
// DownloadTries attempts in all, as Hermes retries media downloads;
// before, the first such answer lost the file to the turn. Any other
// status is final at once (a 404, a 403). A wait that would outlast
// ctx's deadline is not waited: the download fails at once with the
// answer. Every answer but the one returned is drained and closed; a
// status that ends the download is a *StatusError.
//
// A transport failure is asked again the same way, after 1.5 s then
// 3 s, within the same attempts, as Hermes retries an httpx timeout
// (its read timeout covers the body, which it reads in the try): an
// attempt that received nothing for its stall bound (DownloadStall),
// the client's own timeout, a connection reset or closed before the
// answer, and a body that broke off while the caller read it (a reset,
// an unexpected EOF, a stall). A broken body is asked for again whole,
// and the bytes the caller has are skipped, so that its reads go on as
// if nothing broke; a file that is not the same any more (ErrChanged)
// ends them. Nothing is asked again once ctx is done, nor when the wait
// would outlast its deadline. After the last attempt the download fails
// with its error, saying how many were made. The client's other errors
// (a refused connection, a certificate, an address egress refuses, ctx's
// end) are returned at once. No error names the URL but for its host
// (hideURL): it may hold a secret (a bot token, a signature), which a
// caller could not take out of an error wrapped for the attempts made,
// nor of one a read of the body returns.
func Download(ctx context.Context, hc *http.Client, newReq func(context.Context) (*http.Request, error)) (*http.Response, error) {
	return DownloadReading(ctx, hc, newReq, nil)
}

// A Refusal reads a download's answer other than 200, given the start of
// its body (up to 16 KiB): whether it is asked again, and the error
// that ends the download with it when it is not (or is the last), for a platform whose answers say
// more than their status (Meta's Graph API names a rate limit by a code
// in an answer of 400).
type Refusal func(resp *http.Response, body []byte) (retry bool, err error)

// A WaitError is a Refusal's error for an answer whose body names the
// wait before another attempt (Matrix's retry_after_ms, which a
// homeserver before Matrix 1.10 sends without a Retry-After):
// DownloadReading waits Wait in place of the answer's Retry-After or
// its default (within ctx, as any wait), and ends a download it
// refuses with Err.
type WaitError struct {
	Err  error
	Wait time.Duration
}

func (e *WaitError) Error() string { return e.Err.Error() }

func (e *WaitError) Unwrap() error { return e.Err }

// DownloadReading is Download with refused reading each answer other
// than 200 (nil: Download's rule, a *StatusError asked again when 429 or
// 5xx). The waits and attempts are Download's, but for the wait a
// refusal names (its error a *WaitError); a wait that would outlast ctx
// ends the download with the refusal's error, wrapped with the wait
// asked.
func DownloadReading(ctx context.Context, hc *http.Client, newReq func(context.Context) (*http.Request, error), refused Refusal) (*http.Response, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	d := &downloading{ctx: ctx, hc: hc, newReq: newReq, refused: refused}
	resp, a, err := d.open()
	if err != nil {
		return nil, err
	}
	resp.Body = &downloadBody{d: d, first: resp, a: a, body: resp.Body}
	return resp, nil
}

// DownloadStall bounds how long one attempt of a download may receive
// nothing, neither its answer nor the next bytes of its body: past it
// the attempt is given up and the download asked again (ErrStalled), as
// Hermes's httpx timeout of 30 s bounds each wait on the network. An
// attempt's bound is at most its share of what is left of ctx (what is
// left, divided by the attempts left), so a stalled attempt leaves the
// others time within the fetch's bound. Only the download's own reads
// count: a caller slow to read is not a stall.
const DownloadStall = 30 * time.Second

// ErrStalled is an attempt of a download that received nothing for its
// stall bound (DownloadStall).
var ErrStalled = errors.New("download stalled")

// ErrChanged ends a download whose body broke off and was asked for
// again, when the second answer is not the file the caller was reading:
// another length, ETag or Last-Modified, or fewer bytes than it read.
var ErrChanged = errors.New("download: the file changed between attempts")

// DownloadBackoff is the wait before attempt try+1 of a download that
// names none: Hermes's 1.5 s times the attempts made.
func DownloadBackoff(try int) time.Duration {
	return time.Duration(try) * 1500 * time.Millisecond
}

// downloading is one Download's state: its attempts made, of DownloadTries.
type downloading struct {
	ctx     context.Context
	hc      *http.Client
	newReq  func(context.Context) (*http.Request, error)
	refused Refusal
	tries   int
}

// attempt is one request of a download, in its own context, which its
// stall timer cancels (ErrStalled) when it runs out: while the request
// waits for its answer, and during each read of its body.
type attempt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	limit  time.Duration
	stall  *time.Timer
}

// start begins the next attempt, its stall timer running.
func (d *downloading) start() *attempt {
	d.tries++
	limit := DownloadStall
	if end, ok := d.ctx.Deadline(); ok {
		limit = min(limit, time.Until(end)/time.Duration(max(DownloadTries-d.tries+1, 1)))
	}
	ctx, cancel := context.WithCancelCause(d.ctx)
	return &attempt{ctx: ctx, cancel: cancel, limit: limit, stall: time.AfterFunc(limit, func() { cancel(ErrStalled) })}
}

// read reads r, a's body, within a's stall bound.
func (a *attempt) read(r io.Reader, p []byte) (int, error) {
	a.stall.Reset(a.limit)
	n, err := r.Read(p)
	a.stall.Stop()
	return n, err
}

// end ends a: its timer, and its request if still open.
func (a *attempt) end() {
	a.stall.Stop()
	a.cancel(nil)
}

// attemptReader reads an attempt's body within its stall bound.
type attemptReader struct {
	a *attempt
	r io.Reader
}

func (r attemptReader) Read(p []byte) (int, error) { return r.a.read(r.r, p) }

// open makes attempts until one is answered 200, which it returns with
// its attempt (the body unread), or the download ends.
func (d *downloading) open() (*http.Response, *attempt, error) {
	for {
		a := d.start()
		req, err := d.newReq(a.ctx)
		if err != nil {
			a.end()
			return nil, nil, err
		}
		resp, err := d.hc.Do(req)
		if err != nil {
			err = hideURL(err)
			a.end()
			failure, retry := d.broken(a, err, false)
			if !retry {
				return nil, nil, failure
			}
			if err := d.again(failure, DownloadBackoff(d.tries), true); err != nil {
				return nil, nil, err
			}
			continue
		}
		if resp.StatusCode == http.StatusOK {
			a.stall.Stop()
			return resp, a, nil
		}
		// A refusal's body is read within the stall bound too.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, refusalBytes))
		drain(resp)
		a.end()
		var (
			status error
			retry  bool
		)
		if d.refused != nil {
			retry, status = d.refused(resp, body)
		} else {
			status, retry = &StatusError{Code: resp.StatusCode, Status: resp.Status}, downloadRetried(resp.StatusCode)
		}
		wait := downloadWait(resp.Header, d.tries, time.Now())
		if we, ok := status.(*WaitError); ok {
			status, wait = we.Err, we.Wait
		}
		if !retry {
			return nil, nil, status
		}
		if err := d.again(status, wait, false); err != nil {
			return nil, nil, err
		}
	}
}

// broken reads err, the client's error in attempt a (its request, or a
// read of its body when inBody), as the failure that ends the attempt,
// and reports whether another attempt may follow: never once ctx is
// done; after a stall, a timeout, a connection reset or closed, and any
// failure of a body under way (the answer came, so the server and the
// way to it are right). Other errors (a refused connection, a
// certificate, egress's refusal, a bad URL) are final.
func (d *downloading) broken(a *attempt, err error, inBody bool) (error, bool) {
	switch {
	case d.ctx.Err() != nil:
		return err, false
	case errors.Is(context.Cause(a.ctx), ErrStalled):
		// The error the client returned is the attempt's cancellation,
		// context.Canceled, which would read as ctx's end.
		return fmt.Errorf("%w: nothing received in %s", ErrStalled, a.limit.Round(time.Millisecond)), true
	case inBody || transient(err):
		return err, true
	}
	return err, false
}

// transient reports whether err, the client's error for a request, is
// one another attempt may not meet: a timeout (the client's, a dial's, a
// TLS handshake's), a connection reset or aborted, or closed before its
// answer.
func transient(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// again waits wait before the next attempt after failure (a transport
// failure when transport, else the answer's refusal), or returns the
// error that ends the download: the last attempt's, saying so when it
// was the transport's; one whose wait would outlast ctx's deadline at
// once; ctx's end during the wait.
func (d *downloading) again(failure error, wait time.Duration, transport bool) error {
	switch {
	case d.tries >= DownloadTries && transport:
		return fmt.Errorf("download: %d attempts failed, the last: %w", d.tries, failure)
	case d.tries >= DownloadTries:
		return failure
	case transport && !lasts(d.ctx, wait):
		return fmt.Errorf("download: attempt %d failed, and the fetch's bound ends before another: %w", d.tries, failure)
	}
	return pause(d.ctx, failure, wait)
}

// lasts reports whether ctx has no deadline within wait.
func lasts(ctx context.Context, wait time.Duration) bool {
	end, ok := ctx.Deadline()
	return !ok || time.Until(end) >= wait
}

// pause waits wait before another attempt after failure, or returns the
// error that ends the attempts: failure with the wait asked when ctx's
// deadline comes first (failed now, rather than at the bound), with
// ctx's error when ctx ends during it.
func pause(ctx context.Context, failure error, wait time.Duration) error {
	if !lasts(ctx, wait) {
		var se *StatusError
		if errors.As(failure, &se) {
			se.Wait = wait
			return failure
		}
		return fmt.Errorf("%w, asked to wait %s", failure, wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", failure, ctx.Err())
	case <-t.C:
		return nil
	}
}

// Retried calls call within ctx as Download makes its attempts: again
// reads the error of its try-th call (from 1), whether it is called
// again and after what wait (the platform's, else DownloadBackoff);
// DownloadTries calls at most, none once ctx is done, and a wait that
// would outlast ctx's deadline fails at once, with the wait asked. For
// a platform's call that comes before its download (Telegram's getFile).
func Retried[T any](ctx context.Context, call func(context.Context) (T, error), again func(err error, try int) (wait time.Duration, retry bool)) (T, error) {
	for try := 1; ; try++ {
		v, err := call(ctx)
		if err == nil {
			return v, nil
		}
		wait, retry := again(err, try)
		if !retry || try >= DownloadTries || ctx.Err() != nil {
			return v, err
		}
		if err := pause(ctx, err, wait); err != nil {
			return v, err
		}
	}
}

// downloadBody is the body Download returns: the first answer's, or,
// after it broke off, a later attempt's, read on from where the first
// broke.
type downloadBody struct {
	d     *downloading
	first *http.Response // the answer the caller has
	n     int64          // bytes the caller read
	err   error          // what ended the download: every read returns it

	mu     sync.Mutex // body, a and closed: Close may come from another goroutine
	a      *attempt
	body   io.ReadCloser
	closed bool
}

func (b *downloadBody) Read(p []byte) (int, error) {
	for {
		if b.err != nil {
			return 0, b.err
		}
		b.mu.Lock()
		a, body, closed := b.a, b.body, b.closed
		b.mu.Unlock()
		if closed {
			return 0, http.ErrBodyReadAfterClose
		}
		n, err := a.read(body, p)
		b.n += int64(n)
		if err == nil || err == io.EOF {
			return n, err
		}
		b.err = b.resume(a, body, err)
		if n > 0 {
			return n, nil // the error, if any, comes with the next read
		}
	}
}

// resume asks for the file again after its body, read in attempt a,
// broke off with cause: the whole of it (no range, which a server may
// not serve), its first b.n bytes, the ones the caller read already,
// read past. It returns the error that ends the download, nil when the
// caller reads on.
func (b *downloadBody) resume(a *attempt, body io.Closer, cause error) error {
	_ = body.Close()
	a.end()
	failure, retry := b.d.broken(a, cause, true)
	for {
		if !retry || b.isClosed() {
			return failure
		}
		if err := b.d.again(failure, DownloadBackoff(b.d.tries), true); err != nil {
			return err
		}
		resp, next, err := b.d.open()
		if err != nil {
			return err
		}
		if err := sameFile(b.first, resp); err != nil {
			drain(resp)
			next.end()
			return err
		}
		skipped, err := io.CopyN(io.Discard, attemptReader{next, resp.Body}, b.n)
		if err == nil {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.closed {
				_ = resp.Body.Close()
				next.end()
				return http.ErrBodyReadAfterClose
			}
			b.a, b.body = next, resp.Body
			return nil
		}
		_ = resp.Body.Close()
		next.end()
		if err == io.EOF {
			return fmt.Errorf("%w: %d bytes, fewer than the %d read before", ErrChanged, skipped, b.n)
		}
		failure, retry = b.d.broken(next, err, true)
	}
}

func (b *downloadBody) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

func (b *downloadBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.body.Close()
	b.a.end()
	return err
}

// hideURL takes the request's URL out of err, the client's error (a
// *url.Error, which names it), leaving its host, before any error wraps
// it: the URL may hold a secret (a bot token, a signature).
func hideURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		host := ""
		if u, perr := url.Parse(ue.URL); perr == nil {
			host = u.Host
		}
		ue.URL = host
	}
	return err
}

// sameFile reports, as ErrChanged, a later answer that is not the file
// the first began: another length, ETag or Last-Modified, where both
// name one.
func sameFile(first, later *http.Response) error {
	if first.ContentLength >= 0 && later.ContentLength >= 0 && first.ContentLength != later.ContentLength {
		return fmt.Errorf("%w: %d bytes, then %d", ErrChanged, first.ContentLength, later.ContentLength)
	}
	for _, h := range []string{"ETag", "Last-Modified"} {
		if was, is := first.Header.Get(h), later.Header.Get(h); was != "" && is != "" && was != is {
			return fmt.Errorf("%w: %s %s, then %s", ErrChanged, h, was, is)
		}
	}
	return nil
}

// refusalBytes is how much of a refused answer's body a Refusal reads.
const refusalBytes = 16 << 10

// downloadRetried: a download answered with status is tried again (a
// rate limit or a server error); a 404, a 403 or the like is final.
func downloadRetried(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// downloadWait is the wait before attempt try+1 of a download answered
// with h: its Retry-After (seconds or a date), else Hermes's 1.5 s times
// the attempts made.
func downloadWait(h http.Header, try int, now time.Time) time.Duration {
	if d, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		return d
	}
	return DownloadBackoff(try)
}

// drain reads what is left of a refused answer (up to 4 KiB, so the
// connection can be reused) and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
}
