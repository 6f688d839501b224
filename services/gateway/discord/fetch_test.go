package discord

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// An attachment a user sends is published as Discord sent it (its signed
// CDN URL), with nothing downloaded. When a turn reads it, the worker asks
// the gateway, which downloads it once from the CDN, without the bot
// token, into the attachment store and answers where it is; asked again
// (a second attempt of the turn), it downloads nothing more. One that
// cannot be kept (gone from the CDN, larger than declared) is answered
// with the reason. One too large by its declared size is marked so as it
// is published, and files the agent does not read are never downloaded.
func TestAttachmentsAreKept(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	cfg := attachment.Config{Enabled: true, MaxBytes: 64 << 10, StoreBytes: 8 << 20}
	b, next := runWith(t, f, Config{}, platform.Options{Attachments: cfg})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.JetStream().DeleteObjectStore(ctx, b.Topology().Stream(attachment.Bucket))
	})
	store := attachment.New(b.JetStream(), b.Topology(), cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	downloads := func() int {
		n, _ := f.Downloads()
		return n
	}
	// publish posts a DM with a and returns the event as published, and
	// how many CDN requests publishing it made.
	publish := func(t *testing.T, a discordfake.Attachment) (*eventsv1.MessageReceived, int) {
		t.Helper()
		before := downloads()
		m := discordfake.MessageCreate{ID: f.NewID(), ChannelID: dmChan, AuthorID: user, Content: "look", Attachments: []discordfake.Attachment{a}}
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if ev.GetEventId() != m.ID || len(ev.GetAttachments()) != 1 {
			t.Fatalf("got %v, want %s with its attachment", ev, m.ID)
		}
		return ev, downloads() - before
	}
	big := platformtest.NoisePNG(t, 256, 256)
	if len(big) <= 64<<10 {
		t.Fatalf("the big image has %d bytes, want more than 64 KiB", len(big))
	}
	img := platformtest.NoisePNG(t, 32, 32)
	notes := []byte("# Notes\n\n- ship it\n")

	tests := []struct {
		name       string
		attachment func() discordfake.Attachment
		// notRead: the agent does not read it (attachment.Wanted is
		// false), so no turn asks for it.
		notRead bool
		// published is what the published attachment's unavailable must
		// contain ("": empty).
		published string
		// want are the bytes kept (nil: none), of wantMIME.
		want     []byte
		wantMIME string
		// unavailable is what the fetch's answer must contain ("": kept).
		unavailable string
		// downloads is how many CDN requests the fetch makes.
		downloads int
		// cdnFails are the CDN's answers to the fetch's first requests.
		cdnFails []discordfake.CDNFailure
	}{
		{name: "image", attachment: func() discordfake.Attachment { return f.AddAttachment(dmChan, "cat.png", "image/png", img) },
			want: img, wantMIME: "image/png", downloads: 1},
		{name: "text document", want: notes, wantMIME: "text/markdown", downloads: 1,
			attachment: func() discordfake.Attachment { return f.AddAttachment(dmChan, "notes.md", "text/markdown", notes) }},
		// A turn that waited more than a day for its message: the URL's
		// signature expired, the CDN answers 404, and a refreshed URL
		// gets the file.
		{name: "expired signature", want: img, wantMIME: "image/png", downloads: 2,
			attachment: func() discordfake.Attachment { return f.Expire(f.AddAttachment(dmChan, "cat.png", "image/png", img)) }},
		// A rate limit or a server error is asked again (after its
		// Retry-After, else 1.5 s), as Hermes's media downloads: before,
		// the file was lost to the turn.
		{name: "rate limited", want: img, wantMIME: "image/png", downloads: 2,
			cdnFails:   []discordfake.CDNFailure{{Status: 429, RetryAfter: "1"}},
			attachment: func() discordfake.Attachment { return f.AddAttachment(dmChan, "cat.png", "image/png", img) }},
		{name: "cdn unavailable", want: img, wantMIME: "image/png", downloads: 2,
			cdnFails:   []discordfake.CDNFailure{{Status: 503, RetryAfter: "0"}},
			attachment: func() discordfake.Attachment { return f.AddAttachment(dmChan, "cat.png", "image/png", img) }},
		// Expired, then rate limited on the refreshed URL.
		{name: "expired then rate limited", want: img, wantMIME: "image/png", downloads: 3,
			cdnFails:   []discordfake.CDNFailure{{Status: 404}, {Status: 429, RetryAfter: "0"}},
			attachment: func() discordfake.Attachment { return f.Expire(f.AddAttachment(dmChan, "cat.png", "image/png", img)) }},
		{name: "gone from the CDN", unavailable: "could not be downloaded", downloads: 1, attachment: func() discordfake.Attachment {
			a := f.AddAttachment(dmChan, "cat.png", "image/png", platformtest.NoisePNG(t, 8, 8))
			a.URL = strings.Replace(a.URL, "/"+a.ID+"/", "/1/", 1) // a file the CDN does not hold (a deleted message's): 404, and no refresh
			return a
		}},
		// The worker does not ask for it; a gateway asked all the same
		// refuses it without a download.
		{name: "declared too large", published: "too large", unavailable: "too large",
			attachment: func() discordfake.Attachment { return f.AddAttachment(dmChan, "big.png", "image/png", big) }},
		{name: "larger than declared", unavailable: "too large", downloads: 1, attachment: func() discordfake.Attachment {
			a := f.AddAttachment(dmChan, "big.png", "image/png", big)
			a.Size = 1000
			return a
		}},
		{name: "pdf", notRead: true,
			attachment: func() discordfake.Attachment {
				return f.AddAttachment(dmChan, "notes.pdf", "application/pdf", []byte("%PDF-1.7"))
			}},
		{name: "video", notRead: true, attachment: func() discordfake.Attachment {
			return f.AddAttachment(dmChan, "clip.mp4", "video/mp4", []byte("\x00\x00\x00\x18ftypmp42"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := tt.attachment()
			ev, n := publish(t, sent)
			a := ev.GetAttachments()[0]
			if n != 0 {
				t.Errorf("publishing made %d CDN requests, want none", n)
			}
			if a.GetUrl() != sent.URL || a.GetBytesRef() != "" {
				t.Errorf("published attachment %v, want its CDN URL %s", a, sent.URL)
			}
			switch {
			case tt.published == "" && a.GetUnavailable() != "":
				t.Errorf("published unavailable %q, want none", a.GetUnavailable())
			case tt.published != "" && !strings.Contains(a.GetUnavailable(), tt.published):
				t.Errorf("published unavailable %q, want it to contain %q", a.GetUnavailable(), tt.published)
			}
			if tt.notRead {
				if attachment.Wanted(a) {
					t.Fatalf("attachment %v is read by the agent, want it left alone", a)
				}
				return
			}
			if tt.published == "" && !attachment.Wanted(a) {
				t.Fatalf("attachment %v is not read by the agent: no turn would ask for it", a)
			}

			before := downloads()
			f.FailCDN(tt.cdnFails...)
			got := platformtest.Fetch(t, ctx, b, "discord", ev, 0)
			if d := downloads() - before; d != tt.downloads {
				t.Errorf("the fetch made %d CDN requests, want %d", d, tt.downloads)
			}
			if _, withToken := f.Downloads(); withToken != 0 {
				t.Errorf("%d CDN requests carried a token, want none", withToken)
			}
			if tt.unavailable != "" {
				if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), tt.unavailable) {
					t.Fatalf("fetched %v, want it unavailable: %q", got, tt.unavailable)
				}
				return
			}
			name := attachment.Name("discord", ev.GetSource().GetAccount(), ev.GetEventId(), 0)
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
			before = downloads()
			again := platformtest.Fetch(t, ctx, b, "discord", ev, 0)
			if d := downloads() - before; d != 0 || !proto.Equal(again, got) {
				t.Fatalf("asked again: %v after %d CDN requests, want %v after none", again, d, got)
			}
		})
	}
}

