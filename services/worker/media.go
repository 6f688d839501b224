package worker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// fetchWait bounds a gateway's download for the worker: the gateway's
// own bound (platform.FetchTimeout) and a margin.
const fetchWait = 70 * time.Second

// fetchAliveEvery is how often a fetch asks whether the gateway replica
// downloading the attachment is still there (bus.RequestWatched).
const fetchAliveEvery = time.Second

// errFetchLater: no gateway replica could download an attachment now
// (none answering, all busy, stopping, gone). The turn is tried again
// later, with nothing written; its last attempt goes on without the
// attachment, naming it as not downloaded. A replica that was asked and
// is there but did not finish within fetchWait is no reason to try
// again: the turn goes on without the file (afterFetchWait).
var errFetchLater = errors.New("attachment cannot be downloaded now")

// stoppedByUser reports whether ctx was ended by a /stop, a newer message
// or the lock's loss (cancellable), not by the process stopping.
func stoppedByUser(ctx context.Context) bool {
	cause := context.Cause(ctx)
	return errors.Is(cause, errStopped) || errors.Is(cause, errInterrupted) || errors.Is(cause, errLockLost)
}

// fetchAttachments has the gateway of in's platform download the
// attachments the agent reads (those want accepts) into the attachment
// store, once a turn runs the message: the gateway holds the platform's
// credentials, and nothing is downloaded for messages never answered. An
// attachment kept already (a data: URL, an earlier attempt) costs the
// gateway one lookup; one the gateway cannot have (too large, gone) is
// marked with why. It returns errFetchLater (wrapped) when the gateway
// could not be asked, unless this is the turn's last attempt.
func (r *turnRun) fetchAttachments(ctx context.Context, in *eventsv1.MessageReceived, want func(*eventsv1.Attachment) bool) error {
	src := in.GetSource()
	if src.GetPlatform() == "api" {
		return nil // inline pictures are kept as they arrive; addresses go to the model
	}
	// One bound for the attempt's attachments, of all its messages (a
	// merged turn has several): a gateway that hangs costs the turn
	// fetchWait once, not once per attachment or message. It counts the
	// time spent downloading only, not the reading between messages (a
	// transcription), which would leave a later message's files named
	// as not downloaded without its gateway asked.
	fetchBy := time.Now().Add(r.s.cfg.FetchWait - r.fetchSpent)
	fctx, cancel := context.WithDeadline(ctx, fetchBy)
	defer func(began time.Time) { cancel(); r.fetchSpent += time.Since(began) }(time.Now())
	for i, a := range in.GetAttachments() {
		if !toFetch(a, want) {
			continue
		}
		req := &eventsv1.AttachmentFetchRequested{Attachment: a, Account: src.GetAccount(),
			Name: attachment.Name(src.GetPlatform(), src.GetAccount(), in.GetEventId(), i)}
		resp := &eventsv1.AttachmentFetched{}
		var err error
		if time.Until(fetchBy) < lookupWait {
			// The bound went on the attempt's earlier downloads, from a
			// live replica (the others end the attempt): too little is
			// left for a replica to even say it took the request.
			resp, err = r.afterFetchWait(ctx, req.GetName())
		} else if err = r.fetch(fctx, src.GetPlatform(), req, resp); errors.Is(err, bus.ErrNotAnswered) && ctx.Err() == nil {
			// A live replica was downloading it: another attempt would
			// wait as long again.
			resp, err = r.afterFetchWait(ctx, req.GetName())
		}
		switch {
		case stoppedByUser(ctx):
			a.Unavailable = "it was not read: the request was stopped first"
		case ctx.Err() != nil:
			return ctx.Err() // the worker is stopping: the turn is handed back
		case (err != nil || resp.GetRetry()) && r.spent < r.s.cfg.MaxDeliver:
			return fmt.Errorf("%w (%s gateway): %v", errFetchLater, src.GetPlatform(), cmp.Or(err, errors.New("busy or stopping")))
		case err != nil || resp.GetRetry():
			r.log.Warn("attachment not fetched on the turn's last attempt", "platform", src.GetPlatform(), "index", i, "err", err)
			a.Unavailable = "it could not be downloaded"
		case resp.GetBytesRef() == "":
			a.Unavailable = cmp.Or(resp.GetUnavailable(), "it could not be downloaded")
		default:
			a.Location, a.SizeBytes = &eventsv1.Attachment_BytesRef{BytesRef: resp.GetBytesRef()}, resp.GetSizeBytes()
			a.MimeType = cmp.Or(resp.GetMimeType(), a.GetMimeType())
		}
	}
	return nil
}

