package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// answer is a gateway response: status, Retry-After and JSON body.
type answer struct {
	code       int
	retryAfter string
	body       map[string]string
}

func postAnswer(t *testing.T, addr string, d delivery) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhooks/"+d.route, bytes.NewReader(d.body))
	for k, v := range d.headers {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, raw)
	}
	return a
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// A route over its limit answers 429 with Hermes's body and Retry-After
// until its oldest delivery leaves the minute; unsigned deliveries do
// not spend its budget, a duplicate over the limit is refused as well
// (the limit comes before the duplicate check, as in Hermes), another
// route is undisturbed, and nothing refused is published.
func TestRateLimitPerRoute(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	gh := cfg.Routes["gh"]
	gh.RateLimit = ptr(3)
	cfg.Routes["gh"] = gh
	clk := &clock{t: time.Now()}
	b, s, _, _ := startGatewayWith(t, cfg, clk.now)
	next := inbound(t, b)

	body := []byte(`{"repository":{"full_name":"o/r"},"sender":{"login":"x"}}`)
	signed := func(id string) delivery {
		return delivery{"gh", body, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": id, "X-Hub-Signature-256": Sign(secret, body)}}
	}
	generic := func(id string) delivery {
		return delivery{"generic", []byte(`{"alert":"disk"}`), map[string]string{"X-Signature": strings.TrimPrefix(Sign(secret, []byte(`{"alert":"disk"}`)), "sha256="), "X-Webhook-Id": id}}
	}
	limited := func() float64 { return testutil.ToFloat64(refused.WithLabelValues("gh", "rate_limited")) }
	before := limited()

	for i := range 5 {
		if a := postAnswer(t, s.Addr(), delivery{"gh", body, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": Sign("guess", body)}}); a.code != http.StatusUnauthorized {
			t.Fatalf("forged delivery %d: %+v, want 401", i, a)
		}
	}
	var published []string
	for i := range 3 {
		if a := postAnswer(t, s.Addr(), signed(fmt.Sprint("ok-", i))); a.code != http.StatusAccepted {
			t.Fatalf("delivery %d within the limit: %+v", i, a)
		}
		published = append(published, fmt.Sprint("gh/ok-", i))
	}
	clk.add(20 * time.Second)
	for _, c := range []struct {
		name string
		d    delivery
	}{{"fourth delivery", signed("over-1")}, {"duplicate of an accepted one", signed("ok-0")}, {"fifth delivery", signed("over-2")}} {
		a := postAnswer(t, s.Addr(), c.d)
		if a.code != http.StatusTooManyRequests || a.body["error"] != "Rate limit exceeded" || a.retryAfter != "40" {
			t.Fatalf("%s: %+v, want 429 Rate limit exceeded, Retry-After 40", c.name, a)
		}
	}
	if got := limited() - before; got != 3 {
		t.Fatalf("counted %v rate-limited refusals, want 3", got)
	}
	if a := postAnswer(t, s.Addr(), generic("g-1")); a.code != http.StatusAccepted {
		t.Fatalf("another route while gh is limited: %+v", a)
	}
	published = append(published, "generic/g-1")
	// The window frees when the first three leave it.
	clk.add(40*time.Second + time.Millisecond)
	if a := postAnswer(t, s.Addr(), signed("over-1")); a.code != http.StatusAccepted {
		t.Fatalf("after the window: %+v, want 202", a)
	}
	published = append(published, "gh/over-1")
	for _, want := range published {
		if got := next(); got.GetEventId() != want {
			t.Fatalf("published %s, want %s (in order: %v)", got.GetEventId(), want, published)
		}
	}
}

// The gateway's default limit applies to a route without its own, and
// 0 turns it off.
func TestRateLimitDefaults(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RateLimit = 2
	gl := cfg.Routes["gl"]
	gl.RateLimit = ptr(0)
	cfg.Routes["gl"] = gl
	_, s, _, _ := startGatewayWith(t, cfg, nil)

	body := []byte(`{"alert":"disk"}`)
	for i := range 3 {
		mac := strings.TrimPrefix(Sign(secret, body), "sha256=")
		want := http.StatusAccepted
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if a := postAnswer(t, s.Addr(), delivery{"generic", body, map[string]string{"X-Signature": mac, "X-Webhook-Id": fmt.Sprint("g-", i)}}); a.code != want {
			t.Fatalf("generic delivery %d: %+v, want %d", i, a, want)
		}
	}
	for i := range 10 {
		gbody := []byte(`{"object_kind":"push","project":{"name":"p"}}`)
		if a := postAnswer(t, s.Addr(), delivery{"gl", gbody, map[string]string{"X-Gitlab-Token": secret, "X-Gitlab-Event-UUID": fmt.Sprint("l-", i)}}); a.code != http.StatusAccepted {
			t.Fatalf("unlimited route, delivery %d: %+v", i, a)
		}
	}
	if DefaultConfig().RateLimit != 30 {
		t.Fatalf("default rate_limit %d, want Hermes's 30", DefaultConfig().RateLimit)
	}
}
