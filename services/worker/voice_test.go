package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"github.com/switchboard-chat/switchboard/pkg/bus/bustest"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// speakFunc is a Speaker over the harness's fake model server.
type speakFunc func(ctx context.Context, text string) ([]byte, string, error)

func (f speakFunc) Speak(ctx context.Context, text string) ([]byte, string, error) {
	return f(ctx, text)
}

// withSpeaker gives the worker a Speaker on the fake's /audio/speech
// with the defaults (Hermes's OpenAI model and voice, Opus).
func (h *harness) withSpeaker(_ *worker.Config, d *worker.Deps) {
	tts := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	d.Speaker = speakFunc(func(ctx context.Context, text string) ([]byte, string, error) {
		return tts.Speak(ctx, "", "", "", text)
	})
}

// split is a finished turn's final and the media events after it.
func split(t *testing.T, evs []*repliesv1.ReplyEvent) (final *repliesv1.ReplyEvent, media []*repliesv1.ReplyEvent) {
	t.Helper()
	for _, ev := range evs {
		switch {
		case ev.GetFinalText() != nil || ev.GetError() != nil:
			final = ev
		case ev.GetMedia() != nil:
			if final == nil {
				t.Fatalf("media before the final: %v", ev)
			}
			media = append(media, ev)
		}
	}
	if final == nil {
		t.Fatal("no final")
	}
	return final, media
}

// Hermes's voice modes: /voice on (voice_only) speaks the answer to a
// voice message only, /voice tts (all) every answer, off none; the
// voice message follows the text answer (which is unchanged) at the next
// seq, Opus in Ogg kept in the attachment store, what was spoken the
// answer without its Markdown.
func TestVoiceReplyModes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
	if _, err := store.Keep(context.Background(), "speech", "audio/ogg", strings.NewReader("what is the answer")); err != nil {
		t.Fatal(err)
	}
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", h.withSpeaker)
	defer w.stop(t)
	voiceNote := []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, MimeType: "audio/ogg",
		Location: &eventsv1.Attachment_BytesRef{BytesRef: "speech"}}}
	audioFile := []*eventsv1.Attachment{{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, MimeType: "audio/mpeg", FileName: "song.mp3",
		Location: &eventsv1.Attachment_BytesRef{BytesRef: "speech"}}}
	for _, tt := range []struct {
		name   string
		mode   string
		attach []*eventsv1.Attachment
		voice  bool
	}{
		{"off, voice in", "", voiceNote, false},
		{"off, text in", "", nil, false},
		{"on, voice in", "voice_only", voiceNote, true},
		{"on, text in", "voice_only", nil, false},
		{"on, audio file in", "voice_only", audioFile, false},
		{"tts, text in", "all", nil, true},
		{"tts, voice in", "all", voiceNote, true},
	} {
		before := len(h.fake.Speeches())
		h.fake.Enqueue(fakellm.Reply{Text: "The **answer** is `42`.\n\n```\nprint(42)\n```"})
		req := h.requestTurn("s1", "tell me "+tt.name, turnOpts{attachments: tt.attach, voiceMode: tt.mode})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: status %v (%s)", tt.name, c.GetStatus(), c.GetError())
		}
		final, media := split(t, h.replies(req.TurnId))
		if got := final.GetFinalText().GetText(); got != "The **answer** is `42`.\n\n```\nprint(42)\n```" {
			t.Errorf("%s: final %q", tt.name, got)
		}
		speeches := h.fake.Speeches()[before:]
		if !tt.voice {
			if len(media) != 0 || len(speeches) != 0 {
				t.Errorf("%s: %d voice replies, %d speech requests, want none", tt.name, len(media), len(speeches))
			}
			continue
		}
		if len(media) != 1 || len(speeches) != 1 {
			t.Fatalf("%s: %d voice replies, %d speech requests, want one", tt.name, len(media), len(speeches))
		}
		if sp := speeches[0]; sp.Input != "The answer is 42." || sp.Model != "gpt-4o-mini-tts" || sp.Voice != "alloy" || sp.Format != "opus" {
			t.Errorf("%s: spoke %+v", tt.name, sp)
		}
		ev := media[0]
		if ev.GetSeq() != final.GetSeq()+1 || ev.GetGeneration() != final.GetGeneration() || ev.GetTarget().GetChatId() != "99" {
			t.Errorf("%s: voice reply seq %d gen %d target %v after final seq %d", tt.name, ev.GetSeq(), ev.GetGeneration(), ev.GetTarget(), final.GetSeq())
		}
		a := ev.GetMedia().GetAttachment()
		if a.GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE || a.GetMimeType() != "audio/ogg" || a.GetFileName() != "voice-reply.ogg" {
			t.Errorf("%s: attachment %v", tt.name, a)
		}
		data, _, err := store.Get(context.Background(), a.GetBytesRef(), 1<<20)
		if err != nil || !bytes.HasPrefix(data, []byte("OggS")) || int64(len(data)) != a.GetSizeBytes() {
			t.Errorf("%s: kept audio %d bytes %q, %v", tt.name, len(data), data[:min(len(data), 8)], err)
		}
	}
}

