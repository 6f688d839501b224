package platform

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
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
