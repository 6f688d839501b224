package slack

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
)

// A file a user shares is published as Slack sent it, with nothing
// downloaded: its url_private_download, as Hermes reads it, or its
// url_private when Slack gives no other. When a turn reads it, the worker asks the
// gateway, which downloads it once with the bot token into the attachment
// store and answers where it is; asked again (a second attempt of the
// turn), it downloads nothing more. One that cannot be kept (deleted,
// refused with Slack's sign-in page, larger than declared) is answered
// with the reason. One too large by its declared size is marked so as it
// is published, and files the agent does not read are never downloaded.
func TestFilesAreKept(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	cfg := attachment.Config{Enabled: true, MaxBytes: 64 << 10, StoreBytes: 8 << 20}
	_, b, next, _ := gatewayWith(t, fake, Config{AppToken: fake.AppToken}, platform.Options{Attachments: cfg})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.JetStream().DeleteObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	})
	store := attachment.New(b.JetStream(), b.Topology(), cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var n atomic.Int64
	// publish shares f in a DM and returns the event as published, and
	// how many file requests publishing it made.
	publish := func(t *testing.T, f slackfake.File) (*eventsv1.MessageReceived, int) {
		t.Helper()
		before := fake.Downloads()
		ts := fmt.Sprintf("1700000%03d.000100", n.Add(1))
		ev := slackfake.Event{Subtype: "file_share", Channel: "D0DM", ChannelType: "im", User: "U0USER01", Text: "look", TS: ts, Files: []slackfake.File{f}}
		if err := fake.Push(ctx, fake.Callback("Ev"+ts, ev), 0); err != nil {
			t.Fatal(err)
		}
		got := next()
		if got.GetMessageId() != ts || len(got.GetAttachments()) != 1 {
			t.Fatalf("got %v, want %s with its file", got, ts)
		}
		return got, fake.Downloads() - before
	}
	big := platformtest.NoisePNG(t, 256, 256)
	if len(big) <= 64<<10 {
		t.Fatalf("the big image has %d bytes, want more than 64 KiB", len(big))
	}
	img := platformtest.NoisePNG(t, 32, 32)
	page := []byte(`<!DOCTYPE html><html><head><title>Release notes</title></head><body><h1>v2.1</h1><p>Faster.</p></body></html>`)
	withoutFilesRead := func() func() {
		fake.SetFilesRead(false)
		return func() { fake.SetFilesRead(true) }
	}

	tests := []struct {
		name string
		file func() slackfake.File
		// notRead: the agent does not read the file (attachment.Wanted is
		// false), so no turn asks for it.
		notRead bool
		// published is what the published file's unavailable must contain
		// ("": empty).
		published string
		// during runs around the fetch request and returns its undoing.
		during func() func()
		// want are the bytes kept (nil: none), of wantMIME.
		want     []byte
		wantMIME string
		// kind is the published file's kind (0: not checked).
		kind eventsv1.AttachmentKind
		// unavailable is what the fetch's answer must contain ("": kept).
		unavailable string
		// downloads is how many file requests the fetch makes.
		downloads int
	}{
		{name: "image", file: func() slackfake.File { return fake.AddFile("cat.png", "image/png", img) },
			want: img, wantMIME: "image/png", downloads: 1},
		{name: "html file", file: func() slackfake.File { return fake.AddFile("notes.html", "text/html", page) },
			want: page, wantMIME: "text/html", downloads: 1},
		{name: "deleted", unavailable: "could not be downloaded", downloads: 1, file: func() slackfake.File {
			f := fake.AddFile("cat.png", "image/png", platformtest.NoisePNG(t, 8, 8))
			f.URL = strings.Replace(f.URL, f.ID, "F99999999", 1) // 404
			f.DownloadURL = strings.Replace(f.DownloadURL, f.ID, "F99999999", 1)
			return f
		}},
		// Slack gives no url_private_download: url_private is read.
		{name: "url_private only", want: img, wantMIME: "image/png", downloads: 1, file: func() slackfake.File {
			f := fake.AddFile("cat.png", "image/png", img)
			f.DownloadURL = ""
			return f
		}},
		{name: "sign-in page", during: withoutFilesRead, unavailable: "could not be downloaded", downloads: 1,
			file: func() slackfake.File { return fake.AddFile("cat.png", "image/png", platformtest.NoisePNG(t, 8, 8)) }},
		{name: "sign-in page for an html file", during: withoutFilesRead, unavailable: "could not be downloaded", downloads: 1,
			file: func() slackfake.File { return fake.AddFile("notes.html", "text/html", page) }},
		// The worker does not ask for it; a gateway asked all the same
		// refuses it without a download.
		{name: "declared too large", published: "too large", unavailable: "too large",
			file: func() slackfake.File { return fake.AddFile("big.png", "image/png", big) }},
		{name: "larger than declared", unavailable: "too large", downloads: 1, file: func() slackfake.File {
			f := fake.AddFile("big.png", "image/png", big)
			f.Size = 1000
			return f
		}},
		// A Slack Connect channel's file comes as a stub (file_access:
		// check_file_info, no URL, type or name): files.info, as the
		// message is published, gives the rest.
		{name: "slack connect image", want: img, wantMIME: "image/png", downloads: 1, file: func() slackfake.File {
			f := fake.AddFile("cat.png", "image/png", img)
			f.Connect = true
			return f
		}},
		// files.info's audio/* type makes it a voice message, as Hermes.
		{name: "slack connect audio", want: []byte("OggS-clip"), wantMIME: "audio/ogg", downloads: 1, kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE,
			file: func() slackfake.File {
				f := fake.AddFile("clip.ogg", "audio/ogg", []byte("OggS-clip"))
				f.Connect = true
				return f
			}},
		{name: "slack connect file files.info does not give", published: "file_not_found", unavailable: "could not be downloaded", file: func() slackfake.File {
			return slackfake.File{ID: "F99999998", Connect: true}
		}},
		{name: "pdf", notRead: true,
			file: func() slackfake.File { return fake.AddFile("notes.pdf", "application/pdf", []byte("%PDF-1.7")) }},
		{name: "video", notRead: true,
			file: func() slackfake.File {
				return fake.AddFile("clip.mp4", "video/mp4", []byte("\x00\x00\x00\x18ftypmp42"))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.file()
			infos := fake.FileInfos()
			ev, downloads := publish(t, f)
			a := ev.GetAttachments()[0]
			if downloads != 0 {
				t.Errorf("publishing made %d file requests, want none", downloads)
			}
			if n, want := fake.FileInfos()-infos, map[bool]int{true: 1}[f.Connect]; n != want {
				t.Errorf("publishing made %d files.info calls, want %d", n, want)
			}
			// As Hermes: url_private_download, else url_private (a
			// Slack Connect stub's, as files.info gives them).
			wantURL := cmp.Or(f.DownloadURL, f.URL)
			if a.GetUrl() != wantURL || a.GetBytesRef() != "" {
				t.Errorf("published file %v, want its URL %s", a, wantURL)
			}
			if tt.kind != 0 && a.GetKind() != tt.kind {
				t.Errorf("published kind %v, want %v", a.GetKind(), tt.kind)
			}
			switch {
			case tt.published == "" && a.GetUnavailable() != "":
				t.Errorf("published unavailable %q, want none", a.GetUnavailable())
			case tt.published != "" && !strings.Contains(a.GetUnavailable(), tt.published):
				t.Errorf("published unavailable %q, want it to contain %q", a.GetUnavailable(), tt.published)
			}
			if tt.notRead {
				if attachment.Wanted(a) {
					t.Fatalf("file %v is read by the agent, want it left alone", a)
				}
				return
			}
			if tt.published == "" && !attachment.Wanted(a) {
				t.Fatalf("file %v is not read by the agent: no turn would ask for it", a)
			}

			before := fake.Downloads()
			if tt.during != nil {
				undo := tt.during()
				defer undo()
			}
			requested := len(fake.FileRequests())
			got := platformtest.Fetch(t, ctx, b, "slack", ev, 0)
			if d := fake.Downloads() - before; d != tt.downloads {
				t.Errorf("the fetch made %d file requests, want %d", d, tt.downloads)
			}
			for _, u := range fake.FileRequests()[requested:] {
				if u != wantURL {
					t.Errorf("the fetch requested %s, want %s", u, wantURL)
				}
			}
			if tt.unavailable != "" {
				if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), tt.unavailable) {
					t.Fatalf("fetched %v, want it unavailable: %q", got, tt.unavailable)
				}
				return
			}
			name := attachment.Name("slack", ev.GetSource().GetAccount(), ev.GetEventId(), 0)
			if got.GetBytesRef() != name || got.GetUnavailable() != "" || got.GetSizeBytes() != int64(len(tt.want)) || got.GetMimeType() != tt.wantMIME {
				t.Fatalf("fetched %v, want %s: %d bytes of %s", got, name, len(tt.want), tt.wantMIME)
			}
			kept, mime, err := store.Get(ctx, got.GetBytesRef(), 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(kept, tt.want) || mime != tt.wantMIME {
				t.Fatalf("store has %d bytes of %q, want the %d served bytes of %s", len(kept), mime, len(tt.want), tt.wantMIME)
			}

			// A second attempt of the turn finds it kept.
			before = fake.Downloads()
			again := platformtest.Fetch(t, ctx, b, "slack", ev, 0)
			if d := fake.Downloads() - before; d != 0 || !proto.Equal(again, got) {
				t.Fatalf("asked again: %v after %d file requests, want %v after none", again, d, got)
			}
		})
	}
}

