// Package bearer calls REST APIs that take an OAuth2 access token (the
// Bot Connector, Google's Chat API): it gets tokens from a token
// endpoint, keeps one until shortly before it expires, and sends JSON
// with it, trying once more with a new token when the API refuses the
// old one.
package bearer

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

// MaxAnswerBytes bounds an answer the client reads.
const MaxAnswerBytes = 1 << 20

// TokenError is a refusal of the token endpoint (an OAuth2 error).
type TokenError struct {
	Status      int
	Code        string // error: invalid_client, invalid_grant …
	Description string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("token endpoint HTTP %d: %s: %s", e.Status, e.Code, e.Description)
}

// Refused reports whether the credentials are wrong, expired or not
// allowed: no retry mends that.
func (e *TokenError) Refused() bool {
	switch e.Code {
	case "invalid_client", "unauthorized_client", "invalid_request", "invalid_grant", "invalid_scope":
		return true
	}
	return e.Status == http.StatusUnauthorized
}

// Refused reports whether err is a token endpoint's refusal.
func Refused(err error) bool {
	var te *TokenError
	return errors.As(err, &te) && te.Refused()
}

// Tokens gets access tokens by POSTing the grant Form makes to URL, and
// keeps one until five minutes (or half its life, for short ones)
// before it expires.
type Tokens struct {
	URL string
	// Form is the grant's form (client credentials, a signed JWT
	// assertion, …) for a request made at now.
	Form func(now time.Time) (url.Values, error)
	HC   *http.Client

	mu      sync.Mutex
	access  string
	expires time.Time
}

// Token returns a valid access token, asking for one when needed.
func (t *Tokens) Token(ctx context.Context) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if t.access != "" && now.Before(t.expires) {
		return t.access, nil
	}
	form, err := t.Form(now)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := t.HC.Do(req)
	if err != nil {
		return "", fmt.Errorf("token request: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
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
	t.access, t.expires = out.AccessToken, now.Add(ttl-min(5*time.Minute, ttl/2))
	return t.access, nil
}

// Forget drops the cached token when it is tok (the API refused it).
func (t *Tokens) Forget(tok string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.access == tok {
		t.access = ""
	}
}

// Client calls an API with JSON bodies and the bearer token of Tokens.
type Client struct {
	Tokens *Tokens
	HC     *http.Client
	// Name names the API in errors ("bot connector", "chat api").
	Name string
	// Failure turns a non-2xx answer into the error Do returns,
	// classified for delivery (platform.Permanent, RateLimited, …).
	Failure func(resp *http.Response, body []byte) error
}

// Do sends body (nil: none) as JSON to u and decodes a 2xx answer into
// out (nil: ignored). A 401 drops the cached token and tries once more
// with a new one; a token endpoint's refusal is Permanent.
func (c *Client) Do(ctx context.Context, method, u string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return platform.Permanent(fmt.Errorf("%s: encode request: %w", c.Name, err))
		}
	}
	for attempt := 0; ; attempt++ {
		tok, err := c.Tokens.Token(ctx)
		if err != nil {
			if Refused(err) {
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
		resp, err := c.HC.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.Name, method, err)
		}
		answer, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			c.Tokens.Forget(tok)
			continue
		}
		if resp.StatusCode/100 != 2 {
			return c.Failure(resp, answer)
		}
		if rerr != nil {
			return fmt.Errorf("%s %s: read answer: %w", c.Name, method, rerr)
		}
		if out != nil && len(bytes.TrimSpace(answer)) > 0 {
			if err := json.Unmarshal(answer, out); err != nil {
				return fmt.Errorf("%s %s: decode answer: %w", c.Name, method, err)
			}
		}
		return nil
	}
}
