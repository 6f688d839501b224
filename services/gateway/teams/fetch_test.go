package teams

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
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