// Fetch sends the bot token to Slack only, and takes Slack's sign-in page
// (its answer to a token it does not accept) for the failure it is.
// Its errors never carry the token.
func TestFetch(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := socketPlatform(t, ctx, fake)
	fetchFile := func(a *eventsv1.Attachment) ([]byte, string, error) {
		rc, mime, err := p.Fetch(ctx, a)
		if err != nil {
			if strings.Contains(err.Error(), fake.BotToken) || strings.Contains(err.Error(), p.cfg.BotToken) {
				t.Errorf("fetch %s: the error shows the token: %v", a.GetUrl(), err)
			}
			return nil, "", err
		}
		defer func() { _ = rc.Close() }()
		data, err := io.ReadAll(rc)
		return data, mime, err
	}
	fetch := func(u string) ([]byte, string, error) {
		return fetchFile(&eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: u}, PlatformFileId: "F1"})
	}

	data := platformtest.NoisePNG(t, 4, 4)
	f := fake.AddFile("cat.png", "image/png", data)
	for _, u := range []string{f.URL, f.DownloadURL} {
		got, mime, err := fetch(u)
		if err != nil || !bytes.Equal(got, data) || mime != "image/png" {
			t.Fatalf("fetch %s: %d bytes of %q (%v), want %d of image/png", u, len(got), mime, err, len(data))
		}
	}

	// A remote file's url_private is any URL its creator chose.
	var hits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(data)
	}))
	defer elsewhere.Close()
	for _, u := range []string{elsewhere.URL + "/files-pri/T-F1/cat.png", "", "file:///etc/passwd"} {
		if _, _, err := fetch(u); !errors.Is(err, errTokenRefused) {
			t.Errorf("fetch %q: %v, want errTokenRefused", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("%d requests reached a host that is not Slack", hits.Load())
	}

	// An HTML file is HTML too: it is the sign-in page only when Slack
	// redirected the request away from the file, declared by its media
	// type or, when that is generic, its name.
	page := []byte(`<!DOCTYPE html><html><head><title>Notes</title></head><body>v2</body></html>`)
	h := fake.AddFile("notes.html", "text/html", page)
	htmlFiles := []*eventsv1.Attachment{
		{Location: &eventsv1.Attachment_Url{Url: h.URL}, PlatformFileId: h.ID, MimeType: "text/html", FileName: "notes.html"},
		{Location: &eventsv1.Attachment_Url{Url: h.URL}, PlatformFileId: h.ID, MimeType: "text/html; charset=utf-8"},
		{Location: &eventsv1.Attachment_Url{Url: h.URL}, PlatformFileId: h.ID, MimeType: "application/octet-stream", FileName: "notes.HTML"},
		{Location: &eventsv1.Attachment_Url{Url: h.DownloadURL}, PlatformFileId: h.ID, FileName: "notes.htm"},
	}
	for _, a := range htmlFiles {
		if got, mime, err := fetchFile(a); err != nil || !bytes.Equal(got, page) || mime != "text/html" {
			t.Fatalf("fetch %v: %d bytes of %q (%v), want the %d bytes of text/html", a, len(got), mime, err, len(page))
		}
	}
	// Served as HTML, a file declared as something else is the sign-in
	// page all the same.
	if _, _, err := fetchFile(&eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: h.URL}, MimeType: "image/png", FileName: "notes.png"}); !errors.Is(err, errSignIn) {
		t.Fatalf("fetch of an HTML answer for a picture: %v, want errSignIn", err)
	}

	p.cfg.BotToken = "xoxb-wrong-token"
	if _, _, err := fetch(f.URL); !errors.Is(err, errSignIn) {
		t.Fatalf("fetch with a wrong token: %v, want errSignIn", err)
	}
	for _, a := range htmlFiles {
		if _, _, err := fetchFile(a); !errors.Is(err, errSignIn) {
			t.Fatalf("fetch of %v with a wrong token: %v, want errSignIn", a, err)
		}
	}
}

