package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

const (
	aliceKey = "alice-key-0123456789abcdef"
	bobKey   = "bob-key-0123456789abcdefgh"
)

var jobsT0 = time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)

// jobsServer serves an API gateway whose jobs API is backed by store
// (nil: none), with two named keys, alice and bob.
func jobsServer(t *testing.T, store CronJobs, mutate func(*Config)) *httptest.Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.Keys = map[string]string{"alice": aliceKey, "bob": bobKey}
	cfg.RateLimit = 0
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, Deps{Bus: newBus(t), Log: slog.Default(), Jobs: store, JobTargets: []string{"telegram:555", "slack:*"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func jobsStore(t *testing.T) *cron.Store {
	t.Helper()
	now := jobsT0
	return cron.New(pgtest.New(t), time.UTC, func() time.Time { return now })
}

type jobsResp struct {
	status int
	body   map[string]any
	raw    string
}

func (r jobsResp) job() map[string]any {
	j, _ := r.body["job"].(map[string]any)
	return j
}

func call(t *testing.T, srv *httptest.Server, key, method, path, body string, header ...string) jobsResp {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := jobsResp{status: res.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &out.body)
	return out
}

// TestJobsAPI walks every endpoint with one client's job, as a dashboard
// does.
func TestJobsAPI(t *testing.T) {
	t.Parallel()
	store := jobsStore(t)
	srv := jobsServer(t, store, nil)

	created := call(t, srv, aliceKey, "POST", "/api/jobs",
		`{"name":"Morning brief","schedule":"every 2h","prompt":"Summarise the news","skills":[],"model":null}`)
	if created.status != 200 {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	j := created.job()
	id, _ := j["id"].(string)
	sched, _ := j["schedule"].(map[string]any)
	repeat, _ := j["repeat"].(map[string]any)
	if !jobIDPattern.MatchString(id) || j["name"] != "Morning brief" || j["prompt"] != "Summarise the news" ||
		j["deliver"] != "local" || j["state"] != "scheduled" || j["enabled"] != true || j["origin"] != nil ||
		sched["kind"] != "interval" || sched["minutes"] != float64(120) || j["schedule_display"] != "every 120m" ||
		repeat["times"] != nil || repeat["completed"] != float64(0) ||
		j["next_run_at"] != "2026-03-10T10:30:00Z" || j["last_run_at"] != nil || j["created_at"] != "2026-03-10T08:30:00Z" {
		t.Fatalf("created job %s", created.raw)
	}
	// The owner is the client's identity, as its chats' user key.
	if stored, err := store.Resolve(context.Background(), "api:key:alice", id); err != nil || stored.Deliver != "local" {
		t.Fatalf("stored job %+v, %v", stored, err)
	}

	steps := []struct {
		name, method, path, body string
		check                    func(r jobsResp) bool
	}{
		{"list", "GET", "/api/jobs", "", func(r jobsResp) bool {
			jobs, _ := r.body["jobs"].([]any)
			return len(jobs) == 1 && jobs[0].(map[string]any)["id"] == id
		}},
		{"get", "GET", "/api/jobs/" + id, "", func(r jobsResp) bool { return r.job()["id"] == id }},
		{"update", "PATCH", "/api/jobs/" + id, `{"prompt":"Summarise the weather","schedule":"0 9 * * *","repeat":3,"deliver":"telegram","unknown":1}`,
			func(r jobsResp) bool {
				j := r.job()
				return j["prompt"] == "Summarise the weather" && j["schedule"].(map[string]any)["expr"] == "0 9 * * *" &&
					j["repeat"].(map[string]any)["times"] == float64(3) && j["deliver"] == "telegram" && j["next_run_at"] == "2026-03-10T09:00:00Z"
			}},
		{"pause", "POST", "/api/jobs/" + id + "/pause", "", func(r jobsResp) bool {
			return r.job()["state"] == "paused" && r.job()["enabled"] == false
		}},
		{"paused jobs are not listed by default", "GET", "/api/jobs", "", func(r jobsResp) bool {
			jobs, ok := r.body["jobs"].([]any)
			return ok && len(jobs) == 0
		}},
		{"but with include_disabled", "GET", "/api/jobs?include_disabled=true", "", func(r jobsResp) bool {
			jobs, _ := r.body["jobs"].([]any)
			return len(jobs) == 1
		}},
		{"resume", "POST", "/api/jobs/" + id + "/resume", "", func(r jobsResp) bool { return r.job()["state"] == "scheduled" }},
		{"enabled false pauses", "PATCH", "/api/jobs/" + id, `{"enabled":false}`, func(r jobsResp) bool { return r.job()["state"] == "paused" }},
		{"enabled true resumes", "PATCH", "/api/jobs/" + id, `{"enabled":true}`, func(r jobsResp) bool { return r.job()["state"] == "scheduled" }},
		{"run", "POST", "/api/jobs/" + id + "/run", "", func(r jobsResp) bool { return r.job()["next_run_at"] == "2026-03-10T08:30:00Z" }},
		{"delete", "DELETE", "/api/jobs/" + id, "", func(r jobsResp) bool { return r.body["ok"] == true }},
	}
	for _, st := range steps {
		r := call(t, srv, aliceKey, st.method, st.path, st.body)
		if r.status != 200 || !st.check(r) {
			t.Fatalf("%s: %d %s", st.name, r.status, r.raw)
		}
	}
	if r := call(t, srv, aliceKey, "GET", "/api/jobs/"+id, ""); r.status != 404 || r.body["error"] != "Job not found" {
		t.Fatalf("removed job: %d %s", r.status, r.raw)
	}
}

// TestJobsAPIRefusals: each refusal, with Hermes's status and error.
func TestJobsAPIRefusals(t *testing.T) {
	t.Parallel()
	store := jobsStore(t)
	srv := jobsServer(t, store, nil)
	own := call(t, srv, aliceKey, "POST", "/api/jobs", `{"name":"Mine","schedule":"every 1h","prompt":"hello"}`)
	if own.status != 200 {
		t.Fatalf("create: %d %s", own.status, own.raw)
	}
	id := own.job()["id"].(string)
	named := call(t, srv, aliceKey, "POST", "/api/jobs", `{"name":"0123456789ab","schedule":"every 1h","prompt":"hello"}`)
	if named.status != 200 {
		t.Fatalf("create: %d %s", named.status, named.raw)
	}
	big := `{"name":"x","schedule":"every 1h","prompt":"` + strings.Repeat("a", maxJobBody) + `"}`

	cases := []struct {
		name, key, method, path, body string
		header                        []string
		status                        int
		err                           string // a part of the error
	}{
		{"no key", "", "GET", "/api/jobs", "", nil, 401, ""},
		{"wrong key", "nope", "POST", "/api/jobs/" + id + "/run", "", nil, 401, ""},
		{"id not an id", aliceKey, "GET", "/api/jobs/Mine", "", nil, 400, "Invalid job ID format"},
		{"id not an id on delete", aliceKey, "DELETE", "/api/jobs/ABCDEF012345", "", nil, 400, "Invalid job ID format"},
		{"unknown id", aliceKey, "GET", "/api/jobs/000000000000", "", nil, 404, "Job not found"},
		{"an id that is another job's name", aliceKey, "POST", "/api/jobs/0123456789ab/pause", "", nil, 404, "Job not found"},
		{"another client's job", bobKey, "GET", "/api/jobs/" + id, "", nil, 404, "Job not found"},
		{"another client's job: update", bobKey, "PATCH", "/api/jobs/" + id, `{"name":"x"}`, nil, 404, "Job not found"},
		{"another client's job: pause", bobKey, "POST", "/api/jobs/" + id + "/pause", "", nil, 404, "Job not found"},
		{"another client's job: resume", bobKey, "POST", "/api/jobs/" + id + "/resume", "", nil, 404, "Job not found"},
		{"another client's job: run", bobKey, "POST", "/api/jobs/" + id + "/run", "", nil, 404, "Job not found"},
		{"another client's job: delete", bobKey, "DELETE", "/api/jobs/" + id, "", nil, 404, "Job not found"},
		{"another scope of the same key", aliceKey, "GET", "/api/jobs/" + id, "", []string{HeaderSessionKey, "channel-7"}, 404, "Job not found"},
		{"not an object", aliceKey, "POST", "/api/jobs", `[1]`, nil, 400, "JSON object"},
		{"not JSON", aliceKey, "POST", "/api/jobs", `{"name":`, nil, 400, "JSON object"},
		{"no name", aliceKey, "POST", "/api/jobs", `{"schedule":"every 1h","prompt":"p"}`, nil, 400, "Name is required"},
		{"no schedule", aliceKey, "POST", "/api/jobs", `{"name":"n","prompt":"p"}`, nil, 400, "Schedule is required"},
		{"no prompt", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"  "}`, nil, 400, "Prompt is required"},
		{"name too long", aliceKey, "POST", "/api/jobs", `{"name":"` + strings.Repeat("n", 101) + `","schedule":"every 1h","prompt":"p"}`, nil, 400, "Name must be"},
		{"name not a string", aliceKey, "POST", "/api/jobs", `{"name":7,"schedule":"every 1h","prompt":"p"}`, nil, 400, "name must be a string"},
		{"bad schedule", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"whenever","prompt":"p"}`, nil, 400, `Invalid schedule "whenever"`},
		{"repeat 0", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","repeat":0}`, nil, 400, "Repeat must be a positive integer"},
		{"repeat not a number", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","repeat":"3"}`, nil, 400, "Repeat must be a positive integer"},
		{"skills", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","skills":["web"]}`, nil, 400, "skills is not supported"},
		{"model", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","model":"gpt"}`, nil, 400, "model is not supported"},
		// As Hermes's: a job with no origin chat delivering to its origin
		// answers in a home channel when it runs.
		{"deliver origin: the API has no chat", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"origin"}`, nil, 200, ""},
		{"deliver a chat not allowed", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"telegram:123"}`, nil, 403, "agent.send_message_targets"},
		{"deliver a channel name not allowed", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"slack:#ops"}`, nil, 403, "agent.send_message_targets"},
		{"deliver not a target", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"telegram"}`, nil, 200, ""},
		{"deliver an allowed chat", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"telegram:555"}`, nil, 200, ""},
		{"deliver an allowed platform's chat", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"slack:C123"}`, nil, 200, ""},
		{"update to a chat not allowed", aliceKey, "PATCH", "/api/jobs/" + id, `{"deliver":"discord:42"}`, nil, 403, "agent.send_message_targets"},
		// Several targets: each is checked, and a list is not one chat id
		// of an allowed "slack:*".
		{"deliver allowed targets", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"telegram:555, slack:C1,origin"}`, nil, 200, ""},
		{"deliver a list hiding a chat not allowed", aliceKey, "POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p","deliver":"slack:C1,telegram:123"}`, nil, 403, `deliver "telegram:123"`},
		{"update with nothing to change", aliceKey, "PATCH", "/api/jobs/" + id, `{"id":"x","state":"paused"}`, nil, 400, "No valid fields to update"},
		{"update to an empty name", aliceKey, "PATCH", "/api/jobs/" + id, `{"name":" "}`, nil, 400, "name must not be empty"},
		{"update to a bad schedule", aliceKey, "PATCH", "/api/jobs/" + id, `{"schedule":"never"}`, nil, 400, `Invalid schedule "never"`},
		{"body too large", aliceKey, "POST", "/api/jobs", big, nil, 413, ""}, // TestJobsBodyTooLargeAsHermes
		{"session key too long", aliceKey, "GET", "/api/jobs", "", []string{HeaderSessionKey, strings.Repeat("k", 257)}, 400, ""},
		{"method not served", aliceKey, "PUT", "/api/jobs/" + id, `{}`, nil, 405, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, srv, c.key, c.method, c.path, c.body, c.header...)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.raw)
			}
			if c.err != "" {
				if msg, _ := r.body["error"].(string); !strings.Contains(msg, c.err) {
					t.Fatalf("error %s, want %q in it", r.raw, c.err)
				}
			}
		})
	}
	// Nothing refused was stored, and bob sees none of alice's jobs.
	if r := call(t, srv, bobKey, "GET", "/api/jobs?include_disabled=1", ""); r.status != 200 || len(r.body["jobs"].([]any)) != 0 {
		t.Fatalf("bob's jobs: %d %s", r.status, r.raw)
	}
	jobs, err := store.List(context.Background(), "api:key:alice", true)
	if err != nil || len(jobs) != 7 { // Mine, the one named like an id, and the five allowed deliveries
		t.Fatalf("alice's jobs: %d, %v", len(jobs), err)
	}
	if j, _ := store.Resolve(context.Background(), "api:key:alice", id); j.Deliver != "local" || j.Name != "Mine" {
		t.Fatalf("a refused update changed the job: %+v", j)
	}
}

