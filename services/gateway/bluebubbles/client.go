package bluebubbles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// ErrCredentials is the server refusing the password.
var ErrCredentials = errors.New("the bluebubbles server refused the password")

// ErrChatNotFound is a send to an address no chat of the server has.
var ErrChatNotFound = errors.New("bluebubbles has no chat with this address")

// APIError is an error answer of the BlueBubbles REST API: {"status",
// "message", "error": {"type", "message"}}.
type APIError struct {
	Status     int // HTTP status
	Type       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Type != "" {
		return fmt.Sprintf("bluebubbles HTTP %d (%s): %s", e.Status, e.Type, e.Message)
	}
	return fmt.Sprintf("bluebubbles HTTP %d: %s", e.Status, e.Message)
}

// defaultRetryAfter is the wait before retrying a rate-limited send
// without a Retry-After.
const defaultRetryAfter = 2 * time.Second

// classify maps a failed REST call to delivery's error classes: 429 →
// RATE_LIMITED, 5xx and network trouble → retryable, 401 and other 4xx →
// PERMANENT.
func classify(err error) error {
	var ae *APIError
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.Status == http.StatusTooManyRequests:
		d := ae.RetryAfter
		if d <= 0 {
			d = defaultRetryAfter
		}
		return platform.RateLimited(err, d)
	case ae.Status >= 500:
		return err
	case ae.Status == http.StatusUnauthorized:
		return platform.Permanent(fmt.Errorf("%w: %w", ErrCredentials, err))
	case ae.Status >= 400:
		return platform.Permanent(err)
	}
	return err
}

// client is a small client of the BlueBubbles REST API: JSON requests
// with the password in the query, answers {"status", "message", "data"}.
type client struct {
	base     string // without a trailing slash
	password string
	hc       *http.Client
}

// maxAnswerBytes bounds a REST answer the gateway reads.
const maxAnswerBytes = 4 << 20

// url is the full URL of path (which may carry a query) with the
// password.
func (c *client) url(path string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return c.base + path + sep + "password=" + url.QueryEscape(c.password)
}

// call sends a JSON request and decodes the answer's data into out.
func (c *client) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	ct := ""
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd, ct = bytes.NewReader(b), "application/json"
	}
	return c.send(ctx, method, path, ct, rd, out)
}

// send sends a request with a body of content type ct (none when rd is
// nil) and decodes the answer's data into out.
func (c *client) send(ctx context.Context, method, path, ct string, rd io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), rd)
	if err != nil {
		return fmt.Errorf("bluebubbles %s: %w", cut(path), err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		// The error's URL would carry the password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("bluebubbles %s %s: %w", method, cut(path), err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("bluebubbles %s: read answer: %w", cut(path), err)
	}
	return decodeAnswer(resp.StatusCode, resp.Header.Get("Retry-After"), raw, cut(path), out)
}

// decodeAnswer reads a REST answer: an *APIError for an HTTP status
// other than 2xx or an envelope whose status is 400 or more, else the
// envelope's data decoded into out (when out is not nil).
func decodeAnswer(status int, retryAfter string, raw []byte, path string, out any) error {
	var wire struct {
		Status  int             `json:"status"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
		Error   *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	decodeErr := json.Unmarshal(raw, &wire)
	if status/100 != 2 || (decodeErr == nil && wire.Status >= 400) {
		ae := &APIError{Status: status, Message: http.StatusText(status)}
		if status/100 == 2 {
			ae.Status = wire.Status
		}
		if decodeErr == nil {
			if wire.Message != "" {
				ae.Message = wire.Message
			}
			if wire.Error != nil {
				ae.Type = wire.Error.Type
				if wire.Error.Message != "" {
					ae.Message = wire.Error.Message
				}
			}
		}
		if s, err := strconv.Atoi(strings.TrimSpace(retryAfter)); err == nil && s > 0 {
			ae.RetryAfter = time.Duration(min(s, 3600)) * time.Second
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if decodeErr != nil {
		return fmt.Errorf("bluebubbles %s: decode answer: %w", path, decodeErr)
	}
	if len(wire.Data) == 0 || string(wire.Data) == "null" {
		return nil
	}
	if err := json.Unmarshal(wire.Data, out); err != nil {
		return fmt.Errorf("bluebubbles %s: decode data: %w", path, err)
	}
	return nil
}

// cut is a path for an error message, without its query.
func cut(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}
