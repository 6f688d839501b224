package platform

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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
		{name: "a dated wait beyond the bound", answers: []answer{{503, time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)}}, bound: 10 * time.Second, requests: 1, status: 503, wait: 59 * time.Minute, maxTime: time.Second},
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
