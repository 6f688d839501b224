package email

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

func TestParseAuthResults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, v string
		id      string
		results string // method=result[ prop=value…], "|" between results
	}{
		{"gmail", "mx.google.com;\r\n       dkim=pass header.i=@example.com header.s=s1 header.b=AbC;\r\n       spf=pass (google.com: domain of ann@example.com designates 192.0.2.1 as permitted sender) smtp.mailfrom=ann@example.com;\r\n       dmarc=pass (p=REJECT sp=REJECT dis=NONE) header.from=example.com",
			"mx.google.com", "dkim=pass header.i=@example.com header.s=s1 header.b=AbC|spf=pass smtp.mailfrom=ann@example.com|dmarc=pass header.from=example.com"},
		{"version, quoted, comments", `"MX.Example.COM" 1; dkim/1 = pass (good (nested; sig)) reason="a; b" header . d = "ex\"ample.org"; none`,
			"mx.example.com", `dkim=pass header.d=ex"ample.org`},
		{"none", "mx.example.com; none", "mx.example.com", ""},
		{"only id", "mx.example.com", "mx.example.com", ""},
		{"stray words", "mx.example.com; dmarc=fail junk header.from=evil.test extra; =pass; spf=", "mx.example.com", "dmarc=fail header.from=evil.test"},
		{"comment as id", "(x) mx.example.com; spf=neutral", "mx.example.com", "spf=neutral"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id, res, err := parseAuthResults(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if id != c.id {
				t.Errorf("authserv-id %q, want %q", id, c.id)
			}
			var got []string
			for _, r := range res {
				s := r.Method + "=" + r.Result
				for _, k := range []string{"header.i", "header.s", "header.b", "header.d", "smtp.mailfrom", "header.from"} {
					if v, ok := r.Props[k]; ok {
						s += " " + k + "=" + v
					}
				}
				got = append(got, s)
			}
			if g := strings.Join(got, "|"); g != c.results {
				t.Errorf("results\n %s\nwant\n %s", g, c.results)
			}
		})
	}
	for _, v := range []string{"", "  ", "(only a comment)", "; dmarc=pass"} {
		if id, _, err := parseAuthResults(v); err == nil {
			t.Errorf("%q: authserv-id %q, want an error", v, id)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	const mx = "mx.example.net"
	dmarc := []string{AuthDMARC}
	all := []string{AuthDMARC, AuthSPF, AuthDKIM}
	for _, c := range []struct {
		name    string
		headers []string
		methods []string
		from    string
		ok      bool
		reason  string
	}{
		{"dmarc pass", []string{mx + "; spf=fail smtp.mailfrom=x@other.test; dmarc=pass header.from=example.com"}, dmarc, "example.com", true, ""},
		{"dmarc pass without header.from", []string{mx + "; dmarc=pass"}, dmarc, "example.com", true, ""},
		{"dmarc pass for another domain", []string{mx + "; dmarc=pass header.from=evil.test"}, dmarc, "example.com", false, "failed"},
		{"dmarc fail", []string{mx + "; dmarc=fail header.from=example.com"}, dmarc, "example.com", false, "failed"},
		{"no header", nil, dmarc, "example.com", false, "missing"},
		{"only the sender's own header", []string{"attacker.test; dmarc=pass header.from=example.com"}, dmarc, "example.com", false, "missing"},
		{"trusted one fails, the sender's below passes", []string{"MX.example.net; dmarc=fail header.from=example.com", mx + "; dmarc=pass header.from=example.com"}, dmarc, "example.com", false, "failed"},
		{"another server's on top", []string{"imap.example.net; dmarc=pass", mx + "; dmarc=fail header.from=example.com"}, dmarc, "example.com", false, "failed"},
		{"spf pass not accepted by default", []string{mx + "; spf=pass smtp.mailfrom=ann@example.com; dmarc=none"}, dmarc, "example.com", false, "failed"},
		{"spf pass aligned", []string{mx + "; spf=pass smtp.mailfrom=bounce@mail.example.com; dmarc=none"}, all, "example.com", true, ""},
		{"spf pass unaligned", []string{mx + "; spf=pass smtp.mailfrom=bounce@sendgrid.test"}, all, "example.com", false, "failed"},
		{"dkim pass aligned by header.i", []string{mx + "; dkim=pass header.i=@example.com"}, all, "example.com", true, ""},
		{"dkim pass unaligned", []string{mx + "; dkim=pass header.d=example.com.evil.test"}, all, "example.com", false, "failed"},
		{"public suffix is no organization", []string{mx + "; spf=pass smtp.mailfrom=a@other.co.uk"}, all, "example.co.uk", false, "failed"},
		{"dkim fail", []string{mx + "; dkim=fail header.d=example.com"}, all, "example.com", false, "failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := authenticate(c.headers, mx, c.methods, c.from)
			if a.OK != c.ok || a.Reason != c.reason {
				t.Errorf("authenticate = %+v, want ok %v reason %q", a, c.ok, c.reason)
			}
		})
	}
}

