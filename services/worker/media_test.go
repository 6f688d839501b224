package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/platform"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/worker"
)

// The pictures a gateway kept reach the model with the user's message, in
// every model call of the turn; a picture that is unavailable, too large
// for the model and unreadable (TestOversizedPicturesAreScaledDown), or
// refused by a model without vision is only named, and the turn is
// answered all the same. Bytes the worker cannot read, within the model's
// limit, are sent as they are: the provider decides.
func TestPicturesReachTheModel(t *testing.T) {
	t.Parallel()
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 300)...)
	seen := "[image " + fakellm.Image{MediaType: "image/png", Data: png}.String() + "]"
	image := func(ref string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, MimeType: "image/png",
			Location: &eventsv1.Attachment_BytesRef{BytesRef: ref}, FileName: "cat.png"}
	}
	cases := []struct {
		name     string
		textOnly bool
		context  []*eventsv1.ContextMessage
		mod      func(*worker.Config, *worker.Deps)
		text     string
		attach   *eventsv1.Attachment
		want     string // the final answer
		calls    int    // model requests that carried the picture
	}{
		{name: "native", text: "what is this?", attach: image("pic"),
			want: "echo: what is this?\n[Attachment: image cat.png] " + seen, calls: 1},
		{name: "in every call of a tool turn", text: `look [[tool:clock {"tz":"UTC"}]]`, attach: image("pic"),
			want: "echo: look [Attachment: image cat.png] " + seen, calls: 2},
		{name: "after a stateless client's conversation", text: "and this?", attach: image("pic"),
			context: []*eventsv1.ContextMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}},
			want:    "echo: and this?\n[Attachment: image cat.png] " + seen, calls: 1},
		{name: "a model without vision", textOnly: true, text: "what is this?", attach: image("pic"),
			want: "echo: what is this?\n[Attachment: image cat.png]", calls: 1}, // the refused one
		{name: "images off", mod: func(c *worker.Config, _ *worker.Deps) { c.Agent.Images = worker.ImagesOff },
			text: "what is this?", attach: image("pic"), want: "echo: what is this?\n[Attachment: image cat.png]"},
		{name: "over the model's limit, unreadable", mod: func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxImageBytes = 100 },
			text: "what is this?", attach: image("pic"), want: "echo: what is this?\n[Attachment: image cat.png (unavailable: it could not be read as a picture)]"},
		{name: "expired", text: "what is this?", attach: image("gone"), want: "echo: what is this?\n[Attachment: image cat.png]"},
		{name: "a sticker", attach: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, MimeType: "image/png",
			Location: &eventsv1.Attachment_BytesRef{BytesRef: "pic"}, StickerEmoji: "😀", StickerSet: "HappyPack"},
			want: `echo: [The user sent a sticker 😀 from "HappyPack"] ` + seen, calls: 1},
		{name: "a Discord sticker", attach: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER, MimeType: "image/png",
			Location: &eventsv1.Attachment_BytesRef{BytesRef: "pic"}, FileName: "Wave"},
			want: `echo: [The user sent a sticker "Wave"] ` + seen, calls: 1},
		{name: "an animated sticker", attach: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER,
			MimeType: "application/x-tgsticker", PlatformFileId: "f2", StickerEmoji: "🎉"},
			want: "echo: [The user sent an animated sticker 🎉]"},
		{name: "not kept by the gateway", text: "what is this?",
			attach: &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "f1",
				Unavailable: "it is too large (30.0 MB, the limit is 20.0 MB)"},
			want: "echo: what is this?\n[Attachment: image (unavailable: it is too large (30.0 MB, the limit is 20.0 MB))]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if tc.textOnly {
				h.fake = fakellm.New(fakellm.Config{TextOnly: true})
			}
			store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
			if _, err := store.Keep(context.Background(), "pic", "image/png", bytes.NewReader(png)); err != nil {
				t.Fatal(err)
			}
			h.setGeneration("s1", 1)
			h.startWorker("w1", tc.mod)
			req := h.requestTurn("s1", tc.text, turnOpts{attachments: []*eventsv1.Attachment{tc.attach}, context: tc.context})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			got := checkReplies(t, h.replies(req.TurnId)).GetFinalText().GetText()
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("answer %q, want it to start with %q", got, tc.want)
			}
			calls := 0
			for _, r := range h.fake.Requests() {
				for i, m := range r.Messages {
					if len(m.Images) > 0 {
						calls++
						if m.Role != "user" || !strings.HasPrefix(m.Content, tc.text) || i != lastUser(r) {
							t.Errorf("the picture went with message %d %q, not the user's last", i, m.Content)
						}
						if !bytes.Equal(m.Images[0].Data, png) {
							t.Errorf("the model saw other bytes: %d", len(m.Images[0].Data))
						}
					}
				}
			}
			if calls != tc.calls {
				t.Errorf("%d model requests carried the picture, want %d", calls, tc.calls)
			}
		})
	}
}

