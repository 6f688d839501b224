package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
)

// TestWholeSystemSteeringOfAFailedModelCallRunsNext runs every service
// with the scriptable fake model. A run calls a tool; the model call
// after it is slow and fails. Steering sent during that call (POST
// /v1/runs/{id}/steer, the router's /steer) was taken by the turn,
// acknowledged, and lost with the failed call. It is answered now by
// the next turn, and read by the model exactly once.
func TestWholeSystemSteeringOfAFailedModelCallRunsNext(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	const steer = "make it by train"
	fake, d := startWithFakeModel(t)
	fake.SetScript(func(r *fakellm.Request) (fakellm.Reply, bool) {
		last := r.Messages[len(r.Messages)-1]
		switch {
		case last.Role == "tool":
			// The call after the tool: the steering arrives meanwhile.
			return fakellm.Reply{Failure: &fakellm.Failure{Status: http.StatusBadRequest, Message: "refused", Latency: 1500 * time.Millisecond}}, true
		case strings.Contains(r.LastUserText(), "plan a trip"):
			return fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}}, true
		}
		return fakellm.Reply{Text: "answered: " + r.LastUserText()}, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	post := func(path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.apiAddr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, out)
		}
		return out
	}
	wait := func(what string, cond func([]fakellm.Request) bool) {
		t.Helper()
		for !cond(fake.Requests()) {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s; model requests %d", what, len(fake.Requests()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	id, _ := post("/v1/runs", `{"input":"plan a trip"}`)["run_id"].(string)
	wait("the call after the tool", func(reqs []fakellm.Request) bool { return len(reqs) >= 2 })
	// The run is running from its first event (the tool's start), which
	// reaches the gateway through delivery, not with the model call: a
	// loaded machine can be into the next call before it arrives, and a
	// queued run refuses steering (409).
	for status := ""; status != "running"; {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.apiAddr+"/v1/runs/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("run %s: %v (last status %q)", id, err, status)
		}
		var run struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		if status = run.Status; status != "running" {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if ans := post("/v1/runs/"+id+"/steer", `{"input":"`+steer+`"}`); ans["accepted"] != true {
		t.Fatalf("steer: %v", ans)
	}
	carrying := func(reqs []fakellm.Request) []fakellm.Request {
		var out []fakellm.Request
		for _, r := range reqs {
			for _, m := range r.Messages {
				if strings.Contains(m.Content, steer) {
					out = append(out, r)
					break
				}
			}
		}
		return out
	}
	wait("the steering's turn", func(reqs []fakellm.Request) bool { return len(carrying(reqs)) > 0 })
	time.Sleep(2 * time.Second) // anything more would have come by now
	got := carrying(fake.Requests())
	if len(got) != 1 || !strings.Contains(got[0].LastUserText(), steer) || strings.Count(messagesText(got[0]), steer) != 1 {
		t.Fatalf("%d model calls carry the steering, want one whose last user message is it: %+v", len(got), got)
	}
}

// messagesText is the text of r's messages, joined.
func messagesText(r fakellm.Request) string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	return b.String()
}
