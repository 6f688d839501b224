package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/cron/schedule"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Hermes's jobs API: the cron jobs of the API client, over HTTP, as
// dashboards (Hermes-Studio, the Hermes web UI) use it.
//
//	GET    /api/jobs[?include_disabled=true]  {"jobs": [job…]}
//	POST   /api/jobs                          {"job": job}
//	GET    /api/jobs/{id}                     {"job": job}
//	PATCH  /api/jobs/{id}                     {"job": job}
//	DELETE /api/jobs/{id}                     {"ok": true}
//	POST   /api/jobs/{id}/pause|resume|run    {"job": job}
//
// Errors are Hermes's {"error": "…"}: 400 for a bad id or body, 403 for
// a deliver target the API may not set, 404 for a job that is not the
// client's, 503 when the gateway has no job store or the database does
// not answer. Jobs belong to the client identity (the API key; with
// X-Hermes-Session-Key, the scope it names), as "api:<identity>": the
// user key of that client's chats, so the jobs the agent makes in them
// are listed too, and no client sees or changes another's.

// CronJobs is the job store the jobs API uses (pkg/cron's Store).
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

// jobIDPattern is a job id: 12 hex digits (Hermes's and pkg/cron's).
var jobIDPattern = regexp.MustCompile(`^[a-f0-9]{12}$`)

// jobTimeout bounds one jobs API call's database work.
const jobTimeout = 10 * time.Second

func (s *Service) jobRoutes(mux *routeTable) {
	mux.HandleFunc("GET /api/jobs", s.authed(s.jobsAPI(s.listJobs)))
	mux.HandleFunc("POST /api/jobs", s.authed(s.jobsAPI(s.createJob)))
	mux.HandleFunc("GET /api/jobs/{id}", s.authed(s.jobsAPI(s.jobAction(nil))))
	mux.HandleFunc("PATCH /api/jobs/{id}", s.authed(s.jobsAPI(s.updateJob)))
	mux.HandleFunc("DELETE /api/jobs/{id}", s.authed(s.jobsAPI(s.jobAction(CronJobs.Remove))))
	mux.HandleFunc("POST /api/jobs/{id}/pause", s.authed(s.jobsAPI(s.jobAction(CronJobs.Pause))))
	mux.HandleFunc("POST /api/jobs/{id}/resume", s.authed(s.jobsAPI(s.jobAction(CronJobs.Resume))))
	mux.HandleFunc("POST /api/jobs/{id}/run", s.authed(s.jobsAPI(s.jobAction(CronJobs.Trigger))))
}

type jobHandler func(w http.ResponseWriter, r *http.Request, owner string)

// jobsAPI answers 503 when the gateway has no job store, else runs next
// for the request's owner.
func (s *Service) jobsAPI(next jobHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.jobs == nil {
			writeJobError(w, http.StatusServiceUnavailable,
				"Cron jobs are not available on this gateway: it has no database (gateways.api.jobs is off)")
			return
		}
		owner, ok := s.jobOwner(w, r)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), jobTimeout)
		defer cancel()
		next(w, r.WithContext(ctx), owner)
	}
}

// jobOwner is whose jobs a request manages: "api:<scope>" with
// X-Hermes-Session-Key (the scope memoryScope derives under the client
// identity), else "api:<client identity>" — the user key the worker
// gives the client's chat turns. It answers the request and returns false
// when the header is refused.
func (s *Service) jobOwner(w http.ResponseWriter, r *http.Request) (string, bool) {
	scope, ok := s.memoryScope(w, r)
	if !ok {
		return "", false
	}
	if scope != "" {
		return PlatformName + ":" + scope, true
	}
	return PlatformName + ":" + identityOf(r), true
}

