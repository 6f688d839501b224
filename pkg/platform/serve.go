package platform

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// ServeHTTP serves srv on ln until ctx ends, then shuts down gracefully
// (requests in flight get grace to finish), or returns the listener's
// error. HTTP-based gateways use it as the body of Connect.
func ServeHTTP(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		// The listener failed; requests in flight keep their connections.
		return fmt.Errorf("serve http: %w", err)
	}
}

// ReadBody reads a request body of at most limit bytes. One that says it
// is longer (Content-Length) is refused before any of it is read — the
// client need not send it, nor the server wait for it — and one that
// turns out longer once limit bytes are read (chunked, a wrong length);
// both with an *http.MaxBytesError, which the caller answers with 413.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		// The rest of the body stays unread: the connection cannot
		// serve another request.
		w.Header().Set("Connection", "close")
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// Deliverer is what a webhook's handler needs of the kit's Conn: publish
// a message, or count and log one it refused.
type Deliverer interface {
	Deliver(ctx context.Context, ev *eventsv1.MessageReceived) (Accepted, error)
	Reject(ctx context.Context, reason string, err error)
}

// webhookReadTimeout bounds reading one request, body included.
const webhookReadTimeout = 30 * time.Second

// ServeWebhook listens on addr and serves h until ctx ends, for gateways
// their platform calls (WhatsApp, SMS, Teams, LINE, BlueBubbles). Anyone
// can connect and send a body before its signature is checked, so every
// phase of a connection is bounded; an answer may wait up to ack for the
// bus. listening gets the listener's address (port 0 picks one) before
// conn is marked connected.
func ServeWebhook(ctx context.Context, conn Conn, addr string, h http.Handler, ack time.Duration, listening func(addr string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookReadTimeout + ack + 15*time.Second,
		IdleTimeout:       30 * time.Second,
	}
	listening(ln.Addr().String())
	conn.Connected()
	return ServeHTTP(ctx, srv, ln, 5*time.Second)
}
