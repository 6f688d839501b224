package sms

import (
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

// Twilio error codes the gateway tells apart (twilio.com/docs/api/errors).
const (
	codeAuthenticate      = 20003 // authentication failed
	codeTooManyRequests   = 20429 // too many requests
	codeInvalidTo         = 21211 // invalid 'To' phone number
	codeNotSMSCapableFrom = 21606 // the 'From' number cannot send SMS
	codeUnverifiedTo      = 21608 // trial accounts send only to verified numbers
	codeUnsubscribed      = 21610 // the recipient replied STOP
	codeNotMobile         = 21614 // 'To' is not a mobile number
	codeRegionDisabled    = 21408 // sending to this region is not enabled
	codeQueueOverflow     = 30001 // the sending queue is full: retry
	codeFromQueueFull     = 21611 // the 'From' number's queue is full (up to 10 hours of segments): retry
)

// defaultRetryAfter is the wait before retrying a rate-limited send when
// Twilio's answer has no Retry-After.
const defaultRetryAfter = 2 * time.Second

// TwilioError is an error answer of Twilio's REST API: {"code",
// "message", "more_info", "status"}.
type TwilioError struct {
	Status     int // HTTP status
	Code       int
	Message    string
	MoreInfo   string
	RetryAfter time.Duration // from a Retry-After header
}

func (e *TwilioError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("twilio error %d (HTTP %d): %s", e.Code, e.Status, e.Message)
	}
	return fmt.Sprintf("twilio HTTP %d: %s", e.Status, e.Message)
}

func (e *TwilioError) credentialsRefused() bool {
	return e.Status == http.StatusUnauthorized || e.Code == codeAuthenticate
}

// Errors of sends Twilio refused for good, with what they mean.
var (
	ErrCredentials  = errors.New("twilio refused the account sid and auth token")
	ErrInvalidTo    = errors.New("the recipient is not a valid phone number")
	ErrUnsubscribed = errors.New("the recipient unsubscribed from this number (replied STOP); they must text START to receive messages again")
	ErrNotMobile    = errors.New("the recipient is not a mobile number and cannot receive SMS")
	ErrUnverified   = errors.New("a twilio trial account sends only to verified numbers")
	ErrRegion       = errors.New("the twilio account may not send to the recipient's country (messaging geo permissions)")
	ErrFromNumber   = errors.New("the twilio phone number cannot send SMS")
)

// classify maps a Twilio failure to delivery's error classes: 429 and
// 20429 → RATE_LIMITED after Twilio's Retry-After or a default; 5xx and
// a full queue → retryable; the refusals above and any other 4xx →
// PERMANENT with Twilio's code and message; network trouble stays
// retryable.
func classify(err error) error {
	var te *TwilioError
	if err == nil || !errors.As(err, &te) {
		return err
	}
	perm := map[int]error{
		codeInvalidTo: ErrInvalidTo, codeUnsubscribed: ErrUnsubscribed, codeNotMobile: ErrNotMobile,
		codeUnverifiedTo: ErrUnverified, codeRegionDisabled: ErrRegion, codeNotSMSCapableFrom: ErrFromNumber,
	}
	switch {
	case te.Status == http.StatusTooManyRequests || te.Code == codeTooManyRequests:
		d := te.RetryAfter
		if d <= 0 {
			d = defaultRetryAfter
		}
		return platform.RateLimited(err, d)
	case te.Status >= 500 || te.Code == codeQueueOverflow || te.Code == codeFromQueueFull:
		return err
	case te.credentialsRefused():
		return platform.Permanent(fmt.Errorf("%w: %w", ErrCredentials, err))
	case perm[te.Code] != nil:
		return platform.Permanent(fmt.Errorf("%w: %w", perm[te.Code], err))
	case te.Status >= 400:
		return platform.Permanent(err)
	}
	return err
}

// twilio is a small client of Twilio's REST API: form-encoded requests
// with the account's basic auth, JSON answers, errors decoded into
// *TwilioError. (twilio-go was not used: its calls take no context, its
// errors drop the Retry-After header and the status of a non-JSON
// answer, and its base URL is fixed.)
type twilio struct {
	base  string // without a trailing slash
	sid   string
	token string
	hc    *http.Client
}

// maxAnswerBytes bounds a REST API answer the gateway reads.
const maxAnswerBytes = 1 << 20

func (t *twilio) accountURL() string { return t.base + "/2010-04-01/Accounts/" + t.sid }

func (t *twilio) get(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	return t.do(req, out)
}

// postForm posts form to the account's resource (Messages.json …).
func (t *twilio) postForm(ctx context.Context, resource string, form url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.accountURL()+"/"+resource, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return t.do(req, out)
}

// do sends req with the credentials and decodes a 2xx answer into out.
func (t *twilio) do(req *http.Request, out any) error {
	req.SetBasicAuth(t.sid, t.token)
	req.Header.Set("Accept", "application/json")
	resp, err := t.hc.Do(req)
	if err != nil {
		return fmt.Errorf("twilio %s: %w", req.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("twilio %s: read answer: %w", req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp, body)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("twilio %s: decode answer: %w", req.URL.Path, err)
	}
	return nil
}

func decodeError(resp *http.Response, body []byte) *TwilioError {
	te := &TwilioError{Status: resp.StatusCode}
	var wire struct {
		Code     int    `json:"code"`
		Message  string `json:"message"`
		MoreInfo string `json:"more_info"`
	}
	if json.Unmarshal(body, &wire) == nil && (wire.Code != 0 || wire.Message != "") {
		te.Code, te.Message, te.MoreInfo = wire.Code, wire.Message, wire.MoreInfo
	} else {
		te.Message = http.StatusText(resp.StatusCode)
	}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		te.RetryAfter = time.Duration(s) * time.Second
	}
	return te
}