func (s *Service) listJobs(w http.ResponseWriter, r *http.Request, owner string) {
	all := strings.EqualFold(r.URL.Query().Get("include_disabled"), "true") || r.URL.Query().Get("include_disabled") == "1"
	list, err := s.jobs.List(r.Context(), owner, all)
	if err != nil {
		s.jobFailed(w, r, "list", err)
		return
	}
	out := make([]jobJSON, 0, len(list))
	for _, j := range list {
		out = append(out, s.jobView(j))
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
}

func (s *Service) createJob(w http.ResponseWriter, r *http.Request, owner string) {
	body, ok := s.readJobBody(w, r)
	if !ok {
		return
	}
	b, err := parseJobCreate(body)
	if err != nil {
		s.rn().Reject(r.Context(), "invalid job body", err)
		writeJobError(w, http.StatusBadRequest, jobMessage(err))
		return
	}
	n := cron.NewJob{Owner: owner, Name: *b.Name, Prompt: *b.Prompt, Schedule: *b.Schedule, Deliver: cron.DeliverLocal}
	if b.Deliver != nil {
		n.Deliver = *b.Deliver
	}
	if b.Repeat != nil {
		n.Repeat = *b.Repeat
	}
	if !s.deliverAllowed(w, n.Deliver) {
		return
	}
	j, err := s.jobs.Create(r.Context(), n)
	if err != nil {
		s.jobFailed(w, r, "create", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job": s.jobView(j)})
}

func (s *Service) updateJob(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	body, ok := s.readJobBody(w, r)
	if !ok {
		return
	}
	b, err := parseJobUpdate(body)
	if err != nil {
		s.rn().Reject(r.Context(), "invalid job body", err)
		writeJobError(w, http.StatusBadRequest, jobMessage(err))
		return
	}
	if b.Deliver != nil && !s.deliverAllowed(w, *b.Deliver) {
		return
	}
	if _, err := s.ownJob(r.Context(), owner, id); err != nil {
		s.jobFailed(w, r, "update", err)
		return
	}
	u := cron.Update{Name: b.Name, Prompt: b.Prompt, Schedule: b.Schedule, Deliver: b.Deliver, Repeat: b.Repeat}
	j, err := s.jobs.Update(r.Context(), owner, id, u)
	if err == nil && b.Enabled != nil {
		// Hermes's enabled: false pauses, true resumes.
		switch {
		case !*b.Enabled && j.State == cron.StateScheduled:
			j, err = s.jobs.Pause(r.Context(), owner, id)
		case *b.Enabled && j.State == cron.StatePaused:
			j, err = s.jobs.Resume(r.Context(), owner, id)
		}
	}
	if err != nil {
		s.jobFailed(w, r, "update", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job": s.jobView(j)})
}

// jobAction serves a call on one job: op (nil: get), answered with the
// job, or {"ok": true} for a removal.
func (s *Service) jobAction(op func(CronJobs, context.Context, string, string) (cron.Job, error)) jobHandler {
	return func(w http.ResponseWriter, r *http.Request, owner string) {
		id, ok := jobID(w, r)
		if !ok {
			return
		}
		j, err := s.ownJob(r.Context(), owner, id)
		if err == nil && op != nil {
			j, err = op(s.jobs, r.Context(), owner, id)
		}
		if err != nil {
			s.jobFailed(w, r, "job call", err)
			return
		}
		if r.Method == http.MethodDelete {
			writeJSON(w, http.StatusOK, map[string]any{"ok": true})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"job": s.jobView(j)})
	}
}

// ownJob is the owner's job of that id: the store also finds a job by
// its name, which the API does not (a name may look like an id).
func (s *Service) ownJob(ctx context.Context, owner, id string) (cron.Job, error) {
	j, err := s.jobs.Resolve(ctx, owner, id)
	if err == nil && j.ID != id {
		return cron.Job{}, cron.ErrNotFound
	}
	if errors.Is(err, cron.ErrAmbiguous) {
		return cron.Job{}, cron.ErrNotFound
	}
	return j, err
}

// jobID is the request's job id; it answers 400 and returns false for
// one that is not an id (Hermes's "Invalid job ID format").
func jobID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !jobIDPattern.MatchString(id) {
		writeJobError(w, http.StatusBadRequest, "Invalid job ID format")
		return "", false
	}
	return id, true
}

func (s *Service) readJobBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := min(s.cfg.MaxBodyBytes, maxJobBody)
	body, err := platform.ReadBody(w, r, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			// As Hermes's body_limit_middleware answers a body too large
			// on every path, the jobs API's too (gateway/platforms/
			// api_server.py), and as readBody answers it.
			s.rn().Reject(r.Context(), "job body too large", err)
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "body_too_large", "", "Request body too large.")
			return nil, false
		}
		writeJobError(w, http.StatusBadRequest, "Could not read the request body")
		return nil, false
	}
	return body, true
}

// deliverAllowed applies the cronjob tool's rule to a target set over
// the API: a job may post, without asking, where send_message may (a
// platform's home channel, agent.send_message_targets). The tool asks the
// chat's user to /approve any other chat; an API client has no one else
// to ask — the key holder would approve its own request — so any other
// chat is refused (403). origin and local are checked by the store. Each
// target of several (comma-separated) is checked on its own: a list
// must not pass as one chat id of an allowed "platform:*".
func (s *Service) deliverAllowed(w http.ResponseWriter, deliver string) bool {
	for _, d := range cron.DeliverParts(deliver) {
		switch strings.ToLower(d) {
		case cron.DeliverOrigin, cron.DeliverLocal:
			continue
		}
		if !targetAllowed(d, s.jobTargets) {
			writeJobError(w, http.StatusForbidden, fmt.Sprintf(
				"deliver %q is neither a platform's home channel nor in agent.send_message_targets: a job made over the API may post only there", d))
			return false
		}
	}
	return true
}

