package googlechat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// serve serves the endpoint (and GET /health) until ctx ends.
func (p *Platform) serve(ctx context.Context, conn platform.Conn) error {
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.Handler(conn))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	err := platform.ServeWebhook(ctx, conn, p.log, p.Name(), p.cfg.Addr, mux, p.cfg.AckTimeout, func(addr string) {
		p.addr.Store(addr)
		p.log.Info("google chat endpoint listening", "addr", addr, "path", p.cfg.Path)
	})
	if err != nil {
		return fmt.Errorf("googlechat: %w", err)
	}
	return nil
}

// Handler serves Google Chat's POSTs of interaction events. An event is
// answered 413 over MaxBodyBytes, 401 without a valid Google Chat token,
// 503 when the token cannot be checked (the keys could not be
// downloaded), 400 when it is not an event, 500 when its message could
// not be stored, and 200 with an empty JSON object (no synchronous
// reply: answers go through the Chat API) once its message is on the bus
// or deliberately skipped. So 200 never confirms an event that was not
// stored, a 4xx is what no retry can fix, and an event posted again after
// a 5xx (Google Chat does not document whether it does) is published once:
// its bus id is the message name.
func (p *Platform) Handler(conn platform.Deliverer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p.event(w, r, conn)
	})
}

func (p *Platform) event(w http.ResponseWriter, r *http.Request, conn platform.Deliverer) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			conn.Reject(r.Context(), "google chat event too large", err)
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	err = p.verifier.verify(r.Context(), r.Header.Get("Authorization"))
	if errors.Is(err, errKeysUnavailable) {
		p.log.Warn("google chat event not checked; answered 503", "err", err)
		w.Header().Set("Retry-After", "60")
		http.Error(w, "signing keys unavailable", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		authFailures.Inc()
		p.log.Warn("google chat event refused", "reason", err.Error(), "remote", r.RemoteAddr)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	e, err := parseEvent(body)
	if err != nil {
		conn.Reject(r.Context(), "malformed google chat event", err)
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AckTimeout)
	defer cancel()
	n := normalize(e, p.cfg.Audience, p.bots, p.self.is)
	if n.ev == nil {
		skipped.WithLabelValues(n.skip).Inc()
		p.log.Debug("google chat event skipped", "reason", n.skip, "type", e.Type)
	} else if _, err := conn.Deliver(ctx, n.ev); err != nil && !errors.Is(err, platform.ErrRejected) {
		p.log.Warn("google chat message not stored; answered 500", "err", err)
		http.Error(w, "not stored", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}
