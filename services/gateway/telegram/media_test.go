package telegram

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/egress"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/telegramfake"
)

// A picture Telegram cannot fetch by URL is not lost, as in Hermes
// (send_image): the gateway downloads and uploads it, and when it
// cannot download it either, sends the caption with the link.
func TestUnfetchableURL(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/chart.png" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(png)
	}))
	t.Cleanup(srv.Close)
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	// The test's image server is on 127.0.0.1, which downloads reach
	// only when attachments.urls allows it.
	s, err := New(testConfig(f), Deps{Log: quietLog(), Bus: b, Instance: "a", Backoff: platform.Schedule(50 * time.Millisecond),
		Attachments: attachment.Config{URLs: egress.Config{AllowHosts: []string{"127.0.0.1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	send := func(chat, key, url string) *deliveryv1.SendReceipt {
		f.Unfetchable(url)
		return sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: key, Text: "the chart",
			Format: deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: chat},
			Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: url}}}})
	}

	// Downloaded and uploaded as a photo.
	if r := send("31", "u1", srv.URL+"/chart.png"); !r.GetOk() {
		t.Fatalf("receipt %v, want ok", r)
	}
	if ms := f.Messages("31"); len(ms) != 1 || ms[0].Kind != "photo" || !strings.HasPrefix(ms[0].File, "upload:") || ms[0].Shown != "the chart" {
		t.Fatalf("chat has %+v, want the uploaded photo with its caption", ms)
	}

	// Not downloadable either: the caption and the link.
	gone := srv.URL + "/gone.png"
	if r := send("32", "u2", gone); !r.GetOk() {
		t.Fatalf("receipt %v, want ok", r)
	}
	if ms := f.Messages("32"); len(ms) != 1 || ms[0].Kind != "text" || ms[0].Shown != "the chart\n"+gone {
		t.Fatalf("chat has %+v, want the caption and the link", ms)
	}
}

// A GIF goes with sendAnimation, so that it plays in the chat (sendPhoto
// makes a still picture of it), as Hermes's send_animation does: one
// whose URL's path ends in .gif (any case, query aside) or whose type is
// image/gif, given by URL or uploaded. Other pictures go as photos, and
// an animation Telegram refuses goes as a photo, as Hermes falls back.
func TestGIFsGoAsAnimations(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(testConfig(f), Deps{Log: quietLog(), Bus: b, Instance: "a", Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	gif := "data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw=="
	for i, tc := range []struct {
		name, url, mime string
		refuse          bool
		kind, file      string
	}{
		{name: "gif URL", url: "https://cdn.example.com/cat.GIF?size=large", kind: "animation", file: "https://cdn.example.com/cat.GIF?size=large"},
		{name: "typed gif", url: "https://media.example.com/render/123", mime: "image/gif", kind: "animation", file: "https://media.example.com/render/123"},
		{name: "uploaded gif", url: gif, kind: "animation", file: "upload:"},
		{name: "png", url: "https://cdn.example.com/chart.png", kind: "photo", file: "https://cdn.example.com/chart.png"},
		{name: "gif in the query only", url: "https://cdn.example.com/render?f=.gif", kind: "photo", file: "https://cdn.example.com/render?f=.gif"},
		{name: "refused as an animation", url: "https://cdn.example.com/still.gif", refuse: true, kind: "photo", file: "https://cdn.example.com/still.gif"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chat := fmt.Sprint(60 + i)
			if tc.refuse {
				f.FailNext("sendAnimation", telegramfake.APIError{Code: 400, Description: "Bad Request: wrong type of the animation"})
			}
			r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "gif" + chat, Text: "a cat",
				Target:      &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: chat},
				Attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: tc.mime, Location: &eventsv1.Attachment_Url{Url: tc.url}}}})
			if !r.GetOk() {
				t.Fatalf("receipt %v, want ok", r)
			}
			ms := f.Messages(chat)
			if len(ms) != 1 || ms[0].Kind != tc.kind || !strings.HasPrefix(ms[0].File, tc.file) || ms[0].Shown != "a cat" {
				t.Fatalf("chat has %+v, want a %s of %s captioned", ms, tc.kind, tc.file)
			}
		})
	}
}

