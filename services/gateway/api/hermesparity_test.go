package api

import (
	"encoding/json"
	"net/http"
	"testing"
)

// Small things a client written for Hermes's API server looks for: the
// /v1/health alias, a cors_origins of "*" (any origin), and the legacy
// fields of a /v1/models entry.
func TestHermesParity(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	anyOrigin := startService(t, b, func(c *Config) { c.CORSOrigins = []string{"*"} })
	listed := startService(t, b, func(c *Config) { c.CORSOrigins = []string{"https://chat.example.test"} })
	for _, c := range []struct {
		name        string
		s           *Service
		method      string
		path, key   string
		origin      string
		status      int
		allowOrigin string
	}{
		{"v1 health", listed, "GET", "/v1/health", "", "", 200, ""},
		{"any origin's preflight", anyOrigin, "OPTIONS", "/v1/runs", "", "https://ui.example.test", 204, "https://ui.example.test"},
		{"any origin's POST", anyOrigin, "POST", "/v1/runs", testKey, "https://ui.example.test", 400, "https://ui.example.test"},
		{"an unlisted origin's POST", listed, "POST", "/v1/runs", testKey, "https://ui.example.test", 403, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			headers := map[string]string{}
			if c.origin != "" {
				headers["Origin"] = c.origin
				headers["Access-Control-Request-Method"] = "POST"
			}
			r := do(t, c.method, "http://"+c.s.Addr()+c.path, c.key, "{}", headers)
			if r.code != c.status || r.header.Get("Access-Control-Allow-Origin") != c.allowOrigin {
				t.Fatalf("%d %s, Access-Control-Allow-Origin %q; want %d %q", r.code, r.body, r.header.Get("Access-Control-Allow-Origin"), c.status, c.allowOrigin)
			}
		})
	}
	r := do(t, "GET", "http://"+listed.Addr()+"/v1/models", testKey, "", nil)
	var models struct {
		Data []map[string]any `json:"data"`
	}
	if r.code != http.StatusOK || json.Unmarshal(r.body, &models) != nil || len(models.Data) != 1 {
		t.Fatalf("models %d %s", r.code, r.body)
	}
	m := models.Data[0]
	if m["id"] != "switchboard" || m["root"] != "switchboard" || m["parent"] != nil || m["permission"] == nil {
		t.Errorf("model %v", m)
	}
}
