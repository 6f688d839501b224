package router

import "testing"

// A message's context limit (MessageReceived.context_limit: an API
// Responses request's truncation "auto") rides on the turn that answers
// it (TurnRequested.context_limit), for the worker to cut what the model
// is shown; a message without one, or with one below 0, sets none.
func TestTurnCarriesItsMessagesContextLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startRouter(testConfig(), nil, nil)
	w := e.startWorker(nil)
	for _, tc := range []struct {
		text  string
		limit int32
		want  int32
	}{
		{"limited", 100, 100},
		{"unlimited", 0, 0},
		{"below zero", -5, 0},
		{"limited again", 7, 7},
	} {
		ev := dm("alice", tc.text)
		ev.ContextLimit = tc.limit
		e.publish(ev)
		if got := turnOf(t, w, tc.text).GetContextLimit(); got != tc.want {
			t.Errorf("%s: the turn's context limit %d, want %d", tc.text, got, tc.want)
		}
	}
}
