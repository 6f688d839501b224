package line

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// FuzzErrorAnswer feeds the reading of a failed Messaging API answer
// (its JSON error body, Retry-After and X-Line-Accepted-Request-Id) and
// its classification arbitrary input: it never panics, keeps the status,
// always says something, and a 429 is either rate limited after a wait
// of at least a second or, the monthly limit, permanent.
func FuzzErrorAnswer(f *testing.F) {
	f.Add(429, "", "", `{"message":"The API rate limit has been exceeded. Try again later."}`)
	f.Add(429, "7", "", `{"message":"You have reached your monthly limit."}`)
	f.Add(400, "", "", `{"message":"The request body has 1 error(s)","details":[{"message":"May not be empty","property":"messages[0].text"}]}`)
	f.Add(400, "", "", `{"message":"Invalid reply token"}`)
	f.Add(409, "", "7c4b7a2a-1b7e-4b5f-9d3a-2f0e6c7d8e9f", `{"message":"The retry key is already accepted"}`)
	f.Add(500, "-3", "", `not json`)
	f.Add(404, "1e9", "", `{"message":"","details":null}`)
	f.Fuzz(func(t *testing.T, status int, retryAfter, accepted, body string) {
		if status < 100 || status > 999 {
			return
		}
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		h.Set("X-Line-Accepted-Request-Id", accepted)
		resp := &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
		le := decodeError(resp, []byte(body))
		if le.Status != status || le.Message == "" || le.RetryAfter < 0 {
			t.Fatalf("%+v for HTTP %d", le, status)
		}
		_ = le.invalidReplyToken()
		_ = le.retryKeyAccepted()
		err := classify(le)
		var se *platform.SendError
		if !errors.As(err, &se) {
			if status == http.StatusTooManyRequests || (status >= 400 && status < 500) {
				t.Fatalf("HTTP %d left unclassified: %v", status, err)
			}
			return
		}
		switch {
		case status == http.StatusTooManyRequests && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_RATE_LIMITED:
			if se.RetryAfter < time.Second {
				t.Fatalf("a 429 asks to wait %s", se.RetryAfter)
			}
		case status == http.StatusTooManyRequests:
			if se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !errors.Is(err, ErrMonthlyLimit) {
				t.Fatalf("a 429 classed %s: %v", se.Class, err)
			}
		case status >= 400 && status < 500 && se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT:
			t.Fatalf("HTTP %d classed %s", status, se.Class)
		}
	})
}

// fence matches a code fence's backticks and language tag.
var fence = regexp.MustCompile("```[^\\s`]*")

// FuzzMessages feeds the cutting of an answer into LINE's message
// objects arbitrary text: every text message is non-empty and within
// LINE's 5,000 UTF-16 units, and together they keep every word (a code
// fence cut in two is closed and reopened, as delivery cuts).
func FuzzMessages(f *testing.F) {
	f.Add("hello")
	f.Add(strings.Repeat("word ", 2100))
	f.Add(strings.Repeat("あ", 5001))
	f.Add(strings.Repeat("😀", 2600) + "\n\n" + strings.Repeat("x", 9000))
	f.Add("```go\n" + strings.Repeat("fmt.Println(1)\n", 700) + "```\n**done** [docs](https://example.com)")
	f.Fuzz(func(t *testing.T, text string) {
		req := &deliveryv1.SendRequested{Text: text, Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN}
		msgs, err := messages(req)
		if err != nil {
			if strings.TrimSpace(text) != "" {
				t.Fatalf("text %.40q refused: %v", text, err)
			}
			return
		}
		var joined strings.Builder
		for _, m := range msgs {
			if n := len(utf16.Encode([]rune(m.Text))); m.Type != "text" || n == 0 || n > maxText {
				t.Fatalf("message %s of %d units", m.Type, n)
			}
			joined.WriteString(m.Text)
		}
		words := func(s string) string { return strings.Join(strings.Fields(fence.ReplaceAllString(s, "")), "") }
		if got, want := words(joined.String()), words(formatted(req)); got != want {
			t.Fatalf("the messages lose text: %d characters of %d", len(got), len(want))
		}
	})
}
