package mattermost

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/mattermost/mattermostfake"
)

// A post read while NATS is out of reach waits in the gateway until the
// bus is back, on the websocket it came by: the reader, held up
// publishing it, reads no pongs meanwhile, and their absence is no dead
// connection. Before, the next ping failed, the connection was dropped
// with the post (and what the server had sent after it) unpublished, and
// a post in a channel the gateway had not read from yet was lost: the
// catch-up after the reconnect reads only channels it knows.
func TestPostReadDuringANATSOutageIsPublished(t *testing.T) {
	t.Parallel()
	n := bustest.NewRestartable(t)
	b := n.Bus(t, n.Topology())

	f := mattermostfake.New(bot, botName, token)
	t.Cleanup(f.Close)
	fakeChannels(f)
	cfg := testConfig(f)
	cfg.PingInterval = 100 * time.Millisecond
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(10 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	platformtest.WaitFor(t, "the gateway to connect", func() bool {
		st, _ := s.Runner().State()
		return st == platform.StateConnected && f.Connections() == 1
	})

	n.Stop()
	id := f.Message(dmCh, ann, "written while NATS is down")
	time.Sleep(2 * time.Second) // many ping intervals
	n.Start()

	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	after := f.Message(dmCh, ann, "written after")
	platformtest.WaitFor(t, "the control published", func() bool { return published(wctx, b, after) })
	platformtest.WaitFor(t, "the post published", func() bool { return published(wctx, b, id) })
	if n := f.Connections(); n != 1 {
		t.Errorf("%d websocket connections, want the first one kept", n)
	}
}

// published reports whether the inbound stream holds an event naming id.
func published(ctx context.Context, b *bus.Bus, id string) bool {
	st, err := b.JetStream().Stream(ctx, b.Topology().Stream(bus.StreamInbound))
	if err != nil {
		return false
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		if m, err := st.GetMsg(ctx, seq); err == nil && bytes.Contains(m.Data, []byte(id)) {
			return true
		}
	}
	return false
}

// A post whose files the server is slow to describe (GET /files/{id}/info
// answering after several ping intervals, within call_timeout) is
// published with them described, on the websocket it came by: the reader,
// held up asking, reads no pongs meanwhile, and their absence is no dead
// connection. Before, the next ping failed and the connection was dropped
// with the post unpublished, lost in a channel the catch-up did not know.
func TestPostWithSlowlyDescribedFilesIsPublished(t *testing.T) {
	t.Parallel()
	g := start(t, func(c *Config) { c.PingInterval = 100 * time.Millisecond }, platform.Options{})
	audio := g.f.Upload("talk.ogg", "audio/ogg", []byte("OggS"))
	g.f.OmitFileMetadata(true)
	g.f.FailNext("file info", 1, mattermostfake.Fail{Delay: time.Second})
	id := g.f.Add(mattermostfake.Post{ChannelID: dmCh, UserID: ann, FileIDs: []string{audio.ID}})
	ev := g.next(t)
	if ev.GetMessageId() != id {
		t.Fatalf("published %s, want %s", ev.GetMessageId(), id)
	}
	if atts := ev.GetAttachments(); len(atts) != 1 || atts[0].GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE || atts[0].GetFileName() != "talk.ogg" {
		t.Errorf("attachments %v, want the described audio file", atts)
	}
	if n := g.f.Connections(); n != 1 {
		t.Errorf("%d websocket connections, want the first one kept", n)
	}
}
