package bluebubbles

import (
	"log/slog"
	"net/http"
	"testing"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// panicTransport panics on every request.
type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) { panic("transport bug") }

// A read receipt whose request panics on its goroutine is recovered and
// counted (gateway_read_receipt), and its slot freed; it ended the
// process before.
func TestReadReceiptPanicRecovered(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ServerURL, cfg.Password = "http://127.0.0.1:1", "pw"
	p, err := NewPlatform(cfg, slog.New(slog.DiscardHandler), &http.Client{Transport: panicTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"component": readReceiptComponent}
	before := telemetrytest.Value(t, "switchboard_panics_total", labels)
	p.markRead(&eventsv1.SessionSource{ChatId: "iMessage;-;+15550001"})
	platformtest.WaitFor(t, "the panic to be counted", func() bool {
		return telemetrytest.Value(t, "switchboard_panics_total", labels) > before
	})
	platformtest.WaitFor(t, "the receipt's slot to be freed", func() bool { return len(readReceipts) == 0 })
}