// sttFunc is a Transcriber over the harness's fake model server.
type sttFunc func(ctx context.Context, audio io.Reader, filename, mime string) (string, error)

func (f sttFunc) Transcribe(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
	return f(ctx, audio, filename, mime)
}

// Voice messages are transcribed and text documents read into the user's
// message as the turn begins; what the model read is stored in the
// transcript, so later turns see it too. What cannot be read is named,
// with why. A recording is streamed to the speech-to-text server whole,
// its stored size sent as its length, one over attachments.max_bytes not
// at all.
func TestVoiceAndDocumentsAreReadIntoTheMessage(t *testing.T) {
	t.Parallel()
	kept := func(kind eventsv1.AttachmentKind, ref, mime, name string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: kind, MimeType: mime, FileName: name, Location: &eventsv1.Attachment_BytesRef{BytesRef: ref}}
	}
	voice := eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
	doc := eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	files := map[string]string{
		"speech": "turn the lights off",
		"notes":  "\xef\xbb\xbf# Plan\n- buy milk ✓",
		"long":   strings.Repeat("é", 20), // 40 bytes
		"binary": "PK\x03\x04\x00\x00",
		// Several of the store's chunks (128 KiB), not UTF-8: the
		// fake server hears it as "(unintelligible audio, N bytes)".
		"recording": strings.Repeat("\xff\x00\x7f\x80", 75<<10),
	}
	cases := []struct {
		name   string
		noSTT  bool
		mod    func(*worker.Config, *worker.Deps)
		text   string
		attach *eventsv1.Attachment
		want   string // the user message as stored and as the model read it
		// uploads are the audio files the speech-to-text server must
		// have received (nil: not checked), each with a Content-Length
		// (their stored size is known: servers that take no chunked
		// body refuse one without).
		uploads []string
	}{
		{name: "voice message", attach: kept(voice, "speech", "audio/ogg", ""),
			want: `[The user sent a voice message~ Here's what they said: "turn the lights off"]`},
		{name: "audio file with a caption", text: "what is this song?", attach: kept(eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, "speech", "audio/mpeg", "song.mp3"),
			want: "what is this song?\n[The user sent an audio file \"song.mp3\"~ Here's what it says: \"turn the lights off\"]"},
		{name: "long recording", attach: kept(voice, "recording", "audio/ogg", ""),
			want:    `[The user sent a voice message~ Here's what they said: "(unintelligible audio, 307200 bytes)"]`,
			uploads: []string{files["recording"]}},
		{name: "recording over attachments.max_bytes", mod: func(c *worker.Config, _ *worker.Deps) { c.MaxAttachmentBytes = 256 << 10 },
			attach:  kept(voice, "recording", "audio/ogg", ""),
			want:    "[Attachment: voice (unavailable: it is too large to be transcribed (over 256.0 KB))]",
			uploads: []string{}},
		{name: "no speech-to-text", noSTT: true, attach: kept(voice, "speech", "audio/ogg", ""),
			want: "[Attachment: voice (unavailable: no speech-to-text is configured)]"},
		{name: "refused by the server", attach: kept(voice, "speech", "audio/ogg", "fail.ogg"),
			want: "[Attachment: voice fail.ogg (unavailable: it could not be transcribed)]"},
		{name: "text document", text: "summarise", attach: kept(doc, "notes", "text/markdown", "notes.md"),
			want: "summarise\n[The user sent a document: \"notes.md\". Its content is included below.]\n# Plan\n- buy milk ✓\n[End of \"notes.md\"]"},
		{name: "long document", mod: func(c *worker.Config, _ *worker.Deps) { c.Agent.MaxDocumentBytes = 11 },
			attach: kept(doc, "long", "text/plain", "e.txt"),
			want:   "[The user sent a document: \"e.txt\". The first 11 bytes of its 40 bytes are included below; the rest was cut.]\nééééé\n[End of \"e.txt\"]"},
		{name: "binary named as text", attach: kept(doc, "binary", "application/octet-stream", "data.txt"),
			want: "[Attachment: document data.txt]"},
		{name: "expired", attach: kept(doc, "gone", "text/plain", "a.txt"), want: "[Attachment: document a.txt]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
			for name, data := range files {
				if _, err := store.Keep(context.Background(), name, "", strings.NewReader(data)); err != nil {
					t.Fatal(err)
				}
			}
			stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
			h.setGeneration("s1", 1)
			h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
				if !tc.noSTT {
					d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
						return stt.Transcribe(ctx, "", audio, filename, mime)
					})
				}
				if tc.mod != nil {
					tc.mod(c, d)
				}
			})
			req := h.requestTurn("s1", tc.text, turnOpts{attachments: []*eventsv1.Attachment{tc.attach}})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			if got := h.fake.Requests()[0].LastUserText(); got != tc.want {
				t.Fatalf("the model read\n%q\nwant\n%q", got, tc.want)
			}
			var stored string
			if err := h.db.QueryRow(context.Background(), `SELECT content FROM transcript_messages WHERE turn_id = $1 AND role = 'user'`, req.TurnId).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if stored != tc.want {
				t.Fatalf("stored %q", stored)
			}
			if tc.uploads != nil {
				got := h.fake.Transcriptions()
				if len(got) != len(tc.uploads) {
					t.Fatalf("the speech-to-text server received %d files, want %d", len(got), len(tc.uploads))
				}
				for i, want := range tc.uploads {
					if string(got[i].Audio) != want || got[i].Streamed {
						t.Errorf("upload %d: %d bytes (streamed %v), want the %d kept, with a Content-Length", i, len(got[i].Audio), got[i].Streamed, len(want))
					}
				}
			}
		})
	}
}