// targetAllowed: target is a home channel (a bare platform) or
// matches one of allowed ("platform:chat_id", or "platform:*" for any
// chat id of the platform but no #name).
func targetAllowed(target string, allowed []string) bool {
	if !strings.Contains(target, ":") {
		return true
	}
	for _, a := range allowed {
		if p, ok := strings.CutSuffix(a, ":*"); ok {
			if rest, ok := strings.CutPrefix(target, p+":"); ok && rest != "" && !strings.HasPrefix(rest, "#") {
				return true
			}
			continue
		}
		if a == target {
			return true
		}
	}
	return false
}

// jobFailed answers a store error: 400 for bad input, 404 for a job that
// is not the owner's, 503 otherwise (the database).
func (s *Service) jobFailed(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, cron.ErrNotFound):
		writeJobError(w, http.StatusNotFound, "Job not found")
	case errors.Is(err, schedule.ErrInvalid):
		writeJobError(w, http.StatusBadRequest, "Invalid schedule "+cron.Message(err))
	case errors.Is(err, cron.ErrInvalid):
		writeJobError(w, http.StatusBadRequest, cron.Message(err))
	default:
		s.log.WarnContext(r.Context(), "jobs api "+what+" failed", "err", err)
		writeJobError(w, http.StatusServiceUnavailable, "The job store did not answer; retry later")
	}
}

func orEmpty(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func writeJobError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func jobMessage(err error) string {
	return strings.TrimPrefix(err.Error(), errJobBody.Error()+": ")
}

// jobJSON is a job as Hermes's jobs API shows it.
type jobJSON struct {
	ID              string         `json:"id"`
	Name            string         `json:"name"`
	Prompt          string         `json:"prompt"`
	Skills          []string       `json:"skills"`
	Skill           *string        `json:"skill"`
	Model           *string        `json:"model"`
	Provider        *string        `json:"provider"`
	Schedule        map[string]any `json:"schedule"`
	ScheduleDisplay string         `json:"schedule_display"`
	Repeat          jobRepeat      `json:"repeat"`
	Enabled         bool           `json:"enabled"`
	State           string         `json:"state"`
	CreatedAt       string         `json:"created_at"`
	UpdatedAt       string         `json:"updated_at"`
	NextRunAt       *string        `json:"next_run_at"`
	LastRunAt       *string        `json:"last_run_at"`
	LastStatus      *string        `json:"last_status"`
	LastError       *string        `json:"last_error"`
	// LastDeliveryError is Hermes's last_delivery_error: why the last
	// run's answer was not delivered (null: it was, or nothing to send).
	LastDeliveryError *string `json:"last_delivery_error"`
	// PausedReason is Hermes's paused_reason: why the scheduler paused
	// the job (null: it did not).
	PausedReason *string    `json:"paused_reason"`
	Deliver      string     `json:"deliver"`
	Origin       *jobOrigin `json:"origin"`
}

type jobRepeat struct {
	Times     *int `json:"times"`
	Completed int  `json:"completed"`
}

type jobOrigin struct {
	Platform string  `json:"platform"`
	ChatID   string  `json:"chat_id"`
	ThreadID *string `json:"thread_id"`
}

func (s *Service) jobView(j cron.Job) jobJSON {
	loc := s.jobs.Location()
	at := func(t time.Time) *string {
		if t.IsZero() {
			return nil
		}
		v := t.In(loc).Format(time.RFC3339)
		return &v
	}
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	sched := map[string]any{"kind": j.Kind, "expr": j.Expr, "display": j.Display}
	if sc, err := j.Schedule(loc); err == nil {
		switch sc.Kind {
		case schedule.Once:
			sched["run_at"] = sc.At.In(loc).Format(time.RFC3339)
		case schedule.Interval:
			sched["minutes"] = int(sc.Period(time.Time{}) / time.Minute)
		}
	}
	v := jobJSON{
		ID: j.ID, Name: j.Name, Prompt: j.Prompt, Skills: []string{}, Schedule: sched, ScheduleDisplay: j.Display,
		Repeat:  jobRepeat{Completed: j.RepeatCompleted},
		Enabled: j.State == cron.StateScheduled, State: j.State,
		CreatedAt: orEmpty(at(j.CreatedAt)), UpdatedAt: orEmpty(at(j.UpdatedAt)),
		NextRunAt: at(j.NextRun()), LastRunAt: at(j.LastRunAt), LastStatus: str(j.LastStatus), LastError: str(j.LastError),
		LastDeliveryError: str(j.LastDeliveryError), PausedReason: str(j.PausedReason), Deliver: j.Deliver,
	}
	if j.RepeatTimes > 0 {
		n := j.RepeatTimes
		v.Repeat.Times = &n
	}
	if j.Origin.Platform != "" {
		v.Origin = &jobOrigin{Platform: j.Origin.Platform, ChatID: j.Origin.ChatID, ThreadID: str(j.Origin.ThreadID)}
	}
	return v
}
