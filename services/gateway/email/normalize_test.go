package email

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// mailText joins header and body lines with CRLF, as mail travels.
func mailText(lines ...string) []byte {
	return []byte(strings.Join(lines, "\r\n"))
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		raw       []byte
		text      string // the event's text
		from      string
		user      string
		topic     string
		id        string
		replyTo   string
		automated string
		parts     []string // "name mime size kept"
	}{
		{
			name: "plain text with a subject",
			raw: mailText("From: Ann Example <Ann@Example.com>", "To: agent@example.com", "Subject: Lunch plans",
				"Message-ID: <m1@example.com>", "Date: Mon, 01 Jan 2024 10:00:00 +0000", "", "Where shall we eat?"),
			text: "[Subject: Lunch plans]\n\nWhere shall we eat?", from: "ann@example.com", user: "Ann Example",
			topic: "Lunch plans", id: "m1@example.com",
		},
		{
			name: "a reply's subject is not repeated, quotes and signature trimmed",
			raw: mailText("From: ann@example.com", "Subject: Re: Lunch plans", "Message-ID: <m2@example.com>",
				"In-Reply-To: <sb-1@example.com>", "References: <m1@example.com> <sb-1@example.com>", "",
				"Thai it is.", "", "-- ", "Ann", "Head of Lunch", "",
				"On Mon, 1 Jan 2024 at 10:05, Agent <agent@example.com> wrote:", "> Shall we try Thai?", "> ", "> -- the agent"),
			text: "Thai it is.", from: "ann@example.com", user: "ann@example.com", topic: "Re: Lunch plans",
			id: "m2@example.com", replyTo: "<sb-1@example.com>",
		},
		{
			name: "Gmail's wrapped attribution and a phone signature",
			raw: mailText("From: bob@example.com", "Subject: RE: report", "Message-ID: <m3@example.com>", "",
				"Looks good.", "", "Sent from my iPhone", "", "On Tue, 2 Jan 2024 at 09:00, Some Agent <agent@example.com>",
				"wrote:", "", "> The report is attached."),
			text: "Looks good.", from: "bob@example.com", user: "bob@example.com", topic: "RE: report", id: "m3@example.com",
		},
		{
			name: "Outlook's original message header",
			raw: mailText("From: carl@example.com", "Subject: Re: q", "Message-ID: <m4@example.com>", "",
				"Yes, please.", "", "-----Original Message-----", "From: Agent", "Sent: today", "", "Do you want it?"),
			text: "Yes, please.", from: "carl@example.com", user: "carl@example.com", topic: "Re: q", id: "m4@example.com",
		},
		{
			name: "interleaved quotes stay",
			raw: mailText("From: dee@example.com", "Subject: Re: two questions", "Message-ID: <m5@example.com>", "",
				"> First?", "Yes.", "> Second?", "No."),
			text: "> First?\nYes.\n> Second?\nNo.", from: "dee@example.com", user: "dee@example.com",
			topic: "Re: two questions", id: "m5@example.com",
		},
		{
			name: "HTML only, converted to text",
			raw: mailText("From: eve@example.com", "Subject: =?UTF-8?B?w4RwZmVs?=", "Message-ID: <m6@example.com>",
				"Content-Type: text/html; charset=utf-8", "",
				"<html><head><style>p{color:red}</style></head><body><p>Hello&nbsp;<b>there</b></p><ul><li>one</li><li>two</li></ul>",
				"<p>See <a href=\"https://x.io/a\">the docs</a>.</p></body></html>"),
			text: "[Subject: Äpfel]\n\nHello there\n\n- one\n- two\n\nSee the docs (https://x.io/a).", from: "eve@example.com",
			user: "eve@example.com", topic: "Äpfel", id: "m6@example.com",
		},
		{
			name: "text/plain preferred over HTML, Latin-1 decoded, an attachment",
			raw: mailText("From: =?ISO-8859-1?Q?Fran=E7ois?= <francois@example.com>", "Subject: Re: photo",
				"Message-ID: <m7@example.com>", "MIME-Version: 1.0", "Content-Type: multipart/mixed; boundary=XX", "",
				"--XX", "Content-Type: multipart/alternative; boundary=YY", "",
				"--YY", "Content-Type: text/plain; charset=ISO-8859-1", "Content-Transfer-Encoding: quoted-printable", "",
				"Voil=E0 la photo.", "--YY", "Content-Type: text/html", "", "<p>HTML version</p>", "--YY--",
				"--XX", "Content-Type: image/png", "Content-Disposition: attachment; filename=\"cat.png\"",
				"Content-Transfer-Encoding: base64", "", "iVBORw0KGgo=", "--XX--", ""),
			text: "Voilà la photo.", from: "francois@example.com", user: "François", topic: "Re: photo", id: "m7@example.com",
			parts: []string{"cat.png image/png 8 kept"},
		},
		{
			name: "an attachment over the bound is named, not kept; a zip is named only",
			raw: mailText("From: gus@example.com", "Subject: Re: files", "Message-ID: <m8@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Two files.",
				"--XX", "Content-Type: image/jpeg; name=big.jpg", "Content-Transfer-Encoding: base64", "",
				"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "--XX", "Content-Type: application/zip",
				"Content-Disposition: attachment; filename=a.zip", "", "PK", "--XX--"),
			text: "Two files.", from: "gus@example.com", user: "gus@example.com", topic: "Re: files", id: "m8@example.com",
			parts: []string{"big.jpg image/jpeg 30 named", "a.zip application/zip 2 named"},
		},
		{
			name: "no Message-ID: named by the bytes; empty body",
			raw:  mailText("From: hal@example.com", "Subject: Re: x", "", ""),
			text: "(empty email)", from: "hal@example.com", user: "hal@example.com", topic: "Re: x", id: "raw:",
		},
		{
			name: "a noreply address is automated",
			raw:  mailText("From: GitHub <noreply@github.com>", "Subject: CI failed", "Message-ID: <n1@github.com>", "", "x"),
			text: "[Subject: CI failed]\n\nx", from: "noreply@github.com", user: "GitHub", topic: "CI failed", id: "n1@github.com",
			automated: "address",
		},
		{
			name: "Auto-Submitted is automated, unless no",
			raw: mailText("From: ivy@example.com", "Auto-Submitted: auto-replied", "Subject: Out of office",
				"Message-ID: <n2@example.com>", "", "Away."),
			text: "[Subject: Out of office]\n\nAway.", from: "ivy@example.com", user: "ivy@example.com", topic: "Out of office",
			id: "n2@example.com", automated: "auto-submitted",
		},
		{
			name: "Auto-Submitted: no is a person",
			raw:  mailText("From: ivy@example.com", "Auto-Submitted: no", "Subject: Re: hi", "Message-ID: <n3@example.com>", "", "Hi."),
			text: "Hi.", from: "ivy@example.com", user: "ivy@example.com", topic: "Re: hi", id: "n3@example.com",
		},
		{
			name: "Auto-Submitted: no with a comment and a parameter is a person",
			raw:  mailText("From: ivy@example.com", "Auto-Submitted: No (sent by hand); x=y", "Subject: Re: hi", "Message-ID: <n3@example.com>", "", "Hi."),
			text: "Hi.", from: "ivy@example.com", user: "ivy@example.com", topic: "Re: hi", id: "n3@example.com",
		},
		{
			name: "Auto-Submitted with a parameter is automated",
			raw: mailText("From: ivy@example.com", "Auto-Submitted: auto-replied; owner-email=ivy@example.com", "Subject: Out of office",
				"Message-ID: <n2@example.com>", "", "Away."),
			text: "[Subject: Out of office]\n\nAway.", from: "ivy@example.com", user: "ivy@example.com", topic: "Out of office",
			id: "n2@example.com", automated: "auto-submitted",
		},
		{
			name: "bulk mail is automated",
			raw:  mailText("From: news@example.com", "Precedence: bulk", "Subject: News", "Message-ID: <n4@example.com>", "", "N"),
			text: "[Subject: News]\n\nN", from: "news@example.com", user: "news@example.com", topic: "News", id: "n4@example.com",
			automated: "precedence",
		},
		{
			name: "Precedence auto_reply is automated",
			raw:  mailText("From: ivy@example.com", "Precedence: auto_reply", "Subject: Re: hi", "Message-ID: <n6@example.com>", "", "Away."),
			text: "Away.", from: "ivy@example.com", user: "ivy@example.com", topic: "Re: hi", id: "n6@example.com", automated: "precedence",
		},
		{
			name: "a list is automated",
			raw: mailText("From: list@example.com", "List-Unsubscribe: <mailto:u@example.com>", "Subject: Re: L",
				"Message-ID: <n5@example.com>", "", "L"),
			text: "L", from: "list@example.com", user: "list@example.com", topic: "Re: L", id: "n5@example.com", automated: "list",
		},
		{
			name: "a bounce from an address no pattern knows is automated (multipart/report)",
			raw: mailText("From: Microsoft Outlook <MicrosoftExchange329e71ec88ae@example.com>", "Subject: Undeliverable: Re: Lunch",
				"Message-ID: <d1@example.com>", "Content-Type: multipart/report; report-type=delivery-status; boundary=XX", "",
				"--XX", "Content-Type: text/plain", "", "Delivery has failed.", "--XX",
				"Content-Type: message/delivery-status", "", "Status: 5.1.1", "--XX--"),
			text: "[Subject: Undeliverable: Re: Lunch]\n\nDelivery has failed.", from: "microsoftexchange329e71ec88ae@example.com",
			user: "Microsoft Outlook", topic: "Undeliverable: Re: Lunch", id: "d1@example.com", automated: "report",
			parts: []string{"attachment.delivery-status message/delivery-status 13 named"},
		},
		{
			name: "a read receipt from a person has a null Return-Path",
			raw: mailText("Return-Path: <>", "From: ann@example.com", "Subject: Read: Re: Lunch", "Message-ID: <d2@example.com>", "",
				"Your message was read."),
			text: "[Subject: Read: Re: Lunch]\n\nYour message was read.", from: "ann@example.com", user: "ann@example.com",
			topic: "Read: Re: Lunch", id: "d2@example.com", automated: "null-return-path",
		},
		{
			name: "an old responder's X-Autoreply",
			raw: mailText("Return-Path: <ann@example.com>", "From: ann@example.com", "X-Autoreply: yes", "Subject: Re: Lunch",
				"Message-ID: <d3@example.com>", "", "I am away."),
			text: "I am away.", from: "ann@example.com", user: "ann@example.com", topic: "Re: Lunch", id: "d3@example.com",
			automated: "auto-reply",
		},
		{
			name: "a multipart that breaks off (no closing boundary) keeps its text; the cut part is dropped",
			raw: mailText("From: kim@example.com", "Subject: Re: cut", "Message-ID: <b1@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Still here.",
				"--XX", "Content-Type: image/png", "Content-Disposition: attachment; filename=cat.png",
				"Content-Transfer-Encoding: base64", "", "iVBORw0KGgo="),
			text: "Still here.", from: "kim@example.com", user: "kim@example.com", topic: "Re: cut", id: "b1@example.com",
		},
		{
			name: "a multipart without a boundary is read as written",
			raw: mailText("From: lou@example.com", "Subject: Re: nob", "Message-ID: <b2@example.com>",
				"Content-Type: multipart/alternative", "", "Can you call me?"),
			text: "Can you call me?", from: "lou@example.com", user: "lou@example.com", topic: "Re: nob", id: "b2@example.com",
		},
		{
			name: "a nested multipart without a boundary keeps the text before it",
			raw: mailText("From: max@example.com", "Subject: Re: nest", "Message-ID: <b3@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "The text.",
				"--XX", "Content-Type: multipart/alternative", "", "junk", "--XX--"),
			text: "The text.", from: "max@example.com", user: "max@example.com", topic: "Re: nest", id: "b3@example.com",
		},
		{
			name: "a named text file after the body (Apple Mail sends files inline) is an attachment, not dropped",
			raw: mailText("From: ned@example.com", "Subject: Re: log", "Message-ID: <b4@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "The log is attached.",
				"--XX", "Content-Type: text/plain; name=\"build.log\"", "Content-Disposition: inline; filename=\"build.log\"", "",
				"Error at line 3", "--XX", "Content-Type: text/html; name=page.html", "", "<p>saved page</p>", "--XX--"),
			text: "The log is attached.", from: "ned@example.com", user: "ned@example.com", topic: "Re: log", id: "b4@example.com",
			parts: []string{"build.log text/plain 15 kept", "page.html text/html 17 named"},
		},
		{
			name: "a multipart/alternative whose parts are named is the body, its HTML not a file",
			raw: mailText("From: ola@example.com", "Subject: Re: names", "Message-ID: <b5@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: multipart/alternative; boundary=YY", "",
				"--YY", "Content-Type: text/plain; name=\"message.txt\"", "", "The text.",
				"--YY", "Content-Type: text/html; name=\"message.html\"", "Content-Disposition: inline; filename=\"message.html\"", "",
				"<p>The text.</p>", "--YY--",
				"--XX", "Content-Type: text/plain; name=\"notes.txt\"", "Content-Disposition: inline; filename=\"notes.txt\"", "",
				"a note", "--XX--"),
			text: "The text.", from: "ola@example.com", user: "ola@example.com", topic: "Re: names", id: "b5@example.com",
			parts: []string{"notes.txt text/plain 6 kept"},
		},
		{
			name: "attachments whose names are unquoted, with spaces, keep their names and types",
			raw: mailText("From: pat@example.com", "Subject: Re: report", "Message-ID: <c1@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Both attached.",
				"--XX", "Content-Type: application/pdf; name=Q3 report.pdf", "Content-Disposition: attachment; filename=Q3 report.pdf", "",
				"%PDF-1", "--XX", "Content-Type: text/plain; name=build output.log", "Content-Disposition: attachment; filename=build output.log", "",
				"Error 3", "--XX--"),
			text: "Both attached.", from: "pat@example.com", user: "pat@example.com", topic: "Re: report", id: "c1@example.com",
			parts: []string{"Q3 report.pdf application/pdf 6 named", "build output.log text/plain 7 kept"},
		},
		{
			name: "a multipart whose boundary has an unquoted = is read by its parts",
			raw: mailText("From: quin@example.com", "Subject: Re: time", "Message-ID: <c2@example.com>",
				"Content-Type: multipart/alternative; boundary=----=_Part_7", "", "------=_Part_7", "Content-Type: text/plain", "",
				"Meet at 3?", "------=_Part_7", "Content-Type: text/html", "", "<p>Meet at 3?</p>", "------=_Part_7--"),
			text: "Meet at 3?", from: "quin@example.com", user: "quin@example.com", topic: "Re: time", id: "c2@example.com",
		},
		{
			name: "a text whose Content-Type names its charset twice is read in that charset",
			raw: mailText("From: rae@example.com", "Subject: Re: x", "Message-ID: <c3@example.com>",
				"Content-Type: text/plain; charset=ISO-8859-1; charset=\"iso-8859-1\"", "Content-Transfer-Encoding: quoted-printable", "",
				"Voil=E0."),
			text: "Voilà.", from: "rae@example.com", user: "rae@example.com", topic: "Re: x", id: "c3@example.com",
		},
		{
			name: "a file name in Latin-1 (RFC 2231) is read",
			raw: mailText("From: sam@example.com", "Subject: Re: cv", "Message-ID: <c4@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "My CV.",
				"--XX", "Content-Type: text/plain; charset=iso-8859-1", "Content-Disposition: attachment; filename*=iso-8859-1''r%E9sum%E9.txt", "",
				"cv", "--XX--"),
			text: "My CV.", from: "sam@example.com", user: "sam@example.com", topic: "Re: cv", id: "c4@example.com",
			parts: []string{"résumé.txt text/plain 2 kept"},
		},
		{
			name: "a Latin-1 file name continued over two parameters (RFC 2231) is read whole",
			raw: mailText("From: sam@example.com", "Subject: Re: cv", "Message-ID: <c5@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "My CV.",
				"--XX", "Content-Type: application/pdf", "Content-Disposition: attachment;", " filename*0*=iso-8859-1''r%E9sum%E9%20de;", " filename*1*=%20Fran%E7ois.pdf", "",
				"%PDF-1", "--XX--"),
			text: "My CV.", from: "sam@example.com", user: "sam@example.com", topic: "Re: cv", id: "c5@example.com",
			parts: []string{"résumé de François.pdf application/pdf 6 named"},
		},
		{
			name: "a continued file name beside an unquoted date is joined",
			raw: mailText("From: sam@example.com", "Subject: Re: notes", "Message-ID: <c6@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "Notes.",
				"--XX", "Content-Type: application/pdf", "Content-Disposition: attachment; filename*0=\"meeting notes \";",
				" filename*1=\"of the board.pdf\"; modification-date=Mon, 1 Jan 2024 10:00:00 +0000", "",
				"%PDF-1", "--XX--"),
			text: "Notes.", from: "sam@example.com", user: "sam@example.com", topic: "Re: notes", id: "c6@example.com",
			parts: []string{"meeting notes of the board.pdf application/pdf 6 named"},
		},
		{
			name: "a Latin-1 name (RFC 2231) given by the Content-Type only is read",
			raw: mailText("From: sam@example.com", "Subject: Re: cv", "Message-ID: <c7@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "My CV.",
				"--XX", "Content-Type: application/pdf; name*=iso-8859-1''r%E9sum%E9.pdf", "Content-Disposition: attachment", "",
				"%PDF-1", "--XX--"),
			text: "My CV.", from: "sam@example.com", user: "sam@example.com", topic: "Re: cv", id: "c7@example.com",
			parts: []string{"résumé.pdf application/pdf 6 named"},
		},
		{
			name: "a part whose Content-Type has a Latin-1 RFC 2231 name and an unquoted value keeps its type",
			raw: mailText("From: sam@example.com", "Subject: Re: cv", "Message-ID: <c8@example.com>",
				"Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "", "My CV.",
				"--XX", "Content-Type: application/pdf; name*=iso-8859-1''r%E9sum%E9.pdf; x-comment=my cv", "Content-Disposition: attachment", "",
				"%PDF-1", "--XX--"),
			text: "My CV.", from: "sam@example.com", user: "sam@example.com", topic: "Re: cv", id: "c8@example.com",
			parts: []string{"résumé.pdf application/pdf 6 named"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := parse(c.raw, 16, false)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if m.Automated != c.automated {
				t.Errorf("automated %q, want %q", m.Automated, c.automated)
			}
			id := eventID(m, c.raw)
			if c.id == "raw:" {
				if !strings.HasPrefix(id, "raw:") || id != eventID(m, c.raw) {
					t.Errorf("event id %q, want a stable raw: hash", id)
				}
			} else if id != c.id {
				t.Errorf("event id %q, want %q", id, c.id)
			}
			ev := event(m, id, "agent@example.com", true)
			src := ev.GetSource()
			if ev.GetText() != c.text {
				t.Errorf("text %q, want %q", ev.GetText(), c.text)
			}
			if src.GetChatId() != c.from || src.GetUserId() != c.from || src.GetChatType() != "dm" || src.GetUserName() != c.user ||
				src.GetChatTopic() != c.topic || src.GetPlatform() != "email" || src.GetAccount() != "agent@example.com" {
				t.Errorf("source %v, want chat and user %s (%s), topic %q", src, c.from, c.user, c.topic)
			}
			if ev.GetReplyTo().GetMessageId() != c.replyTo {
				t.Errorf("reply to %q, want %q", ev.GetReplyTo().GetMessageId(), c.replyTo)
			}
			var parts []string
			for _, a := range ev.GetAttachments() {
				kept := "named"
				if strings.HasPrefix(a.GetUrl(), "data:") {
					kept = "kept"
				}
				parts = append(parts, strings.Join([]string{a.GetFileName(), a.GetMimeType(), strconv.FormatInt(a.GetSizeBytes(), 10), kept}, " "))
			}
			if strings.Join(parts, ", ") != strings.Join(c.parts, ", ") {
				t.Errorf("attachments %q, want %q", parts, c.parts)
			}
		})
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"",
		"no header at all",
		"From: \r\nSubject: x\r\n\r\nbody",
		"From: not an address\r\n\r\nbody",
	} {
		if _, err := parse([]byte(raw), 1<<20, false); err == nil {
			t.Errorf("parse(%q) = nil error, want malformed", raw)
		}
	}
}