// afterFetchWait answers for a download that a live gateway replica did
// not finish within fetchWait: the turn goes on now, as its last attempt
// would, rather than being tried again to wait as long. What the store
// holds under name now is what a resumed attempt finds
// (lookUpAttachments): the gateway stores nothing after the time the
// worker waits (it was told it, less a margin), so a file there was
// stored in time, its answer lost, and is read, and none is unavailable
// for good. A store that does not say leaves the attempt to be tried
// again (errFetchLater).
func (r *turnRun) afterFetchWait(ctx context.Context, name string) (*eventsv1.AttachmentFetched, error) {
	if r.s.media == nil {
		return &eventsv1.AttachmentFetched{Unavailable: "it could not be downloaded"}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, lookupWait)
	defer cancel()
	size, mime, err := r.s.media.Info(ctx, name)
	switch {
	case err == nil:
		return &eventsv1.AttachmentFetched{BytesRef: name, SizeBytes: size, MimeType: mime}, nil
	case errors.Is(err, attachment.ErrNotFound):
		r.log.Info("attachment not downloaded in time; the turn goes on without it", "name", name)
		return &eventsv1.AttachmentFetched{Unavailable: "it could not be downloaded"}, nil
	}
	return &eventsv1.AttachmentFetched{}, fmt.Errorf("look up an attachment not downloaded in time: %w", err)
}

// toFetch reports whether a is one a turn has its gateway download:
// read by the agent (want), neither kept nor known unavailable (by its
// gateway, or this attempt's reading), and with an id or address to
// download it by.
func toFetch(a *eventsv1.Attachment, want func(*eventsv1.Attachment) bool) bool {
	return attachment.Wanted(a) && want(a) && a.GetBytesRef() == "" && a.GetUnavailable() == "" &&
		(a.GetPlatformFileId() != "" || a.GetUrl() != "")
}

// lookupWait bounds a look-up of what a turn's reading downloaded
// (lookUpAttachments): a yes or no, bounded as the worker's other short
// question, whether a gateway replica is still there (fetchAliveEvery),
// not as a download (fetchWait).
const lookupWait = fetchAliveEvery

// lookUpAttachments is fetchAttachments for an attempt that did not read
// the turn's input i: one that resumed an earlier attempt's committed
// steps, or republishes its answer. It downloads nothing: it takes each
// file as the reading left it, which the stored message was written
// from, so that the attempt shows the model, or answers with speech
// (voiceInput), only what the turn's text says it had, and decides as
// the first attempt did. The input's committed step says how (readOf);
// the attachment store can say otherwise later (a file expired, stored
// by a later download, a look-up that failed), and is asked only for
// steps an older worker committed without it (lookUpStored).
func (r *turnRun) lookUpAttachments(ctx context.Context, i int, want func(*eventsv1.Attachment) bool) {
	in := r.req.GetInputs()[i]
	if in.GetSource().GetPlatform() == "api" {
		return // inline pictures are kept as they arrive
	}
	if i < len(r.reads) && r.reads[i] != nil {
		applyReads(in, r.reads[i], want)
		return
	}
	r.lookUpStored(ctx, in, want)
}

// applyReads marks in's attachments that want accepts as the first
// attempt's reading left them (reads): a file it downloaded is read from
// the store (one gone since, expired, is then not shown), one it did not
// is unavailable with its reason, one it did not read stays as
// described.
func applyReads(in *eventsv1.MessageReceived, reads []store.ReadAttachment, want func(*eventsv1.Attachment) bool) {
	atts := in.GetAttachments()
	for _, read := range reads {
		if read.Index < 0 || read.Index >= len(atts) || !toFetch(atts[read.Index], want) {
			continue
		}
		a := atts[read.Index]
		if read.BytesRef != "" {
			a.Location, a.SizeBytes = &eventsv1.Attachment_BytesRef{BytesRef: read.BytesRef}, read.SizeBytes
			a.MimeType = cmp.Or(read.MimeType, a.GetMimeType())
		}
		a.Unavailable = read.Unavailable // kept and not shown, or not downloaded
	}
}

