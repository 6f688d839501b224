package signal

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/egress"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Signal-cli's reading of a data URI (DataURI.of): its patterns, and its
// parameter values decoded with Java's URLDecoder ('+' is a space).
var (
	javaDataURI = regexp.MustCompile(`(?is)\Adata:(?P<type>.+?/.+?)?(?P<parameters>;.+?=.+?)?(?P<base64>;base64)?,(?P<data>.+)\z`)
	javaParam   = regexp.MustCompile(`(?is)\A;(.+)=(.+)`)
)

// daemonFileName is the file name signal-cli takes from a data URI.
func daemonFileName(t *testing.T, uri string) string {
	t.Helper()
	m := javaDataURI.FindStringSubmatch(uri)
	if m == nil {
		t.Fatalf("signal-cli does not read %q as a data URI", uri)
	}
	params := m[javaDataURI.SubexpIndex("parameters")]
	if params == "" {
		return ""
	}
	// \G;(.+)=(.+) with greedy groups matches the whole rest once.
	p := javaParam.FindStringSubmatch(params)
	if p == nil || p[1] != "filename" {
		return ""
	}
	name, err := url.QueryUnescape(p[2])
	if err != nil {
		t.Fatalf("URLDecoder rejects %q: %v", p[2], err)
	}
	return name
}

func TestAttachmentFileNameAsTheDaemonReadsIt(t *testing.T) {
	p, err := NewPlatform(Config{HTTPURL: "http://127.0.0.1:1", Account: bot}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := base64.StdEncoding.EncodeToString([]byte("hello"))
	for _, tc := range []struct{ name, url, file string }{
		{"plain name", "data:text/plain;base64," + body, "notes.txt"},
		{"a plus and a space", "data:text/plain;base64," + body, "C++ notes.txt"},
		{"an equals sign", "data:text/plain;base64," + body, "a=b.txt"},
		{"semicolon, comma, percent", "data:text/plain;base64," + body, "x;y,z 100%.txt"},
		{"a data URL with a parameter of its own", "data:text/plain;charset=utf-8;base64," + body, "notes.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uri, err := p.attachmentData(context.Background(), &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: tc.url}, FileName: tc.file})
			if err != nil {
				t.Fatal(err)
			}
			if got := daemonFileName(t, uri); got != tc.file {
				t.Fatalf("signal-cli reads the file name of %q as %q, want %q", uri, got, tc.file)
			}
		})
	}
	t.Run("file name of a downloaded attachment", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte("hello"))
		}))
		defer srv.Close()
		p.downloads = platform.NewDownloader(egress.Config{AllowPrivate: true})
		const name = "C++ a=b.txt"
		uri, err := p.attachmentData(context.Background(), &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/f"}, FileName: name})
		if err != nil {
			t.Fatal(err)
		}
		if got := daemonFileName(t, uri); got != name {
			t.Fatalf("signal-cli reads the file name of %q as %q, want %q", uri, got, name)
		}
	})
}
