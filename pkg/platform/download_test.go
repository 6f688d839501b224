package platform

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is one answer of the file server: a status, with the
// Retry-After it names ("": none).
type answer struct {
	status     int
	retryAfter string
}

// fileServer serves the file after answering the answers given, one
// per request, in order; it counts requests and records each one's
// Authorization.
type fileServer struct {
	*httptest.Server
	mu      sync.Mutex
	answers []answer
	auth    []string
}

func newFileServer(t *testing.T, file string, answers ...answer) *fileServer {
	t.Helper()
	s := &fileServer{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		var a *answer
		if len(s.answers) > 0 {
			a = &s.answers[0]
			s.answers = s.answers[1:]
		}
		s.mu.Unlock()
		if a != nil {
			if a.retryAfter != "" {
				w.Header().Set("Retry-After", a.retryAfter)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(a.status)
			_, _ = io.WriteString(w, `{"error":"`+strconv.Itoa(a.status)+`"}`)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = io.WriteString(w, file)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *fileServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// A file answered 429 or 5xx is asked again, after its Retry-After,
// else 1.5 s then 3 s, three attempts in all, as Hermes's media
// downloads; any other status is final at once, and a wait longer than
// ctx has left fails at once with the answer.
func TestDownload(t *testing.T) {
	t.Parallel()
	const file = "\x89PNG-bytes"
	for _, tc := range []struct {
		name    string
		answers []answer
		bound   time.Duration // ctx's deadline
		// requests is how many requests the download makes; status is
		// the code of the *StatusError it fails with (0: the file).
		requests int
		status   int
		// wait is the StatusError's Wait, at least (0: none); minTime
		// and maxTime bound how long the download takes.
		wait             time.Duration
		minTime, maxTime time.Duration
	}{
		{name: "200", requests: 1, maxTime: time.Second},
		{name: "429 with Retry-After 0", answers: []answer{{429, "0"}}, requests: 2, maxTime: time.Second},
		{name: "429 with Retry-After 1", answers: []answer{{429, "1"}}, requests: 2, minTime: time.Second, maxTime: 1400 * time.Millisecond},
		{name: "503 without Retry-After waits 1.5 s", answers: []answer{{503, ""}}, requests: 2, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		{name: "500 then 502", answers: []answer{{500, "0"}, {502, "0"}}, requests: 3, maxTime: time.Second},
		{name: "three failures", answers: []answer{{429, "0"}, {500, "0"}, {503, "0"}}, requests: 3, status: 503, maxTime: time.Second},
		{name: "404 is final", answers: []answer{{404, ""}}, requests: 1, status: 404, maxTime: time.Second},
		{name: "403 is final", answers: []answer{{403, "0"}}, requests: 1, status: 403, maxTime: time.Second},
		{name: "202 is not the file", answers: []answer{{202, ""}}, requests: 1, status: 202, maxTime: time.Second},
		{name: "a wait beyond the bound", answers: []answer{{429, "120"}}, bound: 10 * time.Second, requests: 1, status: 429, wait: 120 * time.Second, maxTime: time.Second},
		// The date is an hour from when the table is built; the case,
		// parallel, may start a minute later on a busy machine.
		{name: "a dated wait beyond the bound", answers: []answer{{503, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}, bound: 10 * time.Second, requests: 1, status: 503, wait: 55 * time.Minute, maxTime: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFileServer(t, file, tc.answers...)
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.bound, 30*time.Second))
			defer cancel()
			start := time.Now()
			resp, err := Download(ctx, s.Client(), func(ctx context.Context) (*http.Request, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/file", nil)
				if err == nil {
					req.Header.Set("Authorization", "Bearer t0ken")
				}
				return req, err
			})
			took := time.Since(start)
			got := s.requests()
			if len(got) != tc.requests {
				t.Errorf("%d requests, want %d", len(got), tc.requests)
			}
			for i, a := range got {
				if a != "Bearer t0ken" {
					t.Errorf("request %d had Authorization %q, want the one newReq set", i+1, a)
				}
			}
			if took < tc.minTime || took > tc.maxTime {
				t.Errorf("took %s, want %s to %s", took, tc.minTime, tc.maxTime)
			}
			if tc.status != 0 {
				var se *StatusError
				if !errors.As(err, &se) || se.Code != tc.status {
					t.Fatalf("got %v (%v), want a StatusError of %d", err, resp, tc.status)
				}
				if se.Wait < tc.wait || (tc.wait == 0) != (se.Wait == 0) {
					t.Errorf("StatusError's wait %s, want at least %s", se.Wait, tc.wait)
				}
				return
			}
			if err != nil {
				t.Fatalf("download: %v, want the file", err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != file || resp.StatusCode != http.StatusOK {
				t.Fatalf("got %s %q (%v), want 200 and the file", resp.Status, body, err)
			}
		})
	}
}

// ctx ending during a wait ends the download at once, with the answer
// and ctx's error.
func TestDownloadCanceledDuringTheWait(t *testing.T) {
	t.Parallel()
	s := newFileServer(t, "file", answer{429, "5"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := Download(ctx, s.Client(), func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 429 || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want the 429 and context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s, want it to end as ctx did", took)
	}
	if n := len(s.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// A request newReq cannot build, and a client's error, end the
// download as they are.
func TestDownloadErrors(t *testing.T) {
	t.Parallel()
	errBuild := errors.New("no request")
	if _, err := Download(context.Background(), nil, func(context.Context) (*http.Request, error) { return nil, errBuild }); !errors.Is(err, errBuild) {
		t.Errorf("got %v, want newReq's error", err)
	}
	s := newFileServer(t, "file")
	url := s.URL
	s.Close() // nothing listens any more
	_, err := Download(context.Background(), nil, func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	})
	var se *StatusError
	if err == nil || errors.As(err, &se) {
		t.Errorf("got %v, want the client's error", err)
	}
}

func TestDownloadWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 17, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		retryAfter string
		try        int
		want       time.Duration
	}{
		{"", 1, 1500 * time.Millisecond},
		{"", 2, 3 * time.Second},
		{"7", 1, 7 * time.Second},
		{" 2 ", 2, 2 * time.Second},
		{"0", 1, 0},
		{now.Add(4 * time.Second).Format(http.TimeFormat), 1, 4 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 1, 0},
		{"soon", 1, 1500 * time.Millisecond},
	} {
		h := http.Header{}
		if tc.retryAfter != "" {
			h.Set("Retry-After", tc.retryAfter)
		}
		if got := downloadWait(h, tc.try, now); got != tc.want {
			t.Errorf("Retry-After %q, attempt %d: wait %s, want %s", tc.retryAfter, tc.try, got, tc.want)
		}
	}
}

// DownloadReading asks again what its Refusal says to, from the answer's
// body (a 400 naming a rate limit), and ends with the Refusal's error.
func TestDownloadReading(t *testing.T) {
	t.Parallel()
	errLimited := errors.New("limited")
	refused := func(resp *http.Response, body []byte) (bool, error) {
		if resp.StatusCode == http.StatusBadRequest && string(body) == `{"error":"400"}` {
			return true, errLimited
		}
		return false, &StatusError{Code: resp.StatusCode, Status: resp.Status}
	}
	for _, tt := range []struct {
		name     string
		answers  []answer
		requests int
		err      error
	}{
		{"asked again", []answer{{http.StatusBadRequest, "0"}}, 2, nil},
		{"asked three times", []answer{{http.StatusBadRequest, "0"}, {http.StatusBadRequest, "0"}, {http.StatusBadRequest, "0"}}, 3, errLimited},
		{"final at once", []answer{{http.StatusServiceUnavailable, "0"}}, 1, &StatusError{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newFileServer(t, "file", tt.answers...)
			resp, err := DownloadReading(t.Context(), s.Client(), func(ctx context.Context) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
			}, refused)
			if n := len(s.requests()); n != tt.requests {
				t.Errorf("%d requests, want %d", n, tt.requests)
			}
			var se *StatusError
			switch {
			case tt.err == nil && err != nil:
				t.Fatalf("err %v", err)
			case tt.err == nil:
				_ = resp.Body.Close()
			case errors.As(tt.err, &se) && !errors.As(err, &se):
				t.Errorf("err %v, want a *StatusError", err)
			case !errors.As(tt.err, &se) && !errors.Is(err, tt.err):
				t.Errorf("err %v, want %v", err, tt.err)
			}
		})
	}
}

// serverStep is how the flaky server answers one request.
type serverStep func(w http.ResponseWriter, r *http.Request)

// dropped closes the connection before any answer.
func dropped(w http.ResponseWriter, _ *http.Request) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = c.Close()
	}
}

// reset resets the connection (RST) before any answer.
func reset(w http.ResponseWriter, _ *http.Request) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// stalled answers nothing until the client gives up.
func stalled(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

// serving serves file, whole.
func serving(file string) serverStep {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(file)))
		_, _ = io.WriteString(w, file)
	}
}

// cut sends the first half of file, which it declares whole, then drops
// the connection (the client reads an unexpected EOF).
func cut(file string) serverStep {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(file)))
		_, _ = io.WriteString(w, file[:len(file)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
}

// stalledBody sends the first half of file, then nothing until the
// client gives up.
func stalledBody(file string) serverStep {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(file)))
		_, _ = io.WriteString(w, file[:len(file)/2])
		w.(http.Flusher).Flush()
		stalled(w, r)
	}
}

