package matrix

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/logtest"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
	"github.com/switchboard-chat/switchboard/services/gateway/matrix/matrixfake"
)

// An event the gateway rejects (too large, malformed) is logged with the
// error that says why, which names the event but not its room: the room
// goes in no attribute the logs' pseudonyms know (log.pseudonymize), and
// a DM room's id names one person's conversation.
func TestRejectedEventLogsNoRoom(t *testing.T) {
	t.Parallel()
	f, b, _ := fixture(t)
	var logs logtest.Buffer
	runGatewayLogged(t, b, f, nil, telemetry.NewLogger(telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "k"}, &logs))
	f.Message(dmRm, ann, strings.Repeat("x", maxEventBytes+1))
	f.InjectRaw(dmRm, `{"type":"m.room.message","event_id":"$bad:fake.test","sender":"@ann:fake.test","origin_server_ts":1,"content":{"msgtype":"m.text","body":42}}`)
	platformtest.WaitFor(t, "both events to be rejected", func() bool {
		return strings.Count(logs.String(), "inbound payload rejected") == 2
	})
	if out := logs.String(); strings.Contains(out, dmRm) {
		t.Errorf("the log names the room %s:\n%s", dmRm, out)
	}
}

// A gap in a room's timeline that cannot be read back fails the sync,
// which the runner logs with its error: the error names no room.
func TestGapFailureLogsNoRoom(t *testing.T) {
	t.Parallel()
	g := start(t, nil)
	first := g.f.Message(dmRm, ann, "before the restart")
	if ev := g.next(t); ev.GetEventId() != first {
		t.Fatalf("event %s, want %s", ev.GetEventId(), first)
	}
	platformtest.WaitFor(t, "the token to move past the first message", func() bool {
		return g.f.Receipt(dmRm) == first
	})
	g.stop()
	g.f.SetTimelineLimit(2)
	var want []string
	for i := range 5 {
		want = append(want, g.f.Message(dmRm, ann, fmt.Sprintf("while down %d", i)))
	}
	g.f.FailNext("messages", 1, matrixfake.Fail{Status: http.StatusInternalServerError, ErrCode: "M_UNKNOWN"})
	var logs logtest.Buffer
	runGatewayLogged(t, g.b, g.f, nil, telemetry.NewLogger(telemetry.LogConfig{Level: "info", Pseudonymize: true, PseudonymKey: "k"}, &logs))
	for _, id := range want {
		if ev := g.next(t); ev.GetEventId() != id {
			t.Fatalf("event %s %q, want %s", ev.GetEventId(), ev.GetText(), id)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "fill the gap") {
		t.Fatalf("the failed read back is not logged:\n%s", out)
	}
	if strings.Contains(out, dmRm) {
		t.Errorf("the log names the room %s:\n%s", dmRm, out)
	}
}
