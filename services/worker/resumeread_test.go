package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/worker"
	"github.com/switchboard-chat/switchboard/services/worker/internal/tools"
)

// resumeCase is a turn of a message typed by its downloads
// (voice_by_download, /voice on) that a second attempt takes over after
// its first read the message: after a crash (a new worker resumes the
// committed steps) or, its answer given, delivered again (the same
// worker republishes it). meanwhile runs between the two attempts.
type resumeCase struct {
	name      string
	attach    []*eventsv1.Attachment // a1, p1 and d1 download, gone fails
	crash     bool
	meanwhile func(t *testing.T, h *harness, req *turnsv1.TurnRequested)
	voice     bool // the second attempt answers with speech
}

// runResumed runs each case on h (in order: a case may leave the store
// unusable for the next) and checks the second attempt's voice reply,
// and that it showed the model no picture when the first could not.
func runResumed(t *testing.T, h *harness, cases []resumeCase) {
	t.Helper()
	pic := "\x89PNG\r\n\x1a\n pixels"
	p := &fetchingPlatform{Memory: platformtest.NewMemory("bot1", false), files: map[string]string{"a1": "see you at noon", "p1": pic, "d1": "the agenda"}}
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
	for i, tt := range cases {
		key := fmt.Sprintf("r%d", i)
		h.setGeneration(key, 1)
		opts := turnOpts{origin: origin, attachments: tt.attach, voiceMode: "voice_only", voiceByDownload: true}
		var req *turnsv1.TurnRequested
		var speeches int // before the second attempt
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
			if err := h.rdb.Del(context.Background(), h.locker.Key(key)).Err(); err != nil {
				t.Fatal(err)
			}
			tt.meanwhile(t, h, req)
			speeches = len(h.fake.Speeches())
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
				t.Fatalf("%s: the first attempt sent %d voice replies, want %d", tt.name, len(media), btoi(tt.voice))
			}
			tt.meanwhile(t, h, req)
			speeches = len(h.fake.Speeches())
			deliverAgain(t, h, key, req)
			w.stop(t)
		}
		if _, media := split(t, h.replies(req.TurnId)); len(media) != btoi(tt.voice) {
			t.Errorf("%s: %d voice replies, want %d", tt.name, len(media), btoi(tt.voice))
		}
		// A voice reply published again is the same message, deduplicated:
		// the second attempt's shows as its speech.
		if spoke := len(h.fake.Speeches()) > speeches; spoke != tt.voice {
			t.Errorf("%s: the second attempt spoke %v, want %v", tt.name, spoke, tt.voice)
		}
	}
}

// storeLater keeps, under the name its download would have, the i-th
// attachment of req's message: a second download (a hand-back, a
// replica cut off) that stored it after the first attempt recorded it
// could not be downloaded.
func storeLater(i int, data, mime string) func(*testing.T, *harness, *turnsv1.TurnRequested) {
	return func(t *testing.T, h *harness, req *turnsv1.TurnRequested) {
		t.Helper()
		in := req.GetInputs()[0]
		name := attachment.Name("memory", "bot1", in.GetEventId(), i)
		store := attachment.New(h.bus.JetStream(), h.bus.Topology(), attachment.Config{})
		if _, err := store.Keep(context.Background(), name, mime, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
}

// expire deletes the i-th attachment of req's message from the store,
// as its TTL (a day) does.
func expire(i int) func(*testing.T, *harness, *turnsv1.TurnRequested) {
	return func(t *testing.T, h *harness, req *turnsv1.TurnRequested) {
		t.Helper()
		ctx := context.Background()
		obs, err := h.bus.JetStream().ObjectStore(ctx, h.bus.Topology().Stream(attachment.Bucket))
		if err != nil {
			t.Fatal(err)
		}
		if err := obs.Delete(ctx, attachment.Name("memory", "bot1", req.GetInputs()[0].GetEventId(), i)); err != nil {
			t.Fatal(err)
		}
	}
}

// breakStore deletes the attachment store's bucket: a worker that
// opened it already (it read a document from it) gets an error, not
// "not found", for a look-up.
func breakStore(t *testing.T, h *harness, _ *turnsv1.TurnRequested) {
	t.Helper()
	if err := h.bus.JetStream().DeleteObjectStore(context.Background(), h.bus.Topology().Stream(attachment.Bucket)); err != nil {
		t.Fatal(err)
	}
}

func resumeAudio(id string) *eventsv1.Attachment {
	return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, PlatformFileId: id, MimeType: "audio/ogg"}
}

func resumeImage(id string) *eventsv1.Attachment {
	return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, PlatformFileId: id, MimeType: "image/png"}
}