func refusedWith(status int) serverStep {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(status)
	}
}

// flakyServer answers its requests with steps, in order, then serves
// file; it counts the requests.
type flakyServer struct {
	*httptest.Server
	mu       sync.Mutex
	steps    []serverStep
	requests int
}

func newFlakyServer(t *testing.T, file string, steps ...serverStep) *flakyServer {
	t.Helper()
	s := &flakyServer{steps: steps}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		next := serving(file)
		if len(s.steps) > 0 {
			next, s.steps = s.steps[0], s.steps[1:]
		}
		s.mu.Unlock()
		next(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *flakyServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// fetch downloads from s within ctx with a client that opens a
// connection for each request (the transport retries by itself a
// request whose reused connection was closed, which would take another
// serverStep), and reads the body.
func (s *flakyServer) fetch(ctx context.Context) (string, error) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := Download(ctx, hc, func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/file", nil)
	})
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// A transport failure (a connection closed or reset before the answer,
// an attempt that receives nothing for its stall bound, a body that
// breaks off or stalls) is asked again as a 5xx is, within the same
// attempts and bound; a broken body is asked for again whole and read on
// where it broke, so the caller reads the file once, unbroken. Attempts
// that all fail end with the last one's error, which says so.
func TestDownloadTransportFailures(t *testing.T) {
	t.Parallel()
	file := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB
	for _, tc := range []struct {
		name  string
		steps []serverStep
		bound time.Duration
		// requests the download makes; err is what it fails with
		// (errors.Is; nil: the file), errText what its error says.
		requests         int
		err              error
		errText          string
		minTime, maxTime time.Duration
	}{
		{name: "dropped once", steps: []serverStep{dropped}, requests: 2, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		{name: "reset once", steps: []serverStep{reset}, requests: 2, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		// A third of the bound for the first attempt: 1.5 s.
		{name: "no answer once", steps: []serverStep{stalled}, bound: 4500 * time.Millisecond, requests: 2, minTime: 3 * time.Second, maxTime: 4400 * time.Millisecond},
		{name: "body cut once", steps: []serverStep{cut(file)}, requests: 2, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		{name: "body stalled once", steps: []serverStep{stalledBody(file)}, bound: 4500 * time.Millisecond, requests: 2, minTime: 3 * time.Second, maxTime: 4400 * time.Millisecond},
		{name: "503, then cut", steps: []serverStep{refusedWith(503), cut(file)}, requests: 3, minTime: 3 * time.Second, maxTime: 4400 * time.Millisecond},
		{name: "cut, then 503", steps: []serverStep{cut(file), refusedWith(503)}, requests: 3, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		{name: "cut twice", steps: []serverStep{cut(file), cut(file)}, requests: 3, minTime: 4500 * time.Millisecond, maxTime: 5900 * time.Millisecond},
		{name: "dropped three times", steps: []serverStep{dropped, dropped, dropped}, requests: 3, err: io.EOF, errText: "download: 3 attempts failed, the last: ", minTime: 4500 * time.Millisecond, maxTime: 5900 * time.Millisecond},
		{name: "cut three times", steps: []serverStep{cut(file), cut(file), cut(file)}, requests: 3, err: io.ErrUnexpectedEOF, errText: "download: 3 attempts failed, the last: unexpected EOF", minTime: 4500 * time.Millisecond, maxTime: 5900 * time.Millisecond},
		// 1.5 s, 1.5 s of wait, then half of the 1.5 s left: 3 s more
		// would outlast the bound.
		{name: "no answer until the bound", steps: []serverStep{stalled, stalled, stalled}, bound: 4500 * time.Millisecond, requests: 2, err: ErrStalled, errText: "download: attempt 2 failed, and the fetch's bound ends before another: download stalled: nothing received in ", minTime: 3700 * time.Millisecond, maxTime: 4400 * time.Millisecond},
		{name: "cut, then another file", steps: []serverStep{cut(file), serving(file + "more")}, requests: 2, err: ErrChanged, errText: "65536 bytes, then 65540", maxTime: 2900 * time.Millisecond},
		{name: "no time left for another", steps: []serverStep{cut(file)}, bound: time.Second, requests: 1, err: io.ErrUnexpectedEOF, errText: "the fetch's bound ends before another", maxTime: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFlakyServer(t, file, tc.steps...)
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.bound, 30*time.Second))
			defer cancel()
			start := time.Now()
			got, err := s.fetch(ctx)
			took := time.Since(start)
			if n := s.count(); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			if took < tc.minTime || took > tc.maxTime {
				t.Errorf("took %s, want %s to %s", took, tc.minTime, tc.maxTime)
			}
			if tc.err == nil {
				if err != nil || got != file {
					t.Fatalf("read %d bytes (%v), want the file's %d (the same: %v)", len(got), err, len(file), got == file)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(fmt.Sprint(err), tc.errText) {
				t.Fatalf("got %v, want %v, saying %q", err, tc.err, tc.errText)
			}
		})
	}
}

// No error of a download names its URL (it may hold a bot token, a
// signature) but for its host: not one a read of the body returns after
// the body broke off and was asked for again, which the caller, holding
// only the body, could not take out (the Runner logs it: "attachment not
// kept"), nor one that wraps the client's for the attempts made. Before,
// both carried the client's error whole, the URL in it.
func TestDownloadErrorsHideTheURL(t *testing.T) {
	t.Parallel()
	file := strings.Repeat("z", 8<<10)
	for _, tc := range []struct {
		name  string
		steps []serverStep
	}{
		{"cut, then dropped twice", []serverStep{cut(file), dropped, dropped}},
		{"cut, then reset twice", []serverStep{cut(file), reset, reset}},
		{"dropped three times", []serverStep{dropped, dropped, dropped}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFlakyServer(t, file, tc.steps...)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := Download(ctx, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, func(ctx context.Context) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/file/bot123:s3cret/photo.jpg?sig=s3cret", nil)
			})
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "3 attempts failed") {
				t.Fatalf("got %v, want the last attempt's failure", err)
			}
			if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "/file/") || !strings.Contains(msg, s.Listener.Addr().String()) {
				t.Fatalf("got %q: want the host, not the URL", msg)
			}
		})
	}
}