func TestTokenMayGo(t *testing.T) {
	const api = "https://slack.com/api/"
	for _, tc := range []struct {
		api, url string
		want     bool
	}{
		{api, "https://files.slack.com/files-pri/T1-F1/cat.png", true},
		{api, "https://files.slack.com/files-pri/T1-F1/download/cat.png", true},
		{api, "https://slack.com/files-pri/T1-F1/cat.png", true},
		{api, "https://FILES.Slack.COM/files-pri/T1-F1/cat.png", true},
		{api, "https://files.slack-gov.com/files-pri/T1-F1/cat.png", true},
		{api, "http://files.slack.com/files-pri/T1-F1/cat.png", false},
		{api, "https://files.slack.com.evil.example/cat.png", false},
		{api, "https://evilslack.com/cat.png", false},
		{api, "https://files.slack.com@evil.example/cat.png", false},
		{api, "https://drive.example.com/cat.png", false},
		{api, "", false},
		{"http://127.0.0.1:8080/api/", "http://127.0.0.1:8080/files-pri/T1-F1/cat.png", true},
		{"http://127.0.0.1:8080/api/", "http://127.0.0.1:8081/files-pri/T1-F1/cat.png", false},
		{"http://127.0.0.1:8080/api/", "https://127.0.0.1:8080/files-pri/T1-F1/cat.png", false},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := tokenMayGo(tc.api, u); got != tc.want {
			t.Errorf("tokenMayGo(%q, %q) = %v, want %v", tc.api, tc.url, got, tc.want)
		}
	}
}

