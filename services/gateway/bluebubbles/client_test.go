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

// The lookup of an earlier attempt takes only the bot's messages that
// match, a sent one before a failed one.
func TestPickSent(t *testing.T) {
	for _, c := range []struct {
		name, raw, want string
	}{
		{"none", `[]`, ""},
		{"null", `null`, ""},
		{"sent", `[{"guid":"G1","text":" hi ","isFromMe":true,"error":0}]`, "G1"},
		{"someone else's", `[{"guid":"G1","text":"hi","isFromMe":false,"error":0}]`, ""},
		{"other text", `[{"guid":"G1","text":"hello","isFromMe":true}]`, ""},
		{"failed then sent", `[{"guid":"F","text":"hi","isFromMe":true,"error":22},{"guid":"G2","text":"hi","isFromMe":true}]`, "G2"},
		{"failed only", `[{"guid":"F","text":"hi","isFromMe":true,"error":22}]`, "F"},
		{"no guid", `[{"text":"hi","isFromMe":true}]`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := pickSent([]byte(c.raw), textIs("hi"))
			if err != nil {
				t.Fatal(err)
			}
			if got := ""; m != nil {
				got = m.GUID
				if got != c.want {
					t.Fatalf("picked %q, want %q", got, c.want)
				}
			} else if c.want != "" {
				t.Fatalf("picked none, want %q", c.want)
			}
		})
	}
	if m, _ := pickSent([]byte(`[{"guid":"A","isFromMe":true,"attachments":[{"transferName":"b.pdf"},{"transferName":"a.txt"}]}]`), fileIs("a.txt")); m == nil || m.GUID != "A" {
		t.Fatalf("attachment by name: %+v", m)
	}
	if _, err := pickSent([]byte(`{"guid":"A"}`), textIs("")); err == nil {
		t.Fatal("an object read as a list")
	}
}

func TestLooksLikeAddress(t *testing.T) {
	for s, want := range map[string]bool{"+15551234567": true, "ann@icloud.com": true, "+": false, "15551234567": false,
		"+1555 123": false, "iMessage;-;a@b.c": false, "chat493817263544": false, "": false} {
		if got := looksLikeAddress(s); got != want {
			t.Errorf("%q: %v, want %v", s, got, want)
		}
	}
}

// FuzzPickSent reads a message query's data as the server may answer it.
func FuzzPickSent(f *testing.F) {
	f.Add(`[{"guid":"G1","text":"hi","isFromMe":true,"error":0,"dateCreated":1700000000000,"attachments":[]}]`, "hi")
	f.Add(`[{"guid":"F","text":"hi","isFromMe":true,"error":22},{"guid":"G","isFromMe":true,"attachments":[{"transferName":"hi"}]}]`, "hi")
	f.Add(`null`, "")
	f.Add(`[{"guid":1}]`, "x")
	f.Fuzz(func(t *testing.T, raw, text string) {
		for _, match := range []func(*foundMessage) bool{textIs(text), fileIs(text)} {
			m, err := pickSent([]byte(raw), match)
			if err != nil && m != nil {
				t.Fatalf("both a message and %v", err)
			}
			if m != nil && (!m.IsFromMe || m.GUID == "" || !match(m)) {
				t.Fatalf("picked %+v", m)
			}
		}
	})
}
