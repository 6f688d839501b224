package matrix

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// A received file is downloaded from the media repository with the
// bot's token. A 429 (M_LIMIT_EXCEEDED) or a 5xx is asked again, as
// Hermes's media downloads: before, mautrix's client, its retries off,
// lost the file to the turn. A 429 is asked again after the wait it
// names, in the body's retry_after_ms when it has no Retry-After (a
// homeserver before Matrix 1.10): before, after 1.5 s whatever it named,
// and a wait beyond the fetch's bound was not seen as one. With both,
// the header's wait is waited (Matrix 1.10 deprecates the body's): before,
// the body's. A 404 or a 403 is final.
func TestFetch(t *testing.T) {
	t.Parallel()
	f := matrixfake.New(bot, token)
	t.Cleanup(f.Close)
	p, err := NewPlatform(testConfig(f), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("\x89PNG\r\n\x1a\n-cat")
	mxc := f.Upload(data, "image/png")
	for _, tc := range []struct {
		name  string
		mxc   string
		fails []matrixfake.Fail
		// downloads is how many download requests the fetch makes;
		// status is the answer it fails with (0: the file), wait its
		// StatusError's Wait; the fetch takes minTime to maxTime (0:
		// any).
		downloads        int
		status           int
		wait             time.Duration
		minTime, maxTime time.Duration
	}{
		{name: "file", mxc: mxc, downloads: 1},
		{name: "rate limited", mxc: mxc, downloads: 2, minTime: time.Second,
			fails: []matrixfake.Fail{{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 1000}}},
		{name: "rate limited, the wait in the body alone", mxc: mxc, downloads: 2, minTime: 200 * time.Millisecond, maxTime: 1400 * time.Millisecond,
			fails: []matrixfake.Fail{{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 200, BodyOnly: true}}},
		{name: "a body's wait beyond the bound", mxc: mxc, downloads: 1, status: http.StatusTooManyRequests, wait: 2 * time.Minute, maxTime: time.Second,
			fails: []matrixfake.Fail{{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 120_000, BodyOnly: true}}},
		{name: "rate limited, the header's wait before the body's", mxc: mxc, downloads: 2, minTime: time.Second, maxTime: 2 * time.Second,
			fails: []matrixfake.Fail{{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED", RetryAfterMS: 120_000, RetryAfter: "1"}}},
		{name: "502 then the file", mxc: mxc, downloads: 2,
			fails: []matrixfake.Fail{{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"}}},
		{name: "forbidden is final", mxc: mxc, downloads: 1, status: http.StatusForbidden,
			fails: []matrixfake.Fail{{Status: http.StatusForbidden, ErrCode: "M_FORBIDDEN"}}},
		{name: "unknown media", mxc: "mxc://" + matrixfake.Server + "/nope", downloads: 1, status: http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fl := range tc.fails {
				f.FailNext("download", 1, fl)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			before := f.Calls("download")
			start := time.Now()
			rc, mime, err := p.Fetch(ctx, &eventsv1.Attachment{PlatformFileId: tc.mxc})
			took := time.Since(start)
			if n := f.Calls("download") - before; n != tc.downloads {
				t.Errorf("%d download requests, want %d", n, tc.downloads)
			}
			if took < tc.minTime || tc.maxTime > 0 && took > tc.maxTime {
				t.Errorf("the fetch took %s, want %s to %s", took, tc.minTime, tc.maxTime)
			}
			if tc.status != 0 {
				var se *platform.StatusError
				if !errors.As(err, &se) || se.Code != tc.status || se.Wait != tc.wait {
					if err == nil {
						_ = rc.Close()
					}
					t.Fatalf("fetch: %v, want a %d, its wait %s", err, tc.status, tc.wait)
				}
				return
			}
			if err != nil {
				t.Fatalf("fetch: %v, want the file", err)
			}
			defer func() { _ = rc.Close() }()
			got, err := io.ReadAll(rc)
			if err != nil || string(got) != string(data) || mime != "image/png" {
				t.Fatalf("fetched %q of %q (%v), want the %d bytes of image/png", got, mime, err, len(data))
			}
		})
	}
}

// A refused download names the wait before the next attempt in its
// Retry-After, else its body's retry_after_ms, bounded as a send's
// (maxNamedWait) before it becomes a time.Duration; one that names none
// leaves the wait to platform.Download (its default), and an answer that
// is not asked again names none.
func TestDownloadRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		header string // Retry-After ("": none)
		body   string
		retry  bool
		wait   time.Duration // the WaitError's (0: none)
	}{
		{name: "retry_after_ms", status: 429, body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1500}`, retry: true, wait: 1500 * time.Millisecond},
		{name: "retry_after_ms of centuries", status: 429, body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1e13}`, retry: true, wait: maxNamedWait},
		{name: "retry_after_ms beyond int64", status: 429, body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1e20}`, retry: true, wait: maxNamedWait},
		{name: "retry_after_ms negative", status: 429, body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":-5}`, retry: true},
		{name: "no retry_after_ms", status: 429, body: `{"errcode":"M_LIMIT_EXCEEDED"}`, retry: true},
		{name: "not JSON", status: 502, body: `<html>Bad Gateway</html>`, retry: true},
		{name: "503 naming a wait", status: 503, body: `{"errcode":"M_UNKNOWN","retry_after_ms":300}`, retry: true, wait: 300 * time.Millisecond},
		{name: "403 is final", status: 403, body: `{"errcode":"M_FORBIDDEN","retry_after_ms":300}`},
		{name: "Retry-After before retry_after_ms", status: 429, header: "2", body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1500}`, retry: true, wait: 2 * time.Second},
		{name: "Retry-After before a longer retry_after_ms", status: 429, header: "1", body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":120000}`, retry: true, wait: time.Second},
		{name: "Retry-After alone", status: 503, header: "3", body: `<html>Service Unavailable</html>`, retry: true, wait: 3 * time.Second},
		{name: "Retry-After of 0 names none", status: 429, header: "0", body: `{"errcode":"M_LIMIT_EXCEEDED","retry_after_ms":1500}`, retry: true, wait: 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: tc.status, Status: http.StatusText(tc.status), Header: http.Header{}}
			if tc.header != "" {
				resp.Header.Set("Retry-After", tc.header)
			}
			retry, err := downloadRefused(resp, []byte(tc.body))
			var (
				se   *platform.StatusError
				we   *platform.WaitError
				wait time.Duration
			)
			if errors.As(err, &we) {
				wait = we.Wait
			}
			if retry != tc.retry || wait != tc.wait || !errors.As(err, &se) || se.Code != tc.status {
				t.Errorf("retry %t, err %v, wait %s; want retry %t, a StatusError of %d, wait %s", retry, err, wait, tc.retry, tc.status, tc.wait)
			}
		})
	}
}