// Fetch gets only http(s) URLs, and its errors do not carry the signed
// URL (the runner logs them).
func TestFetch(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := NewPlatform(ctx, Config{BotToken: f.Token, APIBaseURL: f.URL()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"", "file:///etc/passwd", "ftp://cdn.discordapp.com/attachments/1/2/cat.png",
		"//cdn.discordapp.com/attachments/1/2/cat.png", "gopher://cdn.discordapp.com/", "javascript:alert(1)", "https:///no-host.png"} {
		_, _, err := p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: u}})
		if !errors.Is(err, errNotHTTP) {
			t.Errorf("fetch %q: %v, want errNotHTTP", u, err)
		}
	}
	// Only Discord's CDN (over https) and the configured API host: a fetch
	// request cannot point the gateway at an internal address.
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "https://internal.example/cat.png",
		"https://cdn.discordapp.com.evil.example/a.png", "http://cdn.discordapp.com/attachments/1/2/cat.png"} {
		_, _, err := p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: u}})
		if !errors.Is(err, errNotCDN) {
			t.Errorf("fetch %q: %v, want errNotCDN", u, err)
		}
	}
	noBase := &Platform{cfg: Config{}}
	for u, want := range map[string]bool{"https://cdn.discordapp.com/attachments/1/2/a.png": true,
		"https://media.discordapp.net/attachments/1/2/a.png": true, "https://evildiscordapp.com/a.png": false} {
		parsed, _ := url.Parse(u)
		if got := noBase.cdnHost(parsed); got != want {
			t.Errorf("cdnHost(%q) = %v, want %v", u, got, want)
		}
	}

	data := platformtest.NoisePNG(t, 4, 4)
	a := f.AddAttachment(dmChan, "cat.png", "image/png", data)
	rc, mime, err := p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: a.URL}, PlatformFileId: a.ID})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, err = got.ReadFrom(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got.Bytes(), data) || mime != "image/png" {
		t.Fatalf("fetched %d bytes of %q (%v), want %d of image/png", got.Len(), mime, err, len(data))
	}

	// An expired signature is refreshed (with the bot token) and the file
	// downloaded with the new one.
	expired := f.Expire(a)
	rc, _, err = p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: expired.URL}, PlatformFileId: a.ID})
	if err != nil {
		t.Fatalf("fetch of an expired URL: %v", err)
	}
	got.Reset()
	_, err = got.ReadFrom(rc)
	_ = rc.Close()
	if err != nil || !bytes.Equal(got.Bytes(), data) || f.Refreshes() != 1 {
		t.Fatalf("fetched %d bytes (%v) after %d refreshes, want %d after 1", got.Len(), err, f.Refreshes(), len(data))
	}

	gone := strings.Replace(a.URL, "/"+a.ID+"/", "/1/", 1)
	_, _, err = p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: gone}, PlatformFileId: a.ID})
	if err == nil || !strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "hm=") {
		t.Fatalf("fetch of a file the CDN does not hold: %v, want a 404 without the URL's signature", err)
	}
}