// TestVoiceMessageByDownload: a message its gateway types by the files
// downloaded (voice_by_download: Slack, Mattermost, as Hermes's adapters
// type a message by what they downloaded) is a voice message, which /voice
// on answers with speech, only when an audio file of it was downloaded
// and no picture was: not when the audio's download failed, and when only
// the picture's did. Other platforms' voice messages (Telegram's voice
// notes) are voice messages downloaded or not, as Hermes's.
func TestVoiceMessageByDownload(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{
		"a1": "see you at noon", "p1": "\x89PNG\r\n\x1a\n pixels",
	}}
	startGateway(t, h, p)
	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		h.withSpeaker(c, d)
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
			return stt.Transcribe(ctx, "", audio, filename, mime)
		})
	})
	defer w.stop(t)
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	file := func(kind eventsv1.AttachmentKind, id, mime string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: kind, PlatformFileId: id, MimeType: mime}
	}
	voice := func(id string) *eventsv1.Attachment {
		return file(eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE, id, "audio/ogg")
	}
	audio := func(id string) *eventsv1.Attachment {
		return file(eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, id, "audio/ogg")
	}
	image := func(id string) *eventsv1.Attachment {
		return file(eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, id, "image/png")
	}
	for _, tt := range []struct {
		name       string
		byDownload bool
		attach     []*eventsv1.Attachment
		voice      bool
	}{
		{"audio downloaded", true, []*eventsv1.Attachment{voice("a1")}, true},
		{"audio not downloaded", true, []*eventsv1.Attachment{voice("gone")}, false},
		{"picture not downloaded", true, []*eventsv1.Attachment{audio("a1"), image("gone")}, true},
		{"picture downloaded", true, []*eventsv1.Attachment{audio("a1"), image("p1")}, false},
		{"a voice note not downloaded", false, []*eventsv1.Attachment{voice("gone")}, true},
	} {
		before := len(h.fake.Speeches())
		req := h.requestTurn("s1", "", turnOpts{origin: origin, attachments: tt.attach, voiceMode: "voice_only", voiceByDownload: tt.byDownload})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: status %v (%s)", tt.name, c.GetStatus(), c.GetError())
		}
		_, media := split(t, h.replies(req.TurnId))
		if spoken := len(media) == 1 && len(h.fake.Speeches()) == before+1; spoken != tt.voice || len(media) > 1 {
			t.Errorf("%s: %d voice replies, %d speech requests; want a voice reply %v", tt.name, len(media), len(h.fake.Speeches())-before, tt.voice)
		}
	}
}

