package platform_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/pkg/telemetry/telemetrytest"
)

// TestALateFetchCallsNoPlatform: a worker's fetch request that reaches
// the gateway after the worker stopped waiting (sent while the worker's
// NATS connection was down, it went out once that was back) is answered
// without calling the platform: no one would read what a download
// brought, and it would be stored after the worker's turn went on
// without the file. The request's wait, a duration, counts from when the
// gateway got it, so only the deadline it carries tells it is over. A
// request in time is downloaded.
func TestALateFetchCallsNoPlatform(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	for _, tc := range []struct {
		name  string
		held  time.Duration // how long the worker's connection is down as it sends; 0: up
		calls int32
	}{
		{"in time", 0, 1},
		{"after its wait", wait + bus.DeadlineSkew + 2*time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := bustest.EmbeddedURL(t)
			gw := bustest.New(t, url)
			relay := bustest.NewCuttable(t, url)
			worker := bustest.NewWith(t, relay.URL(), gw.Topology(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
			p := &countedFiles{Memory: platformtest.NewMemory("bot-late", false)}
			r := startRunner(t, p, gw, platform.Options{Instance: "replica-a", Attachments: attachment.Config{Enabled: true, MaxBytes: 1000}}).r
			platformtest.WaitFor(t, "the gateway to start", func() bool { return state(r) == platform.StateConnected })
			late := map[string]string{"platform": "memory", "result": "late"}
			lateBefore := telemetrytest.Value(t, "switchboard_gateway_attachments_total", late)
			if tc.held > 0 {
				relay.Cut()
				platformtest.WaitFor(t, "the worker to see its connection down", func() bool { return worker.Conn().IsReconnecting() })
				time.AfterFunc(tc.held, relay.Restore)
			}

			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			req := &eventsv1.AttachmentFetchRequested{Account: "bot-late", Name: attachment.Name("memory", "bot-late", "e1", 0),
				Attachment: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "f1", MimeType: "text/plain"}}
			resp := &eventsv1.AttachmentFetched{}
			alive := func(instance string) string { return worker.Topology().SendingSubject("memory", instance) }
			err := worker.RequestWatched(ctx, worker.Topology().FetchSubject("memory"), req, resp, alive, 200*time.Millisecond)
			if tc.held == 0 {
				if err != nil || resp.GetBytesRef() == "" {
					t.Fatalf("%v, answer %v: want the file downloaded", err, resp)
				}
			} else {
				if err == nil {
					t.Fatalf("answered %v while the worker's connection was down", resp)
				}
				platformtest.WaitFor(t, "the gateway to take the late request", func() bool {
					return p.calls.Load() > 0 || telemetrytest.Value(t, "switchboard_gateway_attachments_total", late) > lateBefore
				})
			}
			if got := p.calls.Load(); got != tc.calls {
				t.Fatalf("the platform was called %d times, want %d", got, tc.calls)
			}
		})
	}
}

// countedFiles is Memory with downloads, which it counts.
type countedFiles struct {
	*platformtest.Memory
	calls atomic.Int32
}

func (f *countedFiles) Fetch(context.Context, *eventsv1.Attachment) (io.ReadCloser, string, error) {
	f.calls.Add(1)
	return io.NopCloser(strings.NewReader("notes")), "text/plain", nil
}
