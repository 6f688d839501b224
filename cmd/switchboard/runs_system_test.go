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

// TestWholeSystemRuns runs `switchboard dev` with the shipped fake model
// and drives Hermes's runs API over HTTP: a run completes with its
// events; a tool listed in agent.dangerous_tools parks the run until its
// approval, which reaches the worker through the router's /approve; a
// slow run is stopped through the router's /stop and ends cancelled.
func TestWholeSystemRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	d := startDev(t, "SWITCHBOARD_AGENT__DANGEROUS_TOOLS=clock")
	defer d.stop(t)
	base := "http://" + d.apiAddr + "/v1/runs"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	call := func(method, url, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	start := func(input string) (string, <-chan map[string]any) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"input": input})
		code, acc := call(http.MethodPost, base, string(body))
		id, _ := acc["run_id"].(string)
		if code != http.StatusAccepted || id == "" {
			t.Fatalf("start %q: %d %v", input, code, acc)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/"+id+"/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("events: %v %v", resp, err)
		}
		events := make(chan map[string]any, 1000)
		go func() {
			defer close(events)
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var ev map[string]any
					if json.Unmarshal([]byte(data), &ev) == nil {
						events <- ev
					}
				}
			}
		}()
		return id, events
	}
	// until reads events up to the first one named name; it returns the
	// names read, deltas left out.
	until := func(events <-chan map[string]any, name string) (map[string]any, []string) {
		t.Helper()
		var seen []string
		for ev := range events {
			n := ev["event"].(string)
			if n != "message.delta" {
				seen = append(seen, n)
			}
			if n == name {
				return ev, seen
			}
		}
		t.Fatalf("stream ended before %s (saw %v)\nstderr:\n%s", name, seen, d.stderr.String())
		return nil, nil
	}
	status := func(id string) map[string]any {
		t.Helper()
		code, st := call(http.MethodGet, base+"/"+id, "")
		if code != http.StatusOK {
			t.Fatalf("status: %d %v", code, st)
		}
		return st
	}

	id, events := start("hello runs")
	end, seen := until(events, "run.completed")
	if end["output"] != "echo: hello runs" || len(seen) != 1 {
		t.Errorf("run.completed %v after %v", end, seen)
	}
	if st := status(id); st["status"] != "completed" || st["output"] != "echo: hello runs" || st["session_id"] != id {
		t.Errorf("status %v", st)
	}

	id, events = start(`what time is it? [[tool:clock {"tz":"UTC"}]]`)
	req, _ := until(events, "approval.request")
	if req["tool"] != "clock" {
		t.Errorf("approval.request %v", req)
	}
	if st := status(id); st["status"] != "waiting_for_approval" {
		t.Errorf("status while waiting %v", st)
	}
	if code, ans := call(http.MethodPost, base+"/"+id+"/approval", `{"choice":"once"}`); code != http.StatusOK || ans["resolved"] != 1.0 {
		t.Fatalf("approval: %d %v", code, ans)
	}
	if _, seen := until(events, "run.completed"); strings.Join(seen, " ") != "approval.responded tool.started tool.completed run.completed" {
		t.Errorf("events after the approval: %v", seen)
	}

	id, events = start("[[slow:300ms]] " + strings.Repeat("word ", 40))
	until(events, "message.delta")
	if code, ans := call(http.MethodPost, base+"/"+id+"/stop", ""); code != http.StatusOK || ans["status"] != "stopping" {
		t.Fatalf("stop: %d %v", code, ans)
	}
	until(events, "run.cancelled")
	if st := status(id); st["status"] != "cancelled" {
		t.Errorf("status after stop %v", st)
	}
}