func TestSkipAttachments(t *testing.T) {
	t.Parallel()
	raw := mailText("From: a@example.com", "Content-Type: multipart/mixed; boundary=XX", "", "--XX", "Content-Type: text/plain", "",
		"hi", "--XX", "Content-Type: image/png", "Content-Disposition: attachment; filename=a.png", "", "x", "--XX--")
	m, err := parse(raw, 1<<20, true)
	if err != nil || len(m.Parts) != 0 || m.Text != "hi" {
		t.Fatalf("parse = %+v, %v; want the text without attachments", m, err)
	}
	ev := event(m, "x", "agent@example.com", false)
	if len(ev.GetAttachments()) != 0 {
		t.Fatalf("attachments %v", ev.GetAttachments())
	}
}

// A part in a charset the decoder does not know (unknown-8bit, RFC 1428,
// which mailers write for 8-bit text of no declared charset) or with an
// unknown transfer encoding is read as it stands, as the message's own
// body is when it is not multipart: dropping it left the agent an
// "(empty email)".
func TestUnknownCharsetPartKept(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		raw  []byte
		text string
	}{
		{
			name: "multipart text in unknown-8bit",
			raw: mailText("From: a@example.com", "Content-Type: multipart/alternative; boundary=XX", "", "--XX",
				"Content-Type: text/plain; charset=unknown-8bit", "", "Can you call me at 5?", "--XX",
				"Content-Type: text/html; charset=unknown-8bit", "", "<p>Can you call me at 5?</p>", "--XX--"),
			text: "Can you call me at 5?",
		},
		{
			name: "html alone in an unknown charset",
			raw: mailText("From: a@example.com", "Content-Type: multipart/mixed; boundary=XX", "", "--XX",
				"Content-Type: text/html; charset=x-no-such-charset", "", "<p>Ship it.</p>", "--XX--"),
			text: "Ship it.",
		},
		{
			name: "multipart text with an unknown transfer encoding",
			raw: mailText("From: a@example.com", "Content-Type: multipart/mixed; boundary=XX", "", "--XX",
				"Content-Type: text/plain", "Content-Transfer-Encoding: x-uuencode-ish", "", "Plain words.", "--XX--"),
			text: "Plain words.",
		},
		{
			name: "single part in unknown-8bit",
			raw:  mailText("From: a@example.com", "Content-Type: text/plain; charset=unknown-8bit", "", "Hello there."),
			text: "Hello there.",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := parse(c.raw, 1<<20, false)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if m.Text != c.text {
				t.Fatalf("text %q, want %q", m.Text, c.text)
			}
		})
	}
}