// TestAStuckStoreReadEndsWithTheTranscription: a voice message whose
// audio the attachment store does not deliver (its chunks are gone while
// the file is still listed, so the read waits for them) is named to the
// model as not transcribed once the transcription's bound
// (TranscribeTimeout, stt.timeout) is over; the read waited on the
// turn, which it held until a /stop.
func TestAStuckStoreReadEndsWithTheTranscription(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
	if _, err := store.Keep(ctx, "stuck", "audio/ogg", strings.NewReader(strings.Repeat("\xff\x00", 1000))); err != nil {
		t.Fatal(err)
	}
	bucket := h.bus.Topology().Stream(attachment.Bucket)
	obs, err := h.bus.JetStream().ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := h.bus.JetStream().Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$O."+bucket+".C."+info.NUID)); err != nil {
		t.Fatal(err)
	}
	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.TranscribeTimeout = time.Second
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
			return stt.Transcribe(ctx, "", audio, filename, mime)
		})
	})
	req := h.requestTurn("s1", "", turnOpts{attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE,
		MimeType: "audio/ogg", Location: &eventsv1.Attachment_BytesRef{BytesRef: "stuck"}}}})
	var c *turnsv1.TurnCompleted
	waitFor(t, 20*time.Second, "the turn to complete", func() bool {
		c = h.completed(req.TurnId)
		return c != nil
	})
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if got, want := h.fake.Requests()[0].LastUserText(), "[Attachment: voice (unavailable: it could not be transcribed)]"; got != want {
		t.Fatalf("the model read %q, want %q", got, want)
	}
}

