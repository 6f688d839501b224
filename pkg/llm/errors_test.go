package llm

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{" 1.5 ", 1500 * time.Millisecond},
		{"0", 0},
		{"-3", 0},
		{"NaN", 0},
		{"abc", 0},
		{"1e12", maxRetryAfter},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	h := http.Header{}
	h.Set("Retry-After", "5")
	h.Set("retry-after-ms", "250")
	if got := RetryAfter(h, now); got != 250*time.Millisecond {
		t.Errorf("retry-after-ms not preferred: %v", got)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "1", "1.5", "-1", "Inf", "NaN", "1e400", "Wed, 21 Oct 2015 07:28:00 GMT", "Mon, 02 Jan 2026 03:04:05 GMT"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d := ParseRetryAfter(s, now)
		if d < 0 || d > maxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v out of range", s, d)
		}
		h := http.Header{}
		h.Set("retry-after-ms", s)
		if d := RetryAfter(h, now); d < 0 || d > maxRetryAfter {
			t.Fatalf("RetryAfter(ms=%q) = %v out of range", s, d)
		}
	})
}

func TestClassify(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   Class
	}{
		{429, `{"error":{"message":"Rate limit reached","type":"requests"}}`, RateLimited},
		{429, `{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}`, Quota},
		{403, `{"error":{"message":"Key limit exceeded: no credit left"}}`, Quota},
		{402, `{"error":{"message":"Insufficient credits"}}`, Quota},
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low"}}`, Quota},
		{401, `{"error":{"message":"Incorrect API key"}}`, Auth},
		{403, `{"error":{"message":"forbidden"}}`, Auth},
		{400, `{"error":{"code":"context_length_exceeded","message":"too long"}}`, ContextOverflow},
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, ContextOverflow},
		{400, `{"error":{"message":"This model's maximum context length is 8192 tokens"}}`, ContextOverflow},
		{413, ``, ContextOverflow},
		{400, `{"error":{"message":"bad"}}`, BadRequest},
		{404, `not found`, BadRequest},
		{500, ``, Server},
		{529, `{"type":"error","error":{"type":"overloaded_error"}}`, Server},
		{408, ``, Server},
	}
	for _, tt := range tests {
		e := Classify(tt.status, nil, tt.body)
		if e.Class != tt.want {
			t.Errorf("Classify(%d, %s) = %s, want %s", tt.status, tt.body, e.Class, tt.want)
		}
		if UserMessage(e) == "" {
			t.Errorf("no user message for %s", e.Class)
		}
	}
	if got := Classify(400, nil, `{"error":{"message":"a \"quoted\" msg"}}`).Message; got != `a "quoted" msg` {
		t.Errorf("message = %q", got)
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{BaseDelay: time.Second, MaxDelay: 5 * time.Second, Jitter: func() float64 { return 0.5 }}
	want := []time.Duration{750 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 3750 * time.Millisecond, 3750 * time.Millisecond}
	for i, w := range want {
		if got := p.Backoff(i+1, 0); got != w {
			t.Errorf("Backoff(%d) = %v, want %v", i+1, got, w)
		}
	}
	if got := p.Backoff(1, 7*time.Second); got != 7*time.Second {
		t.Errorf("Retry-After not honoured: %v", got)
	}
}

// FuzzClassify: any provider failure (status, Retry-After, body) gets one
// of the classes, a bounded wait, and a user message that is one of the
// fixed texts — nothing of the provider's body reaches a chat user.
func FuzzClassify(f *testing.F) {
	f.Add(429, "2", `{"error":{"message":"Rate limit reached"}}`)
	f.Add(402, "", `{"error":{"message":"Insufficient credits","code":"payment_required"}}`)
	f.Add(400, "", `{"error":{"message":"prompt is too long: secret-sk-abc"}}`)
	f.Add(503, "Wed, 21 Oct 2015 07:28:00 GMT", "<html>\xff</html>")
	f.Add(0, "-1", `{"message":"\u00e9`)
	classes := map[Class]bool{RateLimited: true, Server: true, Quota: true, Auth: true, ContextOverflow: true, BadRequest: true}
	fixed := map[string]bool{}
	for c := range classes {
		fixed[UserMessage(&Error{Class: c})] = true
	}
	f.Fuzz(func(t *testing.T, status int, retryAfter, body string) {
		h := http.Header{}
		h.Set("Retry-After", retryAfter)
		e := Classify(status, h, body)
		if !classes[e.Class] {
			t.Fatalf("class %q", e.Class)
		}
		if e.RetryAfter < 0 || e.RetryAfter > maxRetryAfter {
			t.Fatalf("retry after %v", e.RetryAfter)
		}
		if status == http.StatusPaymentRequired && e.Class != Quota {
			t.Fatalf("402 classified %s", e.Class)
		}
		if status == http.StatusTooManyRequests && e.Class != RateLimited && e.Class != Quota {
			t.Fatalf("429 classified %s", e.Class)
		}
		if msg := UserMessage(e); !fixed[msg] {
			t.Fatalf("user message %q is not one of the fixed texts", msg)
		}
		if len(e.Message) > len(body) {
			t.Fatalf("message of %d bytes from a body of %d", len(e.Message), len(body))
		}
		_ = e.Error()
	})
}