// A subject or display name folded to any length is cut: both go into
// the event (bounded by the bus) and the subject back out on the answer.
func TestLongSubjectAndNameAreCut(t *testing.T) {
	t.Parallel()
	long := strings.TrimSpace(strings.Repeat("é word ", 20000)) // 160,000 bytes, folded below
	m, err := parse(mailText("From: \""+long+"\" <ann@example.com>", "Subject: "+strings.ReplaceAll(long, " ", "\r\n "),
		"Message-ID: <l1@example.com>", "", "Hi."), 16, false)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	for _, c := range []struct {
		what, got string
		max       int
	}{{"subject", m.Subject, maxSubjectBytes}, {"name", m.Name, maxNameBytes}} {
		if len(c.got) > c.max || !strings.HasSuffix(c.got, "…") || !utf8.ValidString(c.got) || !strings.HasPrefix(c.got, "é word é word") {
			t.Errorf("%s: %d bytes %q…, want at most %d, cut with …", c.what, len(c.got), c.got[:min(len(c.got), 40)], c.max)
		}
	}
	if m.From != "ann@example.com" {
		t.Errorf("from %q", m.From)
	}
}

// TestMalformedSenderStaysOutOfTheError: the error a malformed sender
// gives is logged; the address is a person's and stays out of it.
func TestMalformedSenderStaysOutOfTheError(t *testing.T) {
	t.Parallel()
	_, err := parse([]byte("From: \"bob 5551234\"@example.com\r\nSubject: x\r\n\r\nbody"), 1<<20, false)
	if !errors.Is(err, errMalformed) {
		t.Fatalf("parse = %v, want malformed", err)
	}
	if strings.Contains(err.Error(), "5551234") {
		t.Errorf("the error names the sender: %v", err)
	}
}

