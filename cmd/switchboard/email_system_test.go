package main

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	gomail "github.com/emersion/go-message/mail"

	"github.com/switchboard-chat/switchboard/services/gateway/email/mailfake"
)

// TestEmailEndToEnd runs the whole system (`switchboard dev`) with the
// email gateway reading an in-process IMAP server (with IDLE) and sending
// through an in-process SMTP server. A mail is answered in its thread
// ("Re: <subject>", In-Reply-To, References) after the SMTP server's 451
// made delivery retry; automated mail gets no answer; the same message
// filed again (a copy with the same Message-ID) is not answered twice.
func TestEmailEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the whole system")
	}
	t.Parallel()
	const agent = "agent@example.com"
	f, err := mailfake.New(mailfake.Options{Address: agent, Password: "pw", Idle: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := startDev(t, "GATEWAY_ALLOW_ALL_USERS=true", "EMAIL_ADDRESS="+agent, "EMAIL_PASSWORD=pw",
		"EMAIL_IMAP_HOST="+f.IMAPHost, "EMAIL_IMAP_PORT="+strconv.Itoa(f.IMAPPort),
		"EMAIL_SMTP_HOST="+f.SMTPHost, "EMAIL_SMTP_PORT="+strconv.Itoa(f.SMTPPort),
		"SWITCHBOARD_GATEWAYS__EMAIL__IMAP_TLS=none", "SWITCHBOARD_GATEWAYS__EMAIL__SMTP_TLS=none")
	defer d.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	waitFor := d.waiter(ctx, t)
	deliver := func(lines ...string) {
		t.Helper()
		if _, err := f.Deliver([]byte(strings.Join(lines, "\r\n"))); err != nil {
			t.Fatal(err)
		}
	}
	// answers are the sent mails whose body holds text.
	answers := func(text string) []gomail.Header {
		var hs []gomail.Header
		for _, m := range f.Sent() {
			r, err := gomail.CreateReader(bytes.NewReader(m.Raw))
			if err != nil {
				continue
			}
			p, err := r.NextPart()
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(p.Body)
			if strings.Contains(string(body), text) {
				hs = append(hs, r.Header)
			}
		}
		return hs
	}

	// The gateway's first read of the mailbox leaves the mail already
	// there alone (as Hermes does), and readiness does not wait for it:
	// deliver once the gateway has read the mailbox.
	waitFor("the first read of the mailbox", func() bool {
		return strings.Contains(d.stderr.String(), "email: reading the mailbox")
	})
	f.FailNext(451)
	msg := []string{"From: Ann <ann@example.com>", "To: " + agent, "Subject: Re: lunch", "Message-ID: <e2e-1@example.com>",
		"References: <e2e-0@example.com>", "", "hello email"}
	deliver(msg...)
	waitFor("the answer", func() bool { return len(answers("echo: hello email")) == 1 })
	if f.Attempts() < 2 {
		t.Fatalf("%d SMTP attempts, want the refused one and its retry", f.Attempts())
	}
	h := answers("echo: hello email")[0]
	subject, _ := h.Subject()
	inReplyTo, _ := h.MsgIDList("In-Reply-To")
	refs, _ := h.MsgIDList("References")
	if subject != "Re: lunch" || strings.Join(inReplyTo, " ") != "e2e-1@example.com" || strings.Join(refs, " ") != "e2e-0@example.com e2e-1@example.com" {
		t.Fatalf("answer threading: subject %q, in-reply-to %v, references %v", subject, inReplyTo, refs)
	}

	// Automated mail, the same message filed again, then a new one: once
	// the new one is answered, the others were handled.
	deliver("From: noreply@example.com", "Subject: Re: lunch", "Message-ID: <e2e-bot@example.com>", "", "automated")
	deliver(msg...)
	deliver("From: Ann <ann@example.com>", "Subject: Re: lunch", "Message-ID: <e2e-2@example.com>", "", "second")
	waitFor("the second answer", func() bool { return len(answers("echo: second")) == 1 })
	if n := len(answers("echo: hello email")); n != 1 {
		t.Fatalf("the first mail was answered %d times, want once", n)
	}
	if n := len(answers("automated")); n != 0 {
		t.Fatalf("automated mail answered %d times", n)
	}
}
