package api

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/cron"
)

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
				if p == nil || strings.TrimSpace(*p) == "" || !utf8.ValidString(*p) || strings.ContainsRune(*p, 0) {
					t.Fatalf("create accepted %q without its required text: %+v", body, c)
				}
			}
			if utf8.RuneCountInString(strings.TrimSpace(*c.Name)) > maxJobName || len(*c.Prompt) > cron.MaxPromptBytes {
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