// readOf is how the reading left in's attachments, committed with its
// step (store.Message.Read) for the turn's later attempts: nil when it
// has none.
func readOf(in *eventsv1.MessageReceived) []store.ReadAttachment {
	var reads []store.ReadAttachment
	for i, a := range in.GetAttachments() {
		reads = append(reads, store.ReadAttachment{Index: i, BytesRef: a.GetBytesRef(), Unavailable: a.GetUnavailable(),
			MimeType: a.GetMimeType(), SizeBytes: a.GetSizeBytes()})
	}
	return reads
}

// keepReads finds, in the turn's committed steps, how its first attempt
// read each input (r.reads, by input): the steps begin gave the inputs
// are each input's context messages, then its own.
func (r *turnRun) keepReads(history []store.Message) {
	byStep := map[int][]store.ReadAttachment{}
	for _, m := range history {
		if m.TurnID == r.req.GetTurnId() && m.Role == llm.RoleUser && m.Read != nil {
			byStep[m.Step] = m.Read
		}
	}
	if len(byStep) == 0 {
		return
	}
	r.reads = make([][]store.ReadAttachment, len(r.req.GetInputs()))
	for i, step := range r.inputStepOf() {
		r.reads[i] = byStep[step]
	}
}

// inputStepOf is the step of each input's own message among those begin
// gives the turn: each input's context messages come before it.
func (r *turnRun) inputStepOf() []int {
	steps := make([]int, 0, len(r.req.GetInputs()))
	step := 0
	for _, in := range r.req.GetInputs() {
		for _, c := range in.GetContext() {
			if c.GetRole() == llm.RoleUser || c.GetRole() == llm.RoleAssistant {
				step++
			}
		}
		steps = append(steps, step)
		step++
	}
	return steps
}

// lookUpStored is lookUpAttachments for steps committed without how they
// were read (an older worker's): it finds in the attachment store what
// the reading downloaded. A download keeps its file under the turn's
// name (attachment.Name, the same for every attempt), a failed one keeps
// nothing, so a file kept is read as the reading read it and one not
// kept is unavailable. A store that does not answer within lookupWait
// leaves the file as its gateway described it, which voiceByDownload
// counts, as Hermes decides a voice reply by the type of the message as
// it came: the user sent audio.
func (r *turnRun) lookUpStored(ctx context.Context, in *eventsv1.MessageReceived, want func(*eventsv1.Attachment) bool) {
	src := in.GetSource()
	ctx, cancel := context.WithTimeout(ctx, lookupWait)
	defer cancel()
	for i, a := range in.GetAttachments() {
		if !toFetch(a, want) {
			continue
		}
		name := attachment.Name(src.GetPlatform(), src.GetAccount(), in.GetEventId(), i)
		size, mime, err := r.s.media.Info(ctx, name)
		switch {
		case err == nil:
			a.Location, a.SizeBytes = &eventsv1.Attachment_BytesRef{BytesRef: name}, size
			a.MimeType = cmp.Or(mime, a.GetMimeType())
		case errors.Is(err, attachment.ErrNotFound):
			a.Unavailable = "it could not be downloaded"
		default:
			r.log.Warn("what the turn's reading downloaded is unknown; the file counts as described", "platform", src.GetPlatform(), "index", i, "err", err)
		}
	}
}

