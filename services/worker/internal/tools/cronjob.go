package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron"
)

// CronJobs is what the cronjob tool needs of the job store (cron.Store).
type CronJobs interface {
	Create(ctx context.Context, n cron.NewJob) (cron.Job, error)
	List(ctx context.Context, owner string, all bool) ([]cron.Job, error)
	Resolve(ctx context.Context, owner, ref string) (cron.Job, error)
	Update(ctx context.Context, owner, id string, u cron.Update) (cron.Job, error)
	Pause(ctx context.Context, owner, id string) (cron.Job, error)
	Resume(ctx context.Context, owner, id string) (cron.Job, error)
	Trigger(ctx context.Context, owner, id string) (cron.Job, error)
	Remove(ctx context.Context, owner, id string) (cron.Job, error)
	Location() *time.Location
}

const cronjobDescription = `Manage scheduled cron jobs: action='create' schedules a job from a prompt; 'list' inspects jobs; 'update'/'pause'/'resume'/'remove' manage one by job_id (always list first — never guess job IDs); 'run' fires a job on the next scheduler tick.

Jobs run in a fresh session with no current-chat context, so prompts must be self-contained, and the agent's FINAL RESPONSE is what gets delivered — cron runs are autonomous and cannot ask questions. Prefer updating an existing job over creating near-duplicates.`

const cronjobParameters = `{"type":"object","properties":{
"action":{"type":"string","description":"One of: create, list, update, pause, resume, remove, run. When action=create, the 'schedule' and 'prompt' fields are REQUIRED."},
"job_id":{"type":"string","description":"Required for update/pause/resume/remove/run: the job's id (or its name)."},
"prompt":{"type":"string","description":"For create: the full self-contained prompt the job runs."},
"schedule":{"type":"string","description":"REQUIRED for create. Schedule forms: (1) one-shot delay — '30m', '2h', '1d' or 'in 30m' (fires ONCE that far from now; use this for 'remind me in N minutes' — do NOT hand-compute an absolute timestamp); (2) recurring interval — 'every 30m', 'every 2h'; (2b) recurring days and time — 'every monday 9am', 'weekdays at 9am', 'every day at 9:30pm'; (3) cron syntax — '0 9 * * *' (daily 9am); (4) absolute one-shot — ISO timestamp '2026-06-01T09:00:00'."},
"name":{"type":"string","description":"Optional human-friendly name"},
"repeat":{"type":"integer","description":"Optional repeat count. Omit for defaults (once for one-shot, forever for recurring)."},
"deliver":{"type":"string","description":"Where the job's output is POSTED as a one-way message (the job itself always runs in a fresh session with no chat context). Omit to address the chat this job was created from ('origin'). Otherwise: 'local' (no delivery), a platform name such as 'telegram' (this chat when this chat is on that platform, else the platform's home channel), 'platform:chat_id', 'platform:chat_id:thread_id' or 'platform:#channel-name'; several separated by commas ('telegram,discord:123,origin') each get the output."},
"include_disabled":{"type":"boolean","description":"For list: also list paused and completed jobs."}
},"required":["action"]}`

// Cronjob is Hermes's cronjob tool: one tool with actions. A user (in a
// group, the session) lists and changes only the jobs they made; a job
// made here answers in this chat unless deliver says otherwise. A job
// that would post elsewhere than send_message may without asking (this
// chat, a home channel, allowed: agent.send_message_targets) waits for
// the user's approval, as such a send_message does.
func Cronjob(jobs CronJobs, allowed []string) Tool {
	return Tool{
		Name:        "cronjob",
		Emoji:       "⏰",
		Description: cronjobDescription,
		Parameters:  json.RawMessage(cronjobParameters),
		Confirm: func(call Call, args json.RawMessage) string {
			d, ok := cronDeliver(args)
			if !ok {
				return ""
			}
			// Each of several targets on its own: a list must not pass
			// as one chat id of an allowed "platform:*".
			for _, p := range cron.DeliverParts(d) {
				switch strings.ToLower(p) {
				case cron.DeliverOrigin, cron.DeliverLocal:
					continue
				}
				if !sendAllowed(p, call.Origin, allowed) {
					return "cronjob delivering to " + p + ", a chat that is neither this one, a home channel nor in agent.send_message_targets"
				}
			}
			return ""
		},
		Pattern: func(args json.RawMessage) string {
			d, _ := cronDeliver(args)
			return "cronjob " + d
		},
		Preview: func(args json.RawMessage) string {
			var a cronArgs
			_ = decode(args, &a)
			if a.JobID != "" {
				return a.Action + " " + a.JobID
			}
			return strings.TrimSpace(a.Action + " " + a.Schedule)
		},
		Run: func(ctx context.Context, call Call, args json.RawMessage) (string, error) {
			var a cronArgs
			if err := decode(args, &a); err != nil {
				return cronFail(err.Error()), nil
			}
			return cronRun(ctx, jobs, call, a), nil
		},
	}
}