// TestASilentSpeechToTextServerEndsWithTheTranscription: a
// speech-to-text server that takes the upload and never answers holds the
// turn no longer than the transcription's bound (TranscribeTimeout,
// stt.timeout: Hermes's 30 s by default, not llm.call_timeout's 10
// minutes); the voice message is then only named to the model, as for a
// failed transcription, and the turn is answered.
func TestASilentSpeechToTextServerEndsWithTheTranscription(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
	if _, err := store.Keep(ctx, "speech", "audio/ogg", strings.NewReader("turn the lights off")); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 1)
	hangUp := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		select { // no answer while the test runs
		case <-r.Context().Done():
		case <-hangUp:
		}
	}))
	t.Cleanup(silent.Close)
	t.Cleanup(func() { close(hangUp) }) // before the server closes
	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: silent.URL + "/v1"})
	const bound = 300 * time.Millisecond
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.TranscribeTimeout = bound
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
			return stt.Transcribe(ctx, "", audio, filename, mime)
		})
	})
	start := time.Now()
	req := h.requestTurn("s1", "", turnOpts{attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE,
		MimeType: "audio/ogg", Location: &eventsv1.Attachment_BytesRef{BytesRef: "speech"}}}})
	var c *turnsv1.TurnCompleted
	waitFor(t, 10*time.Second, "the turn to complete", func() bool {
		c = h.completed(req.TurnId)
		return c != nil
	})
	took := time.Since(start)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	select {
	case <-asked:
	default:
		t.Fatal("the speech-to-text server was never asked")
	}
	if got, want := h.fake.Requests()[0].LastUserText(), "[Attachment: voice (unavailable: it could not be transcribed)]"; got != want {
		t.Fatalf("the model read %q, want %q", got, want)
	}
	if took < bound {
		t.Fatalf("the turn completed in %v, before the transcription's bound of %v", took, bound)
	}
}

// fetchingPlatform is a memory platform whose attachments are files it
// holds, by platform file id.
type fetchingPlatform struct {
	*platformtest.Memory
	files   map[string]string
	fetches atomic.Int32
	// flaky are ids whose first download fails, as a platform's
	// download does that fails for a moment.
	flaky   map[string]bool
	mu      sync.Mutex
	entered chan struct{} // set: every download hangs, after saying so here
	// hangUp, when closed, ends a hanging download: the test is over. (A
	// gateway's stop waits for its downloads up to its SendTimeout, 30 s.)
	hangUp chan struct{}
	// slow, when set, is how long every download takes, heedless of its
	// context, as a platform's that does not honour it.
	slow time.Duration
	// ended counts the hanging downloads their context ended and the
	// slow ones that are over.
	ended atomic.Int32
	// lastByteAtBound: every download's end comes only as its context
	// ends, as a download's last bytes that arrive just then.
	lastByteAtBound bool
}

// endsAtBound reads r, whose end it tells only once ctx ended.
type endsAtBound struct {
	ctx   context.Context
	r     io.Reader
	ended *atomic.Int32
}

func (e *endsAtBound) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if errors.Is(err, io.EOF) {
		<-e.ctx.Done()
		e.ended.Add(1)
	}
	return n, err
}

// startGateway runs p's gateway with attachments on, for the test.
func startGateway(t *testing.T, h *harness, p platform.Platform) *platform.Runner {
	t.Helper()
	return startGatewayOn(t, h.bus, p)
}

