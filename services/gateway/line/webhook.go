package line

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// HeaderSignature carries the base64 HMAC-SHA256 of the raw body keyed
// with the channel secret.
const HeaderSignature = "X-Line-Signature"

// serveWebhook serves the webhook until ctx ends.
func (p *Platform) serveWebhook(ctx context.Context, conn platform.Conn) error {
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.WebhookHandler(conn))
	mux.HandleFunc(strings.TrimRight(p.cfg.Path, "/")+"/health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok","platform":"line"}`)
	})
	err := platform.ServeWebhook(ctx, conn, p.log, p.Name(), p.cfg.Addr, mux, p.cfg.AckTimeout, func(addr string) {
		p.addr.Store(addr)
		p.log.Info("line webhook listening", "addr", addr, "path", p.cfg.Path)
	})
	if err != nil {
		return fmt.Errorf("line webhook: %w", err)
	}
	return nil
}

// WebhookHandler serves LINE's POSTs. A delivery is answered 405 unless
// it is a POST, 413 over MaxBodyBytes, 401 without a valid
// X-Line-Signature (nothing is published), 400 when the signed body is
// not a LINE delivery, 500 when one of its events could not be published
// (LINE redelivers the delivery when redelivery is on; what was published
// is not published twice), and 200 once every message event is on the
// bus or deliberately skipped. A malformed event among good ones is
// rejected with a logged reason and does not hold back the others. The
// console's Verify (a delivery without events) is answered 200.
func (p *Platform) WebhookHandler(conn platform.Deliverer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p.delivery(w, r, conn)
	})
}

func (p *Platform) delivery(w http.ResponseWriter, r *http.Request, conn platform.Deliverer) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			conn.Reject(r.Context(), "line webhook too large", err)
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if !validSignature(p.cfg.ChannelSecret, r.Header.Get(HeaderSignature), body) {
		signatureFailures.Inc()
		p.log.Warn("line webhook refused", "reason", "bad signature", "remote", r.RemoteAddr, "has_signature", r.Header.Get(HeaderSignature) != "")
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	pl, err := parsePayload(body)
	if err != nil {
		conn.Reject(r.Context(), "malformed line webhook", err)
		http.Error(w, "not a line webhook", http.StatusBadRequest)
		return
	}
	ru := &rules{account: p.account, bot: p.botUserID(), data: p.cfg.DataBaseURL, groups: p.groups, rooms: p.rooms,
		requireMention: p.cfg.RequireMention, freeGroups: p.freeGroups, freeRooms: p.freeRooms}
	if ru.bot == "" && strings.HasPrefix(pl.Destination, "U") {
		ru.bot = pl.Destination // the bot's user id, when /v2/bot/info was out of reach
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AckTimeout)
	defer cancel()
	for i := range pl.Events {
		in := normalize(&pl.Events[i], ru)
		switch {
		case in.err != nil:
			conn.Reject(r.Context(), "malformed line event", in.err)
			continue
		case in.ev == nil:
			skipped.WithLabelValues(in.skip).Inc()
			p.log.Debug("line event skipped", "reason", in.skip)
			continue
		}
		if in.replyToken != "" {
			if err := p.keepReplyToken(ctx, in.ev.GetSource().GetChatId(), in.replyToken); err != nil {
				p.log.Warn("line reply token not kept; the answer is pushed", "err", err)
			}
		}
		if _, err := conn.Deliver(ctx, in.ev); err != nil && !errors.Is(err, platform.ErrRejected) {
			p.log.Warn("line event not stored; line redelivers the webhook if redelivery is on", "webhook_event_id", in.ev.GetEventId(), "err", err)
			http.Error(w, "not stored", http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}

// signature is LINE's signature of body: HMAC-SHA256 keyed with the
// channel secret.
func signature(secret string, body []byte) []byte {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return mac.Sum(nil)
}

// validSignature reports whether header is the base64 signature of body
// (constant time). An empty secret accepts nothing.
func validSignature(secret, header string, body []byte) bool {
	got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header))
	if err != nil || secret == "" || len(got) != sha256.Size {
		return false
	}
	return hmac.Equal(got, signature(secret, body))
}
