package slack

import (
	"net/http"
	"testing"
	"time"
)

// The Events API server reads unauthenticated bodies of up to
// MaxBodyBytes, so each phase of a connection has a deadline; a slow-body
// client is cut off after 30 s. (Pinned here rather than shown by a
// trickling client, which would take the full 30 s.)
func TestEventsServerTimeouts(t *testing.T) {
	for _, ack := range []time.Duration{DefaultConfig().AckTimeout, 20 * time.Second} {
		srv := eventsServer(http.NotFoundHandler(), ack)
		for _, c := range []struct {
			name     string
			got, min time.Duration
		}{
			{"ReadHeaderTimeout", srv.ReadHeaderTimeout, time.Second},
			{"ReadTimeout", srv.ReadTimeout, time.Second},
			{"IdleTimeout", srv.IdleTimeout, time.Second},
			// The write deadline starts once the headers are read: it must
			// outlast the rest of the body and the publish, or an event
			// stored in time would be answered with a reset and sent again.
			{"WriteTimeout", srv.WriteTimeout, srv.ReadTimeout + ack},
		} {
			if c.got < c.min {
				t.Errorf("ack timeout %v: %s is %v, want at least %v", ack, c.name, c.got, c.min)
			}
		}
		if srv.ReadTimeout != 30*time.Second {
			t.Errorf("ReadTimeout is %v, want 30s as the webhook gateway's", srv.ReadTimeout)
		}
	}
}
