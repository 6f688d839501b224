package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-telegram/bot"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// allowedUpdates are the update kinds the gateway asks for.
var allowedUpdates = []string{"message", "channel_post", "callback_query"}

// apiError is a Bot API error answer.
type apiError struct {
	Code        int
	Description string
	RetryAfter  time.Duration
}

func (e *apiError) Error() string { return fmt.Sprintf("telegram %d: %s", e.Code, e.Description) }

type getUpdatesRequest struct {
	Offset         int64    `json:"offset,omitempty"`
	Limit          int      `json:"limit,omitempty"`
	Timeout        int      `json:"timeout"`
	AllowedUpdates []string `json:"allowed_updates,omitempty"`
}

// getUpdates is one raw call; the library has no exported getUpdates.
func (p *Platform) getUpdates(ctx context.Context, req getUpdatesRequest) ([]json.RawMessage, error) {
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+"/bot"+p.cfg.BotToken+"/getUpdates", bytes.NewReader(body))
	if err != nil {
		return nil, p.redact(err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := p.http.Do(hreq)
	if err != nil {
		return nil, p.redact(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read getUpdates answer: %w", p.redact(err))
	}
	return decodeUpdates(resp.StatusCode, data)
}

// maxRetryAfter caps the flood wait a getUpdates answer can ask for.
const maxRetryAfter = time.Hour

// decodeUpdates reads a getUpdates answer: the raw updates, or an
// *apiError with the code (the HTTP status when the body has none) and a
// retry_after within [0, maxRetryAfter].
func decodeUpdates(status int, data []byte) ([]json.RawMessage, error) {
	var env struct {
		OK          bool              `json:"ok"`
		Result      []json.RawMessage `json:"result"`
		ErrorCode   int               `json:"error_code"`
		Description string            `json:"description"`
		Parameters  struct {
			RetryAfter int64 `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("decode getUpdates answer (HTTP %d): %w", status, err)
	}
	if !env.OK {
		code := env.ErrorCode
		if code == 0 {
			code = status
		}
		wait := time.Duration(0)
		if s := env.Parameters.RetryAfter; s > 0 {
			wait = time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
		}
		return nil, &apiError{Code: code, Description: env.Description, RetryAfter: wait}
	}
	return env.Result, nil
}

// redact removes the token from transport errors (url.Error carries the URL).
func (p *Platform) redact(err error) error {
	if err == nil || !strings.Contains(err.Error(), p.cfg.BotToken) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), p.cfg.BotToken, "<token>"))
}

// poll is the long-poll loop. The offset sent with each request confirms
// every update below it, so it only advances past updates that are on
// the bus (or deliberately dropped). It starts without an offset:
// Telegram keeps the confirmed position, so a restarted or newly elected
// poller continues where the last confirmation left off.
//
// The gateway is connected once a first getUpdates has answered, a short
// one (firstPollTimeout), about a second after the start when nothing
// waits: the token works, no webhook holds the bot, and this replica's
// poll is the one Telegram serves (a poll still waiting elsewhere, from
// a poller outside the lease, is ended by it with 409). That is all a
// longer first poll proved too: a poller that turns up later ends this
// one's with 409 whenever it does, which stops the gateway.
func (p *Platform) poll(ctx context.Context, conn platform.Conn) error {
	// A webhook left behind makes getUpdates fail; polling mode owns the bot.
	if _, err := p.api.DeleteWebhook(ctx, &bot.DeleteWebhookParams{}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
			return platform.Fatal(fmt.Errorf("telegram rejected the bot token (deleteWebhook): %w", err))
		}
		return fmt.Errorf("deleteWebhook: %w", err)
	}
	var offset int64
	connected := false
	failures := 0
	timeout := int(p.cfg.PollTimeout / time.Second)
	for ctx.Err() == nil {
		// Until a getUpdates has answered, the poll is short
		// (firstPollTimeout): its answer is what makes the gateway
		// connected, and a long poll with nothing waiting would keep it
		// unready for the whole poll_timeout.
		wait := timeout
		if !connected {
			wait = min(timeout, firstPollTimeout)
		}
		updates, err := p.getUpdates(ctx, getUpdatesRequest{Offset: offset, Limit: 100, Timeout: wait, AllowedUpdates: allowedUpdates})
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				switch {
				case ae.Code == http.StatusConflict:
					return platform.Fatal(fmt.Errorf("another poller or a webhook is using this bot token (%s); stopping", ae.Description))
				case ae.Code == http.StatusUnauthorized || ae.Code == http.StatusNotFound:
					return platform.Fatal(fmt.Errorf("telegram rejected the bot token: %s", ae.Description))
				case ae.Code == http.StatusTooManyRequests && ae.RetryAfter > 0:
					p.log.Warn("getUpdates flood wait", "retry_after", ae.RetryAfter)
					if !sleepCtx(ctx, ae.RetryAfter) {
						return nil
					}
					continue
				}
			}
			// A network error or a 5xx (Telegram's 502s come and go) is
			// tried again here, soon, as python-telegram-bot's poller
			// does: going back to the runner would wait out its
			// reconnect backoff (30 s, then more) with the bot deaf.
			// Only a failure that lasts goes back to it.
			if failures < len(pollRetry) && (ae == nil || ae.Code >= 500) {
				p.log.Warn("getUpdates failed; polling again", "attempt", failures+1, "err", err)
				if !sleepCtx(ctx, pollRetry[failures]) {
					return nil
				}
				failures++
				continue
			}
			return fmt.Errorf("getUpdates: %w", err)
		}
		failures = 0
		if !connected {
			connected = true
			conn.Connected()
		}
		for _, raw := range updates {
			id, ok := updateID(raw)
			if !ok {
				conn.Reject(ctx, "update without update_id", fmt.Errorf("%.200s", raw))
				continue
			}
			if id < offset {
				// A redelivery of an update already confirmed in this
				// session: publishing it again is harmless (deduped).
				_ = p.handle(ctx, conn, raw)
				continue
			}
			if !p.handleRetrying(ctx, conn, raw) {
				// Not on the bus: nothing after it is confirmed either.
				// The next holder starts from Telegram's confirmed offset.
				return nil
			}
			offset = id + 1
		}
	}
	// No final confirming call on the way out: any getUpdates would
	// terminate a successor's poll with 409. The successor gets the last
	// unconfirmed batch again and the bus dedupe absorbs it.
	return nil
}

// firstPollTimeout (seconds) is the long-poll timeout of the getUpdates
// that connects the gateway: Telegram answers it at once with the
// updates waiting, with a 409 when a webhook or another poller holds the
// bot, or else after this second, with none; the polls after it wait
// poll_timeout. Its answer is what the gateway's readiness waits for.
// Not 0: Telegram keeps short polling (timeout 0) for tests.
const firstPollTimeout = 1

// pollRetry are the waits before polling again after getUpdates failed
// for a passing reason (about 15 s in all); after that the connection is
// reported lost and the runner's backoff applies.
var pollRetry = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// handleRetrying publishes one update, trying again (200 ms more each
// time, at most 5 s apart) while the bus cannot take it, rather than
// reconnecting: a reconnect waits out the connection backoff (30 s and
// more), and the bot would stay deaf that long after NATS is back. It
// reports false when ctx ended first; the update stays unconfirmed at
// Telegram.
func (p *Platform) handleRetrying(ctx context.Context, conn platform.Conn, raw []byte) bool {
	for attempt := 1; ; attempt++ {
		err := p.handle(ctx, conn, raw)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		p.log.Warn("telegram update not published; retrying", "attempt", attempt, "err", err)
		if !sleepCtx(ctx, min(time.Duration(attempt)*200*time.Millisecond, 5*time.Second)) {
			return false
		}
	}
}
