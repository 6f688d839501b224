package platform_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// countRejects is a Rejecter safe for a server's goroutines.
type countRejects struct {
	mu sync.Mutex
	n  int
}

func (c *countRejects) Reject(context.Context, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
}

func (c *countRejects) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A request whose handling panics is answered with the status the
// gateway chose for its platform, counted and rejected; without
// RecoverHTTP net/http dropped the connection with no answer and counted
// nothing. An answer already begun is cut; a handler's own
// http.ErrAbortHandler passes through uncounted; a streamed answer still
// flushes through the wrapper.
func TestRecoverHTTP(t *testing.T) {
	labels := map[string]string{"component": platform.HTTPComponent}
	tests := []struct {
		name    string
		status  int
		handler http.HandlerFunc
		want    int // answer status; 0: the connection was cut
		body    string
		counted bool
	}{
		{"answered", http.StatusOK, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "fine") }, http.StatusOK, "fine", false},
		{"panic answered 200 for a platform that retries", http.StatusOK, func(http.ResponseWriter, *http.Request) {
			var v []int
			_ = v[len(v)]
		}, http.StatusOK, "", true},
		{"panic answered 500 for a client", http.StatusInternalServerError, func(http.ResponseWriter, *http.Request) { panic("bad request") },
			http.StatusInternalServerError, "", true},
		{"panic after the answer began cuts it", http.StatusOK, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
			panic("late")
		}, 0, "", true},
		{"a handler's own abort is not counted", http.StatusOK, func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, 0, "", false},
		{"streams flush through", http.StatusOK, func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "one ")
			w.(http.Flusher).Flush()
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			_, _ = io.WriteString(w, "two")
		}, http.StatusOK, "one two", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rej := &countRejects{}
			srv := httptest.NewUnstartedServer(platform.RecoverHTTP(tt.handler, slog.New(slog.DiscardHandler), "test", tt.status, rej))
			srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
			srv.Start()
			defer srv.Close()
			before := telemetrytest.Value(t, "switchboard_panics_total", labels)
			resp, err := http.Post(srv.URL, "application/json", nil)
			got, body := 0, ""
			if err == nil {
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil {
					got, body = resp.StatusCode, string(b)
				}
			}
			if got != tt.want || body != tt.body {
				t.Errorf("answer %d %q (err %v), want %d %q", got, body, err, tt.want, tt.body)
			}
			counted := telemetrytest.Value(t, "switchboard_panics_total", labels) > before
			if counted != tt.counted || (rej.count() > 0) != tt.counted {
				t.Errorf("counted %v, rejected %d, want counted %v", counted, rej.count(), tt.counted)
			}
		})
	}
}

// webhookConn is the Conn a ServeWebhook test needs.
type webhookConn struct {
	platform.Conn
	countRejects
}

func (*webhookConn) Connected() {}

func (c *webhookConn) Reject(ctx context.Context, reason string, err error) {
	c.countRejects.Reject(ctx, reason, err)
}

// The webhook gateways' server (ServeWebhook) answers a request whose
// handling panics 200, counted and rejected: before, net/http cut the
// connection and the platform posted the payload again.
func TestServeWebhookRecovers(t *testing.T) {
	labels := map[string]string{"component": platform.HTTPComponent}
	before := telemetrytest.Value(t, "switchboard_panics_total", labels)
	ctx, cancel := context.WithCancel(context.Background())
	conn := &webhookConn{}
	addr := make(chan string, 1)
	done := make(chan error, 1)
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("poison") })
	go func() {
		done <- platform.ServeWebhook(ctx, conn, slog.New(slog.DiscardHandler), "test", "127.0.0.1:0", h, 0, func(a string) { addr <- a })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	resp, err := http.Post("http://"+<-addr+"/hook", "application/json", nil)
	if err != nil {
		t.Fatalf("post: %v, want an answer", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	if telemetrytest.Value(t, "switchboard_panics_total", labels) <= before || conn.count() != 1 {
		t.Errorf("panic not counted or not rejected (%d rejections)", conn.count())
	}
}
