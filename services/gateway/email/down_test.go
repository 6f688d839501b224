package email

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// The IMAP server down when the gateway starts: the mailbox is tried
// again on the backoff schedule, the gateway unready meanwhile; once the
// server is up the gateway reads it and new mail gets through.
func TestIMAPDownAtStart(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	down := platformtest.NewOutage(t)
	host, port, err := net.SplitHostPort(down.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(f)
	cfg.IMAPHost = host
	if cfg.IMAPPort, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatalf("New with the IMAP server down: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range []string{BucketCursors, BucketThreads} {
			_ = b.JetStream().DeleteKeyValue(context.Background(), b.Topology().Stream(n))
		}
	})
	platformtest.Start(t, b, s)
	down.ComeUp(t, s, "", net.JoinHostPort(f.IMAPHost, strconv.Itoa(f.IMAPPort)))
	if _, err := f.Deliver(mailText("From: Ann <ann@example.com>", "To: "+agent, "Subject: Back?",
		"Message-ID: <down1@example.com>", "", "Are you there?")); err != nil {
		t.Fatal(err)
	}
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != "down1@example.com" || !strings.Contains(ev.GetText(), "Are you there?") {
		t.Fatalf("event %v", ev)
	}
}
