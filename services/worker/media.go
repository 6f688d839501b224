package worker

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// Transcriber turns speech into text (an OpenAI-compatible
// /audio/transcriptions endpoint).
type Transcriber interface {
	Transcribe(ctx context.Context, audio []byte, filename, mime string) (string, error)
}

// inputText renders an inbound message for the model, as it is stored in
// the transcript: the message it replies to, its text, and a line for
// each attachment. A voice message's line says what it said (Hermes's
// words), a text document's carries its content; both are read once, as
// the turn begins, and stored with the message, so later turns see them
// too. Pictures are named here and shown to the model by attachImages.
func (r *turnRun) inputText(ctx context.Context, in *eventsv1.MessageReceived) string {
	var b strings.Builder
	if rt := in.GetReplyTo(); rt != nil && rt.GetText() != "" {
		fmt.Fprintf(&b, "[Replying to: %q]\n", truncate(rt.GetText(), 500))
	}
	b.WriteString(in.GetText())
	for _, a := range in.GetAttachments() {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r.attachmentText(ctx, a, in.GetText()))
	}
	return b.String()
}

// attachmentText is one attachment as the model reads it; text is the
// message's, which a platform may also give as the attachment's caption.
func (r *turnRun) attachmentText(ctx context.Context, a *eventsv1.Attachment, text string) string {
	kind := a.GetKind()
	if a.GetBytesRef() != "" && a.GetUnavailable() == "" {
		switch {
		case kind == eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE || kind == eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO:
			text, err := r.transcribe(ctx, a)
			if err == nil {
				if kind == eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE {
					return fmt.Sprintf("[The user sent a voice message~ Here's what they said: %q]", text)
				}
				return fmt.Sprintf("[The user sent an audio file%s~ Here's what it says: %q]", quotedName(a), text)
			}
			r.log.Warn("speech not transcribed", "ref", a.GetBytesRef(), "err", err)
			return attachmentLine(a, text, "it could not be transcribed")
		case attachment.IsTextDocument(a):
			if text, ok := r.documentText(ctx, a); ok {
				return text
			}
		}
	}
	return attachmentLine(a, text, a.GetUnavailable())
}

// attachmentLine names an attachment (and its caption, unless that is the
// message's text), with why the model cannot read it.
func attachmentLine(a *eventsv1.Attachment, text, unavailable string) string {
	var b strings.Builder
	b.WriteString("[Attachment: ")
	b.WriteString(strings.ToLower(strings.TrimPrefix(a.GetKind().String(), "ATTACHMENT_KIND_")))
	for _, s := range []string{a.GetFileName(), a.GetCaption()} {
		if s != "" && s != text {
			b.WriteByte(' ')
			b.WriteString(s)
		}
	}
	if unavailable != "" {
		b.WriteString(" (unavailable: ")
		b.WriteString(unavailable)
		b.WriteByte(')')
	}
	b.WriteByte(']')
	return b.String()
}

func quotedName(a *eventsv1.Attachment) string {
	if a.GetFileName() == "" {
		return ""
	}
	return fmt.Sprintf(" %q", a.GetFileName())
}

// errNoTranscriber: no speech-to-text provider is configured.
var errNoTranscriber = fmt.Errorf("no speech-to-text provider configured")

// transcribe reads a voice message or audio file and turns it into text.
func (r *turnRun) transcribe(ctx context.Context, a *eventsv1.Attachment) (string, error) {
	if r.s.stt == nil {
		return "", errNoTranscriber
	}
	audio, mime, err := r.s.media.Get(ctx, a.GetBytesRef(), 0)
	if err != nil {
		return "", err
	}
	if a.GetMimeType() != "" {
		mime = a.GetMimeType()
	}
	name := a.GetFileName()
	if name == "" || path.Ext(name) == "" {
		name = "voice" + audioExt(mime)
	}
	text, err := r.s.stt.Transcribe(ctx, audio, name, mime)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(text), nil
}

// audioExt is the file extension transcription servers know a format by.
func audioExt(mime string) string {
	mime, _, _ = strings.Cut(strings.ToLower(mime), ";")
	switch mime {
	case "audio/mpeg", "audio/mp3":
		return ".mp3"
	case "audio/mp4", "audio/m4a", "audio/x-m4a", "audio/aac":
		return ".m4a"
	case "audio/wav", "audio/x-wav", "audio/wave":
		return ".wav"
	case "audio/webm":
		return ".webm"
	case "audio/flac", "audio/x-flac":
		return ".flac"
	}
	return ".ogg" // Telegram's and WhatsApp's voice notes (Opus in Ogg)
}

// documentText is a text document's content for the model, cut at
// MaxDocumentBytes; ok is false when it cannot be read as text.
func (r *turnRun) documentText(ctx context.Context, a *eventsv1.Attachment) (string, bool) {
	const bom = "\xef\xbb\xbf"
	limit := r.s.cfg.Agent.MaxDocumentBytes
	data, size, _, err := r.s.media.Head(ctx, a.GetBytesRef(), limit+int64(len(bom)))
	if err != nil {
		r.log.Warn("document not read", "ref", a.GetBytesRef(), "err", err)
		return "", false
	}
	if bytes.HasPrefix(data, []byte(bom)) {
		data, size = data[len(bom):], size-int64(len(bom))
	}
	cut := size > limit
	if cut {
		data = trimPartialRune(data[:min(int64(len(data)), limit)])
	}
	if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
		return "", false // binary after all
	}
	name := a.GetFileName()
	if name == "" {
		name = "document"
	}
	note := "Its content is included below."
	if cut {
		note = fmt.Sprintf("The first %s of its %s are included below; the rest was cut.", humanSize(limit), humanSize(size))
	}
	return fmt.Sprintf("[The user sent a document: %q. %s]\n%s\n[End of %q]", name, note, data, name), true
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if r, _ := utf8.DecodeRune(b[len(b)-i:]); r == utf8.RuneError {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
