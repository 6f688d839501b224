package googlechat

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxAnswerBytes bounds an answer of Google's the gateway reads.
const maxAnswerBytes = 1 << 20

// serviceAccount is the part of a service account key the gateway uses.
type serviceAccount struct {
	ClientEmail  string `json:"client_email"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	TokenURI     string `json:"token_uri"`
	key          *rsa.PrivateKey
}

// loadServiceAccount reads a key: inline JSON, or the path of its file.
func loadServiceAccount(src string) (*serviceAccount, error) {
	data := []byte(strings.TrimSpace(src))
	if !bytes.HasPrefix(data, []byte("{")) {
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("read service account key: %w", err)
		}
		data = b
	}
	var sa serviceAccount
	if err := json.Unmarshal(data, &sa); err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	if sa.ClientEmail == "" || sa.PrivateKey == "" {
		return nil, errors.New("service account key has no client_email or private_key")
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(sa.PrivateKey))
	if err != nil {
		return nil, fmt.Errorf("service account private_key: %w", err)
	}
	sa.key = key
	if sa.TokenURI == "" {
		sa.TokenURI = DefaultTokenURL
	}
	return &sa, nil
}

// TokenError is a refusal of the token endpoint (an OAuth2 error).
type TokenError struct {
	Status      int
	Code        string
	Description string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("token endpoint HTTP %d: %s: %s", e.Status, e.Code, e.Description)
}

// refused: the key is wrong, disabled or not allowed.
func (e *TokenError) refused() bool {
	switch e.Code {
	case "invalid_client", "unauthorized_client", "invalid_grant", "invalid_scope":
		return true
	}
	return e.Status == http.StatusUnauthorized
}

// tokenSource gets the app's access tokens with the JWT bearer grant
// (RFC 7523: an assertion signed with the service account's key) and
// keeps one until shortly before it expires.
type tokenSource struct {
	sa *serviceAccount
	hc *http.Client

	mu      sync.Mutex
	access  string
	expires time.Time
}

func (s *tokenSource) token(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.access != "" && time.Now().Before(s.expires) {
		return s.access, nil
	}
	now := time.Now()
	a := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": s.sa.ClientEmail, "scope": Scope, "aud": s.sa.TokenURI,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	if s.sa.PrivateKeyID != "" {
		a.Header["kid"] = s.sa.PrivateKeyID
	}
	assertion, err := a.SignedString(s.sa.key)
	if err != nil {
		return "", fmt.Errorf("sign token assertion: %w", err)
	}
	form := url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {assertion}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.sa.TokenURI, strings.NewReader(form.Encode()))
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
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
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
	ttl := time.Duration(out.ExpiresIn) * time.Second
	if ttl <= 0 {
		ttl = time.Hour
	}
	s.access, s.expires = out.AccessToken, now.Add(ttl-min(5*time.Minute, ttl/2))
	return s.access, nil
}

func (s *tokenSource) forget(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.access == tok {
		s.access = ""
	}
}

// APIError is an error answer of the Chat API: {"error": {"code",
// "message", "status"}}.
type APIError struct {
	HTTPStatus int
	Status     string // RESOURCE_EXHAUSTED, PERMISSION_DENIED …
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("chat api HTTP %d: %s: %s", e.HTTPStatus, e.Status, e.Message)
}

// chatAPI calls the Chat REST API with the app's token.
type chatAPI struct {
	base   string
	tokens *tokenSource
	hc     *http.Client
}

// do sends body as JSON to base+path (path and query already escaped)
// and decodes a 2xx answer into out. A 401 drops the cached token and
// tries once more.
func (c *chatAPI) do(ctx context.Context, method, path string, body, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return platform.Permanent(fmt.Errorf("encode message: %w", err))
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
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(data))
		if err != nil {
			return platform.Permanent(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		if data != nil {
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return fmt.Errorf("chat api %s: %w", method, err)
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
			return fmt.Errorf("chat api %s: read answer: %w", method, rerr)
		}
		if out != nil && len(bytes.TrimSpace(answer)) > 0 {
			if err := json.Unmarshal(answer, out); err != nil {
				return fmt.Errorf("chat api %s: decode answer: %w", method, err)
			}
		}
		return nil
	}
}

func decodeAPIError(resp *http.Response, body []byte) *APIError {
	e := &APIError{HTTPStatus: resp.StatusCode}
	var wire struct {
		Error struct {
			Message string `json:"message"`
			Status  string `json:"status"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && (wire.Error.Status != "" || wire.Error.Message != "") {
		e.Status, e.Message = wire.Error.Status, wire.Error.Message
	} else {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// defaultRetryAfter is the wait after a 429 without Retry-After (the
// Chat API allows one write a second per space).
const defaultRetryAfter = 2 * time.Second

// classify maps a Chat API failure to delivery's classes: 429 →
// RATE_LIMITED; 5xx and 408 → retryable; any other 4xx → PERMANENT (the
// app removed from the space, a space or message gone, a bad request).
func classify(err error) error {
	var ae *APIError
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.HTTPStatus == http.StatusTooManyRequests:
		d := ae.RetryAfter
		if d <= 0 {
			d = defaultRetryAfter
		}
		return platform.RateLimited(err, d)
	case ae.HTTPStatus >= 500 || ae.HTTPStatus == http.StatusRequestTimeout:
		return err
	case ae.HTTPStatus >= 400:
		return platform.Permanent(err)
	}
	return err
}
