package teams

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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

// failure is the connector's error answer, classified for delivery. A
// 412 is transient on the connector: Microsoft's rate-limit guide has
// bots retry 412, 502 and 504 as they retry 429.
func failure(resp *http.Response, body []byte) error {
	e := decodeAPIError(resp, body)
	if e.Status == http.StatusPreconditionFailed {
		return e
	}
	return platform.ByStatus(e, e.Status, e.RetryAfter, defaultRetryAfter)
}

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
	e.RetryAfter = platform.RetryAfter(resp.Header.Get("Retry-After"))
	return e
}

// defaultRetryAfter is the wait after a 429 without Retry-After (the
// connector allows a few messages a second per conversation).
const defaultRetryAfter = 2 * time.Second
