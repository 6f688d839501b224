package api

import "net/http"

// capabilities serves GET /v1/capabilities: what this API serves, in the
// shape of Hermes's, so that an external UI written for Hermes finds
// its way without scraping docs.
func (s *Service) capabilities(w http.ResponseWriter, _ *http.Request) {
	type endpoint struct {
		Method string `json:"method"`
		Path   string `json:"path"`
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object":   "hermes.api_server.capabilities",
		"platform": "switchboard",
		"model":    s.cfg.Model,
		"auth":     map[string]any{"type": "bearer", "required": !s.cfg.Keyless()},
		"runtime": map[string]any{
			"mode": "server_agent", "tool_execution": "server", "split_runtime": false,
			"description": "Switchboard runs the agent on its workers; tools execute on the server side.",
		},
		"features": map[string]any{
			"chat_completions":           true,
			"chat_completions_streaming": true,
			"responses_api":              true,
			"responses_streaming":        true,
			"run_submission":             true,
			"run_status":                 true,
			"run_events_sse":             true,
			"run_stop":                   true,
			"run_approval_response":      true,
			"run_steer":                  true,
			"tool_progress_events":       true,
			"approval_events":            true,
			"idempotency_key":            true,
			"session_continuity_header":  HeaderHermesSession,
			"session_key_header":         HeaderSessionKey,
			"cors":                       len(s.cfg.CORSOrigins) > 0,
			"cron_jobs":                  s.jobs != nil,
		},
		"endpoints": map[string]endpoint{
			"health":           {http.MethodGet, "/health"},
			"models":           {http.MethodGet, "/v1/models"},
			"chat_completions": {http.MethodPost, "/v1/chat/completions"},
			"responses":        {http.MethodPost, "/v1/responses"},
			"runs":             {http.MethodPost, "/v1/runs"},
			"run_status":       {http.MethodGet, "/v1/runs/{run_id}"},
			"run_events":       {http.MethodGet, "/v1/runs/{run_id}/events"},
			"run_approval":     {http.MethodPost, "/v1/runs/{run_id}/approval"},
			"run_steer":        {http.MethodPost, "/v1/runs/{run_id}/steer"},
			"run_stop":         {http.MethodPost, "/v1/runs/{run_id}/stop"},
			"jobs":             {http.MethodGet, "/api/jobs"},
			"job_create":       {http.MethodPost, "/api/jobs"},
			"job":              {http.MethodGet, "/api/jobs/{job_id}"},
			"job_update":       {http.MethodPatch, "/api/jobs/{job_id}"},
			"job_delete":       {http.MethodDelete, "/api/jobs/{job_id}"},
			"job_pause":        {http.MethodPost, "/api/jobs/{job_id}/pause"},
			"job_resume":       {http.MethodPost, "/api/jobs/{job_id}/resume"},
			"job_run":          {http.MethodPost, "/api/jobs/{job_id}/run"},
			"media":            {http.MethodGet, "/v1/media/{media_id}"},
		},
	})
}
