package teams

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// When the Bot Framework's signing keys cannot be downloaded (Microsoft
// out of reach, the gateway just started), a genuine activity cannot be
// checked: it is answered 503, which the Bot Framework retries, not 401,
// which tells it the activity was forged, and counts no auth failure.
func TestUnreachableSigningKeysAreNotAForgedToken(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	cfg.OpenIDMetadataURL = "http://127.0.0.1:1/openid"
	h := start(t, f, cfg)
	before := testutil.ToFloat64(authFailures)
	for range 2 { // the download failed, then is not tried again within the minute
		if code := h.post(t, f.Message(dmConv, "personal", userID, userName, "hello")); code != http.StatusServiceUnavailable {
			t.Fatalf("answered %d, want %d", code, http.StatusServiceUnavailable)
		}
	}
	platformtest.NoEvent(t, h.evs, 100*time.Millisecond)
	if n := testutil.ToFloat64(authFailures) - before; n != 0 {
		t.Fatalf("%v auth failures counted for activities that could not be checked", n)
	}
}
