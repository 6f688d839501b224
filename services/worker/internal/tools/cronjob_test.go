package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestCronjob runs the tool's actions against the real store, as the
// model calls them, and reads Hermes's answers.
func TestCronjob(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)
	store := cron.New(pgtest.New(t), time.UTC, func() time.Time { return now })
	tool := Cronjob(store, []string{"discord:*"})
	ann := Call{ID: "c1", TurnID: "t1", SessionKey: "agent:main:telegram:dm:99", UserKey: "telegram:99",
		Origin: "telegram:99", Target: &deliveryv1.Target{Platform: "telegram", Account: "default", ChatId: "99"}}
	bob := Call{SessionKey: "agent:main:telegram:dm:7", UserKey: "telegram:7", Target: &deliveryv1.Target{Platform: "telegram", ChatId: "7"}}
	call := func(c Call, args string) map[string]any {
		t.Helper()
		out, err := tool.Run(context.Background(), c, json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s: %v", args, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%s: answer %q is not JSON: %v", args, out, err)
		}
		return m
	}

	got := call(ann, `{"action":"create","schedule":"every 2h","prompt":"Check the build","name":"Build"}`)
	id, _ := got["job_id"].(string)
	if got["success"] != true || len(id) != 12 || got["schedule"] != "every 120m" || got["repeat"] != "forever" ||
		got["deliver"] != "origin" || got["next_run_at"] != "2026-03-10T10:30:00Z" || got["message"] != "Cron job 'Build' created." {
		t.Fatalf("create: %v", got)
	}
	j, err := store.Resolve(context.Background(), "telegram:99", id)
	if err != nil || j.Origin != (cron.Origin{Platform: "telegram", Account: "default", ChatID: "99"}) {
		t.Fatalf("stored %+v %v", j, err)
	}
	if got := call(ann, `{"action":"list"}`); got["count"] != 1.0 || got["jobs"].([]any)[0].(map[string]any)["prompt_preview"] != "Check the build" {
		t.Errorf("list: %v", got)
	}
	if got := call(bob, `{"action":"list"}`); got["count"] != 0.0 {
		t.Errorf("bob lists %v", got)
	}
	if got := call(bob, `{"action":"pause","job_id":"`+id+`"}`); got["success"] != false ||
		got["error"] != "Job with ID or name '"+id+"' not found. Use cronjob(action='list') to inspect jobs." {
		t.Errorf("bob pauses: %v", got)
	}
	if got := call(ann, `{"action":"pause","job_id":"build"}`); got["job"].(map[string]any)["state"] != "paused" || got["job"].(map[string]any)["enabled"] != false {
		t.Errorf("pause: %v", got)
	}
	if got := call(ann, `{"action":"list","include_disabled":true}`); got["count"] != 1.0 {
		t.Errorf("list with disabled: %v", got)
	}
	if got := call(ann, `{"action":"resume","job_id":"`+id+`"}`); got["job"].(map[string]any)["state"] != "scheduled" {
		t.Errorf("resume: %v", got)
	}
	if got := call(ann, `{"action":"update","job_id":"`+id+`","schedule":"0 9 * * *","deliver":"local","repeat":2}`); got["success"] != true ||
		got["job"].(map[string]any)["schedule"] != "0 9 * * *" || got["job"].(map[string]any)["repeat"] != "0/2" || got["job"].(map[string]any)["deliver"] != "local" {
		t.Errorf("update: %v", got)
	}
	if got := call(ann, `{"action":"update","job_id":"`+id+`"}`); got["error"] != "No updates provided." {
		t.Errorf("empty update: %v", got)
	}
	if got := call(ann, `{"action":"run","job_id":"`+id+`"}`); got["success"] != true || !strings.Contains(got["message"].(string), "next scheduler tick") {
		t.Errorf("run: %v", got)
	}
	// The run asked for is the job's next run until it fires, as
	// Hermes's trigger_job moves next_run_at to now (the chat's /cron
	// and the jobs API say so too).
	if got := call(ann, `{"action":"list"}`); got["jobs"].([]any)[0].(map[string]any)["next_run_at"] != "2026-03-10T08:30:00Z" {
		t.Errorf("list after run: %v, want next_run_at the run asked for", got)
	}
	if got := call(ann, `{"action":"remove","job_id":"`+id+`"}`); got["message"] != "Cron job 'Build' removed." || got["removed_job"].(map[string]any)["id"] != id {
		t.Errorf("remove: %v", got)
	}

	for args, want := range map[string]string{
		`{"action":"create","prompt":"x"}`:                                         "schedule is required for create",
		`{"action":"create","schedule":"30m"}`:                                     "create requires a prompt",
		`{"action":"create","schedule":"soon","prompt":"x"}`:                       `"soon". Use:`,
		`{"action":"create","schedule":"30m","prompt":"x","deliver":"origin; rm"}`: "is not a target",
		`{"action":"pause"}`:                                                       "job_id is required for action 'pause'",
		`{"action":"explode","job_id":"x"}`:                                        "Unknown cron action 'explode'",
		`{"action":`:                                                               "invalid arguments",
	} {
		if got := call(ann, args); got["success"] != false || !strings.Contains(got["error"].(string), want) {
			t.Errorf("%s: %v, want an error saying %q", args, got, want)
		}
	}

	// A job posting to a chat send_message could not reach without asking
	// waits for the user's approval; this chat, a home channel, the
	// allowed targets and local do not.
	for args, want := range map[string]string{
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"telegram:5"}`:  "cronjob delivering to telegram:5, a chat that is neither this one, a home channel nor in agent.send_message_targets",
		`{"action":"update","job_id":"x","deliver":"slack:#general"}`:              "cronjob delivering to slack:#general, a chat that is neither this one, a home channel nor in agent.send_message_targets",
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"telegram:99"}`: "",
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"telegram"}`:    "",
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"discord:42"}`:  "",
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"local"}`:       "",
		`{"action":"create","schedule":"1h","prompt":"x"}`:                         "",
		`{"action":"list","deliver":"telegram:5"}`:                                 "",
		// Each of several targets is checked on its own.
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"discord:42,telegram:5"}`:          "cronjob delivering to telegram:5, a chat that is neither this one, a home channel nor in agent.send_message_targets",
		`{"action":"create","schedule":"1h","prompt":"x","deliver":"telegram:99, discord:42,origin"}`: "",
	} {
		if reason, _ := tool.Approval(ann, json.RawMessage(args)); reason != want {
			t.Errorf("%s: approval %q, want %q", args, reason, want)
		}
	}
	if p := tool.ApprovalPattern(json.RawMessage(`{"action":"create","deliver":"telegram:5"}`)); p != "cronjob telegram:5" {
		t.Errorf("pattern %q", p)
	}

	// The API has no chat to answer in later: its jobs deliver locally
	// unless told where.
	api := Call{SessionKey: "agent:main:api:dm:k", UserKey: "api:k", Target: &deliveryv1.Target{Platform: "api", ChatId: "k"}}
	if got := call(api, `{"action":"create","schedule":"1h","prompt":"x"}`); got["deliver"] != "local" {
		t.Errorf("api job: %v", got)
	}
	// A scheduled run cannot schedule more.
	run := Call{SessionKey: "agent:main:cron:dm:abc_20260310_090000", UserKey: "cron:abc"}
	if got := call(run, `{"action":"list"}`); got["success"] != false || !strings.Contains(got["error"].(string), "Cron-run sessions cannot manage cron jobs") {
		t.Errorf("in a cron run: %v", got)
	}
}

// TestFormatJobErrors: as Hermes's job view, a job says why its last run
// failed (last_error) and why its answer was not delivered
// (last_delivery_error), and carries neither key when nothing failed.
func TestFormatJobErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		status, err, derr string
	}{
		{"ok", "ok", "", ""},
		{"failed", "error", "the model is unavailable", ""},
		{"undelivered", cron.StatusDeliveryFailed, "", "Forbidden: bot was blocked by the user"},
		{"both", "error", "the model is unavailable", "chat not found"},
	} {
		j := cron.Job{ID: "abc", Name: "n", Prompt: "p", Display: "every 60m", State: cron.StateScheduled,
			LastStatus: tc.status, LastError: tc.err, LastDeliveryError: tc.derr}
		out := formatJob(j, time.UTC)
		for key, want := range map[string]string{"last_error": tc.err, "last_delivery_error": tc.derr} {
			got, has := out[key]
			if has != (want != "") || (has && got != want) {
				t.Errorf("%s: %s = %v (present %v), want %q", tc.name, key, got, has, want)
			}
		}
		if out["last_status"] != tc.status {
			t.Errorf("%s: last_status %v", tc.name, out["last_status"])
		}
	}
}
