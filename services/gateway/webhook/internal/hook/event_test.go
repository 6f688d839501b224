package hook

import (
	"net/http"
	"testing"
	"time"
)

// Hermes names a generic delivery's event by the payload's event_type
// (then type): a route filtered on it (events: [deploy]) took none of
// the deliveries a sender writes for Hermes, answering each 200
// "ignored".
func TestEventTypeField(t *testing.T) {
	t.Parallel()
	route, err := Compile("deploys", Route{Secret: "s3cret", Signature: SigGeneric, Events: []string{"deploy"},
		Prompt: "{{event}} {{.version}}"}, "")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"event_type":"deploy","version":"1.2.3"}`)
	h := http.Header{}
	h.Set("X-Webhook-Signature", Sign("s3cret", body)[len("sha256="):])
	ev, rerr := Prepare(route, "default", h, body, time.Now())
	if rerr != nil {
		t.Fatalf("Prepare: %d %s: %v", rerr.Code, rerr.Status, rerr.Err)
	}
	if ev.GetText() != "deploy 1.2.3" {
		t.Fatalf("text %q", ev.GetText())
	}
}

// A GitLab route's filter names the payload's object_kind (plus its
// action), or the X-Gitlab-Event header's name as Hermes's filters do.
func TestGitLabEventFilter(t *testing.T) {
	t.Parallel()
	body := []byte(`{"object_kind":"merge_request","object_attributes":{"action":"open"}}`)
	for _, c := range []struct {
		events []string
		header string
		want   bool
	}{
		{[]string{"merge_request"}, "Merge Request Hook", true},
		{[]string{"merge_request.open"}, "Merge Request Hook", true},
		{[]string{"Merge Request Hook"}, "Merge Request Hook", true},
		{[]string{"Merge Request Hook"}, "", false},
		{[]string{"Push Hook"}, "Merge Request Hook", false},
		{[]string{"push"}, "Merge Request Hook", false},
	} {
		route, err := Compile("gl", Route{Secret: "s3cret", Signature: SigGitLab, Events: c.events}, "")
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("X-Gitlab-Token", "s3cret")
		if c.header != "" {
			h.Set("X-Gitlab-Event", c.header)
		}
		_, rerr := Prepare(route, "default", h, body, time.Now())
		if got := rerr == nil; got != c.want {
			t.Errorf("events %q, header %q: accepted %v (%v), want %v", c.events, c.header, got, rerr, c.want)
		}
	}
}

// GitLab sends Idempotency-Key, the same on a resend of a delivery (its
// webhook's "Resend request", the hook events API), beside an
// X-Gitlab-Event-UUID made anew for each sending; a proxy adds an
// X-Request-Id of its own to every request. The delivery is named by its
// Idempotency-Key, so a resend is the same delivery, a duplicate.
func TestIdempotencyKeyNamesTheDelivery(t *testing.T) {
	t.Parallel()
	route, err := Compile("gl", Route{Secret: "s3cret", Signature: SigGitLab}, "")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"object_kind":"issue","object_attributes":{"action":"open"}}`)
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"gitlab", map[string]string{"Idempotency-Key": "9e2bd4a2-7f5c-4d9a-8f5e-0d2b1c3a4e5f", "X-Gitlab-Event-UUID": "1671f880-67c6-45cb-9dfa-f4707face4ba"},
			"9e2bd4a2-7f5c-4d9a-8f5e-0d2b1c3a4e5f"},
		{"gitlab resent", map[string]string{"Idempotency-Key": "9e2bd4a2-7f5c-4d9a-8f5e-0d2b1c3a4e5f", "X-Gitlab-Event-UUID": "4b1e0b7e-2c7d-4f7a-9a43-5f0e0c5d6a11"},
			"9e2bd4a2-7f5c-4d9a-8f5e-0d2b1c3a4e5f"},
		{"behind a proxy", map[string]string{"Idempotency-Key": "key-1", "X-Request-Id": "proxy-7"}, "key-1"},
		// The IETF draft's Idempotency-Key is a structured-field string,
		// quoted; it was refused 400 bad_delivery_id, the delivery lost.
		{"as the IETF draft writes it", map[string]string{"Idempotency-Key": `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
			"8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"gitlab before 17.4", map[string]string{"X-Gitlab-Event-UUID": "1671f880-67c6-45cb-9dfa-f4707face4ba"}, "1671f880-67c6-45cb-9dfa-f4707face4ba"},
		// An Idempotency-Key that is no plain token (a base64 one) beside
		// another id: the delivery is named by that id, as before
		// Idempotency-Key was read first, not refused 400 bad_delivery_id.
		{"a key that is no plain token", map[string]string{"Idempotency-Key": "q1w2/e3r4+t5y6==", "X-Gitlab-Event-UUID": "1671f880-67c6-45cb-9dfa-f4707face4ba"},
			"1671f880-67c6-45cb-9dfa-f4707face4ba"},
		{"a key that is no plain token, behind a proxy", map[string]string{"Idempotency-Key": "q1w2/e3r4+t5y6==", "X-Request-Id": "proxy-7"}, "proxy-7"},
	} {
		h := http.Header{}
		h.Set("X-Gitlab-Token", "s3cret")
		for k, v := range c.headers {
			h.Set(k, v)
		}
		ev, rerr := Prepare(route, "default", h, body, time.Now())
		if rerr != nil {
			t.Fatalf("%s: Prepare: %d %s: %v", c.name, rerr.Code, rerr.Status, rerr.Err)
		}
		if ev.GetMessageId() != c.want || ev.GetEventId() != "gl/"+c.want {
			t.Errorf("%s: delivery %q (event %q), want %q", c.name, ev.GetMessageId(), ev.GetEventId(), c.want)
		}
	}
}
