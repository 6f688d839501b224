package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// serveEvents serves the Events API until ctx ends.
func (p *Platform) serveEvents(ctx context.Context, conn platform.Conn) error {
	ln, err := net.Listen("tcp", p.cfg.Addr)
	if err != nil {
		return fmt.Errorf("slack events listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.EventsHandler(conn))
	// A request that panics outside the event's own handling (which
	// platform.Receive skips) is answered 200 too: Slack would retry it
	// into the same panic.
	srv := eventsServer(platform.RecoverHTTP(mux, p.log, "slack", http.StatusOK, conn), p.cfg.AckTimeout)
	p.eventsAddr.Store(ln.Addr().String())
	p.log.Info("slack events api listening", "addr", ln.Addr().String(), "path", p.cfg.Path)
	conn.Connected()
	if err := platform.ServeHTTP(ctx, srv, ln, 5*time.Second); err != nil {
		return fmt.Errorf("slack events server: %w", err)
	}
	return nil
}

// eventsReadTimeout bounds reading one request, body included, as the
// webhook gateway does.
const eventsReadTimeout = 30 * time.Second

// eventsServer is the Events API server. Anyone can connect and send up
// to MaxBodyBytes before the signature is checked, so every phase of a
// connection is bounded: a body trickled in slowly, or a connection left
// open, would otherwise hold a goroutine and its buffer for as long as
// the client likes. The answers are short, so the write deadline (which
// net/http starts once the headers are read) only has to cover the rest
// of the body and the handler's publish (ackTimeout). Idle keep-alive
// connections close after 30 s.
func eventsServer(h http.Handler, ackTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       eventsReadTimeout,
		WriteTimeout:      eventsReadTimeout + ackTimeout + 5*time.Second,
		IdleTimeout:       30 * time.Second,
	}
}

// EventsAddr is the address the Events API server listens on, once it does.
func (p *Platform) EventsAddr() string {
	a, _ := p.eventsAddr.Load().(string)
	return a
}

// EventsHandler answers Slack's Events API requests: it verifies the
// signature and the 5-minute timestamp window, answers url_verification,
// publishes message events to the bus, and only then answers 200, so an
// event Slack saw acknowledged is stored. A retry (X-Slack-Retry-Num) of
// an event already published is answered 200 without publishing again.
// When publishing fails the answer is 500 and Slack retries.
func (p *Platform) EventsHandler(conn deliverer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				conn.Reject(r.Context(), "slack request body too large", err)
				http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if err := verify(r.Header, body, p.cfg.SigningSecret); err != nil {
			p.log.Warn("slack request refused", "reason", "bad signature", "err", err)
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		var cb callback
		if err := json.Unmarshal(body, &cb); err == nil && cb.Type == "url_verification" {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, cb.Challenge)
			return
		}
		if n := r.Header.Get("X-Slack-Retry-Num"); n != "" {
			p.log.Debug("slack event retry", "retry_num", n, "reason", r.Header.Get("X-Slack-Retry-Reason"))
		}
		ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AckTimeout)
		defer cancel()
		// An event whose handling panics is answered 200 (logged,
		// counted): a 500 would have Slack send it again, to panic again.
		var herr error
		if !platform.Receive(ctx, conn, p.log, "slack", r.Header.Get("X-Slack-Request-Timestamp"), body, func() { herr = p.handle(ctx, conn, body) }) {
			w.WriteHeader(http.StatusOK)
			return
		}
		if err := herr; err != nil {
			p.log.Warn("slack event not published; asking slack to retry", "err", err)
			http.Error(w, "not stored", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// verify checks X-Slack-Signature and X-Slack-Request-Timestamp (at most
// five minutes off) with the signing secret.
func verify(h http.Header, body []byte, secret string) error {
	sv, err := slackapi.NewSecretsVerifier(h, secret)
	if err != nil {
		return err
	}
	if _, err := sv.Write(body); err != nil {
		return err
	}
	return sv.Ensure()
}

// envelopeID reads the envelope id of a raw Socket Mode frame.
func envelopeID(raw []byte) string {
	var env struct {
		EnvelopeID string `json:"envelope_id"`
	}
	if json.Unmarshal(raw, &env) != nil {
		return ""
	}
	return env.EnvelopeID
}