// A text-to-speech provider that fails (rate limited, down) or a reply
// with nothing to speak loses nothing: the text answer is delivered, the
// turn completes, and no voice message follows.
func TestVoiceReplyFailureKeepsTheText(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", h.withSpeaker)
	defer w.stop(t)
	for _, tt := range []struct {
		name   string
		fail   *fakellm.Failure
		answer string
	}{
		{"rate limited", &fakellm.Failure{Status: 429}, "Here you go."},
		{"server error", &fakellm.Failure{Status: 500}, "Here you go."},
		{"only code", nil, "```\nls -la\n```"},
	} {
		if tt.fail != nil {
			h.fake.FailSpeech(1, *tt.fail)
		}
		h.fake.Enqueue(fakellm.Reply{Text: tt.answer})
		req := h.requestTurn("s1", "hi "+tt.name, turnOpts{voiceMode: "all"})
		if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED {
			t.Fatalf("%s: status %v (%s)", tt.name, c.GetStatus(), c.GetError())
		}
		final, media := split(t, h.replies(req.TurnId))
		if got := final.GetFinalText().GetText(); got != tt.answer {
			t.Errorf("%s: final %q, want %q", tt.name, got, tt.answer)
		}
		if len(media) != 0 {
			t.Errorf("%s: %d voice replies", tt.name, len(media))
		}
	}
	// The provider is back: the next answer is spoken.
	h.fake.Enqueue(fakellm.Reply{Text: "Back."})
	req := h.requestTurn("s1", "again", turnOpts{voiceMode: "all"})
	h.waitCompleted(req.TurnId)
	if _, media := split(t, h.replies(req.TurnId)); len(media) != 1 {
		t.Errorf("%d voice replies after the provider recovered, want 1", len(media))
	}
}

// Where the attachment store is off (no gateway created it), a small
// voice reply goes inline as a data: URL.
func TestVoiceReplyInlineWithoutTheStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setGeneration("s1", 1)
	w := h.startWorker("w1", h.withSpeaker)
	defer w.stop(t)
	h.fake.Enqueue(fakellm.Reply{Text: "Short."})
	req := h.requestTurn("s1", "hi", turnOpts{voiceMode: "all"})
	h.waitCompleted(req.TurnId)
	_, media := split(t, h.replies(req.TurnId))
	if len(media) != 1 {
		t.Fatalf("%d voice replies, want 1", len(media))
	}
	u := media[0].GetMedia().GetAttachment().GetUrl()
	data, mime, ok, err := attachment.ParseDataURL(u)
	if !ok || err != nil || mime != "audio/ogg" || !bytes.HasPrefix(data, []byte("OggS")) {
		t.Errorf("inline voice reply %.60q: %q %v %v", u, mime, ok, err)
	}
}

