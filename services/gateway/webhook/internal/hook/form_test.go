package hook

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// GitHub's default content type for a webhook is form
// (application/x-www-form-urlencoded): the JSON payload is the form
// field "payload", and the signature is over the form body. Such a
// delivery was refused as not JSON (400), so every event of a webhook
// set up with GitHub's defaults was lost.
func TestGitHubFormDelivery(t *testing.T) {
	t.Parallel()
	route, err := Compile("gh", Route{Secret: "s3cret", Events: []string{"issues"},
		Prompt: "{{event}}: {{.issue.title}} by {{.sender.login}}"}, "")
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"action":"opened","issue":{"title":"Crash on start"},"sender":{"login":"octocat"}}`
	body := []byte("payload=" + url.QueryEscape(payload))
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-GitHub-Event", "issues")
	h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-Hub-Signature-256", Sign("s3cret", body))
	ev, rerr := Prepare(route, "default", h, body, time.Now())
	if rerr != nil {
		t.Fatalf("Prepare: %d %s: %v", rerr.Code, rerr.Status, rerr.Err)
	}
	if want := "issues.opened: Crash on start by octocat"; ev.GetText() != want {
		t.Fatalf("text %q, want %q", ev.GetText(), want)
	}

	// A form body without a JSON payload field is the form's fields, as
	// Hermes reads one; a body that is neither is still refused.
	plain, err := Compile("plain", Route{Secret: "s3cret", Prompt: "{{.name}} says {{.msg}}"}, "")
	if err != nil {
		t.Fatal(err)
	}
	body = []byte("name=ann&msg=" + url.QueryEscape("hi there"))
	h.Set("X-Hub-Signature-256", Sign("s3cret", body))
	ev, rerr = Prepare(plain, "default", h, body, time.Now())
	if rerr != nil || ev.GetText() != "ann says hi there" {
		t.Fatalf("form fields: %v, %v", ev.GetText(), rerr)
	}
	h.Del("Content-Type")
	body = []byte("payload=" + url.QueryEscape(payload))
	h.Set("X-Hub-Signature-256", Sign("s3cret", body))
	if _, rerr = Prepare(route, "default", h, body, time.Now()); rerr == nil || rerr.Status != "malformed_payload" {
		t.Fatalf("a form body without its content type: %v, want malformed_payload", rerr)
	}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	body = []byte("payload=" + url.QueryEscape(strings.TrimSuffix(payload, "}")))
	h.Set("X-Hub-Signature-256", Sign("s3cret", body))
	if _, rerr = Prepare(route, "default", h, body, time.Now()); rerr == nil || rerr.Status != "malformed_payload" {
		t.Fatalf("a form payload that is not JSON: %v, want malformed_payload", rerr)
	}
}
