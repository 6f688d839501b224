package bluebubbles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/secret"
)

// serveWebhook serves the webhook until ctx ends, then publishes what it
// holds for up to drainWait before it returns (the rest is lost, and
// logged); listening runs once it listens (a call the server makes from
// then on is taken).
func (p *Platform) serveWebhook(ctx context.Context, conn platform.Conn, listening func()) error {
	held := newHold(ctx, conn, p.log, p.cfg.AckTimeout, p.maxHeld)
	defer held.close(p.drainWait)
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.webhookHandler(conn, held))
	err := platform.ServeWebhook(ctx, conn, p.log, p.Name(), p.cfg.Addr, mux, p.cfg.AckTimeout, func(addr string) {
		p.addr.Store(addr)
		p.log.Info("bluebubbles webhook listening", "addr", addr, "path", p.cfg.Path)
		listening()
	})
	if err != nil {
		return fmt.Errorf("bluebubbles webhook: %w", err)
	}
	return nil
}

// authorized reports whether the call carries the webhook secret: in the
// query as password or guid (BlueBubbles can send no headers, so the
// registered URL carries it), or in an X-Password or X-Guid header, as
// Hermes accepts. Constant time; an empty secret accepts nothing.
func (p *Platform) authorized(r *http.Request) bool {
	q := r.URL.Query()
	ok := false
	for _, got := range []string{q.Get("password"), q.Get("guid"), r.Header.Get("X-Password"), r.Header.Get("X-Guid"), r.Header.Get("X-Bluebubbles-Guid")} {
		if got != "" && secret.Equal(got, p.cfg.WebhookSecret) {
			ok = true
		}
	}
	return ok
}

// WebhookHandler serves BlueBubbles's POSTs. A call is answered 405
// unless it is a POST, 401 without the secret (nothing is read or
// published), 415 unless it is JSON, 413 over MaxBodyBytes, 400 when it
// is not a BlueBubbles event, 200 once the message is on the bus or
// deliberately skipped, and 202 when the bus could not take it within
// ack_timeout: BlueBubbles never posts a webhook again, so the message is
// held and published once the bus is back (hold.go); 500 only when the
// hold is full (the message is lost, and logged).
func (p *Platform) WebhookHandler(conn platform.Deliverer) http.Handler {
	return p.webhookHandler(conn, newHold(context.Background(), conn, p.log, p.cfg.AckTimeout, p.maxHeld))
}

// webhookHandler is WebhookHandler holding on held (serveWebhook closes
// it when the webhook stops serving).
func (p *Platform) webhookHandler(conn platform.Deliverer, held *hold) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if !p.authorized(r) {
			authFailures.Inc()
			p.log.Warn("bluebubbles webhook refused", "reason", "missing or wrong secret", "remote", r.RemoteAddr)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		p.message(w, r, conn, held)
	})
}

func (p *Platform) message(w http.ResponseWriter, r *http.Request, conn platform.Deliverer, held *hold) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		http.Error(w, "content type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			conn.Reject(r.Context(), "bluebubbles webhook too large", err)
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	wh, m, err := parseWebhook(body)
	if err != nil {
		conn.Reject(r.Context(), "malformed bluebubbles webhook", err)
		http.Error(w, "malformed webhook", http.StatusBadRequest)
		return
	}
	in := normalize(wh, m, p.Account(), p.cfg.RequireMention, p.mentions)
	switch {
	case in.err != nil:
		conn.Reject(r.Context(), "malformed bluebubbles message", in.err)
		http.Error(w, "not a message", http.StatusBadRequest)
		return
	case in.ev == nil:
		skipped.WithLabelValues(in.skip).Inc()
		p.log.Debug("bluebubbles webhook skipped", "reason", in.skip, "type", reason(wh.Type))
	default:
		if in.dmGUID != "" {
			p.remember(in.dmAddr, in.dmGUID)
		}
		acc, err := p.publish(r.Context(), held, in.ev)
		if err != nil && !errors.Is(err, platform.ErrRejected) {
			p.holdMessage(w, in.ev, err)
			return
		}
		if err == nil && !acc.Duplicate && p.cfg.SendReadReceipts && p.privateAPI.Load() {
			p.markRead(in.ev.GetSource())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"ok"}`)
}

// publish queues ev on the hold behind its chat's earlier messages, in
// the order the calls arrived, and waits up to ack_timeout for it to be
// published. An error other than
// platform.ErrRejected (the kit refused it for good) means it was not:
// it is held, or lost when the hold is full (errHoldFull).
func (p *Platform) publish(ctx context.Context, held *hold, ev *eventsv1.MessageReceived) (platform.Accepted, error) {
	q, behindHeld := held.add(ev)
	switch {
	case q == nil:
		return platform.Accepted{}, errHoldFull
	case behindHeld:
		return platform.Accepted{}, errors.New("the bus was out of reach at the last attempt")
	}
	t := time.NewTimer(p.cfg.AckTimeout)
	defer t.Stop()
	select {
	case res := <-q.first:
		return res.acc, res.err
	case <-t.C:
		return platform.Accepted{}, errors.New("earlier messages of the chat are being published")
	case <-ctx.Done():
		return platform.Accepted{}, ctx.Err()
	}
}

// errHoldFull: the bus cannot take the message and the hold is full.
var errHoldFull = errors.New("the hold is full")

// holdMessage answers a call whose message the bus did not take: 202
// when it is held, 500 when the hold was full (BlueBubbles will not post
// it again: it is lost).
func (p *Platform) holdMessage(w http.ResponseWriter, ev *eventsv1.MessageReceived, err error) {
	if errors.Is(err, errHoldFull) {
		p.log.Error("bluebubbles message lost: the bus cannot take it and the hold is full", "guid", ev.GetEventId())
		http.Error(w, "not stored", http.StatusInternalServerError)
		return
	}
	p.log.Warn("bluebubbles message held until the bus takes it", "guid", ev.GetEventId(), "err", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"held"}`)
}