// startGatewayOn is startGateway on the connection of b.
func startGatewayOn(t *testing.T, b *bus.Bus, p platform.Platform) *platform.Runner {
	t.Helper()
	runner, err := platform.NewRunner(p, b, platform.Options{Attachments: attachment.Config{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 10*time.Second, "the gateway to serve", func() bool { return runner.Ready(ctx) == nil })
	return runner
}

func (p *fetchingPlatform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	p.fetches.Add(1)
	if p.entered != nil {
		p.entered <- struct{}{}
		select { // a download that never ends while the test runs
		case <-ctx.Done():
			p.ended.Add(1)
			return nil, "", ctx.Err()
		case <-p.hangUp:
			return nil, "", errors.New("the test ended")
		}
	}
	if p.slow > 0 {
		select {
		case <-time.After(p.slow):
		case <-p.hangUp:
		}
		p.ended.Add(1)
	}
	p.mu.Lock()
	flaky := p.flaky[a.GetPlatformFileId()]
	delete(p.flaky, a.GetPlatformFileId())
	p.mu.Unlock()
	if flaky {
		return nil, "", errors.New("service unavailable (HTTP 503)")
	}
	data, ok := p.files[a.GetPlatformFileId()]
	if !ok {
		return nil, "", errors.New("file not found (HTTP 404)")
	}
	if p.lastByteAtBound {
		return io.NopCloser(&endsAtBound{ctx: ctx, r: strings.NewReader(data), ended: &p.ended}), "", nil
	}
	return io.NopCloser(strings.NewReader(data)), "", nil
}

// A chat platform's attachments are downloaded by its gateway when the
// turn runs, at the worker's request (nothing is downloaded for messages
// never answered), and the model sees, hears and reads them; one that
// cannot be downloaded is named with why. A second attempt finds them
// kept.
func TestAttachmentsAreFetchedWhenTheTurnRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pic := "\x89PNG\r\n\x1a\n pixels"
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{
		"p1": pic, "v1": "see you at noon", "d1": "a,b\n1,2",
	}}
	runner := startGateway(t, h, p)
	ctx := context.Background()

	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(_ *worker.Config, d *worker.Deps) {
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
			return stt.Transcribe(ctx, "", audio, filename, mime)
		})
	})
	file := func(kind eventsv1.AttachmentKind, id, mime, name string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: kind, PlatformFileId: id, MimeType: mime, FileName: name}
	}
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "look", turnOpts{origin: origin, attachments: []*eventsv1.Attachment{
		file(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "p1", "image/png", ""),
		file(eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, "v1", "audio/ogg", ""),
		file(eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "d1", "text/csv", "t.csv"),
		file(eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, "gone", "text/plain", "lost.txt"),
		file(eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO, "vid", "video/mp4", "clip.mp4"), // not read: never fetched
	}})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	want := "look\n[Attachment: image]\n" +
		`[The user sent a voice message~ Here's what they said: "see you at noon"]` + "\n" +
		"[The user sent a document: \"t.csv\". Its content is included below.]\na,b\n1,2\n[End of \"t.csv\"]\n" +
		"[Attachment: document lost.txt (unavailable: it could not be downloaded)]\n" +
		"[Attachment: video clip.mp4]"
	model := h.fake.Requests()[0]
	if got := model.LastUserText(); got != want {
		t.Fatalf("the model read\n%q\nwant\n%q", got, want)
	}
	if imgs := model.Messages[len(model.Messages)-1].Images; len(imgs) != 1 || string(imgs[0].Data) != pic {
		t.Fatalf("the model saw %+v", imgs)
	}
	if n := p.fetches.Load(); n != 4 {
		t.Fatalf("%d downloads, want 4 (no video)", n)
	}
	// Another attempt's request finds what was kept, without downloading.
	got := runner.FetchAttachment(ctx, &eventsv1.AttachmentFetchRequested{Attachment: file(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, "p1", "image/png", ""),
		Name: attachment.Name("memory", "bot1", req.GetInputs()[0].GetEventId(), 0), Account: "bot1"})
	if got.GetBytesRef() == "" || p.fetches.Load() != 4 {
		t.Fatalf("second fetch %v after %d downloads", got, p.fetches.Load())
	}
}

// lastUser is the index of a model request's last user message.
func lastUser(r fakellm.Request) int {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return i
		}
	}
	return -1
}

