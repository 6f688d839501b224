package signal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// client speaks to a signal-cli daemon's HTTP interface (`signal-cli
// daemon --http`): JSON-RPC 2.0 requests at POST /api/v1/rpc, received
// messages as Server-Sent Events at GET /api/v1/events, liveness at
// GET /api/v1/check.
type client struct {
	base    string // without a trailing slash
	account string
	rpc     *http.Client // bounded requests
	stream  *http.Client // the event stream and receive calls: no overall timeout
	ids     atomic.Int64
}

// maxRPCAnswer bounds a JSON-RPC answer (getAttachment carries a whole
// file in base64).
const maxRPCAnswer = 160 << 20

// JSON-RPC error codes of signal-cli (SignalJsonRpcCommandHandler).
const (
	codeUserError     = -1
	codeIOError       = -3
	codeUntrustedKey  = -4
	codeRateLimit     = -5
	codeCaptcha       = -6
	codeInvalidReq    = -32600
	codeNoMethod      = -32601
	codeInvalidParams = -32602
)

// rpcError is a JSON-RPC error answer.
type rpcError struct {
	Method  string          `json:"-"`
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *rpcError) Error() string {
	return fmt.Sprintf("signal-cli %s: error %d: %s", e.Method, e.Code, e.Message)
}

// httpError is an answer of the daemon that is not JSON-RPC.
type httpError struct {
	Op     string
	Status int
}

func (e *httpError) Error() string {
	return fmt.Sprintf("signal-cli %s: HTTP %d", e.Op, e.Status)
}

// sendResult is what send, sendTyping and sendReaction answer, and what a
// failed one carries in error.data.response.
type sendResult struct {
	Timestamp int64 `json:"timestamp"`
	Results   []struct {
		Type              string `json:"type"`
		RetryAfterSeconds int64  `json:"retryAfterSeconds"`
		Token             string `json:"token"`
		// Success is the form of signal-cli before 0.11.
		Success *bool `json:"success"`
	} `json:"results"`
}

// call makes one JSON-RPC request and decodes its result into out (nil:
// ignored). A JSON-RPC error is an *rpcError, a non-2xx answer an
// *httpError.
func (c *client) call(ctx context.Context, method string, params map[string]any, out any) error {
	return c.callWith(ctx, c.rpc, method, params, out)
}

