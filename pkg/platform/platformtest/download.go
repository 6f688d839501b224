package platformtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// DownloadFailure is a failed download a gateway's fake answers: a
// refusal, its status and the Retry-After it names in seconds (0: none),
// or, Cut, the first half of the file, after which the fake drops the
// connection.
type DownloadFailure struct {
	Status     int
	RetryAfter int
	Cut        bool
}

// Downloads is a gateway's attachment download through its fake, as
// DownloadRetries drives it.
type Downloads struct {
	// Fetch asks the gateway for one file the fake holds.
	Fetch func(ctx context.Context) (io.ReadCloser, error)
	// Fail makes the fake answer the next downloads with fails, one
	// each, before it serves the file again.
	Fail func(fails ...DownloadFailure)
	// Count is how many downloads the fake was asked for, refused ones
	// included.
	Count func() int
	// Data is the file's bytes.
	Data []byte
	// Failed, when set, checks the error of a fetch that failed (a
	// gateway's own error kind); not a read of its body that failed.
	Failed func(t *testing.T, err error)
}

// DownloadRetries checks that a gateway's file download keeps
// platform.Download's rule: an answer of 429 (with or without
// Retry-After) or a 5xx, or a connection dropped in the middle of the
// file, is asked again, three attempts in all, and the file read whole;
// a 404 or a 403 is final; a Retry-After beyond the fetch's bound fails
// at once.
// newDownloads starts a gateway and its fake for one case; the cases
// run in parallel.
func DownloadRetries(t *testing.T, newDownloads func(t *testing.T) Downloads) {
	t.Helper()
	rateLimited := DownloadFailure{Status: http.StatusTooManyRequests, RetryAfter: 1}
	for _, tc := range []struct {
		name  string
		fails []DownloadFailure
		// requests is how many downloads the fetch asks for; kept: the
		// file is downloaded.
		requests int
		kept     bool
	}{
		{name: "429 with Retry-After", fails: []DownloadFailure{rateLimited}, requests: 2, kept: true},
		{name: "503", fails: []DownloadFailure{{Status: http.StatusServiceUnavailable}}, requests: 2, kept: true},
		{name: "two failures, then the file", fails: []DownloadFailure{{Status: http.StatusServiceUnavailable}, {Status: http.StatusInternalServerError}}, requests: 3, kept: true},
		{name: "three failures", fails: []DownloadFailure{rateLimited, {Status: http.StatusInternalServerError}, rateLimited}, requests: 3},
		{name: "404 is final", fails: []DownloadFailure{{Status: http.StatusNotFound}}, requests: 1},
		{name: "403 is final", fails: []DownloadFailure{{Status: http.StatusForbidden}}, requests: 1},
		{name: "a wait beyond the bound", fails: []DownloadFailure{{Status: http.StatusTooManyRequests, RetryAfter: 120}}, requests: 1},
		{name: "cut off in the middle", fails: []DownloadFailure{{Cut: true}}, requests: 2, kept: true},
		{name: "503, then cut off", fails: []DownloadFailure{{Status: http.StatusServiceUnavailable}, {Cut: true}}, requests: 3, kept: true},
		{name: "cut off three times", fails: []DownloadFailure{{Cut: true}, {Cut: true}, {Cut: true}}, requests: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDownloads(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d.Fail(tc.fails...)
			start := time.Now()
			rc, err := d.Fetch(ctx)
			fetchErr := err
			var got []byte
			if err == nil {
				// A connection cut in the middle of the file breaks
				// the body's read, which asks again.
				got, err = io.ReadAll(rc)
				_ = rc.Close()
			}
			if n := d.Count(); n != tc.requests {
				t.Errorf("%d downloads, want %d", n, tc.requests)
			}
			if !tc.kept {
				if err == nil {
					t.Fatal("downloaded, want a failure")
				}
				if d.Failed != nil && fetchErr != nil {
					d.Failed(t, err)
				}
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("failed after %s, want at once past the bound", took)
				}
				return
			}
			if err != nil || !bytes.Equal(got, d.Data) {
				t.Fatalf("read %q (%v), want the file's bytes %q", got, err, d.Data)
			}
		})
	}
}

// CutFile answers a fake's download with the first half of data,
// declared whole (Content-Length), then drops the connection: a download
// broken off mid-body (DownloadFailure.Cut).
func CutFile(w http.ResponseWriter, mime string, data []byte) {
	w.Header().Set("Content-Type", mime)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data[:len(data)/2])
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	panic(http.ErrAbortHandler)
}
