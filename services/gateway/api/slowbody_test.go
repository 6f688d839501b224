package api

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// A client that sends its headers and then its body slowly, or never,
// is cut off after gateways.api.body_timeout: before its key is checked
// (the server reads the unread body of a refused request, to reuse the
// connection) and after. A body that arrives in time is answered, and a
// request whose body is in may wait for its answer as long as it takes.
func TestSlowBodiesAreCutOff(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	const timeout = 300 * time.Millisecond
	s := startService(t, b, func(c *Config) { c.BodyTimeout = timeout; c.ReplyTimeout = 2 * time.Second })
	r := startResponder(t, b)
	release := r.hold()
	const body = `{"model":"switchboard","messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct {
		name, auth string
		send       string // the part of the body sent
	}{
		{"no key, body never sent", "", ""},
		{"wrong key, half a body", "Bearer nope", body[:10]},
		{"the key, half a body", "Bearer " + testKey, body[:10]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + s.Addr() + "\r\nContent-Type: application/json\r\n"
			if tt.auth != "" {
				head += "Authorization: " + tt.auth + "\r\n"
			}
			head += fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))
			if _, err := conn.Write([]byte(head + tt.send)); err != nil {
				t.Fatal(err)
			}
			// The server closes the connection (after an answer or not)
			// within the body timeout, not when the client pleases.
			_ = conn.SetReadDeadline(time.Now().Add(timeout + 5*time.Second))
			rd := bufio.NewReader(conn)
			for {
				if _, err := rd.ReadByte(); err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						t.Fatal("the server still holds the connection of a body that does not come")
					}
					return
				}
			}
		})
	}
	t.Run("a body in time waits for its answer", func(t *testing.T) {
		t.Parallel()
		done := make(chan struct{})
		go func() {
			time.Sleep(3 * timeout)
			release()
			close(done)
		}()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.Addr()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		<-done
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200 after waiting past the body timeout", resp.StatusCode)
		}
	})
}

// A body that says it is over gateways.api.max_body_bytes is refused
// (413) before any of it is read: the client need not send it, the
// gateway reads none of it.
func TestBodyOverTheLimitRefusedUnread(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	small := func(c *Config) { c.BodyTimeout = time.Hour; c.MaxBodyBytes = 1 << 10 }
	s := startService(t, b, small)
	jobs := strings.TrimPrefix(jobsServer(t, jobsStore(t), small).URL, "http://")
	for _, tt := range []struct{ addr, key, path string }{
		{s.Addr(), testKey, "/v1/chat/completions"},
		{s.Addr(), testKey, "/v1/responses"},
		{s.Addr(), testKey, "/v1/runs"},
		{jobs, aliceKey, "/api/jobs"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", tt.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := "POST " + tt.path + " HTTP/1.1\r\nHost: " + tt.addr + "\r\nContent-Type: application/json\r\n" +
				"Authorization: Bearer " + tt.key + "\r\nContent-Length: 1073741824\r\n\r\n{\"model\":"
			if _, err := conn.Write([]byte(head)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to a body over the limit before it was sent: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413", resp.StatusCode)
			}
		})
	}
}
