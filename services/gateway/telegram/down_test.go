package telegram

import (
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// The Bot API out of reach when the gateway starts: it is tried again on
// the backoff schedule, the gateway unready meanwhile; once it answers
// the gateway polls and what was sent meanwhile gets through.
func TestBotAPIDownAtStart(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	down := platformtest.NewOutage(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	cfg := testConfig(f)
	cfg.APIBaseURL = "http://" + down.Addr()
	s, _ := startService(t, cfg, b, "only")
	ids := injectText(f, 2)
	down.ComeUp(t, s, "", strings.TrimPrefix(f.URL, "http://"))
	waitFor(t, "the updates on the bus", 20*time.Second, func() bool { return len(inbound(t, b)) == 2 })
	checkExactlyOnce(t, inbound(t, b), ids)
}