// TestJobsAPISessionKey: X-Hermes-Session-Key scopes the jobs as it
// scopes the memories: another key naming the same header gets its own.
func TestJobsAPISessionKey(t *testing.T) {
	t.Parallel()
	srv := jobsServer(t, jobsStore(t), nil)
	h := []string{HeaderSessionKey, "agent:main:webui:dm:user-42"}
	r := call(t, srv, aliceKey, "POST", "/api/jobs", `{"name":"scoped","schedule":"30m","prompt":"p"}`, h...)
	if r.status != 200 || r.job()["schedule"].(map[string]any)["run_at"] != "2026-03-10T09:00:00Z" ||
		r.job()["repeat"].(map[string]any)["times"] != float64(1) {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	id := r.job()["id"].(string)
	for _, c := range []struct {
		name   string
		key    string
		header []string
		status int
	}{
		{"same key and scope", aliceKey, h, 200},
		{"same key, no scope", aliceKey, nil, 404},
		{"another key, same scope", bobKey, h, 404},
	} {
		if r := call(t, srv, c.key, "GET", "/api/jobs/"+id, "", c.header...); r.status != c.status {
			t.Errorf("%s: %d %s", c.name, r.status, r.raw)
		}
	}
}

// TestJobsAPIUnavailable: no store (gateways.api.jobs off) and a database
// that does not answer are 503 with a clear error; the other endpoints
// are unaffected.
func TestJobsAPIUnavailable(t *testing.T) {
	t.Parallel()
	off := jobsServer(t, nil, func(c *Config) { c.Jobs = false })
	r := call(t, off, aliceKey, "GET", "/api/jobs", "")
	if msg, _ := r.body["error"].(string); r.status != 503 || !strings.Contains(msg, "gateways.api.jobs") {
		t.Fatalf("no store: %d %s", r.status, r.raw)
	}
	if r := call(t, off, aliceKey, "GET", "/v1/capabilities", ""); r.status != 200 || r.body["features"].(map[string]any)["cron_jobs"] != false {
		t.Fatalf("capabilities: %d %s", r.status, r.raw)
	}

	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	down := jobsServer(t, cron.New(pool, time.UTC, nil), nil)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/jobs", ""},
		{"POST", "/api/jobs", `{"name":"n","schedule":"every 1h","prompt":"p"}`},
		{"POST", "/api/jobs/0123456789ab/run", ""},
	} {
		r := call(t, down, aliceKey, c.method, c.path, c.body)
		if msg, _ := r.body["error"].(string); r.status != 503 || !strings.Contains(msg, "retry later") {
			t.Errorf("%s %s with the database down: %d %s", c.method, c.path, r.status, r.raw)
		}
	}
	caps := call(t, down, aliceKey, "GET", "/v1/capabilities", "")
	eps, _ := caps.body["endpoints"].(map[string]any)
	if caps.body["features"].(map[string]any)["cron_jobs"] != true || eps["job_run"] == nil {
		t.Fatalf("capabilities: %s", caps.raw)
	}
}

