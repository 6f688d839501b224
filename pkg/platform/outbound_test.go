package platform

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/egress"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// An attachment's URL is the agent's: by default a download reaches only
// public addresses, and one to the gateway's own network fails for good
// with why; attachments.urls lets an operator's file server through.
func TestReadOutboundAddresses(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("report"))
	}))
	t.Cleanup(srv.Close)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	byIP := &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/r.txt?sig=secret"}, MimeType: "text/plain"}
	byName := &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: "http://localhost:" + port + "/r.txt?sig=secret"}, MimeType: "text/plain"}
	tests := []struct {
		name string
		dl   *Downloader
		a    *eventsv1.Attachment
		ok   bool
	}{
		{"127.0.0.1 refused by default", nil, byIP, false},
		{"a name resolving to the loopback refused by default", nil, byName, false},
		{"refused without allowances", NewDownloader(egress.Config{}), byIP, false},
		{"allowed with allow_private", NewDownloader(egress.Config{AllowPrivate: true}), byIP, true},
		{"allowed by address", NewDownloader(egress.Config{AllowHosts: []string{"127.0.0.1"}}), byIP, true},
		{"allowed by name", NewDownloader(egress.Config{AllowHosts: []string{"localhost"}}), byName, true},
		{"another host allowed", NewDownloader(egress.Config{AllowHosts: []string{"files.internal", "10.0.0.0/8"}}), byIP, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, _, err := ReadOutbound(context.Background(), tt.a, nil, tt.dl, 64)
			if tt.ok {
				if err != nil || string(data) != "report" {
					t.Fatalf("got %q, %v", data, err)
				}
				return
			}
			var se *SendError
			if !errors.As(err, &se) || se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT || !errors.Is(err, egress.ErrRefused) {
				t.Fatalf("err %v, want a permanent refusal", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "not a public address") || !strings.Contains(msg, "attachments.urls") || strings.Contains(msg, "secret") {
				t.Fatalf("err %q: want the reason and the setting, without the URL", msg)
			}
		})
	}
}

func TestReadOutbound(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/cat.png":
			w.Header().Set("Content-Type", "image/png; charset=binary")
			_, _ = w.Write([]byte("\x89PNG\r\n\x1a\nfake"))
		case "/plain":
			_, _ = w.Write([]byte("%PDF-1.4 body"))
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 65)))
		case "/busy":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/slow-down":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/browsers-only":
			// As a host that refuses a request named as an HTTP
			// library (Go's default User-Agent).
			if !strings.HasPrefix(r.UserAgent(), "Mozilla/5.0 (compatible; ") {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			_, _ = w.Write([]byte("GIF89a"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	const max = 64
	local := NewDownloader(egress.Config{AllowPrivate: true}) // the server is on the loopback
	tests := []struct {
		name      string
		a         *eventsv1.Attachment
		data      string
		mime      string
		err       string
		permanent bool
	}{
		{name: "data URL", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,aGk="}}, data: "hi", mime: "text/plain"},
		{name: "data URL, the attachment's type first", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: "data:text/plain,hi"}, MimeType: "text/markdown"}, data: "hi", mime: "text/markdown"},
		{name: "bad data URL", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: "data:text/plain;base64,@@"}}, err: "data: URL", permanent: true},
		{name: "download, the server's type without parameters", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/cat.png"}}, data: "\x89PNG\r\n\x1a\nfake", mime: "image/png"},
		{name: "download, sniffed", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/plain"}}, data: "%PDF-1.4 body", mime: "application/pdf"},
		{name: "download, named as a client", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/browsers-only"}}, data: "GIF89a", mime: "image/gif"},
		{name: "not found is for good", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/gone"}}, err: "404", permanent: true},
		{name: "a busy server is retried", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/busy"}}, err: "503"},
		{name: "a rate limit is retried", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/slow-down"}}, err: "429"},
		{name: "too large", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: srv.URL + "/big"}}, err: "larger than 64 bytes", permanent: true},
		{name: "kept bytes without a store", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_BytesRef{BytesRef: "k1"}}, err: "store is off", permanent: true},
		{name: "no source", a: &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: "ftp://example.org/x"}}, err: "no data: URL", permanent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, mt, err := ReadOutbound(context.Background(), tt.a, nil, local, max)
			if tt.err != "" {
				var se *SendError
				permanent := errors.As(err, &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT
				if err == nil || !strings.Contains(err.Error(), tt.err) || permanent != tt.permanent {
					t.Fatalf("err %v, want one saying %q (permanent: %v)", err, tt.err, tt.permanent)
				}
				if strings.Contains(err.Error(), srv.URL) {
					t.Fatalf("err %v names the URL", err)
				}
				return
			}
			if err != nil || string(data) != tt.data || mt != tt.mime {
				t.Fatalf("got %q, %q, %v; want %q, %q", data, mt, err, tt.data, tt.mime)
			}
		})
	}
}

