package telegram

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/go-telegram/bot"

	"github.com/switchboard-chat/switchboard/pkg/platform"
	secretpkg "github.com/switchboard-chat/switchboard/pkg/secret"
)

// maxWebhookBody bounds one webhook update.
const maxWebhookBody = 1 << 20

// webhookConnections is setWebhook's max_connections (see serveWebhook).
const webhookConnections = 1

// serveWebhook registers the webhook with Telegram and serves it until
// ctx ends. Each replica serves the same URL path; Telegram retries an
// update until one answers 200, which happens only after the bus ack.
func (p *Platform) serveWebhook(ctx context.Context, conn platform.Conn) error {
	u, err := url.Parse(p.cfg.WebhookURL)
	if err != nil {
		return platform.Fatal(fmt.Errorf("gateways.telegram.webhook_url: %w", err))
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+path, p.WebhookHandler(conn))
	ln, err := net.Listen("tcp", p.cfg.WebhookListen)
	if err != nil {
		return fmt.Errorf("listen for the webhook on %s: %w", p.cfg.WebhookListen, err)
	}
	// Anyone who finds the URL can connect: every phase of a connection
	// is bounded, so idle or trickling connections cannot pile up.
	bounds := p.webhookBounds
	// An update whose handling panics is answered 200 (logged, counted):
	// Telegram retries an update until it is answered 200, and over one
	// connection every later update waits behind it.
	srv := &http.Server{Handler: platform.RecoverHTTP(mux, p.log, "telegram", http.StatusOK, conn), ReadHeaderTimeout: bounds.header, ReadTimeout: bounds.read,
		WriteTimeout: bounds.read + 30*time.Second, IdleTimeout: bounds.idle}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	// One connection: Telegram then posts an update only once the last
	// one was answered (after its bus ack), so the updates of a chat are
	// published in the order they were sent (DESIGN invariant 5). Over
	// its default 40 connections two quick messages of one chat can be
	// published out of order, and update_id cannot restore that later:
	// its gaps (other chats, other update kinds) look like an update
	// still in flight.
	params := &bot.SetWebhookParams{URL: p.cfg.WebhookURL, SecretToken: p.cfg.WebhookSecret, AllowedUpdates: allowedUpdates, MaxConnections: webhookConnections}
	if _, err := p.api.SetWebhook(ctx, params); err != nil {
		if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
			return platform.Fatal(fmt.Errorf("telegram rejected the bot token (setWebhook): %w", err))
		}
		if errors.Is(err, bot.ErrorBadRequest) {
			return platform.Fatal(fmt.Errorf("telegram refused the webhook: %w", err))
		}
		return fmt.Errorf("setWebhook: %w", err)
	}
	p.log.Info("telegram webhook registered", "listen", ln.Addr().String(), "path", path)
	conn.Connected()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return fmt.Errorf("webhook server: %w", err)
	}
}

// connBounds bound the phases of a webhook connection: its headers, the
// whole request, and the wait for the next request on a kept-alive one.
type connBounds struct{ header, read, idle time.Duration }

var webhookBounds = connBounds{header: 10 * time.Second, read: 30 * time.Second, idle: 30 * time.Second}

// HeaderSecretToken carries the webhook secret Telegram was given.
const HeaderSecretToken = "X-Telegram-Bot-Api-Secret-Token"

// secretOK reports whether a webhook call carries the configured secret
// (constant time); without a secret every call passes.
func secretOK(header, secret string) bool {
	return secret == "" || secretpkg.Equal(header, secret)
}

// WebhookHandler checks the secret token header, publishes the update and
// answers 200 once it is on the bus (or deliberately dropped); 500 makes
// Telegram retry.
func (p *Platform) WebhookHandler(conn platform.Conn) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !secretOK(r.Header.Get(HeaderSecretToken), p.cfg.WebhookSecret) {
			p.log.Warn("webhook call with a wrong secret token", "remote", r.RemoteAddr)
			http.Error(w, "forbidden", http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if len(body) > maxWebhookBody {
			// Answer 200: Telegram would retry a refusal forever.
			conn.Reject(r.Context(), "webhook update too large", fmt.Errorf("%d bytes", len(body)))
			w.WriteHeader(http.StatusOK)
			return
		}
		if err := p.handle(r.Context(), conn, body); err != nil {
			p.log.Warn("webhook update not stored; telegram will retry", "err", err)
			http.Error(w, "try again", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}