// TestJobsAPICORS: a browser dashboard on an allowed origin may PATCH.
func TestJobsAPICORS(t *testing.T) {
	t.Parallel()
	srv := jobsServer(t, nil, func(c *Config) { c.CORSOrigins = []string{"http://localhost:3000"} })
	req, _ := http.NewRequest(http.MethodOptions, srv.URL+"/api/jobs/0123456789ab", bytes.NewReader(nil))
	req.Header.Set("Origin", "http://localhost:3000")
	req.Header.Set("Access-Control-Request-Method", "PATCH")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 204 || !strings.Contains(res.Header.Get("Access-Control-Allow-Methods"), "PATCH") {
		t.Fatalf("preflight: %d %q", res.StatusCode, res.Header.Get("Access-Control-Allow-Methods"))
	}
}

// A jobs API body over its limit is answered as Hermes's
// body_limit_middleware answers any body too large, before the jobs
// handler reads it (gateway/platforms/api_server.py): 413 with the
// OpenAI error {"message": "Request body too large.", "type":
// "invalid_request_error", "param": null, "code": "body_too_large"}, as
// the other endpoints answer it.
func TestJobsBodyTooLargeAsHermes(t *testing.T) {
	t.Parallel()
	srv := jobsServer(t, jobsStore(t), nil)
	big := `{"name":"x","schedule":"every 1h","prompt":"` + strings.Repeat("a", maxJobBody) + `"}`
	want := map[string]any{"message": "Request body too large.", "type": "invalid_request_error", "param": nil, "code": "body_too_large"}
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/jobs"},
		{"PATCH", "/api/jobs/0123456789ab"},
	} {
		r := call(t, srv, aliceKey, c.method, c.path, big)
		if r.status != http.StatusRequestEntityTooLarge || !reflect.DeepEqual(r.body["error"], want) {
			t.Errorf("%s %s: %d %s; want 413 %v", c.method, c.path, r.status, r.raw, want)
		}
	}
}
