package bluebubbles

import (
	"errors"
	"testing"
	"time"
)

func TestDecodeAnswer(t *testing.T) {
	t.Parallel()
	var msg sentMessage
	if err := decodeAnswer(200, "", []byte(`{"status":200,"message":"Message sent!","data":{"guid":"G1"}}`), "/x", &msg); err != nil || msg.GUID != "G1" {
		t.Fatalf("sent %+v %v", msg, err)
	}
	for _, c := range []struct {
		name, retry, body string
		status, want      int
		message, typ      string
		after             time.Duration
	}{
		{name: "401", status: 401, body: `{"status":401,"message":"You are not authorized to access this resource","error":{"type":"Unauthorized","message":"You are not authorized to access this resource"}}`, want: 401, message: "You are not authorized to access this resource", typ: "Unauthorized"},
		{name: "error in a 200", status: 200, body: `{"status":500,"message":"Failed to send message!","error":{"type":"iMessage Error","message":"timeout"}}`, want: 500, message: "timeout", typ: "iMessage Error"},
		{name: "502 from a proxy", status: 502, body: `<html>bad gateway</html>`, want: 502, message: "Bad Gateway"},
		{name: "429", status: 429, retry: "4", body: `{}`, want: 429, message: "Too Many Requests", after: 4 * time.Second},
	} {
		err := decodeAnswer(c.status, c.retry, []byte(c.body), "/x", nil)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != c.want || ae.Message != c.message || ae.Type != c.typ || ae.RetryAfter != c.after {
			t.Errorf("%s: %#v", c.name, err)
		}
	}
	if err := decodeAnswer(200, "", []byte(`not json`), "/x", &msg); err == nil {
		t.Fatal("an answer that is not JSON was read")
	}
	if err := decodeAnswer(200, "", []byte(`{"status":200,"data":null}`), "/x", &msg); err != nil {
		t.Fatalf("no data: %v", err)
	}
}

// FuzzDecodeAnswer: any answer is data, an *APIError or an error, never
// a panic; an error status is always an *APIError.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add(200, "", `{"status":200,"message":"Message sent!","data":{"guid":"G1"}}`)
	f.Add(400, "", `{"status":400,"error":{"type":"Server Error","message":"Chat does not exist"}}`)
	f.Add(200, "", `{"status":"200","data":[1,2]}`)
	f.Add(429, "99999999999", `{}`)
	f.Add(503, "-1", "\xff")
	f.Fuzz(func(t *testing.T, status int, retry, body string) {
		var out sentMessage
		err := decodeAnswer(status, retry, []byte(body), "/x", &out)
		var ae *APIError
		if status/100 != 2 && !errors.As(err, &ae) {
			t.Fatalf("HTTP %d read as %v", status, err)
		}
		if ae != nil && (ae.RetryAfter < 0 || ae.RetryAfter > time.Hour) {
			t.Fatalf("retry after %v", ae.RetryAfter)
		}
	})
}
