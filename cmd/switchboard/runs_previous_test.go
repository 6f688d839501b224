package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestRunWithSessionAndPreviousResponseInTheWholeSystem runs every
// service with a fake model that records what it is asked. After A → B
// on the Responses API, a run naming a new session_id and
// previous_response_id A shows the model A's exchange and nothing of
// B's, as Hermes's run takes A's stored conversation_history; the run
// goes on in its session_id, whose next run sees that conversation and
// the run's own exchange.
func TestRunWithSessionAndPreviousResponseInTheWholeSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	t.Parallel()
	fake, d := startWithFakeModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := openai.NewClient(option.WithBaseURL("http://"+d.apiAddr+"/v1"), option.WithMaxRetries(0))
	ask := func(text, previous string) *responses.Response {
		t.Helper()
		params := responses.ResponseNewParams{Model: "switchboard", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
		if previous != "" {
			params.PreviousResponseID = openai.String(previous)
		}
		resp, err := client.Responses.New(ctx, params)
		if err != nil {
			t.Fatalf("%s: %v\nlog:\n%s", text, err, d.logs.String())
		}
		return resp
	}
	run := func(body string) {
		t.Helper()
		base := "http://" + d.apiAddr + "/v1/runs"
		resp, err := http.Post(base, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var acc struct {
			RunID string `json:"run_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&acc)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || acc.RunID == "" {
			t.Fatalf("run %s: %d", body, resp.StatusCode)
		}
		for ctx.Err() == nil {
			resp, err := http.Get(base + "/" + acc.RunID)
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			switch st.Status {
			case "completed":
				return
			case "failed", "cancelled":
				t.Fatalf("run %s: %s\nlog:\n%s", body, st.Status, d.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("run %s did not end\nlog:\n%s", body, d.logs.String())
	}
	seen := func(text string) []string {
		t.Helper()
		var found []string
		n := 0
		for _, req := range fake.Requests() {
			if req.LastUserText() != text {
				continue
			}
			n++
			found = nil
			for _, m := range req.Messages {
				if (m.Role == "user" || m.Role == "assistant") && m.Content != text {
					found = append(found, m.Role+": "+m.Content)
				}
			}
		}
		if n == 0 {
			t.Fatalf("the model was never asked %q", text)
		}
		return found
	}
	exchange := func(text string) []string { return []string{"user: " + text, "assistant: echo: " + text} }

	a := ask("alpha", "")
	ask("bravo", a.ID)
	run(`{"input":"charlie","session_id":"run-from-a","previous_response_id":"` + a.ID + `"}`)
	if got, want := seen("charlie"), exchange("alpha"); !slices.Equal(got, want) {
		t.Fatalf("the model saw %q with the run, want %q", got, want)
	}
	run(`{"input":"delta","session_id":"run-from-a"}`)
	if got, want := seen("delta"), append(exchange("alpha"), exchange("charlie")...); !slices.Equal(got, want) {
		t.Fatalf("the model saw %q with the session's next run, want %q", got, want)
	}
}