// A Slack event seen again (Slack's retry, X-Slack-Retry-Num over HTTP,
// a resent envelope in Socket Mode, or the app_mention Slack sends with
// the message event of the same message) is taken for the duplicate it
// is before any files.info call, as Hermes checks its dedup first: a
// Slack Connect file is looked up once, as its message is first
// published, and never for the copies.
func TestRetryCallsNoFilesInfo(t *testing.T) {
	t.Parallel()
	const secret = "signing-secret"
	tests := []struct {
		name string
		cfg  func(*slackfake.Fake) Config
		// push sends payload to the gateway as Slack's delivery number
		// retry (0: the first).
		push func(t *testing.T, ctx context.Context, f *slackfake.Fake, s *Service, payload []byte, retry int)
	}{
		{name: "events api",
			cfg: func(*slackfake.Fake) Config { return Config{SigningSecret: secret, Addr: "127.0.0.1:0"} },
			push: func(t *testing.T, ctx context.Context, _ *slackfake.Fake, s *Service, payload []byte, retry int) {
				t.Helper()
				platformtest.WaitFor(t, "the events listener", func() bool { return s.p.EventsAddr() != "" })
				code, _, err := slackfake.PostEvent(ctx, "http://"+s.p.EventsAddr()+"/slack/events", secret, payload, retry, time.Now())
				if err != nil || code != http.StatusOK {
					t.Fatalf("delivery %d answered %d (%v), want 200", retry, code, err)
				}
			}},
		{name: "socket mode",
			cfg: func(f *slackfake.Fake) Config { return Config{AppToken: f.AppToken} },
			push: func(t *testing.T, ctx context.Context, f *slackfake.Fake, _ *Service, payload []byte, retry int) {
				t.Helper()
				if err := f.Push(ctx, payload, retry); err != nil {
					t.Fatalf("delivery %d: %v", retry, err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			s, _, next, _ := gateway(t, fake, tt.cfg(fake))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			f := fake.AddFile("notes.txt", "text/plain", []byte("shared from another workspace"))
			f.Connect = true
			msg := slackfake.Event{Subtype: "file_share", Channel: "C0SHARED", ChannelType: "channel", User: "U0USER01",
				Text: "<@" + fake.BotUserID + "> read this", TS: "1700000100.000100", Files: []slackfake.File{f}}
			first := fake.Callback("EvMSG", msg)
			tt.push(t, ctx, fake, s, first, 0)
			ev := next()
			if ev.GetEventId() != "C0SHARED:1700000100.000100" || len(ev.GetAttachments()) != 1 || ev.GetAttachments()[0].GetUrl() != f.DownloadURL {
				t.Fatalf("published %v, want the message with its file at %s", ev, f.DownloadURL)
			}
			if n := fake.FileInfos(); n != 1 {
				t.Fatalf("publishing made %d files.info calls, want 1", n)
			}

			// Slack's retries of the event, and the app_mention it sends
			// for the same message (another event id, the same message).
			mention := msg
			mention.Type, mention.Subtype = "app_mention", ""
			for retry := 1; retry <= 3; retry++ {
				tt.push(t, ctx, fake, s, first, retry)
			}
			tt.push(t, ctx, fake, s, fake.Callback("EvMENTION", mention), 0)
			if n := fake.FileInfos(); n != 1 {
				t.Errorf("the copies made %d more files.info calls, want none", n-1)
			}
			// Handled in order: the next event published is the sentinel,
			// so no copy was published again.
			sentinel := slackfake.Event{Channel: "C0SHARED", ChannelType: "channel", User: "U0USER01",
				Text: "<@" + fake.BotUserID + "> after", TS: "1700000101.000100"}
			tt.push(t, ctx, fake, s, fake.Callback("EvAFTER", sentinel), 0)
			if ev := next(); ev.GetEventId() != "C0SHARED:1700000101.000100" {
				t.Fatalf("after the copies the next event is %s, want the sentinel", ev.GetEventId())
			}
			if n := fake.FileInfos(); n != 1 {
				t.Errorf("%d files.info calls in all, want 1", n)
			}
		})
	}
}

// A file Slack answers 429 (its rate limit) or a 5xx for is asked again,
// after the Retry-After it names, else 1.5 s then 3 s, three attempts in
// all, as Hermes's _download_slack_file: before, the first such answer
// lost the file to the turn. A 404 is final, and a wait longer than the
// fetch's bound fails at once. A connection cut in the middle of the
// file is asked again alike, and the file read whole.
func TestDownloadRetries(t *testing.T) {
	t.Parallel()
	rateLimited := slackfake.FileFailure{Status: http.StatusTooManyRequests, RetryAfter: "1"}
	unavailable := slackfake.FileFailure{Status: http.StatusServiceUnavailable}
	for _, tc := range []struct {
		name  string
		fails []slackfake.FileFailure
		bound time.Duration // the fetch's ctx
		// requests is how many file requests the fetch makes; kept:
		// the file is downloaded.
		requests int
		kept     bool
	}{
		{name: "429 with Retry-After", fails: []slackfake.FileFailure{rateLimited}, bound: 30 * time.Second, requests: 2, kept: true},
		{name: "503", fails: []slackfake.FileFailure{unavailable}, bound: 30 * time.Second, requests: 2, kept: true},
		{name: "three failures", fails: []slackfake.FileFailure{rateLimited, {Status: http.StatusInternalServerError}, rateLimited}, bound: 30 * time.Second, requests: 3},
		{name: "404 is final", fails: []slackfake.FileFailure{{Status: http.StatusNotFound}}, bound: 30 * time.Second, requests: 1},
		{name: "a wait beyond the bound", fails: []slackfake.FileFailure{{Status: http.StatusTooManyRequests, RetryAfter: "120"}}, bound: 30 * time.Second, requests: 1},
		{name: "cut off in the middle", fails: []slackfake.FileFailure{{Cut: true}}, bound: 30 * time.Second, requests: 2, kept: true},
		{name: "503, then cut off", fails: []slackfake.FileFailure{unavailable, {Cut: true}}, bound: 30 * time.Second, requests: 3, kept: true},
		{name: "cut off three times", fails: []slackfake.FileFailure{{Cut: true}, {Cut: true}, {Cut: true}}, bound: 30 * time.Second, requests: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fake := slackfake.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
			defer cancel()
			p := socketPlatform(t, ctx, fake)
			data := platformtest.NoisePNG(t, 4, 4)
			f := fake.AddFile("cat.png", "image/png", data)
			fake.FailFiles(tc.fails...)
			rc, _, err := p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: f.DownloadURL}, PlatformFileId: f.ID, MimeType: "image/png"})
			var got []byte
			if err == nil {
				// A connection cut in the middle of the file breaks the
				// body's read, which asks again.
				got, err = io.ReadAll(rc)
				_ = rc.Close()
			}
			if n := fake.Downloads(); n != tc.requests {
				t.Errorf("%d file requests, want %d", n, tc.requests)
			}
			if !tc.kept {
				if err == nil {
					t.Fatal("downloaded, want a failure")
				}
				return
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes (%v), want the %d of the file", len(got), err, len(data))
			}
		})
	}
}

// socketPlatform is a Socket Mode gateway on fake, not connected.
func socketPlatform(t *testing.T, ctx context.Context, fake *slackfake.Fake) *Platform {
	t.Helper()
	p, err := NewPlatform(ctx, Config{BotToken: fake.BotToken, AppToken: fake.AppToken, APIBaseURL: fake.APIURL()}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