// A gateway that cannot be asked (none running, all busy, stopping) makes
// the turn try again later with nothing written; its last attempt goes on
// without the attachment and says so.
func TestUnreachableGatewayTriesTheTurnAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.MaxDeliver = 2 })
	origin := &eventsv1.SessionSource{Platform: "nogateway", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "read this", turnOpts{origin: origin, lockTTL: shortLockTTL, attachments: []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "d1", MimeType: "text/plain", FileName: "a.txt"}}})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if got, want := h.fake.Requests()[0].LastUserText(), "read this\n[Attachment: document a.txt (unavailable: it could not be downloaded)]"; got != want {
		t.Fatalf("the model read %q, want %q", got, want)
	}
	started := streamMsgs[turnsv1.TurnStarted](t, h.bus, bus.StreamTurnEvents, h.bus.Topology().Subject(bus.SubjectTurnStarted))
	attempts := 0
	for _, s := range started {
		if s.GetTurnId() == req.TurnId {
			attempts++
		}
	}
	if attempts != 2 || len(h.fake.Requests()) != 1 {
		t.Fatalf("%d attempts and %d model calls, want the first attempt to give up before the model and the second to answer", attempts, len(h.fake.Requests()))
	}
}

// A live gateway replica whose download does not end within the
// attempt's bound (FetchWait) leaves the turn to go on at once without
// the file, as its last attempt does, not to be tried again: each
// attempt would wait as long, MaxDeliver times. The gateway's download
// ends with the worker's bound, and one that does not heed it stores
// nothing late: a resumed attempt (lookUpAttachments) finds the file
// unavailable, as the stored message says it is.
func TestASlowDownloadGoesOnWithoutTheFile(t *testing.T) {
	t.Parallel()
	const wait = 3 * time.Second
	for _, tc := range []struct {
		name string
		p    *fetchingPlatform
	}{
		{"hangs", &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), entered: make(chan struct{}, 8), hangUp: make(chan struct{})}},
		{"heedless of its bound", &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"d1": "late"}, slow: wait + 2*time.Second}},
		{"ends as its bound does", &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"d1": "late"}, lastByteAtBound: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			p := tc.p
			startGateway(t, h, p)
			if p.hangUp != nil {
				t.Cleanup(func() { close(p.hangUp) }) // before the gateway stops
			}
			h.setGeneration("s1", 1)
			h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.FetchWait, c.MaxDeliver = wait, 5 })
			origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
			began := time.Now()
			req := h.requestTurn("s1", "read this", turnOpts{origin: origin, attachments: []*eventsv1.Attachment{
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "d1", MimeType: "text/plain", FileName: "a.txt"}}})
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
				t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
			}
			took := time.Since(began)
			attempts := 0
			for _, s := range streamMsgs[turnsv1.TurnStarted](t, h.bus, bus.StreamTurnEvents, h.bus.Topology().Subject(bus.SubjectTurnStarted)) {
				if s.GetTurnId() == req.TurnId {
					attempts++
				}
			}
			if attempts != 1 || took > 2*wait {
				t.Fatalf("%d attempts, answered after %v: want one attempt, answered after about %v", attempts, took, wait)
			}
			if got, want := h.fake.Requests()[0].LastUserText(), "read this\n[Attachment: document a.txt (unavailable: it could not be downloaded)]"; got != want {
				t.Fatalf("the model read %q, want %q", got, want)
			}
			waitFor(t, 10*time.Second, "the gateway's download to end", func() bool { return p.ended.Load() == 1 })
			time.Sleep(time.Second) // a late download's storing, if it stored
			store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
			name := attachment.Name("memory", "bot1", req.GetInputs()[0].GetEventId(), 0)
			if _, _, err := store.Info(context.Background(), name); !errors.Is(err, attachment.ErrNotFound) {
				t.Fatalf("the store holds %s after the worker gave it up (%v): a resumed attempt would read it", name, err)
			}
		})
	}
}

