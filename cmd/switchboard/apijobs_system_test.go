package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// TestWholeSystemAPIJobs runs `switchboard dev` with an API key, the
// Telegram gateway pointed at the fake Bot API (its home channel chat 99)
// and the scheduler ticking every second. A job created over /api/jobs
// to post in Telegram's home channel and run with /api/jobs/{id}/run
// fires once, its answer reaches the home channel, and its run is
// recorded on the job (last_run_at, last_status ok). A chat outside
// agent.send_message_targets is refused, and the job the agent makes
// with its cronjob tool in the client's chat is listed among the client's
// jobs.
func TestWholeSystemAPIJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const key = "sk-system-api-jobs"
	tg, err := telegramfake.New("4546:telegram-test-token", "switchboard_bot")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	d := startDev(t, "API_SERVER_KEY="+key,
		"TELEGRAM_BOT_TOKEN=4546:telegram-test-token", "TELEGRAM_API_BASE_URL="+tg.URL, "TELEGRAM_HOME_CHANNEL=99",
		"SWITCHBOARD_GATEWAYS__TELEGRAM__POLL_TIMEOUT=1s",
		"SWITCHBOARD_CRON__TICK=1s", "SWITCHBOARD_CRON__TIMEZONE=UTC")
	defer d.stop(t)
	base := "http://" + d.apiAddr
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s\nstderr:\n%s", what, d.stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	runs := func() int {
		n := 0
		for _, m := range tg.Messages("99") {
			if strings.Contains(m.Shown, "Cronjob Response: Build ping") {
				n++
			}
		}
		return n
	}

	status, out := call(http.MethodPost, "/api/jobs", `{"name":"Build ping","schedule":"1d","prompt":"ping the build","deliver":"telegram"}`)
	job, _ := out["job"].(map[string]any)
	if status != http.StatusOK || job["deliver"] != "telegram" || job["state"] != "scheduled" {
		t.Fatalf("create: %d %v\nstderr:\n%s", status, out, d.stderr.String())
	}
	id, _ := job["id"].(string)
	if status, out := call(http.MethodPost, "/api/jobs/"+id+"/run", ""); status != http.StatusOK {
		t.Fatalf("run: %d %v", status, out)
	}
	until("the run's answer in the home channel", func() bool { return runs() == 1 })
	var last map[string]any
	until("the run on record", func() bool {
		_, out := call(http.MethodGet, "/api/jobs/"+id, "")
		last, _ = out["job"].(map[string]any)
		return last["last_status"] == "ok" && last["last_run_at"] != nil
	})
	// "1d" is a one-shot: the run asked for is its one run (Hermes's
	// run-now), which completes it.
	if last["state"] != "completed" || last["repeat"].(map[string]any)["completed"] != float64(1) {
		t.Errorf("after a run asked for, the job %v", last)
	}

	if status, out := call(http.MethodPost, "/api/jobs", `{"name":"x","schedule":"1d","prompt":"p","deliver":"telegram:12345"}`); status != http.StatusForbidden {
		t.Errorf("a chat outside agent.send_message_targets: %d %v", status, out)
	}

	// The agent's cronjob tool in this client's chat makes a job of the
	// same owner.
	body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user",
		"content": `remind me [[tool:cronjob {"action":"create","schedule":"every 2h","prompt":"stretch","name":"From chat"}]]`}}})
	if status, out := call(http.MethodPost, "/v1/chat/completions", string(body)); status != http.StatusOK {
		t.Fatalf("chat: %d %v", status, out)
	}
	// (Build ping, completed by its run, is listed with include_disabled.)
	_, out = call(http.MethodGet, "/api/jobs?include_disabled=true", "")
	jobs, _ := out["jobs"].([]any)
	names := []string{}
	for _, j := range jobs {
		names = append(names, j.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "Build ping,From chat" {
		t.Errorf("the client's jobs %v", names)
	}

	// One run: a few more ticks add nothing.
	time.Sleep(3 * time.Second)
	if n := runs(); n != 1 {
		t.Errorf("the home channel shows %d answers of the run, want 1", n)
	}
}
