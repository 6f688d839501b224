package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// DownloadTries is how many times Download asks for a file answered 429
// or 5xx: three attempts, as Hermes's media downloads (cache_image_from_url
// and cache_audio_from_url, two retries; Slack's _download_slack_file).
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
// status that ends the download is a *StatusError. The client's own
// errors (a refused connection, ctx's end) are returned as they are,
// so a caller whose URL holds a secret can take it out.
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
	for try := 1; ; try++ {
		req, err := newReq(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, refusalBytes))
		drain(resp)
		var (
			status error
			retry  bool
		)
		if refused != nil {
			retry, status = refused(resp, body)
		} else {
			status, retry = &StatusError{Code: resp.StatusCode, Status: resp.Status}, downloadRetried(resp.StatusCode)
		}
		wait := downloadWait(resp.Header, try, time.Now())
		if we, ok := status.(*WaitError); ok {
			status, wait = we.Err, we.Wait
		}
		if !retry || try == DownloadTries {
			return nil, status
		}
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			// The fetch's bound ends before the wait: fail now, with
			// the platform's answer, rather than at the bound.
			var se *StatusError
			if errors.As(status, &se) {
				se.Wait = wait
				return nil, status
			}
			return nil, fmt.Errorf("%w, asked to wait %s", status, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %w", status, ctx.Err())
		case <-t.C:
		}
	}
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
	return time.Duration(try) * 1500 * time.Millisecond
}

// drain reads what is left of a refused answer (up to 4 KiB, so the
// connection can be reused) and closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
}