// A voice reply (an ATTACHMENT_KIND_VOICE in Opus, MP3 or M4A) goes with
// sendVoice, so that Telegram shows it as a voice message, as Hermes's
// send_voice; an audio file in MP3 or M4A with sendAudio; other audio as
// a document; and a voice message the user's privacy settings refuse
// (VOICE_MESSAGES_FORBIDDEN) as a document, so the audio still arrives.
func TestVoiceAndAudio(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, err := New(testConfig(f), Deps{Log: quietLog(), Bus: b, Instance: "a", Backoff: platform.Schedule(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	ogg := fakellm.OggOpus(3)
	dataURL := func(mime string, b []byte) string {
		return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
	}
	voice, audio := eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	for i, tc := range []struct {
		name     string
		kind     eventsv1.AttachmentKind
		mime     string
		file     string
		data     []byte
		noVoice  bool
		want     string
		wantData bool
	}{
		{name: "opus voice reply", kind: voice, mime: "audio/ogg", file: "voice-reply.ogg", data: ogg, want: "voice", wantData: true},
		{name: "mp3 voice", kind: voice, mime: "audio/mpeg", file: "voice-reply.mp3", data: []byte{0xFF, 0xFB, 0x90, 0x64}, want: "voice"},
		{name: "mp3 audio file", kind: audio, mime: "audio/mpeg", file: "song.mp3", data: []byte{0xFF, 0xFB, 0x90, 0x64}, want: "audio"},
		{name: "wav voice", kind: voice, mime: "audio/wav", file: "voice-reply.wav", data: []byte("RIFF\x00\x00\x00\x00WAVE"), want: "document"},
		{name: "voice refused by the user", kind: voice, mime: "audio/ogg", file: "voice-reply.ogg", data: ogg, noVoice: true, want: "document", wantData: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chat := fmt.Sprint(80 + i)
			if tc.noVoice {
				f.ForbidVoice(chat)
			}
			r := sendReq(t, b, &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "voice" + chat,
				Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: chat},
				Attachments: []*eventsv1.Attachment{{Kind: tc.kind, MimeType: tc.mime, FileName: tc.file,
					Location: &eventsv1.Attachment_Url{Url: dataURL(tc.mime, tc.data)}}}})
			if !r.GetOk() {
				t.Fatalf("receipt %v, want ok", r)
			}
			ms := f.Messages(chat)
			if len(ms) != 1 || ms[0].Kind != tc.want || ms[0].File != "upload:"+tc.file {
				t.Fatalf("chat has %+v, want a %s of %s", ms, tc.want, tc.file)
			}
			if tc.wantData && !bytes.Equal(ms[0].Data, tc.data) {
				t.Errorf("uploaded %d bytes, want the %d of the Ogg/Opus file", len(ms[0].Data), len(tc.data))
			}
		})
	}
}

// An attachment whose own caption is over Telegram's 1,024 characters
// for captions (an agent's media reply) still arrives: the caption goes
// first as a message of its own, as the send's text does, and the file
// after it without one, rather than Telegram refusing the file with it.
// A send retried after all its parts went posts none of them again, and
// one retried after its picture was refused posts only the picture.
func TestLongAttachmentCaption(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	b := bustest.New(t, bustest.EmbeddedURL(t))
	s, _ := startService(t, testConfig(f), b, "a")
	waitFor(t, "connected", 20*time.Second, func() bool { st, _ := s.Runner().State(); return st == platform.StateConnected })
	png := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"))
	long := strings.TrimSpace(strings.Repeat("a long description. ", 60)) // 1,199 characters
	// Over Telegram's 4,096 for a text: two paragraphs, two messages.
	para := strings.TrimSpace(strings.Repeat("a longer description. ", 150)) // 3,299 characters
	longer := para + "\n\n" + strings.ToUpper(para)
	picture := func(caption string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png", Caption: caption,
			Location: &eventsv1.Attachment_Url{Url: png}}
	}
	type shown struct{ kind, text string }
	for i, tc := range []struct {
		name        string
		attachments []*eventsv1.Attachment
		want        []shown
	}{
		{"one picture", []*eventsv1.Attachment{picture(long)},
			[]shown{{"text", long}, {"photo", ""}}},
		{"the second of two", []*eventsv1.Attachment{picture("short"), picture(long)},
			[]shown{{"photo", "short"}, {"text", long}, {"photo", ""}}},
		{"over a text's limit", []*eventsv1.Attachment{picture("short"), picture(longer)},
			[]shown{{"photo", "short"}, {"text", para}, {"text", strings.ToUpper(para)}, {"photo", ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chat := fmt.Sprint(90 + i)
			req := &deliveryv1.SendRequested{Op: deliveryv1.SendOp_SEND_OP_SEND, IdempotencyKey: "caption" + chat,
				Target: &deliveryv1.Target{Platform: "telegram", Account: "4242", ChatId: chat}, Attachments: tc.attachments}
			for attempt := 1; attempt <= 2; attempt++ {
				if r := sendReq(t, b, req); !r.GetOk() {
					t.Fatalf("attempt %d: receipt %v, want ok", attempt, r)
				}
			}
			// Under another key, its picture refused for a moment: the
			// retry sends the picture, not the caption again.
			req.IdempotencyKey += ":again"
			f.FailNext("sendPhoto", telegramfake.FloodWait(1))
			if r := sendReq(t, b, req); r.GetOk() {
				t.Fatalf("first attempt: receipt %v, want the flood wait", r)
			}
			if r := sendReq(t, b, req); !r.GetOk() {
				t.Fatalf("retry: receipt %v, want ok", r)
			}
			ms := f.Messages(chat)
			var got []shown
			for _, m := range ms {
				got = append(got, shown{m.Kind, strings.TrimSpace(m.Shown)})
			}
			if want := append(tc.want, tc.want...); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("chat shows %q, want %q", got, want)
			}
		})
	}
}
