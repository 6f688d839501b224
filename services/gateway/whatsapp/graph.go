package whatsapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Graph API error codes the gateway tells apart
// (developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
const (
	codeAPIUnknown        = 1      // unknown error: retry
	codeAPIService        = 2      // service temporarily unavailable
	codeAPITooManyCalls   = 4      // application request limit reached
	codeBadParameter      = 100    // invalid parameter
	codeAccessToken       = 190    // access token expired or invalid
	codeAccountRateLimit  = 80007  // the business account's rate limit
	codeThroughput        = 130429 // Cloud API throughput reached
	codeSomethingWrong    = 131000 // something went wrong: retry
	codeServiceUnavail    = 131016 // service unavailable
	codeReengagement      = 131047 // more than 24 hours since the user last wrote
	codeSpamRateLimit     = 131048 // spam rate limit hit
	codePairRateLimit     = 131056 // too many messages to this user at once
	codeServerUnavailable = 133004 // server temporarily unavailable
)

// Default waits before retrying a rate-limited send, when Meta's answer
// has no Retry-After: the pair limit allows about one message every six
// seconds to one user; throughput and account limits clear within
// seconds to a minute.
const (
	pairRetryAfter = 6 * time.Second
	rateRetryAfter = 5 * time.Second
	spamRetryAfter = time.Minute
)

// GraphError is an error answer of the Graph API: {"error": {"message",
// "type", "code", "error_subcode", "error_data": {"details"}, "fbtrace_id"}}.
type GraphError struct {
	Status     int // HTTP status
	Code       int
	Subcode    int
	Type       string
	Message    string
	Details    string
	RetryAfter time.Duration // from a Retry-After header
}

func (e *GraphError) Error() string {
	msg := e.Message
	if e.Details != "" && e.Details != msg {
		msg += ": " + e.Details
	}
	if e.Code != 0 {
		return fmt.Sprintf("graph api error %d (HTTP %d): %s", e.Code, e.Status, msg)
	}
	return fmt.Sprintf("graph api HTTP %d: %s", e.Status, msg)
}

// tokenRefused: the access token is invalid, expired or revoked.
func (e *GraphError) tokenRefused() bool {
	return e.Code == codeAccessToken || e.Status == http.StatusUnauthorized
}

// ErrWindowClosed is a send WhatsApp refused because the user last wrote
// more than 24 hours ago: outside that customer service window a business
// may send only approved template messages.
var ErrWindowClosed = errors.New("whatsapp's 24-hour customer service window is closed (the user last wrote more than 24 hours ago; only template messages can be sent)")

// ErrTokenRefused is a send Meta refused because of the access token.
var ErrTokenRefused = errors.New("meta refused the whatsapp access token")

// classify maps a Graph API failure to delivery's error classes: rate
// limits → RATE_LIMITED with Meta's Retry-After or a default; a refused
// token and the closed 24-hour window → PERMANENT with a clear error;
// Meta's transient codes and 5xx → retryable; any other 4xx → PERMANENT;
// network trouble stays retryable.
func classify(err error) error {
	var ge *GraphError
	if err == nil || !errors.As(err, &ge) {
		return err
	}
	switch ge.Code {
	case codeThroughput, codeAPITooManyCalls, codeAccountRateLimit:
		return platform.RateLimited(err, retryAfter(ge, rateRetryAfter))
	case codePairRateLimit:
		return platform.RateLimited(err, retryAfter(ge, pairRetryAfter))
	case codeSpamRateLimit:
		return platform.RateLimited(err, retryAfter(ge, spamRetryAfter))
	case codeReengagement:
		return platform.Permanent(fmt.Errorf("%w: %w", ErrWindowClosed, err))
	case codeAPIUnknown, codeAPIService, codeSomethingWrong, codeServiceUnavail, codeServerUnavailable:
		return err
	}
	switch {
	case ge.Status == http.StatusTooManyRequests:
		return platform.RateLimited(err, retryAfter(ge, rateRetryAfter))
	case ge.tokenRefused():
		return platform.Permanent(fmt.Errorf("%w: %w", ErrTokenRefused, err))
	case ge.Status >= 500:
		return err
	case ge.Status >= 400:
		return platform.Permanent(err)
	}
	return err
}

func retryAfter(ge *GraphError, def time.Duration) time.Duration {
	if ge.RetryAfter > 0 {
		return ge.RetryAfter
	}
	return def
}

// graph is a small Graph API client: JSON in and out, the access token as
// a bearer token, errors decoded into *GraphError.
type graph struct {
	base    string // including the version, without a trailing slash
	token   string
	phoneID string
	hc      *http.Client
}

// maxAnswerBytes bounds a Graph API answer the gateway reads.
const maxAnswerBytes = 1 << 20

func (g *graph) get(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return g.do(req, out)
}

// post sends body as JSON to the phone number's edge (messages, media …).
func (g *graph) post(ctx context.Context, edge string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", edge, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base+"/"+g.phoneID+"/"+edge, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return g.do(req, out)
}

// do sends req with the token and decodes a 2xx answer into out.
func (g *graph) do(req *http.Request, out any) error {
	req.Header.Set("Authorization", "Bearer "+g.token)
	resp, err := g.hc.Do(req)
	if err != nil {
		return fmt.Errorf("graph api %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("graph api %s: read answer: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp, body)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("graph api %s: decode answer: %w", req.URL.Path, err)
	}
	return nil
}

func decodeError(resp *http.Response, body []byte) *GraphError {
	ge := &GraphError{Status: resp.StatusCode}
	var wire struct {
		Error struct {
			Message   string `json:"message"`
			Type      string `json:"type"`
			Code      int    `json:"code"`
			Subcode   int    `json:"error_subcode"`
			ErrorData struct {
				Details string `json:"details"`
			} `json:"error_data"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && (wire.Error.Code != 0 || wire.Error.Message != "") {
		e := wire.Error
		ge.Code, ge.Subcode, ge.Type, ge.Message, ge.Details = e.Code, e.Subcode, e.Type, e.Message, e.ErrorData.Details
	} else {
		ge.Message = http.StatusText(resp.StatusCode)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		ge.RetryAfter = time.Duration(s) * time.Second
	}
	return ge
}
