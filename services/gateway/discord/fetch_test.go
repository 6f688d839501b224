package discord

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/discord/discordfake"
)

// pngOf encodes a w×h image of noise (which PNG cannot shrink).
func pngOf(t *testing.T, w, h int) []byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(uint64(w), uint64(h)))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: uint8(rnd.Uint32()), G: uint8(rnd.Uint32()), B: uint8(rnd.Uint32()), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// An image a user sends is downloaded from the CDN, without the bot token,
// into the attachment store, and the published event points at it. One
// that cannot be kept (gone from the CDN, too large) is published all the
// same, saying why; one too large by its declared size is not downloaded.
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// send posts a DM with a and returns the attachment as published, and
	// how many CDN requests it made.
	send := func(t *testing.T, a discordfake.Attachment) (*eventsv1.Attachment, int) {
		t.Helper()
		before, _ := f.Downloads()
		m := discordfake.MessageCreate{ID: f.NewID(), ChannelID: dmChan, AuthorID: user, Content: "look", Attachments: []discordfake.Attachment{a}}
		if err := f.Dispatch(ctx, "MESSAGE_CREATE", m.Payload()); err != nil {
			t.Fatal(err)
		}
		ev := next(20 * time.Second)
		if ev.GetEventId() != m.ID || len(ev.GetAttachments()) != 1 {
			t.Fatalf("got %v, want %s with its attachment", ev, m.ID)
		}
		after, _ := f.Downloads()
		return ev.GetAttachments()[0], after - before
	}
	big := pngOf(t, 256, 256)
	if len(big) <= 64<<10 {
		t.Fatalf("the big image has %d bytes, want more than 64 KiB", len(big))
	}

	t.Run("image", func(t *testing.T) {
		data := pngOf(t, 32, 32)
		got, downloads := send(t, f.AddAttachment(dmChan, "cat.png", "image/png", data))
		if got.GetBytesRef() == "" || got.GetUnavailable() != "" || got.GetSizeBytes() != int64(len(data)) || got.GetMimeType() != "image/png" {
			t.Fatalf("attachment %v, want a reference to %d bytes of image/png", got, len(data))
		}
		kept, mime, err := store.Get(ctx, got.GetBytesRef(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kept, data) || mime != "image/png" {
			t.Fatalf("store has %d bytes of %q, want the %d served bytes of image/png", len(kept), mime, len(data))
		}
		if _, withToken := f.Downloads(); downloads != 1 || withToken != 0 {
			t.Fatalf("%d CDN requests, %d with a token; want 1, with none", downloads, withToken)
		}
	})
	t.Run("gone from the CDN", func(t *testing.T) {
		a := f.AddAttachment(dmChan, "cat.png", "image/png", pngOf(t, 8, 8))
		a.URL = strings.Replace(a.URL, "hm=", "hm=0", 1) // a signature that no longer holds: 404
		got, downloads := send(t, a)
		if got.GetUrl() != a.URL || got.GetUnavailable() == "" || downloads != 1 {
			t.Fatalf("attachment %v after %d downloads, want its URL, marked unavailable, after 1", got, downloads)
		}
	})
	t.Run("declared too large", func(t *testing.T) {
		got, downloads := send(t, f.AddAttachment(dmChan, "big.png", "image/png", big))
		if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") || downloads != 0 {
			t.Fatalf("attachment %v after %d downloads, want it marked too large without a download", got, downloads)
		}
	})
	t.Run("larger than declared", func(t *testing.T) {
		a := f.AddAttachment(dmChan, "big.png", "image/png", big)
		a.Size = 1000
		got, downloads := send(t, a)
		if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") || downloads != 1 {
			t.Fatalf("attachment %v after %d downloads, want it marked too large after 1", got, downloads)
		}
	})
	t.Run("not an image", func(t *testing.T) {
		a := f.AddAttachment(dmChan, "notes.pdf", "application/pdf", []byte("%PDF-1.7"))
		got, downloads := send(t, a)
		if got.GetUrl() != a.URL || got.GetUnavailable() != "" || downloads != 0 {
			t.Fatalf("attachment %v after %d downloads, want its URL, untouched", got, downloads)
		}
	})
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

	data := pngOf(t, 4, 4)
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

	gone := strings.Replace(a.URL, "hm=", "hm=0", 1)
	_, _, err = p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: gone}, PlatformFileId: a.ID})
	if err == nil || !strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "hm=") {
		t.Fatalf("fetch of a bad signature: %v, want a 404 without the URL's signature", err)
	}
}
