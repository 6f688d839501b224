package worker

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/spoken"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// Speaker turns text into speech (an OpenAI-compatible /audio/speech
// endpoint): the audio and its media type.
type Speaker interface {
	Speak(ctx context.Context, text string) (audio []byte, mime string, err error)
}

var voiceReplies = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_worker_voice_replies_total",
	Help: "Voice replies (/voice) to final answers, by result: sent (published after the text), failed (the text-to-speech provider or the attachment store failed; the text answer went alone), empty (nothing left to speak once the Markdown came off).",
}, []string{"result"})

// Voice modes a turn carries (TurnRequested.voice_mode, Hermes's names).
const (
	voiceOnly = "voice_only"
	voiceAll  = "all"
)

// maxInlineVoice bounds audio sent inline as a data: URL when the
// attachment store cannot keep it: a bus message holds 1 MB by default.
const maxInlineVoice = 512 << 10

// wantsVoice reports whether the turn's final answer is also spoken, as
// Hermes's _should_send_voice_reply decides: the chat chose /voice tts
// (all), or /voice on (voice_only) and an input of the turn is a voice
// message; never without a speaker, a target, or for an answer that is
// not the completed turn's text.
func (r *turnRun) wantsVoice(ctx context.Context, f store.Final) bool {
	if r.s.tts == nil || r.target == nil || f.Kind != store.FinalText || f.Status != store.StatusCompleted ||
		strings.TrimSpace(f.Text) == "" || strings.HasPrefix(f.Text, "Error:") {
		return false
	}
	switch r.req.GetVoiceMode() {
	case voiceAll:
		return true
	case voiceOnly:
		return r.voiceInput(ctx)
	}
	return false
}

// voiceInput reports whether an input of the turn is a voice message
// (Hermes's MessageType.VOICE: a voice note, not an audio file; the
// Slack and Mattermost gateways mark an audio file one, as Hermes, and
// it is one only once downloaded: voiceByDownload).
//
// An attempt that resumed an earlier one's committed steps, or
// republishes its answer, did not read the inputs, and its request
// alone describes no download, so a file whose download failed would
// count as downloaded: it takes what the first reading downloaded, as
// committed (lookUpAttachments), and so decides as that attempt did.
func (r *turnRun) voiceInput(ctx context.Context) bool {
	for i, in := range r.req.GetInputs() {
		if in.GetVoiceByDownload() {
			if r.s.agent == nil { // a plug-in agent's turns download nothing
				r.lookUpAttachments(ctx, i, r.readAtBegin)
			}
			if voiceByDownload(in) {
				return true
			}
			continue
		}
		for _, a := range in.GetAttachments() {
			if a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE {
				return true
			}
		}
	}
	return false
}

// voiceByDownload types a message with voice_by_download as Hermes's
// Slack and Mattermost adapters type a message by the files they
// downloaded (slack.py, mattermost.py): a picture makes it a photo, else
// an audio file a voice message. A file counts unless its download
// failed (it has no bytes and is unavailable); one this turn did not
// need to read (no speech-to-text, pictures off) counts as its gateway
// described it.
func voiceByDownload(in *eventsv1.MessageReceived) bool {
	audio := false
	for _, a := range in.GetAttachments() {
		if a.GetBytesRef() == "" && a.GetUnavailable() != "" {
			continue
		}
		mime := strings.ToLower(a.GetMimeType())
		switch {
		case a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE || strings.HasPrefix(mime, "image/"):
			return false
		case isSpeech(a) || strings.HasPrefix(mime, "audio/"):
			audio = true
		}
	}
	return audio
}

// voiceReply speaks the final answer f, when the turn wants it, and
// publishes the audio as a voice message after the text (which is
// already on the bus: it never waits for, or depends on, the speech).
// Its seq is the final's next, allocated from no counter, and its bus
// message id is its own, so an attempt that republishes the final
// republishes the same voice message, which the bus and delivery's
// idempotency key (turn:seq) deduplicate. A failure is logged and
// counted, never the turn's: the user has the text.
func (r *turnRun) voiceReply(ctx context.Context, f store.Final) {
	if !r.wantsVoice(ctx, f) {
		return
	}
	text := spoken.Text(f.Text)
	if text == "" {
		voiceReplies.WithLabelValues("empty").Inc()
		return
	}
	a, err := r.speak(ctx, text)
	if err == nil {
		seq := f.Seq + 1
		err = r.publishAtID(ctx, seq, fmt.Sprintf("reply:%s:%d:voice", r.req.GetTurnId(), seq),
			&repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Media{Media: &repliesv1.Media{Attachment: a}}})
	}
	if err != nil {
		voiceReplies.WithLabelValues("failed").Inc()
		r.log.Warn("voice reply not sent; the text answer goes alone", "err", err)
		return
	}
	voiceReplies.WithLabelValues("sent").Inc()
	r.log.Info("voice reply published", "bytes", a.GetSizeBytes(), "chars", len([]rune(text)))
}

// speak synthesizes text and keeps the audio in the attachment store
// (under the turn's name, so a second attempt overwrites the first's),
// or, when the store cannot keep it, inlines a small one as a data: URL.
func (r *turnRun) speak(ctx context.Context, text string) (*eventsv1.Attachment, error) {
	audio, mime, err := r.s.tts.Speak(ctx, text)
	if err != nil {
		return nil, fmt.Errorf("text to speech: %w", err)
	}
	// Opus in Ogg is what the platforms play as a voice message; another
	// format goes as an audio file.
	kind, ext := eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, audioExt(mime)
	switch {
	case strings.HasPrefix(mime, "audio/ogg"), strings.HasPrefix(mime, "audio/opus"):
		kind = eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE
	case strings.HasPrefix(mime, "audio/L16"), strings.HasPrefix(mime, "audio/pcm"):
		ext = ".pcm"
	}
	a := &eventsv1.Attachment{Kind: kind, MimeType: mime, SizeBytes: int64(len(audio)), FileName: "voice-reply" + ext}
	name := "voice-reply/" + r.req.GetTurnId()
	_, kerr := r.s.media.Keep(ctx, name, mime, bytes.NewReader(audio))
	switch {
	case kerr == nil:
		a.Location = &eventsv1.Attachment_BytesRef{BytesRef: name}
	case len(audio) <= maxInlineVoice:
		r.log.Info("voice reply inlined: the attachment store did not keep it", "err", kerr)
		a.Location = &eventsv1.Attachment_Url{Url: "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(audio)}
	default:
		return nil, fmt.Errorf("keep voice reply (%d bytes): %w", len(audio), kerr)
	}
	return a, nil
}