// With require_authenticated_sender, only mail whose trusted
// Authentication-Results says the From domain passed DMARC is answered;
// a spoofed sender (a failure, no trusted header, a header of its own)
// is skipped, counted by reason and flagged \Seen.
func TestUnauthenticatedSendersSkipped(t *testing.T) {
	t.Parallel()
	f := newFake(t, true)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	evs := platformtest.InboundEvents(t, b)
	runGateway(t, b, f, platform.Options{}, func(c *Config) {
		c.RequireAuthenticatedSender, c.AuthservID = true, "mx.agent.test"
	})
	missing, failed := testutil.ToFloat64(skipped.WithLabelValues("auth_missing")), testutil.ToFloat64(skipped.WithLabelValues("auth_failed"))
	var uids []uint32
	for _, lines := range [][]string{
		{"Authentication-Results: mx.agent.test; spf=fail smtp.mailfrom=boss@example.com; dmarc=fail header.from=example.com",
			"From: boss@example.com", "Subject: wire money", "Message-ID: <s1@evil.test>", "", "now"},
		{"From: boss@example.com", "Subject: wire money", "Message-ID: <s2@evil.test>", "", "now"},
		{"Authentication-Results: mx.agent.test; dmarc=fail header.from=example.com",
			"Authentication-Results: mx.agent.test; dmarc=pass header.from=example.com",
			"From: boss@example.com", "Subject: wire money", "Message-ID: <s3@evil.test>", "", "now"},
	} {
		uid, err := f.Deliver(mailText(lines...))
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, uid)
	}
	uid, err := f.Deliver(mailText("Authentication-Results: mx.agent.test;", "\tdkim=pass header.d=example.com; dmarc=pass (p=reject) header.from=example.com",
		"From: Boss <boss@example.com>", "Subject: lunch?", "Message-ID: <ok@example.com>", "", "at noon"))
	if err != nil {
		t.Fatal(err)
	}
	if ev := platformtest.NextEvent(t, evs); ev.GetEventId() != "ok@example.com" {
		t.Fatalf("event %v, want only the authenticated mail", ev)
	}
	platformtest.NoEvent(t, evs, 300*time.Millisecond)
	if d := testutil.ToFloat64(skipped.WithLabelValues("auth_missing")) - missing; d < 1 {
		t.Errorf("auth_missing counted %v", d)
	}
	if d := testutil.ToFloat64(skipped.WithLabelValues("auth_failed")) - failed; d < 2 {
		t.Errorf("auth_failed counted %v", d)
	}
	// The authenticated mail is flagged \Seen after it is published
	// (handle): its event on the bus does not mean its flag is set. The
	// skipped ones before it are flagged before it is read.
	platformtest.WaitFor(t, "the authenticated mail flagged \\Seen", func() bool {
		seen, err := f.Seen()
		return err == nil && seen[uid]
	})
	seen, err := f.Seen()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range append(uids, uid) {
		if !seen[u] {
			t.Errorf("uid %d not flagged \\Seen", u)
		}
	}
}
