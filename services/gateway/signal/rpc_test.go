package signal

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/signal/signalfake"
)

var styleRE = regexp.MustCompile(`^\d+:\d+:(BOLD|ITALIC|STRIKETHROUGH|MONOSPACE|SPOILER)$`)

func TestClassify(t *testing.T) {
	rpcErr := func(e *signalfake.RPCError) error {
		data, _ := json.Marshal(e.Data)
		return &rpcError{Method: "send", Code: e.Code, Message: e.Message, Data: data}
	}
	for _, tc := range []struct {
		name  string
		err   error
		class deliveryv1.ErrorClass
		after time.Duration
	}{
		{"rate limit with retry after", rpcErr(signalfake.RateLimited("+1", 7)), deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 7 * time.Second},
		{"proof required (the wait capped)", rpcErr(signalfake.ProofRequired("+1", 86400)), deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, maxRateLimitWait},
		{"rate limit of an old daemon", &rpcError{Code: -32603, Message: "Failed to send message: [429] Rate limit exceeded (RateLimitException)"},
			deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, defaultRateLimitWait},
		{"retry after in an attachment upload", &rpcError{Code: -1, Message: "Failed to send message: Retry after 12 seconds (AttachmentInvalidException)"},
			deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 12 * time.Second},
		{"unregistered", rpcErr(signalfake.Unregistered("+1")), deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"unregistered (exception form)", &rpcError{Code: -1, Message: "The user +1 is not registered."}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"untrusted identity", &rpcError{Code: -4, Message: "Failed to send message due to untrusted identities"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"not a group member", &rpcError{Code: -1, Message: "User is not a member in group: abc"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"bad text style", &rpcError{Code: -1, Message: "Invalid textStyle syntax (x) expected 'start:length:STYLE'"}, deliveryv1.ErrorClass_ERROR_CLASS_FORMAT, 0},
		{"network failure", rpcErr(signalfake.NetworkFailure("+1")), deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"io error", &rpcError{Code: -3, Message: "connection reset"}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"internal error", &rpcError{Code: -32603, Message: "An internal server error has occurred."}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"unknown method", &rpcError{Code: -32601, Message: "Method not implemented"}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"daemon 503", &httpError{Op: "send", Status: http.StatusServiceUnavailable}, deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"daemon 415", &httpError{Op: "send", Status: http.StatusUnsupportedMediaType}, deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT, 0},
		{"transport", errors.New("dial tcp: connection refused"), deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := classify(tc.err)
			class, after := deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, time.Duration(0)
			var se *platform.SendError
			if errors.As(err, &se) {
				class, after = se.Class, se.RetryAfter
			}
			if class != tc.class || after != tc.after {
				t.Fatalf("classify(%v) = %s after %s, want %s after %s", tc.err, class, after, tc.class, tc.after)
			}
		})
	}
}

func TestGroupSendToSomeMembersIsDelivered(t *testing.T) {
	var r sendResult
	_ = json.Unmarshal([]byte(`{"timestamp":5,"results":[{"type":"SUCCESS"},{"type":"UNREGISTERED_FAILURE"}]}`), &r)
	if !delivered(&r) {
		t.Fatal("a group send that reached a member counts as delivered")
	}
	_ = json.Unmarshal([]byte(`{"timestamp":5,"results":[{"type":"NETWORK_FAILURE"}]}`), &r)
	if delivered(&r) {
		t.Fatal("a send that reached no one is not delivered")
	}
	var se *platform.SendError
	if err := resultError("send", &r); errors.As(err, &se) {
		t.Fatalf("a network failure is retryable, got %v", err)
	}
}

func TestRPCAgainstFake(t *testing.T) {
	f := signalfake.New(bot)
	defer f.Close()
	c := &client{base: f.URL, account: bot, rpc: http.DefaultClient}
	ctx := context.Background()
	var res sendResult
	if err := c.call(ctx, "send", map[string]any{"recipient": []string{ann.Number}, "message": "hi"}, &res); err != nil || res.Timestamp == 0 {
		t.Fatalf("send: %+v %v", res, err)
	}
	err := c.call(ctx, "nope", nil, nil)
	var re *rpcError
	if !errors.As(err, &re) || re.Code != codeNoMethod {
		t.Fatalf("unknown method: %v", err)
	}
	if err := c.check(ctx); err != nil {
		t.Fatal(err)
	}
	calls := f.Calls("send")
	if len(calls) != 1 || calls[0].Params["account"] != bot {
		t.Fatalf("calls %+v: want one send with the account", calls)
	}
}

// signal-cli names the attachment in the error of a send whose attachment
// it could not upload ("Failed to send message: <attachment>: <cause>
// (AttachmentInvalidException)"), and the attachment is the whole data URI
// the gateway sent: the error, which goes into the send's receipt on the
// bus and into the logs, is bounded, and keeps what classifies it.
func TestSendErrorEchoingTheAttachmentIsBounded(t *testing.T) {
	f := signalfake.New(bot)
	defer f.Close()
	c := &client{base: f.URL, account: bot, rpc: http.DefaultClient}
	uri := "data:image/png;filename=cat.png;base64," + strings.Repeat("iVBORw0KGgo", 300_000)
	for _, tc := range []struct {
		name, cause string
		class       deliveryv1.ErrorClass
		after       time.Duration
	}{
		{"network", "Connection reset", deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, 0},
		{"rate limit", "Retry after 12 seconds", deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED, 12 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.FailNext("send", &signalfake.RPCError{Code: -32603,
				Message: "Failed to send message: " + uri + ": " + tc.cause + " (AttachmentInvalidException)"})
			err := c.call(context.Background(), "send", map[string]any{"recipient": []string{ann.Number}, "attachments": []string{uri}}, nil)
			if err == nil {
				t.Fatal("the send did not fail")
			}
			if n := len(err.Error()); n > 4096 {
				t.Fatalf("error of %d bytes: the attachment is in it", n)
			}
			for _, want := range []string{"Failed to send message", "data:image/png", tc.cause, "AttachmentInvalidException"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q lost %q", err, want)
				}
			}
			class, after := deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, time.Duration(0)
			var se *platform.SendError
			if errors.As(classify(err), &se) {
				class, after = se.Class, se.RetryAfter
			}
			if class != tc.class || after != tc.after {
				t.Fatalf("classified %s after %s, want %s after %s", class, after, tc.class, tc.after)
			}
		})
	}
}
