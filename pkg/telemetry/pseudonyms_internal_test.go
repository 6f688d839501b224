package telemetry

import (
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// TestPseudonymizeURL: the ids a span's URL holds, by a query
// parameter's name or by their shape, become pseudonyms; the scheme, the
// host and its port, short numbers (a page, a limit) and the route's
// words are kept.
func TestPseudonymizeURL(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	for _, tt := range []struct{ in, want string }{
		{"/v1/responses/resp_abc/cancel", "/v1/responses/resp_abc/cancel"},
		{"/v1/chats/-100123456789/messages", "/v1/chats/" + p.ID("-100123456789") + "/messages"},
		{"https://api.example.org:8443/rooms/%21r:example.org/send?limit=20", "https://api.example.org:8443/rooms/" + p.ID("!r:example.org") + "/send?limit=20"},
		{"http://127.0.0.1:43215/send?chat_id=C0CHANNEL&to=%2B15551234567&page=2",
			"http://127.0.0.1:43215/send?chat_id=" + p.ID("C0CHANNEL") + "&to=" + p.ID("+15551234567") + "&page=2"},
		{"/users/@bob:example.org/profile#u-12345", "/users/" + p.ID("@bob:example.org") + "/profile#u-12345"},
		{"/mail/bob@example.com", "/mail/" + p.ID("bob@example.com")},
		{"/sessions/agent:main:telegram:dm:42", "/sessions/" + p.Key("agent:main:telegram:dm:42")},
		{"https://example.org", "https://example.org"},
		{"/v1/media/2024", "/v1/media/2024"},
		{"/q?flag&x=%zz", "/q?flag&x=%zz"},
		// A host with no path before its query or fragment.
		{"https://api.example.org?chat_id=C0CHANNEL", "https://api.example.org?chat_id=" + p.ID("C0CHANNEL")},
		{"http://[2001:db8::1]:8080?to=%2B15551234567#top", "http://[2001:db8::1]:8080?to=" + p.ID("+15551234567") + "#top"},
		// A "://" in the query of a path, not a scheme's.
		{"/v1/chats/-100123456789/hook?url=https://hooks.example.org", "/v1/chats/" + p.ID("-100123456789") + "/hook?url=https://hooks.example.org"},
		// An id beside an escape that is no escape.
		{"/v1/chats/-100123456789%zz", "/v1/chats/" + p.ID("-100123456789%zz")},
		{"/send?to=%zz15551234567", "/send?to=" + p.ID("%zz15551234567")},
		{"", ""},
	} {
		if got := pseudonymizeURL(p, tt.in); got != tt.want {
			t.Errorf("pseudonymizeURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzPseudonymizeURL: any text goes through without a panic, and an
// id-shaped path segment, escaped as a client writes it, comes out as
// its pseudonym with the path around it as it was.
func FuzzPseudonymizeURL(f *testing.F) {
	for _, seed := range []string{"-100123456789", "+15551234567", "!room:example.org", "bob@example.com", "@bob:server", "12345", "a/b?c=d#e", "%zz"} {
		f.Add(seed)
	}
	p := pseudonym.New("k")
	f.Fuzz(func(t *testing.T, s string) {
		_ = pseudonymizeURL(p, s)
		_ = pseudonymizeURL(p, "https://example.org/x?q="+s)
		if !idShaped(s) {
			return
		}
		in := "https://example.org:8443/v1/" + url.PathEscape(s) + "/send?limit=20"
		want := "https://example.org:8443/v1/" + p.ID(s) + "/send?limit=20"
		if got := pseudonymizeURL(p, in); got != want {
			t.Errorf("pseudonymizeURL(%q) = %q, want %q", in, got, want)
		}
	})
}

// TestURLAttributesPseudonyms: each span attribute that holds a URL or
// a part of one is pseudonymized as that part: url.query's parameters
// by their names and shapes, as a full URL's query is.
func TestURLAttributesPseudonyms(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	for _, tt := range []struct {
		kv   attribute.KeyValue
		want string
	}{
		{attribute.String("url.query", "chat_id=C0CHANNEL&page=2"), "chat_id=" + p.ID("C0CHANNEL") + "&page=2"},
		{attribute.String("url.query", "to=%2B15551234567"), "to=" + p.ID("+15551234567")},
		{attribute.String("url.query", "limit=20"), "limit=20"},
		{attribute.String("url.path", "/v1/chats/-100123456789"), "/v1/chats/" + p.ID("-100123456789")},
		{attribute.String("url.full", "https://api.example.org/send?chat_id=C0CHANNEL"), "https://api.example.org/send?chat_id=" + p.ID("C0CHANNEL")},
	} {
		if got := pseudonymizeKVs(p, []attribute.KeyValue{tt.kv}); got[0].Value.AsString() != tt.want {
			t.Errorf("%s=%q exported as %q, want %q", tt.kv.Key, tt.kv.Value.AsString(), got[0].Value.AsString(), tt.want)
		}
	}
}

// TestURLPseudonymsAsLogs: an id in a span's URL has the pseudonym the
// log records beside the span show for it: a "+" in a query (a phone
// number written as it is) is a "+", as in the id logged, not a form's
// space. A "+" in a value that names no one is kept as it is.
func TestURLPseudonymsAsLogs(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	const phone = "+15551234567"
	logged := pseudonymizeAttr(p)(nil, slog.String("chat_id", phone)).Value.String()
	if logged != p.ID(phone) {
		t.Fatalf("chat_id=%s logged as %q, want %q", phone, logged, p.ID(phone))
	}
	for _, tt := range []struct{ in, want string }{
		{"/send?to=" + phone, "/send?to=" + logged},
		{"/send?chat_id=" + phone + "&page=2", "/send?chat_id=" + logged + "&page=2"},
		{"/send?to=%2B15551234567", "/send?to=" + logged},
		{"https://api.example.org/2010-04-01/Messages.json?To=" + phone + "&Body=hi+there", "https://api.example.org/2010-04-01/Messages.json?To=" + logged + "&Body=hi+there"},
		{"/v1/chats/" + phone, "/v1/chats/" + logged},
	} {
		if got := pseudonymizeURL(p, tt.in); got != tt.want {
			t.Errorf("pseudonymizeURL(%q) = %q, want %q (%s logged as %s)", tt.in, got, tt.want, phone, logged)
		}
	}
	kv := pseudonymizeKVs(p, []attribute.KeyValue{attribute.String("url.query", "to="+phone)})
	if got := kv[0].Value.AsString(); got != "to="+logged || strings.Contains(got, "15551234567") {
		t.Errorf("url.query=to=%s exported as %q, want %q", phone, got, "to="+logged)
	}
}

// TestURLQueryIDsAsLogs: an id in a span's URL query has the pseudonym
// the logs show for it however the client wrote it: escaped by
// url.Values or url.QueryEscape (a space as "+", a "+" as "%2B"), with
// "%20" for a space, or a phone number's "+" as it is, alone or after
// a ":" or ";".
func TestURLQueryIDsAsLogs(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	for _, id := range []string{
		"Support Desk", "Team - 2024", "+15551234567", "whatsapp:+15551234567", "iMessage;-;+15551234567",
		"group.ab+cd/ef==", "Bob +15551234567", "bob@example.com", "!r:example.org", "C0CHANNEL",
	} {
		logged := pseudonymizeAttr(p)(nil, slog.String("chat_id", id)).Value.String()
		if logged != p.ID(id) {
			t.Fatalf("chat_id=%q logged as %q, want %q", id, logged, p.ID(id))
		}
		queries := []string{
			url.Values{"chat_id": {id}}.Encode(),
			"chat_id=" + url.QueryEscape(id),
			"chat_id=" + strings.ReplaceAll(url.QueryEscape(id), "+", "%20"),
		}
		if !strings.ContainsAny(id, " /=") {
			queries = append(queries, "chat_id="+id) // as it is
		}
		for _, q := range queries {
			if got, want := pseudonymizeURL(p, "https://api.example.org/send?"+q+"&page=2"),
				"https://api.example.org/send?chat_id="+logged+"&page=2"; got != want {
				t.Errorf("%q: pseudonymizeURL(…?%s) = %q, want %q", id, q, got, want)
			}
			kv := pseudonymizeKVs(p, []attribute.KeyValue{attribute.String("url.query", q)})
			if got := kv[0].Value.AsString(); got != "chat_id="+logged {
				t.Errorf("%q: url.query=%s exported as %q, want %q", id, q, got, "chat_id="+logged)
			}
		}
	}
}

// FuzzURLQueryAsLogs: any id a client escapes in a query
// (url.QueryEscape) has there the pseudonym it is logged with, but one
// that starts with a space before a digit, which would be written as a
// phone number's "+".
func FuzzURLQueryAsLogs(f *testing.F) {
	for _, seed := range []string{"Support Desk", "+15551234567", "a+b c", "x:+1 ;+2", "%2B", "+", " ", "bob@example.com"} {
		f.Add(seed)
	}
	p := pseudonym.New("k")
	f.Fuzz(func(t *testing.T, id string) {
		if id == "" || len(id) > 1 && id[0] == ' ' && '0' <= id[1] && id[1] <= '9' {
			return
		}
		if got, want := pseudonymizeURL(p, "/send?chat_id="+url.QueryEscape(id)), "/send?chat_id="+p.ID(id); got != want {
			t.Errorf("pseudonymizeURL(/send?chat_id=%s) = %q, want %q", url.QueryEscape(id), got, want)
		}
	})
}