// cronDeliver is the chat a create or update call would deliver to;
// false when it names none (origin, local, no deliver).
func cronDeliver(args json.RawMessage) (string, bool) {
	var a cronArgs
	if decode(args, &a) != nil || a.Deliver == nil {
		return "", false
	}
	switch strings.ToLower(strings.TrimSpace(a.Action)) {
	case "create", "update":
	default:
		return "", false
	}
	d := strings.TrimSpace(*a.Deliver)
	switch strings.ToLower(d) {
	case "", cron.DeliverOrigin, cron.DeliverLocal:
		return "", false
	}
	return d, true
}

type cronArgs struct {
	Action          string  `json:"action"`
	JobID           string  `json:"job_id"`
	Prompt          *string `json:"prompt"`
	Schedule        string  `json:"schedule"`
	Name            *string `json:"name"`
	Repeat          *int    `json:"repeat"`
	Deliver         *string `json:"deliver"`
	IncludeDisabled bool    `json:"include_disabled"`
}

func cronJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return `{"success": false, "error": "internal error"}`
	}
	return string(b)
}

func cronFail(msg string) string {
	return cronJSON(map[string]any{"success": false, "error": msg})
}

// cronOwner is whose jobs a call manages (the turn's user key).
func cronOwner(call Call) string {
	if call.UserKey != "" {
		return call.UserKey
	}
	return "session:" + call.SessionKey
}

// cronOrigin is the chat a job made in this turn answers in: none for
// the API and webhooks, whose callers cannot be written to later.
func cronOrigin(call Call) cron.Origin {
	t := call.Target
	if t == nil || t.GetChatId() == "" {
		return cron.Origin{}
	}
	switch t.GetPlatform() {
	case "api", "webhook", "cron":
		return cron.Origin{}
	}
	return cron.Origin{Platform: t.GetPlatform(), Account: t.GetAccount(), ChatID: t.GetChatId(), ThreadID: t.GetThreadId()}
}