// callWith is call through hc.
func (c *client) callWith(ctx context.Context, hc *http.Client, method string, params map[string]any, out any) error {
	if params == nil {
		params = map[string]any{}
	}
	if c.account != "" {
		params["account"] = c.account
	}
	id := c.ids.Add(1)
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": method, "params": params, "id": id})
	if err != nil {
		return fmt.Errorf("signal-cli %s: encode request: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/api/v1/rpc", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("signal-cli %s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("signal-cli %s: %w", method, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRPCAnswer))
	if err != nil {
		return fmt.Errorf("signal-cli %s: read answer: %w", method, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &httpError{Op: method, Status: resp.StatusCode}
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *rpcError       `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("signal-cli %s: decode answer (HTTP %d): %w", method, resp.StatusCode, err)
	}
	if env.Error != nil {
		env.Error.Method = method
		env.Error.Message = boundMessage(env.Error.Message)
		return env.Error
	}
	if out == nil || len(env.Result) == 0 {
		return nil
	}
	if err := json.Unmarshal(env.Result, out); err != nil {
		return fmt.Errorf("signal-cli %s: decode result: %w", method, err)
	}
	return nil
}

// maxErrorMessage bounds the message of a JSON-RPC error the gateway
// keeps: it goes into the send's receipt on the bus and into the logs.
const maxErrorMessage = 2 << 10

// dataURIRE finds a data URI's payload in an error message: signal-cli
// names the attachment it could not upload (AttachmentInvalidException,
// "<attachment>: <cause>"), and a send's attachments are whole files as
// data URIs.
var dataURIRE = regexp.MustCompile(`(data:[^,\s]{0,256},)[A-Za-z0-9+/=_-]{16,}`)

// boundMessage takes data URIs' payloads out of msg and cuts what is left
// to maxErrorMessage bytes, its start and its end kept (the cause and the
// exception's class come last).
func boundMessage(msg string) string {
	if len(msg) <= maxErrorMessage && !strings.Contains(msg, "data:") {
		return msg
	}
	msg = dataURIRE.ReplaceAllStringFunc(msg, func(m string) string {
		i := strings.IndexByte(m, ',')
		return fmt.Sprintf("%s…(%d bytes)", m[:i+1], len(m)-i-1)
	})
	if len(msg) > maxErrorMessage {
		half := maxErrorMessage / 2
		msg = strings.ToValidUTF8(msg[:half]+" … "+msg[len(msg)-half:], "")
	}
	return msg
}

// check asks GET /api/v1/check whether the daemon runs.
func (c *client) check(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/check", nil)
	if err != nil {
		return fmt.Errorf("signal-cli check: %w", err)
	}
	resp, err := c.rpc.Do(req)
	if err != nil {
		return fmt.Errorf("signal-cli check: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &httpError{Op: "check", Status: resp.StatusCode}
	}
	return nil
}

// defaultRateLimitWait is the wait after a rate-limit answer that names
// none (signal-cli before 0.14.3): Signal refills a token about every 4 s.
const defaultRateLimitWait = 5 * time.Second

// maxRateLimitWait caps what an answer can ask for.
const maxRateLimitWait = time.Hour

// retryAfterRE finds libsignal's "Retry after N seconds" in a message.
var retryAfterRE = regexp.MustCompile(`(?i)retry after (\d+(?:\.\d+)?)\s*second`)

// failureKinds are the result types a failed send reports, and the
// longest retryAfterSeconds among them.
func failureKinds(r *sendResult) (kinds map[string]bool, retryAfter time.Duration) {
	kinds = map[string]bool{}
	for _, x := range r.Results {
		t := x.Type
		if t == "" && x.Success != nil && !*x.Success {
			t = "FAILURE"
		}
		if t == "" || t == "SUCCESS" {
			continue
		}
		if x.Token != "" {
			t = "PROOF_REQUIRED_FAILURE"
		}
		kinds[t] = true
		if d := time.Duration(x.RetryAfterSeconds) * time.Second; d > retryAfter {
			retryAfter = d
		}
	}
	return kinds, retryAfter
}

// delivered reports whether a send reached at least one recipient: a
// group send answers success with the members it failed for; an answer
// without results (an old daemon) counts as delivered.
func delivered(r *sendResult) bool {
	if len(r.Results) == 0 {
		return true
	}
	for _, x := range r.Results {
		if x.Type == "SUCCESS" || (x.Type == "" && (x.Success == nil || *x.Success)) {
			return true
		}
	}
	return false
}

// classify turns a failed daemon call into the kit's error classes, so
// delivery retries as it should: a rate limit or a proof (captcha)
// request waits for the time Signal names; an unregistered or untrusted
// recipient, a group the account is not in, bad parameters are
// permanent; a rejected text style is a format error (delivery resends
// the plain text); network trouble and the daemon's internal errors are
// retried.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var re *rpcError
	if errors.As(err, &re) {
		var data struct {
			Response sendResult `json:"response"`
		}
		if len(re.Data) > 0 {
			_ = json.Unmarshal(re.Data, &data)
		}
		kinds, wait := failureKinds(&data.Response)
		msg := strings.ToLower(re.Message)
		if wait == 0 {
			if m := retryAfterRE.FindStringSubmatch(re.Message); m != nil {
				if s, perr := strconv.ParseFloat(m[1], 64); perr == nil {
					wait = time.Duration(s * float64(time.Second))
				}
			}
		}
		rateLimited := re.Code == codeRateLimit || re.Code == codeCaptcha || kinds["RATE_LIMIT_FAILURE"] || kinds["PROOF_REQUIRED_FAILURE"] ||
			strings.Contains(re.Message, "[429]") || strings.Contains(msg, "ratelimit") || strings.Contains(msg, "rate limit") ||
			strings.Contains(msg, "retrylaterexception") || strings.Contains(msg, "retry after")
		switch {
		case rateLimited:
			if wait <= 0 {
				wait = defaultRateLimitWait
			}
			return platform.RateLimited(err, min(wait, maxRateLimitWait))
		case kinds["UNREGISTERED_FAILURE"] || kinds["IDENTITY_FAILURE"] || re.Code == codeUntrustedKey:
			return platform.Permanent(err)
		case strings.Contains(msg, "textstyle") || strings.Contains(msg, "text style") || strings.Contains(msg, "invalid style"):
			return platform.FormatRejected(err)
		case kinds["NETWORK_FAILURE"] || kinds["INVALID_PRE_KEY_FAILURE"] || re.Code == codeIOError:
			return err
		case re.Code == codeUserError && strings.Contains(msg, "failed to send message") && len(kinds) == 0:
			return err // no reason given: try again
		case re.Code == codeUserError, re.Code == codeInvalidReq, re.Code == codeNoMethod, re.Code == codeInvalidParams:
			return platform.Permanent(err)
		}
		return err
	}
	var he *httpError
	if errors.As(err, &he) && he.Status >= 400 && he.Status < 500 &&
		he.Status != http.StatusTooManyRequests && he.Status != http.StatusRequestTimeout {
		return platform.Permanent(err)
	}
	return err
}

// resultError is the error of a send whose answer names no recipient it
// reached (a daemon that reports failures as results).
func resultError(method string, r *sendResult) error {
	kinds, wait := failureKinds(r)
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	data, _ := json.Marshal(map[string]any{"response": r})
	return classify(&rpcError{Method: method, Code: codeUserError, Message: "Failed to send message: " + strings.Join(names, ", ") +
		retryHint(wait), Data: data})
}

func retryHint(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(" (retry after %d seconds)", int(d/time.Second))
}
