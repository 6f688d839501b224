package line

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// defaultRetryAfter is the wait before retrying a rate-limited call when
// LINE's answer has no Retry-After (it usually has none).
const defaultRetryAfter = 2 * time.Second

// maxAnswerBytes bounds an API answer the gateway reads.
const maxAnswerBytes = 1 << 20

// APIError is an error answer of the Messaging API: {"message",
// "details": [{"message", "property"}]}, with the HTTP status.
type APIError struct {
	Status     int
	Message    string
	Details    []string // "property: message"
	RetryAfter time.Duration
	// AcceptedRequestID is X-Line-Accepted-Request-Id of a 409: the
	// request that already took this retry key.
	AcceptedRequestID string
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("line HTTP %d: %s", e.Status, e.Message)
	if len(e.Details) > 0 {
		s += " (" + strings.Join(e.Details, "; ") + ")"
	}
	return s
}

// invalidReplyToken: the token was used, expired or never issued.
func (e *APIError) invalidReplyToken() bool {
	return e.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(e.Message), "invalid reply token")
}

// retryKeyAccepted: a push with this X-Line-Retry-Key was accepted
// before; this one was not sent again.
func (e *APIError) retryKeyAccepted() bool {
	return e.Status == http.StatusConflict && (e.AcceptedRequestID != "" || strings.Contains(strings.ToLower(e.Message), "retry key"))
}

// Errors of calls LINE refused for good, with what they mean.
var (
	ErrToken        = errors.New("line refused the channel access token (LINE_CHANNEL_ACCESS_TOKEN): reissue it in the LINE Developers Console")
	ErrMonthlyLimit = errors.New("the channel reached its monthly limit of push messages; replies within the reply token's minute are still free")
	ErrForbidden    = errors.New("the channel may not use this LINE API (plan or permission)")
	ErrNotFound     = errors.New("line has no such chat or message for this channel (the user blocked the bot, or the bot left the group)")
	ErrDownload     = errors.New("line content download failed")
)

// classify maps a Messaging API failure to delivery's error classes:
// 429 → RATE_LIMITED after Retry-After or a default, except the monthly
// push limit, which no retry soon fixes → PERMANENT; 5xx → retryable;
// 401, 403, 404 and any other 4xx → PERMANENT with LINE's message;
// network trouble stays retryable.
func classify(err error) error {
	var le *APIError
	if err == nil || !errors.As(err, &le) {
		return err
	}
	switch {
	case le.Status == http.StatusTooManyRequests && strings.Contains(strings.ToLower(le.Message), "monthly limit"):
		return platform.Permanent(fmt.Errorf("%w: %w", ErrMonthlyLimit, err))
	case le.Status == http.StatusTooManyRequests:
		d := le.RetryAfter
		if d <= 0 {
			d = defaultRetryAfter
		}
		return platform.RateLimited(err, d)
	case le.Status >= 500:
		return err
	case le.Status == http.StatusUnauthorized:
		return platform.Permanent(fmt.Errorf("%w: %w", ErrToken, err))
	case le.Status == http.StatusForbidden:
		return platform.Permanent(fmt.Errorf("%w: %w", ErrForbidden, err))
	case le.Status == http.StatusNotFound:
		return platform.Permanent(fmt.Errorf("%w: %w", ErrNotFound, err))
	case le.Status >= 400:
		return platform.Permanent(err)
	}
	return err
}

// api is a small client of the Messaging API: JSON bodies with the
// channel's bearer token, errors decoded into *APIError. (line-bot-sdk-go
// was not used: its generated client is large for the five endpoints
// the gateway calls, as Hermes found too.)
type api struct {
	base  string // api.line.me, without a trailing slash
	data  string // api-data.line.me
	token string
	hc    *http.Client
}

func (a *api) get(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return a.do(req, out)
}

// post posts body as JSON to path on the API host, with the extra
// headers.
func (a *api) post(ctx context.Context, path string, body any, header http.Header, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("line %s: encode: %w", path, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	return a.do(req, out)
}

// do sends req with the token and decodes a 2xx answer into out.
func (a *api) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("line %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("line %s: read answer: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp, body)
	}
	if out == nil || len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("line %s: decode answer: %w", req.URL.Path, err)
	}
	return nil
}

func decodeError(resp *http.Response, body []byte) *APIError {
	le := &APIError{Status: resp.StatusCode, AcceptedRequestID: resp.Header.Get("X-Line-Accepted-Request-Id")}
	var wire struct {
		Message string `json:"message"`
		Details []struct {
			Message  string `json:"message"`
			Property string `json:"property"`
		} `json:"details"`
	}
	if json.Unmarshal(body, &wire) == nil && wire.Message != "" {
		le.Message = wire.Message
		for _, d := range wire.Details {
			le.Details = append(le.Details, d.Property+": "+d.Message)
		}
	} else if le.Message = http.StatusText(resp.StatusCode); le.Message == "" {
		// A status Go has no name for (a proxy's 520, …).
		le.Message = "answer without a LINE error"
	}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		le.RetryAfter = time.Duration(s) * time.Second
	}
	return le
}