func cronRun(ctx context.Context, jobs CronJobs, call Call, a cronArgs) string {
	if strings.HasPrefix(call.UserKey, "cron:") || strings.Contains(call.SessionKey, ":cron:dm:") {
		// As Hermes: a scheduled run cannot schedule more runs.
		return cronFail("Cron-run sessions cannot manage cron jobs: a scheduled job cannot create, change or remove jobs.")
	}
	owner := cronOwner(call)
	action := strings.ToLower(strings.TrimSpace(a.Action))
	loc := jobs.Location()
	switch action {
	case "create":
		if strings.TrimSpace(a.Schedule) == "" {
			return cronFail("schedule is required for create")
		}
		if a.Prompt == nil || strings.TrimSpace(*a.Prompt) == "" {
			return cronFail("create requires a prompt")
		}
		n := cron.NewJob{Owner: owner, Prompt: *a.Prompt, Schedule: a.Schedule, Origin: cronOrigin(call)}
		if a.Name != nil {
			n.Name = *a.Name
		}
		if a.Repeat != nil {
			n.Repeat = max(*a.Repeat, 0)
		}
		if a.Deliver != nil {
			n.Deliver = *a.Deliver
		}
		j, err := jobs.Create(ctx, n)
		if err != nil {
			return cronFail(cronMessage(err))
		}
		return cronJSON(map[string]any{
			"success": true, "job_id": j.ID, "name": j.Name, "schedule": j.Display, "repeat": j.RepeatDisplay(),
			"deliver": j.Deliver, "next_run_at": stamp(j.NextRunAt, loc), "job": formatJob(j, loc),
			"message": fmt.Sprintf("Cron job '%s' created.", j.Name),
		})
	case "list":
		list, err := jobs.List(ctx, owner, a.IncludeDisabled)
		if err != nil {
			return cronFail(cronMessage(err))
		}
		out := make([]map[string]any, 0, len(list))
		for _, j := range list {
			out = append(out, formatJob(j, loc))
		}
		return cronJSON(map[string]any{"success": true, "count": len(out), "jobs": out})
	case "update", "pause", "resume", "remove", "run", "run_now", "trigger":
	default:
		if a.JobID == "" {
			return cronFail(fmt.Sprintf("job_id is required for action '%s'", action))
		}
		return cronFail(fmt.Sprintf("Unknown cron action '%s'", a.Action))
	}
	if strings.TrimSpace(a.JobID) == "" {
		return cronFail(fmt.Sprintf("job_id is required for action '%s'", action))
	}
	var (
		j   cron.Job
		err error
	)
	switch action {
	case "update":
		u := cron.Update{Name: a.Name, Prompt: a.Prompt, Deliver: a.Deliver, Repeat: a.Repeat}
		if a.Schedule != "" {
			u.Schedule = &a.Schedule
		}
		if u == (cron.Update{}) {
			return cronFail("No updates provided.")
		}
		j, err = jobs.Update(ctx, owner, a.JobID, u)
	case "pause":
		j, err = jobs.Pause(ctx, owner, a.JobID)
	case "resume":
		j, err = jobs.Resume(ctx, owner, a.JobID)
	case "remove":
		j, err = jobs.Remove(ctx, owner, a.JobID)
	default:
		j, err = jobs.Trigger(ctx, owner, a.JobID)
	}
	if errors.Is(err, cron.ErrNotFound) {
		return cronFail(fmt.Sprintf("Job with ID or name '%s' not found. Use cronjob(action='list') to inspect jobs.", a.JobID))
	}
	if err != nil {
		return cronFail(cronMessage(err))
	}
	switch action {
	case "remove":
		return cronJSON(map[string]any{"success": true, "message": fmt.Sprintf("Cron job '%s' removed.", j.Name),
			"removed_job": map[string]any{"id": j.ID, "name": j.Name, "schedule": j.Display}})
	case "update", "pause", "resume":
		return cronJSON(map[string]any{"success": true, "job": formatJob(j, loc)})
	}
	return cronJSON(map[string]any{"success": true, "job": formatJob(j, loc),
		"message": fmt.Sprintf("Cron job '%s' will run on the next scheduler tick; its output goes to its deliver target.", j.Name)})
}

// cronMessage is a store error as the model reads it: the reason for bad
// input, a generic line for a failed store (its details stay in logs).
func cronMessage(err error) string {
	if errors.Is(err, cron.ErrInvalid) || errors.Is(err, cron.ErrAmbiguous) {
		return cron.Message(err)
	}
	return "the cron job store is unavailable; try again later"
}

// formatJob is Hermes's job view.
func formatJob(j cron.Job, loc *time.Location) map[string]any {
	p := strings.Join(strings.Fields(j.Prompt), " ")
	if r := []rune(p); len(r) > 100 {
		p = string(r[:100]) + "..."
	}
	out := map[string]any{
		"job_id": j.ID, "name": j.Name, "prompt_preview": p, "schedule": j.Display, "repeat": j.RepeatDisplay(),
		"deliver": j.Deliver, "next_run_at": stamp(j.NextRun(), loc), "last_run_at": stamp(j.LastRunAt, loc),
		"last_status": nilIfEmpty(j.LastStatus), "enabled": j.State == cron.StateScheduled, "state": j.State,
	}
	if j.LastError != "" {
		out["last_error"] = j.LastError
	}
	if j.LastDeliveryError != "" {
		out["last_delivery_error"] = j.LastDeliveryError
	}
	if j.PausedReason != "" {
		out["paused_reason"] = j.PausedReason
	}
	return out
}

func stamp(t time.Time, loc *time.Location) any {
	if t.IsZero() {
		return nil
	}
	return t.In(loc).Format(time.RFC3339)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
