package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Class is the kind of a provider failure, which decides what to do next.
type Class string

// Error classes.
const (
	RateLimited     Class = "rate_limited"     // 429: wait and retry
	Server          Class = "server"           // 5xx, dropped connection, timeout: retry
	Quota           Class = "quota"            // out of credit or quota: tell the operator
	Auth            Class = "auth"             // bad or unauthorised key
	ContextOverflow Class = "context_overflow" // prompt too long: compact and try again
	BadRequest      Class = "bad_request"      // any other 4xx
)

// ErrInterrupted marks a stream that failed after some output had already
// been delivered; such calls are never retried, as that would repeat text.
var ErrInterrupted = errors.New("llm stream interrupted after output")

// Error is a classified provider failure.
type Error struct {
	Class      Class
	Status     int           // HTTP status, 0 when none (dropped connection)
	RetryAfter time.Duration // from Retry-After / retry-after-ms, 0 when absent
	Message    string        // the provider's message, for logs (not for users)
	Err        error         // the underlying SDK or network error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("llm ")
	b.WriteString(string(e.Class))
	if e.Status != 0 {
		b.WriteString(" (")
		b.WriteString(strconv.Itoa(e.Status))
		b.WriteString(")")
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same request may succeed later.
func (e *Error) Retryable() bool { return e.Class == RateLimited || e.Class == Server }

// ClassOf returns the class of err, or "" when it is not an *Error.
func ClassOf(err error) Class {
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ""
}

// UserMessage returns a message safe to show a chat user for err: no
// provider detail, no secrets.
func UserMessage(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, context.Canceled) {
		return "The request was cancelled."
	}
	switch ClassOf(err) {
	case RateLimited:
		return "The AI service is busy right now. Please try again in a minute."
	case Server:
		return "The AI service is having trouble right now. Please try again shortly."
	case Quota:
		return "The AI service's usage quota or credit is exhausted. The operator needs to top it up."
	case Auth:
		return "The AI service rejected this bot's credentials. The operator needs to check the API key."
	case ContextOverflow:
		return "This conversation has grown too long for the model. Please start a new one."
	case BadRequest:
		return "The AI service could not handle this request."
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "The AI service took too long to answer. Please try again."
	}
	return "Something went wrong while talking to the AI service."
}

// Classify builds an *Error from an HTTP failure: status, headers and body.
func Classify(status int, header http.Header, body string) *Error {
	e := &Error{Status: status, Message: errorMessage(body), RetryAfter: RetryAfter(header, time.Now())}
	lower := strings.ToLower(body)
	quota := containsAny(lower, "insufficient_quota", "quota", "credit", "billing", "insufficient balance", "payment")
	switch {
	case status == http.StatusPaymentRequired:
		e.Class = Quota
	case (status == http.StatusTooManyRequests || status == http.StatusForbidden) && quota:
		e.Class = Quota
	case status == http.StatusBadRequest && containsAny(lower, "credit balance", "billing_error", "insufficient_quota"):
		e.Class = Quota
	case status == http.StatusTooManyRequests:
		e.Class = RateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Class = Auth
	case status == http.StatusRequestEntityTooLarge, status >= 400 && status < 500 && isOverflow(lower):
		e.Class = ContextOverflow
	case status == http.StatusRequestTimeout || status == 409 || status >= 500:
		e.Class = Server
	default:
		e.Class = BadRequest
	}
	return e
}

// classifyStreamError classifies an error event received mid-stream, where
// there is no HTTP status, only an error type and message.
func classifyStreamError(typ, msg string, err error) *Error {
	lower := strings.ToLower(typ + " " + msg)
	e := &Error{Message: msg, Err: err}
	switch {
	case containsAny(lower, "insufficient_quota", "billing", "credit"):
		e.Class = Quota
	case containsAny(lower, "rate_limit", "rate limit"):
		e.Class = RateLimited
	case containsAny(lower, "authentication", "permission"):
		e.Class = Auth
	case isOverflow(lower):
		e.Class = ContextOverflow
	case containsAny(lower, "invalid_request"):
		e.Class = BadRequest
	default: // overloaded_error, api_error, server_error, unknown
		e.Class = Server
	}
	return e
}

// classifyTransport classifies a non-HTTP failure. It returns ctx's error
// when the caller gave up, and a Server error for network failures.
func classifyTransport(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("llm call: %w", ctxErr)
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne):
		return &Error{Class: Server, Message: err.Error(), Err: err}
	}
	// SDK transports sometimes flatten network errors into strings.
	if containsAny(strings.ToLower(err.Error()), "connection reset", "unexpected eof", "broken pipe", "connection refused", "timeout") {
		return &Error{Class: Server, Message: err.Error(), Err: err}
	}
	return fmt.Errorf("llm call: %w", err)
}

func isOverflow(lower string) bool {
	return containsAny(lower, "context_length_exceeded", "prompt is too long", "maximum context",
		"context length", "context window", "too many tokens", "reduce the length")
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// errorMessage extracts error.message from a JSON body cheaply, falling back
// to the (truncated) body.
func errorMessage(body string) string {
	const key = `"message"`
	if i := strings.Index(body, key); i >= 0 {
		rest := strings.TrimLeft(body[i+len(key):], " \t\r\n:")
		if len(rest) > 0 && rest[0] == '"' {
			if s, err := strconv.QuotedPrefix(rest); err == nil {
				if u, err := strconv.Unquote(s); err == nil {
					return u
				}
			}
		}
	}
	if len(body) > 300 {
		body = body[:300]
	}
	return strings.TrimSpace(body)
}

// maxRetryAfter caps what a server may ask us to wait.
const maxRetryAfter = 24 * time.Hour

// RetryAfter reads retry-after-ms, then Retry-After (seconds or HTTP date,
// relative to now). It returns 0 when absent or unparsable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms > 0 && ms < float64(maxRetryAfter/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	return ParseRetryAfter(h.Get("Retry-After"), now)
}

// ParseRetryAfter parses a Retry-After value: delay seconds (integer or
// decimal) or an HTTP date. It returns 0 for empty, invalid, negative or
// past values, and caps the result at 24 hours.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if !(secs > 0) { // also rejects NaN
			return 0
		}
		if secs >= maxRetryAfter.Seconds() {
			return maxRetryAfter
		}
		return time.Duration(secs * float64(time.Second))
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}
