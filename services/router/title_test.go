package router

import (
	"strings"
	"testing"
)

// As Hermes: a title names one conversation. /title refuses one another
// of the chat's conversations has ("Title 'X' is already in use by
// session …"); /new <title>, which starts the conversation either way,
// takes the next of the title's lineage ("Plan #2"), as Hermes names a
// conversation it titles itself. So /resume <title> finds one
// conversation; another chat may use the same title.
func TestTitlesAreUnique(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	for _, tt := range []struct {
		user, text, want string
	}{
		{"alice", "/title Plan", "Title set: Plan"},
		{"alice", "/title Plan", "Title set: Plan"}, // its own title again
		{"alice", "/new", "New session started."},
		{"alice", "/title plan", "⚠️ Title 'Plan' is already in use by session "},
		{"alice", "/title", "no title"},
		{"alice", "/new Plan", "New session started: Plan #2"},
		{"alice", "/new plan #2", "New session started: plan #3"},
		{"alice", "/title Plan #2", "already in use"},
		{"alice", "/title Plan #4", "Title set: Plan #4"},
		{"alice", "/sessions", "1. Plan #4"},
		{"alice", "/resume Plan", "Resumed Plan."},
		{"alice", "/resume plan #2", "Resumed Plan #2."},
		{"bob", "/title Plan", "Title set: Plan"}, // another chat
	} {
		if got := e.ask(tt.user, tt.text); !strings.Contains(got, tt.want) {
			t.Errorf("%s %s: got %q, want it to contain %q", tt.user, tt.text, got, tt.want)
		}
	}
}