func resumeDocument(id string) *eventsv1.Attachment {
	return &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, PlatformFileId: id, MimeType: "text/plain", FileName: "agenda.txt"}
}

// TestResumedTurnDecidesAsItsFirstAttemptRead: an attempt that did not
// read the message decides whether to answer with speech, and which
// pictures to show the model, from how the first attempt's reading was
// committed with the message, not from the attachment store, which can
// say otherwise later: a file stored by a later download after the
// first attempt found it could not be downloaded is still not one, and
// a store that fails to answer does not make a file the first attempt
// did not have count as the gateway described it. A file it had that
// expired since is only not shown.
func TestResumedTurnDecidesAsItsFirstAttemptRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runResumed(t, h, []resumeCase{
		{"resumed after a crash, audio stored after it was not downloaded", []*eventsv1.Attachment{resumeAudio("gone")}, true, storeLater(0, "see you at noon", "audio/ogg"), false},
		{"delivered again, audio stored after it was not downloaded", []*eventsv1.Attachment{resumeAudio("gone")}, false, storeLater(0, "see you at noon", "audio/ogg"), false},
		{"resumed after a crash, picture stored after it was not downloaded", []*eventsv1.Attachment{resumeAudio("a1"), resumeImage("gone")}, true, storeLater(1, "\x89PNG\r\n\x1a\n pixels", "image/png"), true},
		{"delivered again, picture stored after it was not downloaded", []*eventsv1.Attachment{resumeAudio("a1"), resumeImage("gone")}, false, storeLater(1, "\x89PNG\r\n\x1a\n pixels", "image/png"), true},
		// A picture the first attempt downloaded, expired since, is not
		// shown, but the message is still a photo, not a voice message.
		{"resumed after a crash, picture expired after it was downloaded", []*eventsv1.Attachment{resumeAudio("a1"), resumeImage("p1")}, true, expire(1), false},
		// Last: the store is gone for the cases after.
		{"delivered again, the store's look-up fails, audio not downloaded", []*eventsv1.Attachment{resumeAudio("gone"), resumeDocument("d1")}, false, breakStore, false},
	})
}

// TestResumedTurnOfAnOlderWorkerLooksInTheStore: steps an older worker
// committed say nothing of how their attachments were read; an attempt
// that resumes them finds what the reading downloaded in the attachment
// store, as before.
func TestResumedTurnOfAnOlderWorkerLooksInTheStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	older := func(then func(*testing.T, *harness, *turnsv1.TurnRequested)) func(*testing.T, *harness, *turnsv1.TurnRequested) {
		return func(t *testing.T, h *harness, req *turnsv1.TurnRequested) {
			t.Helper()
			tag, err := h.db.Exec(context.Background(),
				`UPDATE transcript_messages SET read_attachments = NULL WHERE turn_id = $1 AND read_attachments IS NOT NULL`, req.GetTurnId())
			if err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("forget how the input was read: %v rows, %v", tag.RowsAffected(), err)
			}
			if then != nil {
				then(t, h, req)
			}
		}
	}
	runResumed(t, h, []resumeCase{
		{"resumed after a crash, audio downloaded", []*eventsv1.Attachment{resumeAudio("a1")}, true, older(nil), true},
		{"resumed after a crash, audio not downloaded", []*eventsv1.Attachment{resumeAudio("gone")}, true, older(nil), false},
		{"delivered again, audio not downloaded", []*eventsv1.Attachment{resumeAudio("gone")}, false, older(nil), false},
		// The store is all it has to go by.
		{"resumed after a crash, audio stored after it was not downloaded", []*eventsv1.Attachment{resumeAudio("gone")}, true, older(storeLater(0, "see you at noon", "audio/ogg")), true},
	})
}
