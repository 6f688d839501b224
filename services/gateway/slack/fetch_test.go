package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/services/gateway/slack/slackfake"
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

// An image a user shares is downloaded with the bot token into the
// attachment store, and the published event points at it. One that cannot
// be kept (deleted, refused with Slack's sign-in page, too large) is
// published all the same, saying why; one too large by its declared size
// is not downloaded.
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n atomic.Int64
	// send shares f in a DM and returns it as published, and how many file
	// requests it made.
	send := func(t *testing.T, f slackfake.File) (*eventsv1.Attachment, int) {
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
		return got.GetAttachments()[0], fake.Downloads() - before
	}
	big := pngOf(t, 256, 256)
	if len(big) <= 64<<10 {
		t.Fatalf("the big image has %d bytes, want more than 64 KiB", len(big))
	}

	t.Run("image", func(t *testing.T) {
		data := pngOf(t, 32, 32)
		got, downloads := send(t, fake.AddFile("cat.png", "image/png", data))
		if got.GetBytesRef() == "" || got.GetUnavailable() != "" || got.GetSizeBytes() != int64(len(data)) || got.GetMimeType() != "image/png" || downloads != 1 {
			t.Fatalf("file %v after %d downloads, want a reference to %d bytes of image/png after 1", got, downloads, len(data))
		}
		kept, mime, err := store.Get(ctx, got.GetBytesRef(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(kept, data) || mime != "image/png" {
			t.Fatalf("store has %d bytes of %q, want the %d served bytes of image/png", len(kept), mime, len(data))
		}
	})
	t.Run("deleted", func(t *testing.T) {
		f := fake.AddFile("cat.png", "image/png", pngOf(t, 8, 8))
		f.URL = strings.Replace(f.URL, f.ID, "F99999999", 1) // 404
		got, downloads := send(t, f)
		if got.GetUrl() != f.URL || got.GetUnavailable() == "" || downloads != 1 {
			t.Fatalf("file %v after %d downloads, want its URL, marked unavailable, after 1", got, downloads)
		}
	})
	t.Run("sign-in page", func(t *testing.T) {
		fake.SetFilesRead(false)
		defer fake.SetFilesRead(true)
		f := fake.AddFile("cat.png", "image/png", pngOf(t, 8, 8))
		got, downloads := send(t, f)
		if got.GetUrl() != f.URL || got.GetUnavailable() == "" || downloads != 1 {
			t.Fatalf("file %v after %d downloads, want its URL, marked unavailable, after 1", got, downloads)
		}
	})
	t.Run("declared too large", func(t *testing.T) {
		got, downloads := send(t, fake.AddFile("big.png", "image/png", big))
		if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") || downloads != 0 {
			t.Fatalf("file %v after %d downloads, want it marked too large without a download", got, downloads)
		}
	})
	t.Run("larger than declared", func(t *testing.T) {
		f := fake.AddFile("big.png", "image/png", big)
		f.Size = 1000
		got, downloads := send(t, f)
		if got.GetBytesRef() != "" || !strings.Contains(got.GetUnavailable(), "too large") || downloads != 1 {
			t.Fatalf("file %v after %d downloads, want it marked too large after 1", got, downloads)
		}
	})
	t.Run("not an image", func(t *testing.T) {
		f := fake.AddFile("notes.pdf", "application/pdf", []byte("%PDF-1.7"))
		got, downloads := send(t, f)
		if got.GetUrl() != f.URL || got.GetUnavailable() != "" || downloads != 0 {
			t.Fatalf("file %v after %d downloads, want its URL, untouched", got, downloads)
		}
	})
}

// Fetch sends the bot token to Slack only, and takes Slack's sign-in page
// (its answer to a token it does not accept) for the failure it is.
// Its errors never carry the token.
func TestFetch(t *testing.T) {
	t.Parallel()
	fake := slackfake.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := NewPlatform(ctx, Config{BotToken: fake.BotToken, AppToken: fake.AppToken, APIBaseURL: fake.APIURL()}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(u string) ([]byte, string, error) {
		rc, mime, err := p.Fetch(ctx, &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: u}, PlatformFileId: "F1"})
		if err != nil {
			if strings.Contains(err.Error(), fake.BotToken) || strings.Contains(err.Error(), p.cfg.BotToken) {
				t.Errorf("fetch %s: the error shows the token: %v", u, err)
			}
			return nil, "", err
		}
		defer func() { _ = rc.Close() }()
		data, err := io.ReadAll(rc)
		return data, mime, err
	}

	data := pngOf(t, 4, 4)
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

	p.cfg.BotToken = "xoxb-wrong-token"
	if _, _, err := fetch(f.URL); !errors.Is(err, errSignIn) {
		t.Fatalf("fetch with a wrong token: %v, want errSignIn", err)
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
