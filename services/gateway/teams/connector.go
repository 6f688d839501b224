package teams

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
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxAnswerBytes bounds an answer of Microsoft's the gateway reads.
const maxAnswerBytes = 1 << 20

// TokenError is a refusal of the token endpoint (an OAuth2 error).
type TokenError struct {
	Status      int
	Code        string // error: invalid_client, unauthorized_client …
	Description string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("token endpoint HTTP %d: %s: %s", e.Status, e.Code, e.Description)
}

// refused: the app id or secret is wrong, expired or not allowed.
func (e *TokenError) refused() bool {
	switch e.Code {
	case "invalid_client", "unauthorized_client", "invalid_request", "invalid_grant", "invalid_scope":
		return true
	}
	return e.Status == http.StatusUnauthorized
}

// tokenSource gets the bot's own tokens (OAuth2 client credentials) and
// keeps one until shortly before it expires.
type tokenSource struct {
	url, clientID, secret, scope string
	hc                           *http.Client

	mu      sync.Mutex
	access  string
	expires time.Time
}

// token returns a valid access token, asking for one when the cached one
// expires within five minutes (or half its life, for short ones).
func (s *tokenSource) token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.access != "" && time.Now().Before(s.expires) {
		return s.access, nil
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {s.clientID}, "client_secret": {s.secret}, "scope": {s.scope}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := s.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("token request: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return "", fmt.Errorf("token request: read answer: %w", err)
	}
	var out struct {
		AccessToken string          `json:"access_token"`
		ExpiresIn   json.RawMessage `json:"expires_in"` // a number, or a string of one
		Error       string          `json:"error"`
		Description string          `json:"error_description"`
	}
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != http.StatusOK {
		if out.Error == "" {
			out.Error = http.StatusText(resp.StatusCode)
		}
		return "", &TokenError{Status: resp.StatusCode, Code: out.Error, Description: out.Description}
	}
	if out.AccessToken == "" {
		return "", errors.New("token endpoint answered without an access_token")
	}
	life, _ := strconv.Atoi(strings.Trim(string(out.ExpiresIn), `"`))
	if life <= 0 {
		life = 3600
	}
	ttl := time.Duration(life) * time.Second
	margin := min(5*time.Minute, ttl/2)
	s.access, s.expires = out.AccessToken, time.Now().Add(ttl-margin)
	return s.access, nil
}

// forget drops the cached token (the connector refused it).
func (s *tokenSource) forget(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.access == tok {
		s.access = ""
	}
}

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

// connector calls the Bot Connector REST API with the bot's token.
type connector struct {
	tokens *tokenSource
	hc     *http.Client
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

// do sends body as JSON with the bot's token and decodes a 2xx answer
// into out. A 401 drops the cached token and tries once more with a new one.
func (c *connector) do(ctx context.Context, method, u string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode activity: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		tok, err := c.tokens.token(ctx)
		if err != nil {
			var te *TokenError
			if errors.As(err, &te) && te.refused() {
				return platform.Permanent(err)
			}
			return err
		}
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(data))
		if err != nil {
			return platform.Permanent(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if data != nil {
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return fmt.Errorf("bot connector %s: %w", method, err)
		}
		answer, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			c.tokens.forget(tok)
			continue
		}
		if resp.StatusCode/100 != 2 {
			return classify(decodeAPIError(resp, answer))
		}
		if rerr != nil {
			return fmt.Errorf("bot connector %s: read answer: %w", method, rerr)
		}
		if out != nil && len(bytes.TrimSpace(answer)) > 0 {
			if err := json.Unmarshal(answer, out); err != nil {
				return fmt.Errorf("bot connector %s: decode answer: %w", method, err)
			}
		}
		return nil
	}
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
