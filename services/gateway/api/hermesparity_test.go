package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
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

// Content arrays as Hermes's API server takes them (_normalize_chat_content,
// _normalize_multimodal_content): a string element is a text part, a
// number, null or nested array is skipped; the message is answered with
// its text, on all three endpoints.
func TestHermesContentArrays(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	base := "http://" + s.Addr()
	for _, c := range []struct {
		name, path, body string
		status           int
		text, context    string
	}{
		{"chat completion", "/v1/chat/completions",
			`{"model":"x","messages":[{"role":"system","content":["be ",{"type":"text","text":"brief"},7]},` +
				`{"role":"user","content":["hello",{"type":"text","text":"there"},null,[1],""]}]}`,
			200, "hello\nthere", "system:be \nbrief"},
		{"Responses", "/v1/responses",
			`{"model":"x","input":[{"role":"assistant","content":["earlier",{"type":"output_text","text":"answer"}]},{"role":"user","content":["what now?",3]}]}`,
			200, "what now?", "assistant:earlier\nanswer"},
		{"run", "/v1/runs", `{"input":[{"role":"user","content":["run ","this"]}]}`, 202, "run \nthis", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(r.received())
			res := do(t, "POST", base+c.path, testKey, c.body, nil)
			if res.code != c.status {
				t.Fatalf("%d %s, want %d", res.code, res.body, c.status)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(r.received()) == before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			evs := r.received()
			if len(evs) != before+1 {
				t.Fatalf("%d events, want one more than %d", len(evs), before)
			}
			ev := evs[before]
			var ctx []string
			for _, m := range ev.GetContext() {
				ctx = append(ctx, m.GetRole()+":"+m.GetContent())
			}
			if ev.GetText() != c.text || strings.Join(ctx, ",") != c.context {
				t.Fatalf("text %q, context %q; want %q, %q", ev.GetText(), ctx, c.text, c.context)
			}
		})
	}
}

// An input item without a role is the user's, as Hermes reads it
// (_handle_responses: item.get("role", "user")), on the Responses API and
// runs alike.
func TestHermesInputItemWithoutRole(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	base := "http://" + s.Addr()
	for i, c := range []struct{ path, body string }{
		{"/v1/responses", `{"input":[{"content":"hello"}]}`},
		{"/v1/runs", `{"input":[{"role":"assistant","content":"earlier"},{"type":"message","content":[{"type":"input_text","text":"hello"}]}]}`},
	} {
		res := do(t, "POST", base+c.path, testKey, c.body, nil)
		if res.code != http.StatusOK && res.code != http.StatusAccepted {
			t.Fatalf("%s: %d %s", c.path, res.code, res.body)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(r.received()) <= i && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if evs := r.received(); len(evs) != i+1 || evs[i].GetText() != "hello" {
			t.Fatalf("%s: events %v, want the message hello", c.path, evs)
		}
	}
}

// A body over the limit is answered as Hermes's body_limit_middleware
// answers one (gateway/platforms/api_server.py): 413 with
// {"message": "Request body too large.", "type": "invalid_request_error",
// "param": null, "code": "body_too_large"}, on every endpoint that reads
// a body, whether its Content-Length says so or it is sent in chunks.
func TestBodyTooLargeAsHermes(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, func(c *Config) { c.MaxBodyBytes = 1024 })
	base := "http://" + s.Addr()
	big := strings.Repeat("x", 2048)
	for _, c := range []struct{ name, path, body string }{
		{"chat completion", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + big + `"}]}`},
		{"Responses", "/v1/responses", `{"input":"` + big + `"}`},
		{"run", "/v1/runs", `{"input":"` + big + `"}`},
	} {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, chunked %v", c.name, chunked), func(t *testing.T) {
				var body io.Reader = strings.NewReader(c.body)
				if chunked {
					body = io.MultiReader(body) // no length: sent in chunks
				}
				req, err := http.NewRequest("POST", base+c.path, body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+testKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var got struct {
					Error map[string]any `json:"error"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
					t.Fatal(err)
				}
				want := map[string]any{"message": "Request body too large.", "type": "invalid_request_error", "param": nil, "code": "body_too_large"}
				if resp.StatusCode != http.StatusRequestEntityTooLarge || !reflect.DeepEqual(got.Error, want) {
					t.Fatalf("%d %v; want 413 %v", resp.StatusCode, got.Error, want)
				}
			})
		}
	}
}

// A chat completion of 1,001 messages whose last has 17 pictures, and a
// Responses request of 1,001 input items, are answered (200), as Hermes
// answers them: every message is context, the first 16 pictures are
// taken and the others named.
func TestHermesTakesEveryMessageAndPicture(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	r := startResponder(t, b)
	base := "http://" + s.Addr()
	pictures := strings.TrimSuffix(strings.Repeat(`{"type":"image_url","image_url":{"url":"https://x/a.png"}},`, 17), ",")
	for i, c := range []struct {
		name, path, body string
		context, atts    int
	}{
		{"chat completion", "/v1/chat/completions",
			`{"messages":[` + strings.Repeat(`{"role":"user","content":"m"},`, 1_000) + `{"role":"user","content":[{"type":"text","text":"q"},` + pictures + `]}]}`, 1_000, 17},
		{"Responses", "/v1/responses", `{"input":[` + strings.Repeat(`"m",`, 1_000) + `"q"]}`, 1_000, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := do(t, "POST", base+c.path, testKey, c.body, nil)
			if res.code != http.StatusOK {
				t.Fatalf("%d %s", res.code, res.body)
			}
			evs := r.received()
			if len(evs) != i+1 {
				t.Fatalf("%d events, want %d", len(evs), i+1)
			}
			ev := evs[i]
			atts := ev.GetAttachments()
			if ev.GetText() != "q" || len(ev.GetContext()) != c.context || len(atts) != c.atts {
				t.Fatalf("text %q, %d context messages, %d attachments; want q, %d, %d", ev.GetText(), len(ev.GetContext()), len(atts), c.context, c.atts)
			}
			if len(atts) > 0 && (atts[15].GetUrl() != "https://x/a.png" || atts[16].GetLocation() != nil || atts[16].GetUnavailable() == "") {
				t.Fatalf("pictures %v, want 16 taken and one more not", atts)
			}
		})
	}
}
