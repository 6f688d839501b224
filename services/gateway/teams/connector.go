package teams

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// APIError is an error answer of the Bot Connector API: {"error":
// {"code", "message"}}.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("bot connector HTTP %d: %s: %s", e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("bot connector HTTP %d: %s", e.Status, e.Message)
}

// activitiesURL is {serviceUrl}/v3/conversations/{conversation}/activities[/{id}],
// the ids path-escaped (a channel thread's conversation id has ";").
func activitiesURL(serviceURL, conversation, id string) string {
	u := strings.TrimRight(serviceURL, "/") + "/v3/conversations/" + url.PathEscape(conversation) + "/activities"
	if id != "" {
		u += "/" + url.PathEscape(id)
	}
	return u
}

// failure is the connector's error answer, classified for delivery.
func failure(resp *http.Response, body []byte) error { return classify(decodeAPIError(resp, body)) }

func decodeAPIError(resp *http.Response, body []byte) *APIError {
	e := &APIError{Status: resp.StatusCode}
	var wire struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && (wire.Error.Code != "" || wire.Error.Message != "") {
		e.Code, e.Message = wire.Error.Code, wire.Error.Message
	} else {
		e.Message = http.StatusText(resp.StatusCode)
	}
	e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
	return e
}

// retryAfter reads a Retry-After header: seconds or an HTTP date.
func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// defaultRetryAfter is the wait after a 429 without Retry-After (the
// connector allows a few messages a second per conversation).
const defaultRetryAfter = 2 * time.Second

// classify maps a connector failure to delivery's classes: 429 →
// RATE_LIMITED after Retry-After; 5xx (and 408) → retryable; any other
// 4xx → PERMANENT (forbidden, not found, bad request).
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
	case ae.Status >= 500 || ae.Status == http.StatusRequestTimeout:
		return err
	case ae.Status >= 400:
		return platform.Permanent(err)
	}
	return err
}
