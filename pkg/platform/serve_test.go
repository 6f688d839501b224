package platform

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// ReadBody takes a body within the limit, and refuses one over it: at
// once when its Content-Length says so (nothing of it read, the client
// need not send it), else once the limit is read.
func TestReadBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := ReadBody(w, r, 16)
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		case err != nil:
			w.WriteHeader(http.StatusBadRequest)
		default:
			_, _ = w.Write(body)
		}
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tt := range []struct {
		name, request string
		status        int
		body          string
	}{
		{"within the limit", "Content-Length: 5\r\n\r\nhello", 200, "hello"},
		{"at the limit", "Content-Length: 16\r\n\r\n0123456789abcdef", 200, "0123456789abcdef"},
		{"said to be over it, and not sent", "Content-Length: 1073741824\r\n\r\n", 413, ""},
		{"chunked over it", "Transfer-Encoding: chunked\r\n\r\n11\r\n0123456789abcdefg\r\n0\r\n\r\n", 413, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\n" + tt.request)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			var b strings.Builder
			_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
			if resp.StatusCode != tt.status || b.String() != tt.body {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, b.String(), tt.status, tt.body)
			}
		})
	}
}
