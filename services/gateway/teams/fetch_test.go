package teams

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// A file's downloadUrl is pre-authorized: its tempauth grants the file to
// whoever holds it. A failed download's error (logged by the kit) names
// the host, never the URL.
func TestFetchErrorKeepsTheDownloadURLSecret(t *testing.T) {
	f := teamsfake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A server that drops the connection mid-request (the client's error
	// carries the URL it asked for).
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = c.Close()
		}
	}))
	t.Cleanup(drop.Close)
	const secret = "eyJ0eXAiOiJKV1QiLCJhbGciOiJub25lIn0-tempauth-secret"
	for _, u := range []string{
		drop.URL + "/personal/ann/_layouts/15/download.aspx?UniqueId=1&tempauth=" + secret,
		"http://127.0.0.1:1/personal/ann/_layouts/15/download.aspx?UniqueId=1&tempauth=" + secret,
	} {
		a := &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: u, FileName: "report.pdf"}
		rc, _, err := p.Fetch(context.Background(), a)
		if err == nil {
			_ = rc.Close()
			t.Fatalf("fetch of %s succeeded", u)
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "tempauth") {
			t.Fatalf("the error shows the pre-authorized URL: %v", err)
		}
	}
}

// An attachment's URL comes from the activity, which anyone in the
// conversation (another bot, a Graph API client) can shape: a download
// from a host that is neither the connector nor service_url's reaches
// only public addresses, never the gateway's own network (a cloud's
// metadata service, an internal API, the loopback).
func TestFetchReachesOnlyPublicAddresses(t *testing.T) {
	f := teamsfake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("instance credentials"))
	}))
	t.Cleanup(internal.Close)
	for _, u := range []string{
		internal.URL + "/latest/meta-data/iam/security-credentials/",
		strings.Replace(internal.URL, "127.0.0.1", "localhost", 1) + "/x.png",
	} {
		for _, kind := range []eventsv1.AttachmentKind{eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT} {
			rc, _, err := p.Fetch(context.Background(), &eventsv1.Attachment{Kind: kind, PlatformFileId: u})
			if err == nil {
				_ = rc.Close()
				t.Fatalf("%s was downloaded from an internal address", u)
			}
		}
	}
	// The connector (here the fake, at service_url's host) is still
	// reached, with the bot's token.
	rc, _, err := p.Fetch(context.Background(), &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: f.AddFile([]byte("png"))})
	if err != nil {
		t.Fatalf("connector picture: %v", err)
	}
	_ = rc.Close()
}

// A picture the connector answers 429 (its rate limit) or a 5xx for is
// asked again, after the Retry-After it names, else 1.5 s then 3 s,
// three attempts in all, as Hermes's cache_image_from_url: before, the
// first such answer lost the picture to the turn. A 404 is final, and a
// wait longer than the fetch's bound fails at once.
func TestFetchRetries(t *testing.T) {
	t.Parallel()
	platformtest.DownloadRetries(t, func(t *testing.T) platformtest.Downloads {
		f := teamsfake.New(t)
		b := bustest.New(t, bustest.EmbeddedURL(t))
		p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		data := []byte("png bytes")
		u := f.AddFile(data)
		return platformtest.Downloads{
			Fetch: func(ctx context.Context) (io.ReadCloser, error) {
				rc, _, err := p.Fetch(ctx, &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: u, MimeType: "image/png"})
				return rc, err
			},
			Fail: func(fails ...platformtest.DownloadFailure) {
				for _, fl := range fails {
					f.FailDownloads(teamsfake.Failure{Status: fl.Status, RetryAfter: fl.RetryAfter, Cut: fl.Cut})
				}
			},
			Count: f.Downloads,
			Data:  data,
			// A failed picture is the gateway's ErrDownload.
			Failed: func(t *testing.T, err error) {
				if !errors.Is(err, ErrDownload) {
					t.Errorf("error %v, want ErrDownload", err)
				}
			},
		}
	})
}

// The bot's token goes to Microsoft's connectors, where pictures users
// send are kept behind it: the public cloud's and the government clouds'
// (GCC, GCC High, DoD, as Microsoft's Agents SDK lists them), over
// https; never to another host, nor over http.
func TestConnectorHosts(t *testing.T) {
	f := teamsfake.New(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	p, err := NewPlatform(testConfig(f), b, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]bool{
		"https://smba.trafficmanager.net/amer/v3/attachments/0-eus-d4-1/views/original":           true,
		"https://smba.infra.gcc.teams.microsoft.com/gcc/v3/attachments/0-gcc-d1-1/views/original": true,
		"https://smba.infra.gov.teams.microsoft.us/gcch/v3/attachments/1/views/original":          true,
		"https://smba.infra.dod.teams.microsoft.us/dod/v3/attachments/1/views/original":           true,
		"https://SMBA.infra.gcc.teams.microsoft.com/x":                                            true,
		f.ServiceURL() + "v3/attachments/1/views/original":                                        true,
		"http://smba.infra.gcc.teams.microsoft.com/x":                                             false,
		"https://smba.infra.gcc.teams.microsoft.com.evil.example/x":                               false,
		"https://contoso.sharepoint.com/personal/ann/report.pdf":                                  false,
	} {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.connectorHost(pu); got != want {
			t.Errorf("%s: token sent %v, want %v", u, got, want)
		}
	}
}
