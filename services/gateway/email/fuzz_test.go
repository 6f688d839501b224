package email

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// FuzzNormalize: any bytes an IMAP server hands over either are refused
// as malformed or become an event the kit accepts (an event id and chat
// id that fit a bus header, valid UTF-8, within the size bound), and
// never panic. The seed corpus is in testdata/fuzz/FuzzNormalize.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"From: a@example.com\r\nSubject: hi\r\nMessage-ID: <x@y>\r\n\r\nhello",
		"From: =?utf-8?q?=C3=A4?= <a@example.com>\r\nContent-Type: text/html\r\n\r\n<p>x<br>y</p><script>z</script>",
		"From: a@example.com\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: text/plain\r\n\r\nt\r\n--B\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: attachment; filename=a.png\r\n\r\n!!notbase64\r\n--B--",
		"From: a@example.com\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\nContent-Type: multipart/alternative; boundary=C\r\n\r\n--C\r\n",
		"From: a@example.com\r\nMessage-ID: <\x00\xff@\x01>\r\nReferences: <a> <b> c\r\n\r\n> q\r\n-- \r\nsig",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := parse(raw, 1<<10, false)
		if err != nil {
			return
		}
		ev := event(m, eventID(m, raw), "agent@example.com", true)
		for _, a := range ev.GetAttachments() {
			a.Location = nil // the kit moves data: URLs to the store first
		}
		if err := platform.CheckEvent(ev, "email", "agent@example.com", 256<<10); err != nil {
			t.Fatalf("event refused by the kit: %v (from %q)", err, m.From)
		}
		if !utf8.ValidString(ev.GetText()) || ev.GetText() == "" {
			t.Fatalf("text %q", ev.GetText())
		}
		if strings.ContainsAny(ev.GetSource().GetChatId(), " \r\n<>") {
			t.Fatalf("chat id %q", ev.GetSource().GetChatId())
		}
		for _, id := range m.References {
			if !strings.HasPrefix(id, "<") || !strings.HasSuffix(id, ">") || !printable(id) {
				t.Fatalf("reference %q", id)
			}
		}
	})
}

// FuzzAuthResults: any Authentication-Results value parses or is
// refused without a panic; a parsed one has an authserv-id without
// white space and results with a method and a result, within the
// bounds; a sender passes only on a trusted "pass". The seed corpus is
// in testdata/fuzz/FuzzAuthResults.
func FuzzAuthResults(f *testing.F) {
	for _, s := range []string{
		"mx.google.com; dkim=pass header.i=@example.com header.s=s1; spf=pass (x) smtp.mailfrom=a@example.com; dmarc=pass (p=NONE) header.from=example.com",
		`"mx" 1; dkim/1 = pass reason="a;b" header . d = "x\"y"; none`,
		"mx.example.com; none",
		"(c (nested) \\) ) mx; spf=neutral",
		"mx; =pass; spf=; \"unterminated",
	} {
		f.Add(s, "example.com")
	}
	f.Fuzz(func(t *testing.T, v, from string) {
		id, results, err := parseAuthResults(v)
		if err == nil {
			if id == "" || strings.ContainsAny(id, " \t\r\n") || id != strings.ToLower(id) {
				t.Fatalf("authserv-id %q", id)
			}
			if len(results) > maxAuthResults {
				t.Fatalf("%d results", len(results))
			}
			for _, r := range results {
				if r.Method == "" || r.Result == "" || len(r.Props) > maxAuthProps {
					t.Fatalf("result %+v", r)
				}
			}
		}
		a := authenticate([]string{v}, id, []string{AuthDMARC, AuthSPF, AuthDKIM}, from)
		if a.OK {
			if err != nil || !strings.Contains(a.Verdict, "=pass") {
				t.Fatalf("authenticated by %q (verdict %q)", v, a.Verdict)
			}
		} else if a.Reason != "missing" && a.Reason != "failed" {
			t.Fatalf("reason %q", a.Reason)
		}
		if err == nil && authenticate([]string{v}, id+"x", []string{AuthDMARC}, from).OK {
			t.Fatalf("an untrusted authserv-id authenticated %q", v)
		}
	})
}
