package api

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/cron"
	"github.com/switchboard-chat/switchboard/services/gateway/api/internal/openai"
)

// The jobs API strips a name and a schedule, and finds them and a
// prompt blank, as Hermes's str.strip() does: the separators U+001C to
// U+001F too, which strings.TrimSpace keeps. A job is created with its
// name and schedule stripped, as Hermes's _handle_create_job passes them.
func TestJobBodyBlankAsPython(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body, err string
		update          bool
		// The created job's name and schedule.
		jobName, schedule string
	}{
		{name: "a name of separators", body: `{"name":"\u001c\u001f","schedule":"every 1h","prompt":"p"}`, err: "Name is required"},
		{name: "a schedule of separators", body: `{"name":"n","schedule":" \u001d","prompt":"p"}`, err: "Schedule is required"},
		{name: "a prompt of separators", body: `{"name":"n","schedule":"every 1h","prompt":"\u001e"}`, err: "Prompt is required"},
		{name: "an update to a name of separators", update: true, body: `{"name":"\u001f"}`, err: "name must not be empty"},
		{name: "an update to a schedule of separators", update: true, body: `{"schedule":"\u001c"}`, err: "schedule must not be empty"},
		{name: "separators around", body: `{"name":"\u001cMine\u001f ","schedule":"\u001eevery 1h\u001d","prompt":"p"}`, jobName: "Mine", schedule: "every 1h"},
		{name: "a name within its bound once stripped", body: `{"name":"` + strings.Repeat(`\u001c`, 10) + strings.Repeat("n", maxJobName) + `","schedule":"every 1h","prompt":"p"}`,
			jobName: strings.Repeat("n", maxJobName), schedule: "every 1h"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			parse := parseJobCreate
			if c.update {
				parse = parseJobUpdate
			}
			j, err := parse([]byte(c.body))
			if c.err != "" {
				if !errors.Is(err, errJobBody) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *j.Name != c.jobName || *j.Schedule != c.schedule {
				t.Fatalf("name %q, schedule %q; want %q, %q", *j.Name, *j.Schedule, c.jobName, c.schedule)
			}
		})
	}
}

// FuzzJobBody checks the jobs API's body parser: it never panics, every
// refusal is errJobBody (a 400 with its message), and what it accepts
// holds what the store is given: for a create, a name, a schedule and a
// prompt that are text within their limits; a repeat from 1; for an
// update, at least one of Hermes's fields.
func FuzzJobBody(f *testing.F) {
	f.Add([]byte(`{"name":"Morning brief","schedule":"every 2h","prompt":"Summarise the news","deliver":"telegram","repeat":3}`))
	f.Add([]byte(`{"name":"n","schedule":"0 9 * * *","prompt":"p","skills":[],"model":null,"enabled":true}`))
	f.Add([]byte(`{"enabled":false}`))
	f.Add([]byte(`{"repeat":"3","name":7}`))
	f.Add([]byte(`{"repeat":1e3,"skills":["web"]}`))
	f.Add([]byte(`{"name":"\u0000","schedule":" ","prompt":"\ud800"}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"name":"a","name":"b","schedule":"30m","prompt":"x","deliver":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseJobCreate(body)
		if err != nil && !errors.Is(err, errJobBody) {
			t.Fatalf("create refused with %v, not errJobBody", err)
		}
		if err == nil {
			for _, p := range []*string{c.Name, c.Schedule, c.Prompt} {
				if p == nil || openai.PythonStrip(*p) == "" || !utf8.ValidString(*p) || strings.ContainsRune(*p, 0) {
					t.Fatalf("create accepted %q without its required text: %+v", body, c)
				}
			}
			if utf8.RuneCountInString(*c.Name) > maxJobName || len(*c.Prompt) > cron.MaxPromptBytes {
				t.Fatalf("create accepted %q beyond the limits", body)
			}
		}
		u, err := parseJobUpdate(body)
		if err != nil && !errors.Is(err, errJobBody) {
			t.Fatalf("update refused with %v, not errJobBody", err)
		}
		if err == nil && u.Name == nil && u.Schedule == nil && u.Prompt == nil && u.Deliver == nil && u.Repeat == nil && u.Enabled == nil &&
			!strings.Contains(string(body), "skill") {
			t.Fatalf("update accepted %q with nothing to change", body)
		}
		for _, b := range []jobBody{c, u} {
			if b.Repeat != nil && (*b.Repeat < 1 || *b.Repeat > 1_000_000) {
				t.Fatalf("repeat %d accepted from %q", *b.Repeat, body)
			}
		}
	})
}