// An attachment to send is downloaded as a received one is
// (platform.Download): a 429 or a 5xx, a connection lost before the
// answer and a body cut off mid-file are asked again, three attempts in
// all within DownloadTimeout and the send's ctx, the file read whole
// once; a 404 stays final at once, and a wait beyond the bound fails at
// once. Before, the first such failure failed the send's attempt. The
// error never names the URL, whichever attempt failed.
func TestReadOutboundRetries(t *testing.T) {
	t.Parallel()
	file := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB
	refused := func(status int, retryAfter string) serverStep {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(status)
		}
	}
	for _, tc := range []struct {
		name  string
		steps []serverStep
		bound time.Duration // the send's ctx
		// requests the download makes; err is what its error says
		// ("": the file), permanent whether it is Permanent, retryAfter
		// the wait it passes on to delivery.
		requests         int
		err              string
		permanent        bool
		retryAfter       time.Duration
		minTime, maxTime time.Duration
	}{
		{name: "503, then the file", steps: []serverStep{refused(503, "0")}, requests: 2, maxTime: time.Second},
		{name: "429 with Retry-After, then the file", steps: []serverStep{refused(429, "1")}, requests: 2, minTime: time.Second, maxTime: 2 * time.Second},
		{name: "dropped, then the file", steps: []serverStep{dropped}, requests: 2, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		{name: "cut, then the file", steps: []serverStep{cut(file)}, requests: 2, minTime: 1500 * time.Millisecond, maxTime: 2900 * time.Millisecond},
		{name: "three 503s", steps: []serverStep{refused(503, "0"), refused(503, "0"), refused(503, "0")}, requests: 3, err: "503", maxTime: time.Second},
		{name: "404 is final", steps: []serverStep{refused(404, "0")}, requests: 1, err: "404", permanent: true, maxTime: time.Second},
		{name: "a wait beyond the bound", steps: []serverStep{refused(429, "120")}, bound: 10 * time.Second, requests: 1, err: "429", retryAfter: 2 * time.Minute, maxTime: time.Second},
		{name: "dropped three times", steps: []serverStep{dropped, dropped, dropped}, requests: 3, err: "3 attempts failed", minTime: 4500 * time.Millisecond, maxTime: 5900 * time.Millisecond},
		{name: "cut, then dropped twice", steps: []serverStep{cut(file), dropped, dropped}, requests: 3, err: "3 attempts failed", minTime: 4500 * time.Millisecond, maxTime: 5900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFlakyServer(t, file, tc.steps...)
			// A connection for each request: the transport asks again by
			// itself for a request whose reused connection was closed.
			dl := &Downloader{hc: egress.Guard(&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, egress.Config{AllowPrivate: true})}
			a := &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: s.URL + "/f.txt?sig=secret"}, MimeType: "text/plain"}
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.bound, 30*time.Second))
			defer cancel()
			start := time.Now()
			data, _, err := ReadOutbound(ctx, a, nil, dl, 1<<20)
			took := time.Since(start)
			if n := s.count(); n != tc.requests {
				t.Errorf("%d requests, want %d", n, tc.requests)
			}
			if took < tc.minTime || took > tc.maxTime {
				t.Errorf("took %s, want %s to %s", took, tc.minTime, tc.maxTime)
			}
			if tc.err == "" {
				if err != nil || string(data) != file {
					t.Fatalf("read %d bytes (%v), want the file's %d", len(data), err, len(file))
				}
				return
			}
			var se *SendError
			permanent := errors.As(err, &se) && se.Class == deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT
			if err == nil || !strings.Contains(err.Error(), tc.err) || permanent != tc.permanent {
				t.Fatalf("err %v, want one saying %q (permanent: %v)", err, tc.err, tc.permanent)
			}
			if after := time.Duration(0); tc.retryAfter > 0 || se != nil {
				if se != nil {
					after = se.RetryAfter
				}
				if after != tc.retryAfter {
					t.Errorf("passes on a wait of %s, want %s", after, tc.retryAfter)
				}
			}
			if msg := err.Error(); strings.Contains(msg, "secret") || strings.Contains(msg, "/f.txt") {
				t.Fatalf("err %q names the URL", msg)
			}
		})
	}
}

