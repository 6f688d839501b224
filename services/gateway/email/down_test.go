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
	"github.com/switchboard-chat/switchboard/services/gateway/email/mailfake"
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

// The SMTP server down when the gateway starts: its sign-in is tried
// again on the backoff schedule, the gateway unready meanwhile, and it
// reads the mailbox once the server answers.
func TestSMTPDownAtStart(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	down := platformtest.NewOutage(t)
	host, port, err := net.SplitHostPort(down.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(f)
	cfg.SMTPHost = host
	if cfg.SMTPPort, err = strconv.Atoi(port); err != nil {
		t.Fatal(err)
	}
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(cfg, Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
		Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{BucketCursors, BucketThreads} {
			_ = b.JetStream().DeleteKeyValue(context.Background(), b.Topology().Stream(n))
		}
	})
	platformtest.Start(t, b, s)
	down.ComeUp(t, s, "smtp dial", net.JoinHostPort(f.SMTPHost, strconv.Itoa(f.SMTPPort)))
}

// Credentials a server refuses end Run at start with an error naming
// the settings, whichever of the two servers refuses them; nothing is
// retried.
func TestRefusedCredentialsEndRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   mailfake.Options
		server string
	}{
		{"imap refuses", mailfake.Options{Address: agent, Password: "another"}, "IMAP server"},
		{"smtp refuses", mailfake.Options{Address: agent, Password: password, SMTPPassword: "another"}, "SMTP server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := mailfake.New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(f.Close)
			b := bustest.New(t, bustest.EmbeddedURL(t))
			s, err := New(testConfig(f), Deps{Log: slog.New(slog.DiscardHandler), Bus: b,
				Runner: platform.Options{Backoff: platform.Schedule(20 * time.Millisecond), LeaseTTL: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = s.Run(ctx)
			platformtest.DeleteBuckets(b)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Run = %v (ctx %v), want it to end with the refusal", err, ctx.Err())
			}
			for _, want := range []string{tc.server, "refused the login", "gateways.email.password", "EMAIL_PASSWORD"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if !platform.IsFatal(err) {
				t.Errorf("error %v is not fatal", err)
			}
			if st, _ := s.Runner().State(); st != platform.StateFatal {
				t.Errorf("state %v, want fatal", st)
			}
		})
	}
}
