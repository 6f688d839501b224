package api

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// Steering a running run, as Hermes: the text goes to the run's session
// as /steer <text> from the run's client, the run records run.steered
// and goes on; the answer is Hermes's hermes.run.steer.
func TestRunSteered(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)
	url := "http://" + s.Addr() + "/v1/runs/"
	id, _ := startRun(t, s, `{"input":"slow","session_id":"steer-chat"}`, nil)
	es := followRun(t, s, id)
	<-es.events // running: its first delta

	for i, c := range []struct{ body, command string }{
		{`{"input":"also check the tests"}`, "/steer also check the tests"},
		{`{"message":[{"type":"text","text":"one"},{"type":"input_image","image_url":"x"},"two"]}`, "/steer one\ntwo"},
		{`{"input":"","text":"  from text  "}`, "/steer from text"},
	} {
		r := do(t, http.MethodPost, url+id+"/steer", testKey, c.body, nil)
		if want := `{"accepted":true,"object":"hermes.run.steer","run_id":"` + id + `"}`; r.code != http.StatusOK || strings.TrimSpace(string(r.body)) != want {
			t.Fatalf("steer %s: %d %s", c.body, r.code, r.body)
		}
		var deltas []string
		if ev := es.next(t, &deltas); ev["event"] != "run.steered" || ev["accepted"] != true {
			t.Errorf("event %v", ev)
		}
		if st := runStatusOf(t, s, id); st.Status != runRunning || st.LastEvent != "run.steered" {
			t.Errorf("status %+v", st)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(agent.commandTexts()) < i+1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if cmds := agent.commandTexts(); len(cmds) != i+1 || cmds[i] != c.command {
			t.Fatalf("commands %q, want %q last", cmds, c.command)
		}
	}
	agent.mu.Lock()
	steer := agent.commands[0]
	agent.mu.Unlock()
	if steer.GetSource().GetChatId() != "steer-chat" || steer.GetSource().GetUserId() != agent.received()[0].GetSource().GetUserId() {
		t.Errorf("/steer went to %v", steer.GetSource())
	}
	// The router's notices to /steer are not the run's: it goes on.
	time.Sleep(100 * time.Millisecond)
	if st := runStatusOf(t, s, id); st.Status != runRunning || st.Output != nil {
		t.Errorf("status after the notices %+v", st)
	}
}

// Only a running run is steered (409 run_not_accepting_steer), and only
// with text (400 invalid_steer_input).
func TestRunSteerRefused(t *testing.T) {
	t.Parallel()
	b := newBus(t)
	s := startService(t, b, nil)
	agent := startRunAgent(t, b)
	url := "http://" + s.Addr() + "/v1/runs/"

	running, _ := startRun(t, s, `{"input":"slow","session_id":"busy"}`, nil)
	es := followRun(t, s, running)
	<-es.events
	// Behind the running one in its session: queued.
	queued, _ := startRun(t, s, `{"input":"hello","session_id":"busy"}`, nil)
	ended, _ := startRun(t, s, `{"input":"hello"}`, nil)
	waitRunStatus(t, s, ended, runCompleted)
	stopping, _ := startRun(t, s, `{"input":"slow","session_id":"stopping"}`, nil)
	<-followRun(t, s, stopping).events
	if r := do(t, http.MethodPost, url+stopping+"/stop", testKey, "", nil); r.code != http.StatusOK {
		t.Fatalf("stop: %d %s", r.code, r.body)
	}
	for _, c := range []struct {
		name, id, body string
		status         int
		code           string
	}{
		{"queued", queued, `{"input":"x"}`, 409, "run_not_accepting_steer"},
		{"ended", ended, `{"input":"x"}`, 409, "run_not_accepting_steer"},
		{"stopped", stopping, `{"input":"x"}`, 409, "run_not_accepting_steer"},
		{"unknown", "run_" + strings.Repeat("0", 32), `{"input":"x"}`, 404, "run_not_found"},
		{"no text", running, `{"input":"  "}`, 400, "invalid_steer_input"},
		{"no field", running, `{"choice":"x"}`, 400, "invalid_steer_input"},
		{"parts without text", running, `{"input":[{"type":"input_image","image_url":"x"}]}`, 400, "invalid_steer_input"},
		{"a number", running, `{"input":5}`, 400, "invalid_steer_input"},
		{"not JSON", running, `also`, 400, "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, http.MethodPost, url+c.id+"/steer", testKey, c.body, nil)
			if r.code != c.status || errorCode(t, r) != c.code {
				t.Errorf("%d %s, want %d %s", r.code, r.body, c.status, c.code)
			}
		})
	}
	for _, cmd := range agent.commandTexts() {
		if strings.HasPrefix(cmd, "/steer") {
			t.Errorf("a refused steer was sent: %q", cmd)
		}
	}
}

// FuzzSteerBody checks the steer body parser on any body: it never
// panics, and text it accepts is non-empty and stripped as Python strips
// it (it follows "/steer " in a chat command).
func FuzzSteerBody(f *testing.F) {
	f.Add([]byte(`{"input":"also check the tests"}`))
	f.Add([]byte(`{"message":[{"type":"text","text":"one"},"two",{"type":"input_image"}]}`))
	f.Add([]byte(`{"input":"","text":" x "}`))
	f.Add([]byte(`{"input":5}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"input":"\u0000\n"} {}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		text, err := parseSteer(body)
		if err != nil {
			if text != "" {
				t.Fatalf("text %q with error %v", text, err)
			}
			return
		}
		if text == "" || text != openai.PythonStrip(text) {
			t.Fatalf("text %q accepted", text)
		}
	})
}

// A steer's text and an approval's choice are stripped as Python's
// str.strip() strips them, as the rest of the API reads text
// (openai.PythonStrip): the separators U+001C to U+001F are blanks too,
// so a text of them alone is empty and a choice between them is read.
func TestSteerAndChoiceStrippedAsPython(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body, want string // want "": refused
	}{
		{"a steer between separators", "{\"input\":\"\\u001c check the tests \\u001f\"}", "check the tests"},
		{"a steer part between separators", "{\"message\":[{\"type\":\"text\",\"text\":\"\\u001dtests\\u001e\"}]}", "tests"},
		{"a steer of separators alone", "{\"input\":\"\\u001c\\u001d \\u001e\\u001f\"}", ""},
		{"a steer of no-break spaces alone", "{\"text\":\"\\u00a0\\u3000\"}", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			text, err := parseSteer([]byte(c.body))
			if c.want == "" {
				var inv *openai.InvalidError
				if !errors.As(err, &inv) || inv.Code != "invalid_steer_input" {
					t.Fatalf("%q, %v; want invalid_steer_input", text, err)
				}
				return
			}
			if err != nil || text != c.want {
				t.Fatalf("%q, %v; want %q", text, err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name, body, want string // want "": refused
	}{
		{"a choice between separators", "{\"choice\":\"\\u001fSession\\u001c\"}", "session"},
		{"an alias between separators", "{\"choice\":\"\\u001e approve\\n\"}", "once"},
		{"separators alone", "{\"choice\":\"\\u001c\\u001f\"}", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			choice, err := parseApproval([]byte(c.body))
			if c.want == "" {
				var inv *openai.InvalidError
				if !errors.As(err, &inv) || inv.Code != "invalid_approval_choice" {
					t.Fatalf("%q, %v; want invalid_approval_choice", choice, err)
				}
				return
			}
			if err != nil || choice != c.want {
				t.Fatalf("%q, %v; want %q", choice, err, c.want)
			}
		})
	}
}
