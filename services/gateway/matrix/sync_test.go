package matrix

import (
	"net/http"
	"slices"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// A stored sync position the homeserver no longer knows (its database
// replaced or wiped: Synapse answers a token it cannot read with 400
// M_UNKNOWN, Dendrite with M_INVALID_PARAM, a sliding-sync server with
// M_UNKNOWN_POS) is dropped: the gateway syncs again from the
// homeserver's current state and hears the rooms, where it used to ask
// with the same token forever, deaf until an operator deleted the key.
// A transient failure (a 429, a 5xx) keeps the position.
func TestUnknownSyncPositionStartsAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fail  func(f *matrixfake.Fake)
		reset bool
	}{
		{"the homeserver's database replaced", func(f *matrixfake.Fake) { f.ForgetSyncTokens() }, true},
		{"400 M_INVALID_PARAM", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadRequest, ErrCode: "M_INVALID_PARAM"})
		}, true},
		{"400 M_UNKNOWN_POS", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadRequest, ErrCode: "M_UNKNOWN_POS"})
		}, true},
		{"429", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusTooManyRequests, ErrCode: "M_LIMIT_EXCEEDED"})
		}, false},
		{"502", func(f *matrixfake.Fake) {
			f.FailNext("sync", 1, matrixfake.Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := start(t, nil)
			before := g.f.Message(dmRm, ann, "before")
			if ev := g.next(t); ev.GetEventId() != before {
				t.Fatalf("event %s, want %s", ev.GetEventId(), before)
			}
			platformtest.WaitFor(t, "the token to move past the first message", func() bool {
				return g.f.Receipt(dmRm) == before
			})
			n := len(g.f.SyncSinces())
			tc.fail(g.f)
			after := g.f.Message(dmRm, ann, "after")
			if ev := g.next(t); ev.GetEventId() != after {
				t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), after)
			}
			g.none(t) // the first message is not answered again
			if reset := slices.Contains(g.f.SyncSinces()[n:], ""); reset != tc.reset {
				t.Fatalf("synced again without a token: %v, want %v (syncs %q)", reset, tc.reset, g.f.SyncSinces()[n:])
			}
		})
	}
}
