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