// Nothing is asked again once the caller's ctx is done: ended while the
// answer is awaited, or while the body is read.
func TestDownloadTransportCanceled(t *testing.T) {
	t.Parallel()
	file := strings.Repeat("x", 1<<10)
	for _, tc := range []struct {
		name       string
		serverStep serverStep
	}{
		{"awaiting the answer", stalled},
		{"reading the body", stalledBody(file)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFlakyServer(t, file, tc.serverStep)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			time.AfterFunc(300*time.Millisecond, cancel)
			start := time.Now()
			_, err := s.fetch(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("got %v, want context.Canceled", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %s, want it to end as ctx did", took)
			}
			time.Sleep(200 * time.Millisecond) // no attempt comes late
			if n := s.count(); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

// Only the download's own reads are bound: a caller that takes longer
// than the stall bound between two reads (a slow store) reads the file
// in one attempt.
func TestDownloadSlowReader(t *testing.T) {
	t.Parallel()
	file := strings.Repeat("y", 1<<10)
	s := newFlakyServer(t, file)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // a stall bound of 1 s
	defer cancel()
	resp, err := Download(ctx, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	first := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1300 * time.Millisecond)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(first)+string(rest) != file {
		t.Fatalf("read %d bytes (%v), want the file's %d", len(first)+len(rest), err, len(file))
	}
	if n := s.count(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

// Retried calls again what again says to, after the wait it names,
// DownloadTries calls at most; a wait beyond ctx's deadline fails at
// once, and nothing is called once ctx is done.
func TestRetried(t *testing.T) {
	t.Parallel()
	errBusy, errRefused, errFlood := errors.New("busy"), errors.New("refused"), errors.New("flood wait")
	again := func(err error, try int) (time.Duration, bool) {
		switch {
		case errors.Is(err, errRefused):
			return 0, false
		case errors.Is(err, errFlood):
			return time.Minute, true
		}
		return time.Duration(try) * 10 * time.Millisecond, true
	}
	for _, tc := range []struct {
		name    string
		errs    []error // the calls' errors, in order; then success
		cancel  bool    // ctx is canceled by the first call
		calls   int
		err     error
		errText string
	}{
		{name: "at once", calls: 1},
		{name: "busy twice", errs: []error{errBusy, errBusy}, calls: 3},
		{name: "busy three times", errs: []error{errBusy, errBusy, errBusy}, calls: 3, err: errBusy},
		{name: "refused", errs: []error{errRefused}, calls: 1, err: errRefused},
		{name: "a wait beyond the bound", errs: []error{errFlood}, calls: 1, err: errFlood, errText: "asked to wait 1m0s"},
		{name: "ctx done", errs: []error{errBusy}, cancel: true, calls: 1, err: errBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			calls := 0
			v, err := Retried(ctx, func(context.Context) (int, error) {
				calls++
				if tc.cancel {
					cancel()
				}
				if calls <= len(tc.errs) {
					return 0, tc.errs[calls-1]
				}
				return 7, nil
			}, again)
			if calls != tc.calls {
				t.Errorf("%d calls, want %d", calls, tc.calls)
			}
			if tc.err == nil {
				if err != nil || v != 7 {
					t.Fatalf("got %d, %v, want 7", v, err)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("got %v, want %v saying %q", err, tc.err, tc.errText)
			}
		})
	}
}

// A wait a Refusal names (a *WaitError: Matrix's retry_after_ms, in the
// body) is waited in place of the answer's Retry-After or the default,
// within ctx as any wait; the download ends with the refusal's error,
// not the WaitError.
func TestDownloadReadingNamedWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answers []answer
		named   time.Duration // the wait the refusal names
		bound   time.Duration // ctx's deadline
		// requests is how many requests the download makes; status is
		// the code of the *StatusError it fails with (0: the file), and
		// wait that StatusError's Wait.
		requests         int
		status           int
		wait             time.Duration
		minTime, maxTime time.Duration
	}{
		{name: "in place of the default", answers: []answer{{429, ""}}, named: 100 * time.Millisecond,
			requests: 2, minTime: 100 * time.Millisecond, maxTime: 1400 * time.Millisecond},
		{name: "in place of Retry-After", answers: []answer{{429, "5"}}, named: 100 * time.Millisecond,
			requests: 2, minTime: 100 * time.Millisecond, maxTime: 1400 * time.Millisecond},
		{name: "beyond the bound", answers: []answer{{429, ""}}, named: 2 * time.Minute, bound: 10 * time.Second,
			requests: 1, status: 429, wait: 2 * time.Minute, maxTime: time.Second},
		{name: "three refusals", answers: []answer{{503, ""}, {503, ""}, {503, ""}},
			requests: 3, status: 503, maxTime: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFileServer(t, "file", tc.answers...)
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.bound, 30*time.Second))
			defer cancel()
			start := time.Now()
			resp, err := DownloadReading(ctx, s.Client(), func(ctx context.Context) (*http.Request, error) {
				return http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
			}, func(resp *http.Response, body []byte) (bool, error) {
				return true, &WaitError{Err: &StatusError{Code: resp.StatusCode, Status: resp.Status}, Wait: tc.named}
			})
			took := time.Since(start)
			if n := len(s.requests()); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			if took < tc.minTime || took > tc.maxTime {
				t.Errorf("took %s, want %s to %s", took, tc.minTime, tc.maxTime)
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("download: %v, want the file", err)
				}
				_ = resp.Body.Close()
				return
			}
			var (
				se *StatusError
				we *WaitError
			)
			if !errors.As(err, &se) || se.Code != tc.status || se.Wait != tc.wait || errors.As(err, &we) {
				t.Fatalf("got %v, want the refusal's StatusError of %d, its wait %s", err, tc.status, tc.wait)
			}
		})
	}
}