// A merged turn's messages share one bound for their downloads
// (FetchWait), the attempt's: a gateway whose downloads do not end costs
// the turn that bound once, not once per message.
func TestAMergedTurnWaitsForItsDownloadsOnce(t *testing.T) {
	t.Parallel()
	const wait = 4 * time.Second
	h := newHarness(t)
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"d1": "late", "d2": "late"},
		slow: 3 * wait, hangUp: make(chan struct{})}
	startGateway(t, h, p)
	t.Cleanup(func() { close(p.hangUp) }) // before the gateway stops
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.FetchWait, c.MaxDeliver = wait, 5 })
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	doc := func(id, name string) []*eventsv1.Attachment {
		return []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: id, MimeType: "text/plain", FileName: name}}
	}
	began := time.Now()
	req := h.requestTurn("s1", "read these", turnOpts{origin: origin, attachments: doc("d1", "a.txt"), merged: [][]*eventsv1.Attachment{doc("d2", "b.txt")}})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if took := time.Since(began); took > 2*wait-time.Second {
		t.Fatalf("answered after %v: want about %v, the turn's bound once", took, wait)
	}
	if got, want := h.fake.Requests()[0].LastUserText(), "[Attachment: document b.txt (unavailable: it could not be downloaded)]"; got != want {
		t.Fatalf("the model read %q, want %q", got, want)
	}
}

// The bound a merged turn's messages share is for their downloads, not
// for the reading between them: a message's voice note whose
// transcription takes the whole bound leaves the next message's file to
// be downloaded, not named as not downloaded without its gateway asked.
func TestAMergedTurnsTranscriptionIsNoDownloadTime(t *testing.T) {
	t.Parallel()
	const wait = 3 * time.Second
	h := newHarness(t)
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"v1": "see you at noon", "d2": "notes"}}
	startGateway(t, h, p)
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		c.FetchWait, c.MaxDeliver = wait, 5
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, _, _ string) (string, error) {
			_, _ = io.Copy(io.Discard, audio)
			select { // a slow speech-to-text server, within its own bound
			case <-time.After(wait + time.Second):
				return "see you at noon", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
	})
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "", turnOpts{origin: origin,
		attachments: []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, PlatformFileId: "v1", MimeType: "audio/ogg"}},
		merged:      [][]*eventsv1.Attachment{{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: "d2", MimeType: "text/plain", FileName: "b.txt"}}}})
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if got, want := h.fake.Requests()[0].LastUserText(), "[The user sent a document: \"b.txt\". Its content is included below.]\nnotes\n[End of \"b.txt\"]"; got != want {
		t.Fatalf("the model read %q, want %q", got, want)
	}
	if got := p.fetches.Load(); got != 2 {
		t.Errorf("%d downloads, want both files downloaded", got)
	}
}

// A gateway replica killed while it downloads an attachment (its
// connection closed, its download never answered) is found gone within
// a few seconds (bus.GoneGrace), and another replica downloads it: the
// turn does not wait out fetchWait (70 s) and then a redelivery, as it
// did.
func TestGoneGatewayReplicaIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	busA := bustest.NewWith(t, h.url, h.bus.Topology())
	pic := "\x89PNG\r\n\x1a\n pixels"
	a := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), entered: make(chan struct{}, 1), hangUp: make(chan struct{})}
	startGatewayOn(t, busA, a)
	t.Cleanup(func() { close(a.hangUp) }) // before the gateway stops
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "look", turnOpts{origin: origin, attachments: []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "p1", MimeType: "image/png"}}})
	<-a.entered
	// Replica B comes up; replica A's process dies mid-download.
	b := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"p1": pic}}
	startGateway(t, h, b)
	killed := time.Now()
	busA.Conn().Close()
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	if took := time.Since(killed); took > 15*time.Second {
		t.Fatalf("the turn completed %v after replica A died, want a few seconds", took)
	}
	model := h.fake.Requests()
	if len(model) != 1 || len(model[0].Messages[len(model[0].Messages)-1].Images) != 1 || b.fetches.Load() != 1 {
		t.Fatalf("%d model calls, %d downloads by replica B: want the picture downloaded by B and seen once", len(model), b.fetches.Load())
	}
}

