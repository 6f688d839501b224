package pseudonym_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// scrubCase is a text, the ids Scrub is given and what it makes of it.
type scrubCase struct {
	name, text string
	ids        []string
	want       string
}

// scrubCases are TestScrub's cases, under p's IDs.
func scrubCases(p *pseudonym.Pseudonymizer) []scrubCase {
	id := p.ID
	return []scrubCase{
		{"a URL's path", `Post "https://discord.com/api/v9/channels/900000000000000001/messages": EOF`, []string{"900000000000000001"},
			`Post "https://discord.com/api/v9/channels/` + id("900000000000000001") + `/messages": EOF`},
		{"a platform's message", "The 'To' number +15551234567 is not a valid phone number.", []string{"+15551234567"},
			"The 'To' number " + id("+15551234567") + " is not a valid phone number."},
		{"without its plus", "21211: invalid number 15551234567", []string{"+15551234567"}, "21211: invalid number " + id("+15551234567")},
		{"an address", "550 5.1.1 <bob@example.com>: Recipient address rejected", []string{"bob@example.com"},
			"550 5.1.1 <" + id("bob@example.com") + ">: Recipient address rejected"},
		{"an address in another case", "550 5.1.1 <Bob@Example.COM>: Recipient address rejected (bob@EXAMPLE.com)", []string{"bob@example.com"},
			"550 5.1.1 <" + id("bob@example.com") + ">: Recipient address rejected (" + id("bob@example.com") + ")"},
		{"an escaped address in another case", "GET /users/BOB%40example.com: 404", []string{"bob@example.com"},
			"GET /users/" + id("bob@example.com") + ": 404"},
		{"other ids keep their case", "channel c0channel, not C0CHANNEL", []string{"C0CHANNEL"}, "channel c0channel, not " + id("C0CHANNEL")},
		// Matrix user ids are case-sensitive: @Bob is not @bob.
		{"a Matrix user in another case is someone else", "invite @Bob:example.org failed", []string{"@bob:example.org"},
			"invite @Bob:example.org failed"},
		{"Matrix users in two cases", "@bob:example.org and @Bob:example.org", []string{"@bob:example.org", "@Bob:example.org"},
			id("@bob:example.org") + " and " + id("@Bob:example.org")},
		{"Matrix users in two cases, the other first", "@bob:example.org and @Bob:example.org", []string{"@Bob:example.org", "@bob:example.org"},
			id("@bob:example.org") + " and " + id("@Bob:example.org")},
		// Addresses in two cases given as two ids keep their own.
		{"addresses in two cases", "Bob@example.com, bob@example.com", []string{"bob@example.com", "Bob@example.com"},
			id("Bob@example.com") + ", " + id("bob@example.com")},
		{"an address in a third case", "BOB@example.com", []string{"bob@example.com", "Bob@example.com"},
			id("bob@example.com")},
		// An address that ends another, the longer written in another
		// case: the longer is one word, not the shorter with a name
		// before it ("jim." left in the text).
		{"an address another ends with, in another case", "mail to jim.bob@example.com refused", []string{"bob@example.com", "Jim.Bob@example.com"},
			"mail to " + id("Jim.Bob@example.com") + " refused"},
		{"an address another starts with, in another case", "mail to bob@example.com.AU refused", []string{"bob@example.com", "Bob@example.com.au"},
			"mail to " + id("Bob@example.com.au") + " refused"},
		{"escaped in a path", "failed to PUT /_matrix/client/v3/rooms/%21room:example.org/send (HTTP 403)", []string{"!room:example.org"},
			"failed to PUT /_matrix/client/v3/rooms/" + id("!room:example.org") + "/send (HTTP 403)"},
		{"as given too", "room !room:example.org: forbidden", []string{"!room:example.org"}, "room " + id("!room:example.org") + ": forbidden"},
		{"every occurrence, several ids", "chat 99001 thread 77002 of chat 99001", []string{"99001", "77002"},
			"chat " + id("99001") + " thread " + id("77002") + " of chat " + id("99001")},
		{"not inside a longer number", "code 4199001 for 99001x and x99001", []string{"99001"}, "code 4199001 for 99001x and x99001"},
		{"a negative Telegram id", "chat -1002285219667 not found", []string{"-1002285219667"}, "chat " + id("-1002285219667") + " not found"},
		{"an id within another", "chats 12345 and 123456", []string{"12345", "123456"}, "chats " + id("12345") + " and " + id("123456")},
		{"short ids are left", "HTTP 42: chat 42", []string{"42"}, "HTTP 42: chat 42"},
		// A number under 5 digits (a Telegram topic's thread id) is as
		// likely a status, a year or a duration, and names no one.
		{"a short number is left", "telegram: HTTP 502 Bad Gateway, retry after 2026 ms", []string{"502", "2026", "-2026"},
			"telegram: HTTP 502 Bad Gateway, retry after 2026 ms"},
		{"a year in a timestamp", "topic 1234 closed at 2026-12-05T10:00:00Z", []string{"1234", "2026"}, "topic 1234 closed at 2026-12-05T10:00:00Z"},
		{"a number of 5 digits is taken", "chat 99001: HTTP 502", []string{"99001", "502"}, "chat " + id("99001") + ": HTTP 502"},
		{"short, not a number", "user abc left", []string{"abc"}, "user " + id("abc") + " left"},
		{"empty ids", "nothing", []string{"", ""}, "nothing"},
		{"not there", "forbidden", []string{"99001"}, "forbidden"},
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	for _, tt := range scrubCases(p) {
		if got := p.Scrub(tt.text, tt.ids...); got != tt.want {
			t.Errorf("%s: Scrub(%q, %q) = %q, want %q", tt.name, tt.text, tt.ids, got, tt.want)
		}
	}
	var off *pseudonym.Pseudonymizer
	if got := off.Scrub("chat 99001", "99001"); got != "chat 99001" {
		t.Errorf("nil Pseudonymizer scrubbed: %q", got)
	}
}

func TestNaming(t *testing.T) {
	t.Parallel()
	base := errors.New("HTTP 403: channel 900000000000000001")
	named := pseudonym.Naming(base, "900000000000000001", "")
	if named.Error() != base.Error() || !errors.Is(named, base) {
		t.Errorf("Naming changed the error: %q", named)
	}
	if pseudonym.Naming(nil, "1") != nil {
		t.Error("Naming(nil) is not nil")
	}
	wrapped := fmt.Errorf("send: %w", named)
	joined := errors.Join(errors.New("first"), pseudonym.Naming(errors.New("second"), "U0USER01"))
	tests := []struct {
		err  error
		want []string
	}{
		{named, []string{"900000000000000001", ""}},
		{wrapped, []string{"900000000000000001", ""}},
		{fmt.Errorf("again: %w", pseudonym.Naming(wrapped, "77")), []string{"77", "900000000000000001", ""}},
		{joined, []string{"U0USER01"}},
		{base, nil},
		{nil, nil},
	}
	for _, tt := range tests {
		if got := pseudonym.NamedIDs(tt.err); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("NamedIDs(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestChatKey(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	id := p.ID
	tests := []struct{ in, want string }{
		{"whatsapp:main:15551234567", "whatsapp:main:" + id("15551234567")},
		{"matrix:bot:!room:example.org", "matrix:bot:" + id("!room:example.org")},
		{"telegram::99", "telegram::" + id("99")},
		{"no-colons", id("no-colons")},
		{"telegram:main:", id("telegram:main:")},
		{"", ""},
	}
	for _, tt := range tests {
		if got := p.ChatKey(tt.in); got != tt.want {
			t.Errorf("ChatKey(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMsgID(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	id := p.ID
	tests := []struct{ in, want string }{
		{"signal:main:+15551234567:1700000000000", "signal:main:" + id("+15551234567:1700000000000")},
		{"whatsapp:main:wamid.HBgLMTU1NTEyMzQ1NjcVAgASGBQzQUFC", "whatsapp:main:" + id("wamid.HBgLMTU1NTEyMzQ1NjcVAgASGBQzQUFC")},
		{"email:main:CAF1234@mail.example.com", "email:main:" + id("CAF1234@mail.example.com")},
		{"slack:main:C0CHANNEL:1700000000.000100", "slack:main:" + id("C0CHANNEL:1700000000.000100")},
		// Google Chat's platform is google_chat (googlechat.PlatformName):
		// a message's name holds its space, a DM's names the person.
		{"google_chat:aud:spaces/AAAA/messages/BBBB.BBBB", "google_chat:aud:" + id("spaces/AAAA/messages/BBBB.BBBB")},
		// A router notice's turn id and bus message id, a delivery's
		// idempotency key made of them, a button press's.
		{"notice:signal:main:+15551234567:1700000000000:1", "notice:signal:main:" + id("+15551234567:1700000000000:1")},
		{"notice:signal:main:+15551234567:1700000000000:1:0", "notice:signal:main:" + id("+15551234567:1700000000000:1:0")},
		{"press:whatsapp:main:wamid.HBgL", "press:whatsapp:main:" + id("wamid.HBgL")},
		{"notice:telegram:main:42:1", "notice:telegram:main:42:1"},
		// Opaque ids stay, to find the message on its platform.
		{"telegram:main:42", "telegram:main:42"},
		{"discord:main:1100000000000000001", "discord:main:1100000000000000001"},
		{"signal:main:", "signal:main:"},
		{"01HXYZ:3", "01HXYZ:3"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := p.MsgID(tt.in); got != tt.want {
			t.Errorf("MsgID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzScrub: Scrub never panics, is deterministic, leaves no whole-word
// occurrence of an id of 3 bytes or more it was given, and changes
// nothing when the ids are not in the text. A number under 5 digits is
// left, as Scrub leaves it.
func FuzzScrub(f *testing.F) {
	f.Add(`Post "https://discord.com/api/v9/channels/900/messages": EOF`, "900", "")
	f.Add("The 'To' number +15551234567 is invalid", "+15551234567", "15551234567")
	f.Add("PUT /rooms/%21r:example.org/send", "!r:example.org", "r")
	f.Add("aaaa", "aa", "aaa")
	f.Add("550 <Bob@Example.COM>: rejected", "bob@example.com", "")
	f.Add("", "", "")
	p := pseudonym.New("fuzz")
	f.Fuzz(func(t *testing.T, text, a, b string) {
		got := p.Scrub(text, a, b)
		if again := p.Scrub(text, a, b); again != got {
			t.Fatalf("Scrub(%q, %q, %q) not deterministic: %q then %q", text, a, b, got, again)
		}
		if got != text && !namesIn(text, a) && !namesIn(text, b) {
			t.Fatalf("Scrub(%q, %q, %q) = %q: changed a text that names neither", text, a, b, got)
		}
		for _, id := range []string{a, b} {
			if len(id) >= 3 && !shortNumber(id) && isWord(got, id) && !isWord(p.ID(a)+" "+p.ID(b), id) {
				t.Fatalf("Scrub(%q, %q, %q) = %q: %q still stands in it", text, a, b, got, id)
			}
		}
	})
}

// namesIn reports whether text holds id in a form Scrub looks for: as
// it is, without its "+", or URL-escaped ("\x01" as "%01"); an e-mail
// address in any ASCII case.
func namesIn(text, id string) bool {
	if isAddress(id) {
		text, id = asciiLower(text), asciiLower(id)
	}
	for _, f := range []string{id, strings.TrimPrefix(id, "+"), url.PathEscape(id), url.QueryEscape(id)} {
		if strings.Contains(text, f) {
			return true
		}
	}
	return false
}

// asciiLower is s with its ASCII letters in lower case.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// isWord reports whether id stands in s as a whole word, as Scrub finds
// it: an e-mail address in any ASCII case.
func isWord(s, id string) bool {
	if isAddress(id) {
		s, id = asciiLower(s), asciiLower(id)
	}
	alnum := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	for from := 0; ; {
		i := strings.Index(s[from:], id)
		if i < 0 {
			return false
		}
		start, end := from+i, from+i+len(id)
		if (start == 0 || !alnum(s[start]) || !alnum(s[start-1])) && (end == len(s) || !alnum(s[end-1]) || !alnum(s[end])) {
			return true
		}
		from = start + 1
	}
}

// isAddress reports whether Scrub takes id for an e-mail address, which
// it finds in any case: an "@" after something, and no ":" (a Matrix
// user, "@bob:server", is case-sensitive).
func isAddress(id string) bool {
	at := strings.IndexByte(id, '@')
	return at > 0 && at < len(id)-1 && !strings.Contains(id, ":")
}

// shortNumber reports whether id is a number of under 5 digits, with a
// sign or none, which Scrub leaves in a text.
func shortNumber(id string) bool {
	digits := strings.TrimLeft(id, "+-")
	if len(id)-len(digits) > 1 || len(digits) >= 5 {
		return false
	}
	return strings.Trim(digits, "0123456789") == ""
}