// fetch asks a gateway replica of platform to download req's attachment.
// A replica that is gone before it answered (killed mid-download: its
// connection closed) is found so within bus.GoneGrace and
// fetchAliveEvery, and another replica is asked at once, instead of the
// turn waiting fetchWait for an answer that will not come and then being
// tried again later. One that is only reconnecting is back before, and
// its download and answer are waited for: not done again elsewhere.
func (r *turnRun) fetch(ctx context.Context, platform string, req *eventsv1.AttachmentFetchRequested, resp *eventsv1.AttachmentFetched) error {
	alive := func(instance string) string { return r.s.bus.Topology().SendingSubject(platform, instance) }
	for {
		err := r.s.bus.RequestWatched(ctx, r.s.bus.Topology().FetchSubject(platform), req, resp, alive, fetchAliveEvery)
		if !errors.Is(err, bus.ErrServerGone) || ctx.Err() != nil {
			// A replica found silent as the wait ended is gone too: the
			// turn is tried again later; a request sent now would have a
			// replica download what no one waits for.
			return err
		}
		r.log.Info("gateway replica gone mid-download; another is asked", "platform", platform, "err", err)
	}
}

// hasAttachments reports whether any input of the turn has one: turns
// without skip the attachment steps (and their context and timer).
func (r *turnRun) hasAttachments() bool {
	for _, in := range r.req.GetInputs() {
		if len(in.GetAttachments()) > 0 {
			return true
		}
	}
	return false
}

// cancellable runs fn under a context that a /stop, a newer message or
// the lock's loss end at once, as they end a model call; fn then sees
// stoppedByUser, and the turn's next checkpoint stops it.
func (r *turnRun) cancellable(ctx context.Context, fn func(context.Context) error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := r.ctl.duringCall(cancel); err != nil {
		cancel(err) // already stopped: fn reads nothing
	}
	defer func() { _ = r.ctl.duringCall(nil) }()
	return fn(cctx)
}

// isPicture: an attachment shown to the model as a picture.
func isPicture(a *eventsv1.Attachment) bool {
	switch a.GetKind() {
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE:
		return true
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER:
		return attachment.IsPictureType(a.GetMimeType())
	}
	return false
}

// isSpeech: an attachment transcribed for the model.
func isSpeech(a *eventsv1.Attachment) bool {
	return a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE || a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
}

// readAtBegin reports whether the turn's beginning reads a (into the
// stored message): speech when it can be transcribed, text documents, and
// pictures unless they are off.
func (r *turnRun) readAtBegin(a *eventsv1.Attachment) bool {
	switch {
	case isSpeech(a):
		return r.s.stt != nil
	case isPicture(a):
		return r.s.cfg.Agent.Images != ImagesOff
	}
	return attachment.IsTextDocument(a)
}

// Transcriber turns speech into text (an OpenAI-compatible
// /audio/transcriptions endpoint). It reads audio as it uploads it, to
// its end, and never after it returns.
type Transcriber interface {
	Transcribe(ctx context.Context, audio io.Reader, filename, mime string) (string, error)
}

// inputText renders an inbound message for the model, as it is stored in
// the transcript: the message it replies to, its text, and a line for
// each attachment. A voice message's line says what it said (Hermes's
// words), a text document's carries its content; both are read once, as
// the turn begins, and stored with the message, so later turns see them
// too. Pictures are named here, with why one cannot be shown, and shown
// to the model by attachImages.
func (r *turnRun) inputText(ctx context.Context, in *eventsv1.MessageReceived) string {
	r.preparePictures(ctx, in)
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
	if a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER {
		return stickerLine(a)
	}
	if isSpeech(a) && r.s.stt == nil && a.GetUnavailable() == "" {
		return attachmentLine(a, text, "no speech-to-text is configured")
	}
	if a.GetBytesRef() != "" && a.GetUnavailable() == "" {
		switch {
		case isSpeech(a):
			heard, err := r.transcribe(ctx, a)
			if err == nil {
				if a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE {
					return fmt.Sprintf("[The user sent a voice message~ Here's what they said: %q]", heard)
				}
				return fmt.Sprintf("[The user sent an audio file%s~ Here's what it says: %q]", quotedName(a), heard)
			}
			r.log.Warn("speech not transcribed", "ref", a.GetBytesRef(), "err", err)
			if errors.Is(err, attachment.ErrTooLarge) {
				return attachmentLine(a, text, fmt.Sprintf("it is too large to be transcribed (over %s)", attachment.Size(r.s.cfg.MaxAttachmentBytes)))
			}
			return attachmentLine(a, text, "it could not be transcribed")
		case attachment.IsTextDocument(a):
			if doc, ok := r.documentText(ctx, a); ok {
				return doc
			}
		}
	}
	return attachmentLine(a, text, a.GetUnavailable())
}