// A gateway replica that dies in the last seconds of the turn's wait
// for its download (FetchWait), its liveness subject silent for less
// than bus.GoneGrace when the wait ends, counts as gone, not as a live
// replica that did not finish in time: the turn is tried again, and
// another replica downloads the file, rather than the turn going on
// without it. Nor is the request sent again within the ended wait.
func TestGatewayReplicaDyingAsTheWaitEndsTriesTheTurnAgain(t *testing.T) {
	t.Parallel()
	const wait = 4 * time.Second
	h := newHarness(t)
	busA := bustest.NewWith(t, h.url, h.bus.Topology())
	pic := "\x89PNG\r\n\x1a\n pixels"
	a := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), entered: make(chan struct{}, 1), hangUp: make(chan struct{})}
	startGatewayOn(t, busA, a)
	t.Cleanup(func() { close(a.hangUp) }) // before the gateway stops
	var asked atomic.Int32
	counter, err := h.bus.Conn().Subscribe(h.bus.Topology().FetchSubject("memory"), func(*nats.Msg) { asked.Add(1) })
	if err == nil {
		err = h.bus.Conn().Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = counter.Unsubscribe() }()
	h.setGeneration("s1", 1)
	h.startWorker("w1", func(c *worker.Config, _ *worker.Deps) { c.FetchWait, c.MaxDeliver = wait, 5 })
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "look", turnOpts{origin: origin, lockTTL: shortLockTTL, attachments: []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "p1", MimeType: "image/png"}}})
	<-a.entered
	downloading := time.Now()
	// Replica B comes up; replica A's process dies with the wait's
	// last seconds left: asked at once (each second), it is silent for
	// about two when the wait ends.
	b := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"p1": pic}}
	startGateway(t, h, b)
	time.Sleep(time.Until(downloading.Add(wait/2 - wait/8)))
	busA.Conn().Close()
	if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
		t.Fatalf("status %v (%s)", c.GetStatus(), c.GetError())
	}
	attempts := 0
	for _, s := range streamMsgs[turnsv1.TurnStarted](t, h.bus, bus.StreamTurnEvents, h.bus.Topology().Subject(bus.SubjectTurnStarted)) {
		if s.GetTurnId() == req.TurnId {
			attempts++
		}
	}
	model := h.fake.Requests()
	if attempts != 2 || len(model) != 1 || len(model[0].Messages[len(model[0].Messages)-1].Images) != 1 || b.fetches.Load() != 1 {
		t.Fatalf("%d attempts, %d model calls, %d downloads by replica B: want a second attempt, the picture downloaded by B and seen once", attempts, len(model), b.fetches.Load())
	}
	if got := asked.Load(); got != 2 {
		t.Errorf("the gateway was asked %d times, want twice: once by each attempt", got)
	}
}

// A newer message (or /stop) ends a turn whose attachment is still
// downloading at once, not when the download ends.
func TestInterruptEndsADownload(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), entered: make(chan struct{}, 1), hangUp: make(chan struct{})}
	startGateway(t, h, p)
	t.Cleanup(func() { close(p.hangUp) }) // before the gateway stops
	h.setGeneration("s1", 1)
	h.startWorker("w1", nil)
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	req := h.requestTurn("s1", "look", turnOpts{origin: origin, attachments: []*eventsv1.Attachment{
		{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: "p1", MimeType: "image/png"}}})
	<-p.entered
	began := time.Now()
	h.control("s1", turnsv1.ControlAction_CONTROL_ACTION_INTERRUPT, "")
	c := h.waitCompleted(req.TurnId)
	if c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_INTERRUPTED || len(h.fake.Requests()) != 0 {
		t.Fatalf("status %v after %d model calls, want interrupted before any", c.GetStatus(), len(h.fake.Requests()))
	}
	// The download hangs for ever (fetchWait, 70 s): the turn did not wait for it.
	if waited := time.Since(began); waited > 30*time.Second {
		t.Fatalf("the interrupt took %v", waited)
	}
}
