package whatsapp

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
	"github.com/switchboard-chat/switchboard/pkg/secret"
)

// HeaderSignature carries "sha256=" and the hex HMAC-SHA256 of the raw
// body keyed with the app secret.
const HeaderSignature = "X-Hub-Signature-256"

// serveWebhook serves the webhook until ctx ends.
func (p *Platform) serveWebhook(ctx context.Context, conn platform.Conn) error {
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.WebhookHandler(conn))
	err := platform.ServeWebhook(ctx, conn, p.log, p.Name(), p.cfg.Addr, mux, p.cfg.AckTimeout, func(addr string) {
		p.addr.Store(addr)
		p.log.Info("whatsapp webhook listening", "addr", addr, "path", p.cfg.Path)
	})
	if err != nil {
		return fmt.Errorf("whatsapp webhook: %w", err)
	}
	return nil
}

// WebhookHandler serves Meta's calls: GET is the subscription handshake
// (hub.mode=subscribe, hub.verify_token, hub.challenge), POST a
// notification. A notification is answered 401 without a valid
// X-Hub-Signature-256, 413 over MaxBodyBytes, 400 when it is not JSON,
// 500 when a message could not be published (Meta retries the
// notification; what was published is not published twice) and 200 once
// every message is on the bus or deliberately dropped.
func (p *Platform) WebhookHandler(conn platform.Deliverer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch r.Method {
		case http.MethodGet:
			p.verifySubscription(w, r)
		case http.MethodPost:
			p.notification(w, r, conn)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

// verifySubscription answers the handshake Meta makes when the webhook
// is set up: the challenge echoed back when the verify token matches.
func (p *Platform) verifySubscription(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case q.Get("hub.mode") != "subscribe":
		http.Error(w, "hub.mode must be subscribe", http.StatusBadRequest)
	case !secret.Equal(q.Get("hub.verify_token"), p.cfg.VerifyToken):
		p.log.Warn("whatsapp subscription with a wrong verify token", "remote", r.RemoteAddr)
		http.Error(w, "verify token mismatch", http.StatusForbidden)
	case q.Get("hub.challenge") == "" || len(q.Get("hub.challenge")) > 256:
		http.Error(w, "missing hub.challenge", http.StatusBadRequest)
	default:
		p.log.Info("whatsapp webhook subscription verified")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, q.Get("hub.challenge"))
	}
}

func (p *Platform) notification(w http.ResponseWriter, r *http.Request, conn platform.Deliverer) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			conn.Reject(r.Context(), "whatsapp notification too large", err)
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if !validSignature(body, r.Header.Get(HeaderSignature), p.cfg.AppSecret) {
		signatureFailures.Inc()
		p.log.Warn("whatsapp notification refused", "reason", "bad signature", "remote", r.RemoteAddr, "has_signature", r.Header.Get(HeaderSignature) != "")
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	n, err := parseNotification(body, p.cfg.PhoneNumberID)
	if err != nil {
		conn.Reject(r.Context(), "malformed whatsapp notification", err)
		http.Error(w, "malformed notification", http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AckTimeout)
	defer cancel()
	if err := p.publish(ctx, conn, n); err != nil {
		p.log.Warn("whatsapp notification not stored; meta will retry", "err", err)
		http.Error(w, "not stored", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// publish delivers a notification's messages in order. It stops at the
// first one that could not be stored: Meta sends the whole notification
// again, and the ones before it are known duplicates then.
func (p *Platform) publish(ctx context.Context, conn platform.Deliverer, n parsed) error {
	for _, why := range n.skipped {
		skipped.WithLabelValues(why).Inc()
	}
	for _, s := range n.statuses {
		p.status(s)
		reportSent(ctx, conn, s)
	}
	for _, m := range n.messages {
		switch {
		case m.err != nil:
			conn.Reject(ctx, "malformed whatsapp message", m.err)
			continue
		case m.ev == nil:
			skipped.WithLabelValues(m.skip).Inc()
			p.log.Debug("whatsapp message skipped", "reason", m.skip)
			continue
		}
		if _, err := conn.Deliver(ctx, m.ev); err != nil && !errors.Is(err, platform.ErrRejected) {
			return fmt.Errorf("publish message %s: %w", m.ev.GetEventId(), err)
		}
	}
	return nil
}

// status counts a status notification: sent, delivered, read and failed
// are about messages the gateway sent, not messages to answer. A failed
// one is a message Graph accepted (its send was recorded sent) that never
// reached the user: the closed 24-hour window (131047) and an
// undeliverable number (131026) may be reported only here. It is counted
// by code and logged at warn with the message id (the outbox's platform
// message id), the chat and Meta's reason; nothing flows back to the
// outbox (delivery learns of a send only from its receipt).
func (p *Platform) status(s status) {
	statuses.WithLabelValues(reason(s.Status)).Inc()
	if s.Status != "failed" {
		return
	}
	code, title, msg, details := 0, "", "", ""
	if len(s.Errors) > 0 {
		e := s.Errors[0]
		code, title, msg, details = e.Code, e.Title, e.Message, e.ErrorData.Details
	}
	label := "unknown"
	if code > 0 {
		label = strconv.Itoa(code)
	}
	sendFailures.WithLabelValues(label).Inc()
	// Sent to a business-scoped user id, a status names no number.
	chat := cmp.Or(s.RecipientID, s.RecipientUserID)
	p.log.Warn("whatsapp reports a sent message failed", "message_id", pseudonym.Personal(s.ID), "chat_id", chat,
		"code", code, "title", title, "message", msg, "details", details)
}

// validSignature reports whether header is "sha256=" followed by the hex
// HMAC-SHA256 of body keyed with secret (constant time; hex of either
// case). An empty secret accepts nothing.
func validSignature(body []byte, header, secret string) bool {
	sig, ok := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if !ok || secret == "" || len(sig) != 2*sha256.Size {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}
