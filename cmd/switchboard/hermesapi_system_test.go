package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWholeSystemHermesAPIControls runs `switchboard dev` (with an API
// key and gateways.api.max_concurrent_runs 1) and the shipped fake model,
// and drives what Hermes's API server adds to the OpenAI API over HTTP:
//   - X-Hermes-Session-Key scopes the agent's memory: a note the memory
//     tool saves under one channel's key is listed under that key in
//     another conversation, and not without the key or under another;
//   - POST /v1/runs/{id}/steer reaches the running turn through the
//     router's /steer: the worker gives the text to the model, whose
//     answer to it ends the run;
//   - a second run while one goes on is refused (429), and accepted once
//     the first has ended.
func TestWholeSystemHermesAPIControls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const key = "sk-system-hermes-controls"
	d := startDev(t, "API_SERVER_KEY="+key, "SWITCHBOARD_GATEWAYS__API__MAX_CONCURRENT_RUNS=1")
	defer d.stop(t)
	base := "http://" + d.apiAddr
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	call := func(method, path, body string, headers map[string]string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp, out
	}
	chat := func(text, session, channel string) (string, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": text}}})
		headers := map[string]string{"X-Session-Id": session}
		if channel != "" {
			headers["X-Hermes-Session-Key"] = channel
		}
		resp, out := call(http.MethodPost, "/v1/chat/completions", string(body), headers)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("chat %q: %d %v\nstderr:\n%s", text, resp.StatusCode, out, d.stderr.String())
		}
		choices, _ := out["choices"].([]any)
		if len(choices) != 1 {
			t.Fatalf("chat %q: %v", text, out)
		}
		content, _ := choices[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		return content, resp.Header.Get("X-Hermes-Session-Key")
	}

	// Memory scoped by X-Hermes-Session-Key.
	saved, scope := chat(`remember [[tool:memory {"action":"add","content":"likes green tea"}]]`, "conv-1", "channel-7")
	if !strings.Contains(saved, "saved note") || !strings.HasPrefix(scope, "api-server-") {
		t.Fatalf("save: %q (scope %q)", saved, scope)
	}
	list := `notes? [[tool:memory {"action":"list"}]]`
	if got, again := chat(list, "conv-2", "channel-7"); !strings.Contains(got, "likes green tea") || again != scope {
		t.Errorf("the same channel in another conversation: %q (scope %q)", got, again)
	}
	if got, _ := chat(list, "conv-3", ""); strings.Contains(got, "likes green tea") {
		t.Errorf("without the header: %q", got)
	}
	if got, other := chat(list, "conv-4", "channel-8"); strings.Contains(got, "likes green tea") || other == scope {
		t.Errorf("another channel: %q (scope %q)", got, other)
	}

	// A run steered while it streams; a second run refused meanwhile.
	start := func(input string) (*http.Response, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"input": input})
		resp, acc := call(http.MethodPost, "/v1/runs", string(body), nil)
		id, _ := acc["run_id"].(string)
		return resp, id
	}
	resp, id := start("[[slow:150ms]] " + strings.Repeat("word ", 20))
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("run: %d", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	stream, err := http.DefaultClient.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("events: %v %v", stream, err)
	}
	defer stream.Body.Close()
	events := make(chan map[string]any, 1000)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stream.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev map[string]any
				if json.Unmarshal([]byte(data), &ev) == nil {
					events <- ev
				}
			}
		}
	}()
	if ev := <-events; ev["event"] != "message.delta" {
		t.Fatalf("first event %v", ev)
	}
	if resp, _ := start("another"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("a second run while one goes on: %d", resp.StatusCode)
	}
	if resp, ans := call(http.MethodPost, "/v1/runs/"+id+"/steer", `{"input":"also mention the weather"}`, nil); resp.StatusCode != http.StatusOK || ans["accepted"] != true {
		t.Fatalf("steer: %d %v", resp.StatusCode, ans)
	}
	var seen []string
	var end map[string]any
	for ev := range events {
		if n := ev["event"].(string); n != "message.delta" {
			seen = append(seen, n)
		}
		if ev["event"] == "run.completed" || ev["event"] == "run.failed" {
			end = ev
			break
		}
	}
	if end == nil || end["event"] != "run.completed" || !strings.Contains(end["output"].(string), "also mention the weather") {
		t.Fatalf("run ended with %v after %v\nstderr:\n%s", end, seen, d.stderr.String())
	}
	if strings.Join(seen, " ") != "run.steered run.completed" {
		t.Errorf("events %v", seen)
	}
	if resp, _ := start("after"); resp.StatusCode != http.StatusAccepted {
		t.Errorf("a run after the first ended: %d", resp.StatusCode)
	}
}
