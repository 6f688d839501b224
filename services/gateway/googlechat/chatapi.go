package googlechat

import (
	"bytes"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

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

// grant is the form of the JWT bearer grant (RFC 7523) made at now: an
// assertion signed with the service account's key, asking for Scope.
func (sa *serviceAccount) grant(now time.Time) (url.Values, error) {
	a := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": sa.ClientEmail, "scope": Scope, "aud": sa.TokenURI,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	})
	if sa.PrivateKeyID != "" {
		a.Header["kid"] = sa.PrivateKeyID
	}
	assertion, err := a.SignedString(sa.key)
	if err != nil {
		return nil, fmt.Errorf("sign token assertion: %w", err)
	}
	return url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:jwt-bearer"}, "assertion": {assertion}}, nil
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

// failure is the Chat API's error answer, classified for delivery.
func failure(resp *http.Response, body []byte) error {
	e := decodeAPIError(resp, body)
	return platform.ByStatus(e, e.HTTPStatus, e.RetryAfter, defaultRetryAfter)
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
	e.RetryAfter = platform.RetryAfter(resp.Header.Get("Retry-After"))
	return e
}

// defaultRetryAfter is the wait after a 429 without Retry-After (the
// Chat API allows one write a second per space).
const defaultRetryAfter = 2 * time.Second
