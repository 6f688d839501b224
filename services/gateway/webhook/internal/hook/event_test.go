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