// TestThreadingIDs reads In-Reply-To and References as RFC 5322 writes
// them: ids with no space between them, or beside a comment or words.
func TestThreadingIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		inReplyTo string
		refs      string
		wantReply string
		wantRefs  string // the References an answer carries
	}{
		{"spaced", "<m2@example.com>", "<m1@example.com> <m2@example.com>", "<m2@example.com>",
			"<m1@example.com> <m2@example.com> <m3@example.com>"},
		{"no space between ids, as Exchange writes them", "<m2@example.com><m1@example.com>", "<m1@example.com><m2@example.com>",
			"<m2@example.com>", "<m1@example.com> <m2@example.com> <m3@example.com>"},
		{"a comment beside the id", `<m2@example.com> (Ann's message of "Mon, 1 Jan 2024 10:00")`,
			"<m1@example.com> (first)\r\n <m2@example.com>", "<m2@example.com>", "<m1@example.com> <m2@example.com> <m3@example.com>"},
		{"words before the id", "Ann's message of Mon, 1 Jan 2024 <m2@example.com>", "", "<m2@example.com>", "<m3@example.com>"},
		{"ids without brackets", "m2@example.com", "m1@example.com m2@example.com", "<m2@example.com>",
			"<m1@example.com> <m2@example.com> <m3@example.com>"},
		{"the last id cut before its closing bracket", "<m2@example.com", "<m1@example.com> <m2@example.com", "<m2@example.com>",
			"<m1@example.com> <m2@example.com> <m3@example.com>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := mailText("From: ann@example.com", "Subject: Re: x", "Message-ID: <m3@example.com>",
				"In-Reply-To: "+c.inReplyTo, "References: "+c.refs, "", "Yes.")
			m, err := parse(raw, 16, false)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if m.InReplyTo != c.wantReply {
				t.Errorf("in reply to %q, want %q", m.InReplyTo, c.wantReply)
			}
			if got := strings.Join(m.References, " "); got != c.wantRefs {
				t.Errorf("references %q, want %q", got, c.wantRefs)
			}
		})
	}
}
