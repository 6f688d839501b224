package bearer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// fake is a token endpoint and an API that takes its tokens.
type fake struct {
	issued   atomic.Int32 // tokens handed out
	expires  string       // expires_in as the endpoint writes it
	refuse   string       // an OAuth2 error code the endpoint answers with
	apiRefus atomic.Int32 // the API's next 401s
	srv      *httptest.Server
}

func newFake(t *testing.T) *fake {
	f := &fake{expires: "3600"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("grant_type") != "client_credentials" {
			http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
			return
		}
		if f.refuse != "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":%q,"error_description":"no"}`, f.refuse)
			return
		}
		n := f.issued.Add(1)
		fmt.Fprintf(w, `{"access_token":"tok%d","expires_in":%s}`, n, f.expires)
	})
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		want := fmt.Sprintf("Bearer tok%d", f.issued.Load())
		if r.Header.Get("Authorization") != want || f.apiRefus.Load() > 0 {
			f.apiRefus.Add(-1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprintf(w, `{"echo":%s}`, body)
	})
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) client() *Client {
	tokens := &Tokens{URL: f.srv.URL + "/token", HC: f.srv.Client(), Form: func(time.Time) (url.Values, error) {
		return url.Values{"grant_type": {"client_credentials"}}, nil
	}}
	return &Client{Tokens: tokens, HC: f.srv.Client(), Name: "test api", Failure: func(resp *http.Response, _ []byte) error {
		err := fmt.Errorf("HTTP %d", resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			return platform.RateLimited(err, time.Second)
		}
		return platform.Permanent(err)
	}}
}

func TestDo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		expires   string // expires_in
		refuse    string // the token endpoint's error
		apiRefus  int32  // the API's 401s before it takes a token
		path      string
		calls     int
		wait      time.Duration // between calls
		tokens    int32         // tokens asked for in all
		err       string
		permanent bool
	}{
		{name: "a token serves every call while valid", expires: "3600", path: "/api", calls: 3, tokens: 1},
		{name: "expires_in as a string", expires: `"3600"`, path: "/api", calls: 2, tokens: 1},
		{name: "a token past half of a short life is not used", expires: "1", path: "/api", calls: 2, wait: 600 * time.Millisecond, tokens: 2},
		{name: "a refused token is replaced once", expires: "3600", apiRefus: 1, path: "/api", calls: 1, tokens: 2},
		{name: "a second refusal is the API's answer", expires: "3600", apiRefus: 2, path: "/api", calls: 1, tokens: 2, err: "HTTP 401", permanent: true},
		{name: "refused credentials are permanent", refuse: "invalid_client", path: "/api", calls: 1, err: "invalid_client", permanent: true},
		{name: "an endpoint's other error is retried", refuse: "temporarily_unavailable", path: "/api", calls: 1, err: "temporarily_unavailable"},
		{name: "an API failure goes through Failure", expires: "3600", path: "/busy", calls: 1, tokens: 1, err: "HTTP 429"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t)
			f.expires, f.refuse = tt.expires, tt.refuse
			f.apiRefus.Store(tt.apiRefus)
			c := f.client()
			var err error
			for i := range tt.calls {
				if i > 0 {
					time.Sleep(tt.wait)
				}
				var out struct{ Echo map[string]int }
				err = c.Do(context.Background(), http.MethodPost, f.srv.URL+tt.path, map[string]int{"n": i}, &out)
				if err == nil && out.Echo["n"] != i {
					t.Fatalf("call %d decoded %v", i, out)
				}
			}
			if got := f.issued.Load(); got != tt.tokens {
				t.Errorf("%d tokens asked for, want %d", got, tt.tokens)
			}
			if tt.err == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				return
			}
			var se *platform.SendError
			permanent := errors.As(err, &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT
			if err == nil || !strings.Contains(err.Error(), tt.err) || permanent != tt.permanent {
				t.Fatalf("err %v, want one saying %q (permanent: %v)", err, tt.err, tt.permanent)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{&TokenError{Status: 400, Code: "invalid_client"}, true},
		{fmt.Errorf("wrapped: %w", &TokenError{Status: 400, Code: "invalid_grant"}), true},
		{&TokenError{Status: 401, Code: "whatever"}, true},
		{&TokenError{Status: 503, Code: "temporarily_unavailable"}, false},
		{errors.New("dial tcp: refused"), false},
	}
	for _, tt := range tests {
		if got := Refused(tt.err); got != tt.want {
			t.Errorf("Refused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