// TestResumedTurnAsksWhetherItsAudioWasDownloaded: a turn of a message
// typed by its downloads (voice_by_download) that another attempt takes
// over (its worker died after the user's message was committed, or the
// turn was delivered again after its answer) does not read the message
// again, so its request tells nothing of the downloads: it finds what
// the first attempt's reading downloaded, which the stored message was
// written from, and downloads nothing. An audio file whose download
// failed is not a voice message then either (no voice reply under
// /voice on), even when a download would work now; one downloaded is
// found kept and answered with speech again (the same voice message,
// deduplicated); a picture whose download failed at first still does
// not make the message a photo, nor is it shown to the model.
func TestResumedTurnAsksWhetherItsAudioWasDownloaded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	pic := "\x89PNG\r\n\x1a\n pixels"
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false),
		files: map[string]string{"a1": "see you at noon", "fa1": "see you at noon", "fa2": "see you at noon", "fp1": pic, "fp2": pic},
		flaky: map[string]bool{"fa1": true, "fa2": true, "fp1": true, "fp2": true}}
	startGateway(t, h, p)
	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	entered := make(chan struct{}, 1)
	start := func(id string, dies bool) *runningWorker {
		clock := tools.Tool{Name: "clock", Run: func(ctx context.Context, _ tools.Call, _ json.RawMessage) (string, error) {
			if !dies {
				return "12:00", nil
			}
			entered <- struct{}{}
			<-ctx.Done() // the worker dies here, the user's message committed
			return "", ctx.Err()
		}}
		return h.startWorker(id, func(c *worker.Config, d *worker.Deps) {
			h.withSpeaker(c, d)
			d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
				return stt.Transcribe(ctx, "", audio, filename, mime)
			})
			d.Tools = []tools.Tool{clock}
			c.DrainTimeout = 50 * time.Millisecond // a stop is a kill: handlers are cut off at once
		})
	}
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	audio := func(id string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, PlatformFileId: id, MimeType: "audio/ogg"}
	}
	image := func(id string) *eventsv1.Attachment {
		return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: id, MimeType: "image/png"}
	}
	for i, tt := range []struct {
		name   string
		attach []*eventsv1.Attachment // a1 downloads, gone fails, fa* and fp* fail at first and download on a second try
		crash  bool                   // the first worker dies mid-turn; else the answered turn is delivered again
		voice  bool
	}{
		{"resumed after a crash, audio not downloaded", []*eventsv1.Attachment{audio("gone")}, true, false},
		{"resumed after a crash, audio downloaded", []*eventsv1.Attachment{audio("a1")}, true, true},
		{"resumed after a crash, audio downloadable now", []*eventsv1.Attachment{audio("fa1")}, true, false},
		{"resumed after a crash, picture downloadable now", []*eventsv1.Attachment{audio("a1"), image("fp1")}, true, true},
		{"delivered again after its answer, audio not downloaded", []*eventsv1.Attachment{audio("gone")}, false, false},
		{"delivered again after its answer, audio downloaded", []*eventsv1.Attachment{audio("a1")}, false, true},
		{"delivered again after its answer, audio downloadable now", []*eventsv1.Attachment{audio("fa2")}, false, false},
		{"delivered again after its answer, picture downloadable now", []*eventsv1.Attachment{audio("a1"), image("fp2")}, false, true},
	} {
		key := fmt.Sprintf("s%d", i)
		h.setGeneration(key, 1)
		downloads, speeches := p.fetches.Load(), len(h.fake.Speeches())
		opts := turnOpts{origin: origin, attachments: tt.attach, voiceMode: "voice_only", voiceByDownload: true}
		var req *turnsv1.TurnRequested
		if tt.crash {
			w1 := start("w1", true)
			h.fake.Enqueue(fakellm.Reply{ToolCalls: []fakellm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{}`}}}, fakellm.Reply{Text: "It is noon."})
			req = h.requestTurn(key, "", opts)
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: the tool never ran", tt.name)
			}
			w1.stop(t)
			if h.completed(req.TurnId) != nil {
				t.Fatalf("%s: the killed worker completed the turn", tt.name)
			}
			// The lock expires (a real crash stops its renewals).
			if err := h.rdb.Del(context.Background(), h.locker.Key(key)).Err(); err != nil {
				t.Fatal(err)
			}
			w2 := start("w2", false)
			if c := h.waitCompleted(req.TurnId); c.GetStatus() != turnsv1.TurnStatus_TURN_STATUS_COMPLETED || c.GetWorkerId() != "w2" {
				t.Fatalf("%s: status %v by %s (%s)", tt.name, c.GetStatus(), c.GetWorkerId(), c.GetError())
			}
			w2.stop(t)
			if calls := h.fake.Requests(); hasPictures(calls[len(calls)-1]) {
				t.Errorf("%s: the resumed attempt showed the model a picture the stored message says was not downloaded", tt.name)
			}
		} else {
			w := start("w1", false)
			req = h.requestTurn(key, "", opts)
			h.waitCompleted(req.TurnId)
			if _, media := split(t, h.replies(req.TurnId)); len(media) != btoi(tt.voice) {
				t.Fatalf("%s: the first attempt sent %d voice replies", tt.name, len(media))
			}
			deliverAgain(t, h, key, req)
			w.stop(t)
		}
		_, media := split(t, h.replies(req.TurnId))
		if len(media) != btoi(tt.voice) {
			t.Errorf("%s: %d voice replies, want %d", tt.name, len(media), btoi(tt.voice))
		}
		if tt.voice && len(h.fake.Speeches()) == speeches {
			t.Errorf("%s: nothing spoken", tt.name)
		}
		// Each file was downloaded once, by the first attempt: the second
		// found the kept ones and tried no failed one again.
		if got, want := p.fetches.Load()-downloads, int32(len(tt.attach)); got != want {
			t.Errorf("%s: %d downloads, want %d", tt.name, got, want)
		}
	}
}

// deliverAgain delivers req, a turn answered already, again (its
// completion was lost, say), as a new bus message, and waits for that
// attempt to end: it republishes the answer.
func deliverAgain(t *testing.T, h *harness, key string, req *turnsv1.TurnRequested) {
	t.Helper()
	ok, err := h.locker.Acquire(context.Background(), key, req.LockToken, 5*time.Second)
	if err != nil || !ok {
		t.Fatalf("lock: %v", err)
	}
	if _, err := h.bus.Publish(context.Background(), h.bus.Topology().Subject(bus.SubjectTurnRequested), "turn:"+req.TurnId+":again", req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second attempt to end", func() bool {
		o, _ := h.locker.Owner(context.Background(), key)
		return o == ""
	})
}

// TestResumedTurnAsksNoGateway: an attempt that did not read its
// message (it resumed the turn, or republishes its answer) asks no
// gateway about the message's attachments: it finds in the attachment
// store what the first attempt's reading kept (lookUpAttachments). So it
// decides as the first attempt did when the platform's gateway is gone
// and a replica that takes every fetch question answers none: that
// replica is asked nothing, the audio downloaded at first is a voice
// message again, and the audio whose download failed is not. (A resumed
// attempt that asked the gateway would be held by the hung replica, or,
// with it answering, have the failed file downloaded now.)
func TestResumedTurnAsksNoGateway(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	busA := bustest.NewWith(t, h.url, h.bus.Topology())
	startGatewayOn(t, busA, &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"a1": "see you at noon"}})
	stt := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: h.fakeURL + "/v1"})
	w := h.startWorker("w1", func(c *worker.Config, d *worker.Deps) {
		h.withSpeaker(c, d)
		d.Transcriber = sttFunc(func(ctx context.Context, audio io.Reader, filename, mime string) (string, error) {
			return stt.Transcribe(ctx, "", audio, filename, mime)
		})
		// An attempt that asked the hung replica would end within the
		// test's wait, and say so below, rather than hold it.
		c.FetchWait = 3 * time.Second
	})
	defer w.stop(t)
	origin := &eventsv1.SessionSource{Platform: "memory", Account: "bot1", ChatId: "99", ChatType: "dm", UserId: "u1"}
	turns := []struct {
		key, file string // a1 downloads, gone fails
		voice     bool
	}{
		{"s1", "a1", true},
		{"s2", "gone", false},
	}
	reqs := make([]*turnsv1.TurnRequested, len(turns))
	for i, tt := range turns {
		h.setGeneration(tt.key, 1)
		reqs[i] = h.requestTurn(tt.key, "", turnOpts{origin: origin, voiceMode: "voice_only", voiceByDownload: true, attachments: []*eventsv1.Attachment{
			{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, PlatformFileId: tt.file, MimeType: "audio/ogg"}}})
		h.waitCompleted(reqs[i].TurnId)
		if _, media := split(t, h.replies(reqs[i].TurnId)); len(media) != btoi(tt.voice) {
			t.Fatalf("%s: the first attempt sent %d voice replies, want %d", tt.file, len(media), btoi(tt.voice))
		}
	}
	// The gateway is gone; a replica that takes every fetch question and
	// answers none is there instead.
	busA.Conn().Close()
	var asked atomic.Int32
	hung, err := h.bus.Conn().Subscribe(h.bus.Topology().FetchSubject("memory"), func(*nats.Msg) { asked.Add(1) })
	if err == nil {
		err = h.bus.Conn().Flush() // the server has it before the turns come again
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hung.Unsubscribe() }()
	for i, tt := range turns {
		speeches := len(h.fake.Speeches())
		deliverAgain(t, h, tt.key, reqs[i])
		if got := len(h.fake.Speeches()) - speeches; got != btoi(tt.voice) {
			t.Errorf("%s: the second attempt spoke %d answers, want %d", tt.file, got, btoi(tt.voice))
		}
		if _, media := split(t, h.replies(reqs[i].TurnId)); len(media) != btoi(tt.voice) {
			t.Errorf("%s: %d voice replies, want %d", tt.file, len(media), btoi(tt.voice))
		}
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the second attempts asked the gateway %d times, want never", n)
	}
}

// hasPictures reports whether a model call showed any picture.
func hasPictures(req fakellm.Request) bool {
	for _, m := range req.Messages {
		if len(m.Images) > 0 {
			return true
		}
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