func TestLinkedText(t *testing.T) {
	t.Parallel()
	att := func(url, caption string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: url}, Caption: caption}
	}
	tests := []struct {
		name  string
		req   *deliveryv1.SendRequested
		text  string
		files []int
	}{
		{"text only", &deliveryv1.SendRequested{Text: "hi"}, "hi", nil},
		{"a link after the text", &deliveryv1.SendRequested{Text: "look", Attachments: []*eventsv1.Attachment{att("https://x.example/a.png", "")}},
			"look\nhttps://x.example/a.png", nil},
		{"a caption that is the text is not repeated", &deliveryv1.SendRequested{Text: "look", Attachments: []*eventsv1.Attachment{att("http://x.example/a", " look ")}},
			"look\nhttp://x.example/a", nil},
		{"bytes are uploaded, their captions kept", &deliveryv1.SendRequested{Attachments: []*eventsv1.Attachment{
			att("data:text/plain;base64,aGk=", "notes"), att("https://x.example/b", "b"), {Location: &eventsv1.Attachment_BytesRef{BytesRef: "ref"}}}},
			"notes\nb\nhttps://x.example/b", []int{0, 2}},
		{"nothing", &deliveryv1.SendRequested{}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, files := LinkedText(tt.req)
			if text != tt.text || !slices.Equal(files, tt.files) {
				t.Fatalf("LinkedText = %q, %v; want %q, %v", text, files, tt.text, tt.files)
			}
		})
	}
}

func TestFileName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a        *eventsv1.Attachment
		mimeType string
		want     string
	}{
		{&eventsv1.Attachment{FileName: "report.pdf"}, "image/png", "report.pdf"},
		{&eventsv1.Attachment{}, "image/png", "file.png"},
		{&eventsv1.Attachment{}, "application/x-unknown-thing", "file"},
		{&eventsv1.Attachment{}, "", "file"},
		// The usual extension, whatever the host's mime.types lists
		// first (Debian's: .jfif, .mp1, .oga, .brf, .m4v) or lacks (a
		// distroless image has none: no audio type at all).
		{&eventsv1.Attachment{}, "image/jpeg", "file.jpg"},
		{&eventsv1.Attachment{}, "image/jpg", "file.jpg"},
		{&eventsv1.Attachment{}, "audio/mpeg", "file.mp3"},
		{&eventsv1.Attachment{}, "audio/ogg", "file.ogg"},
		{&eventsv1.Attachment{}, "audio/mp4", "file.m4a"},
		{&eventsv1.Attachment{}, "audio/wav", "file.wav"},
		{&eventsv1.Attachment{}, "video/mp4", "file.mp4"},
		{&eventsv1.Attachment{}, "text/plain", "file.txt"},
		{&eventsv1.Attachment{}, "text/markdown", "file.md"},
		{&eventsv1.Attachment{}, "application/pdf", "file.pdf"},
		{&eventsv1.Attachment{}, "Image/JPEG", "file.jpg"},
		{&eventsv1.Attachment{}, "text/plain; charset=utf-8", "file.txt"},
	}
	for _, tt := range tests {
		if got := FileName(tt.a, tt.mimeType); got != tt.want {
			t.Errorf("FileName(%q, %q) = %q, want %q", tt.a.GetFileName(), tt.mimeType, got, tt.want)
		}
	}
}
