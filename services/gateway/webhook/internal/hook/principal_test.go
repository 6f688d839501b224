package hook

import (
	"net/http"
	"testing"
)

// TestSenderIsTheRoute: a delivery's sender — which the worker keys the
// agent's per-user memory by ("webhook:" + user_id) — is its route, as
// configured: nothing in the payload or the headers names another, so a
// caller of one route never reaches the memory of another route or of a
// chat user.
func TestSenderIsTheRoute(t *testing.T) {
	t.Parallel()
	route, err := Compile("deploys", Route{Signature: SigNone, Insecure: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		body    string
		headers map[string]string
	}{
		{"plain", `{"action":"opened"}`, nil},
		{"payload names a user", `{"user_id":"telegram:99","user":"webhook:other","sender":{"id":"99"},"chat_type":"group"}`, nil},
		{"headers name a user", `{}`, map[string]string{"X-User-Id": "99", "X-Hermes-User-Id": "99", "X-Webhook-User": "other"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range c.headers {
				h.Set(k, v)
			}
			ev, rerr := Build(route, "default", h, []byte(c.body))
			if rerr != nil {
				t.Fatalf("refused: %v", rerr.Err)
			}
			src := ev.GetSource()
			if src.GetPlatform() != "webhook" || src.GetUserId() != "webhook:deploys" || src.GetUserIdAlt() != "" ||
				src.GetChatType() != "dm" || src.GetChatId() != "deploys" {
				t.Errorf("source %v, want the route's own (webhook, webhook:deploys, dm, chat deploys)", src)
			}
		})
	}
}