// stickerLine tells of a sticker in Hermes's words; the model sees a
// static one as a picture besides (attachImages).
func stickerLine(a *eventsv1.Attachment) string {
	var b strings.Builder
	b.WriteString("[The user sent ")
	if isPicture(a) {
		b.WriteString("a sticker")
	} else {
		b.WriteString("an animated sticker")
	}
	if e := a.GetStickerEmoji(); e != "" {
		b.WriteByte(' ')
		b.WriteString(e)
	}
	b.WriteString(quotedName(a)) // a Discord sticker's name
	if set := a.GetStickerSet(); set != "" {
		fmt.Fprintf(&b, " from %q", set)
	}
	if u := a.GetUnavailable(); u != "" {
		b.WriteString(" (unavailable: ")
		b.WriteString(u)
		b.WriteByte(')')
	}
	b.WriteByte(']')
	return b.String()
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
var errNoTranscriber = errors.New("no speech-to-text provider configured")

// defaultTranscribeTimeout bounds a transcription when
// Config.TranscribeTimeout is not set: Hermes's 30 s (stt.timeout's
// default).
const defaultTranscribeTimeout = llm.DefaultTranscriptionTimeout

// errTranscribeTimeout ends a transcription that took longer than
// Config.TranscribeTimeout.
var errTranscribeTimeout = errors.New("transcription took too long")

// transcribe turns a voice message or audio file into text. The audio is
// streamed from the attachment store to the speech-to-text upload, a
// chunk or two at a time, never read whole into memory; one over
// MaxAttachmentBytes is refused (attachment.ErrTooLarge) before a chunk
// is read or anything is sent, and no more than its stored size is read.
// TranscribeTimeout bounds the store's read and the upload together: the
// transcriber waits for a read in progress before it returns, so a read
// bound by the turn alone (a store whose chunks do not come) held the
// turn past the transcriber's own bound.
func (r *turnRun) transcribe(ctx context.Context, a *eventsv1.Attachment) (string, error) {
	if r.s.stt == nil {
		return "", errNoTranscriber
	}
	ctx, cancel := context.WithTimeoutCause(ctx, r.s.cfg.TranscribeTimeout, errTranscribeTimeout)
	defer cancel()
	audio, err := r.s.media.Reader(ctx, a.GetBytesRef(), r.s.cfg.MaxAttachmentBytes)
	if err != nil {
		return "", err
	}
	defer func() { _ = audio.Close() }()
	mime := cmp.Or(a.GetMimeType(), audio.MimeType)
	name := a.GetFileName()
	if name == "" || path.Ext(name) == "" {
		name = "voice" + audioExt(mime)
	}
	text, err := r.s.stt.Transcribe(ctx, newStoredAudio(audio, audio.Size), name, mime)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(text), nil
}

// storedAudio is a kept file read for an upload: it says its stored size
// (Len, which the upload sends as its length) and fails a read past it,
// so a store whose size lied streams no more than the size checked
// against MaxAttachmentBytes.
type storedAudio struct {
	r          io.Reader
	left, size int64
}

func newStoredAudio(r io.Reader, size int64) *storedAudio {
	return &storedAudio{r: r, left: size, size: size}
}

// Len is the number of bytes left to read, as strings.Reader's.
func (s *storedAudio) Len() int { return int(s.left) }

func (s *storedAudio) Read(p []byte) (int, error) {
	if int64(len(p)) > s.left+1 {
		p = p[:s.left+1] // one more, to find a file longer than stored
	}
	n, err := s.r.Read(p)
	if int64(n) > s.left {
		n, s.left = int(s.left), 0
		return n, fmt.Errorf("audio: more than its stored %d bytes", s.size)
	}
	s.left -= int64(n)
	return n, err
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
		note = fmt.Sprintf("The first %s of its %s are included below; the rest was cut.", attachment.Size(limit), attachment.Size(size))
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
