package telegram

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Telegram's limits, in UTF-16 code units.
const (
	maxText    = 4096
	maxCaption = 1024
)

func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

// chatID keeps numeric ids numeric and passes @channelusername through.
func chatID(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

func threadID(t *deliveryv1.Target) int {
	if t.GetThreadId() == "" || t.GetThreadId() == generalTopic {
		return 0
	}
	n, _ := strconv.Atoi(t.GetThreadId())
	return n
}

// replyTo threads the answer to the user's message: the first chunk only
// (reply_to_mode first, Hermes's default), every chunk (all) or never.
func (p *Platform) replyTo(req *deliveryv1.SendRequested) *models.ReplyParameters {
	id, err := strconv.Atoi(req.GetTarget().GetReplyToMessageId())
	if err != nil || id == 0 {
		return nil
	}
	switch p.cfg.ReplyToMode {
	case "off":
		return nil
	case "all":
	default:
		if req.GetChunkIndex() > 0 {
			return nil
		}
	}
	return &models.ReplyParameters{MessageID: id, AllowSendingWithoutReply: true}
}

// formatted returns the text and parse mode to try first.
func formatted(req *deliveryv1.SendRequested) (string, models.ParseMode) {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return req.GetText(), ""
	}
	return markup.Telegram.Convert(req.GetText()), models.ParseModeMarkdown
}

// withPlainFallback runs send with MarkdownV2 and, when Telegram rejects
// the entities, once more as plain text with no parse mode: the
// Markdown without its markers (**bold** → bold, a link → "text (url)",
// no heading #s or code backticks), as Hermes strips them
// (_strip_mdv2) rather than showing the raw syntax. The gateway does
// the fallback itself (rather than answering ERROR_CLASS_FORMAT and
// waiting for delivery's retry) so a chunk costs one request/reply.
// The plain text is never longer than the Markdown, so it fits too.
func (p *Platform) withPlainFallback(req *deliveryv1.SendRequested, send func(text string, mode models.ParseMode) error) error {
	text, mode := formatted(req)
	err := send(text, mode)
	if err != nil && mode != "" && isEntityError(err) {
		p.log.Debug("telegram rejected MarkdownV2; resending as plain text", "err", err)
		err = send(markup.Plain.Convert(req.GetText()), "")
	}
	return err
}

// isTopicGone reports whether Telegram refused a send for its
// message_thread_id: the forum topic was deleted (or never existed).
func isTopicGone(err error) bool {
	return errors.Is(err, bot.ErrorBadRequest) && strings.Contains(strings.ToLower(err.Error()), "message thread not found")
}

// inTopic runs send with the target's topic (0 for none). When Telegram
// answers that the topic is not found, it tries the topic once more
// (Telegram has been seen to say so in passing), then, in a group, sends
// without it, as Hermes does: the answer reaches the chat instead of
// being dropped with a deleted topic. A private chat's topic is not left
// (the answer would land outside the conversation it belongs to): the
// refusal stands there.
func (p *Platform) inTopic(t *deliveryv1.Target, send func(thread int) error) error {
	thread := threadID(t)
	err := send(thread)
	if thread == 0 || !isTopicGone(err) {
		return err
	}
	if err = send(thread); !isTopicGone(err) {
		return err
	}
	if !strings.HasPrefix(t.GetChatId(), "-") {
		return err
	}
	p.log.Warn("telegram topic not found; sending to the chat without it", "chat_id", t.GetChatId(), "thread", thread)
	return send(0)
}

func isEntityError(err error) bool {
	return errors.Is(err, bot.ErrorBadRequest) && strings.Contains(err.Error(), "can't parse entities")
}

func checkLength(text string, limit int) error {
	if n := utf16Len(text); n > limit {
		return platform.Permanent(fmt.Errorf("text is %d UTF-16 units, telegram allows %d", n, limit))
	}
	return nil
}

// Send posts a text message, or the attachments with the text as caption,
// in the supergroup a group was upgraded to (followMigration).
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if req.GetTarget().GetInteraction().GetComponent() {
		return p.refuse(ctx, req)
	}
	var id string
	chat, err := p.followMigration(req, func(req *deliveryv1.SendRequested) error {
		var err error
		id, err = p.send(ctx, req)
		return err
	})
	if err == nil && id != "" && chat != req.GetTarget().GetChatId() {
		p.sentMoved(req.GetTarget().GetChatId(), id)
	}
	return id, err
}

func (p *Platform) send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	t := req.GetTarget()
	if len(req.GetAttachments()) > 0 {
		return p.sendMedia(ctx, req)
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return "", platform.Permanent(errors.New("empty message"))
	}
	if err := checkLength(req.GetText(), maxText); err != nil {
		return "", err
	}
	var msg *models.Message
	err := p.inTopic(t, func(thread int) error {
		return p.withPlainFallback(req, func(text string, mode models.ParseMode) error {
			var err error
			params := &bot.SendMessageParams{
				ChatID: chatID(t.GetChatId()), MessageThreadID: thread, Text: text, ParseMode: mode,
				ReplyParameters: p.replyTo(req),
			}
			if kb := replyMarkup(req); kb != nil {
				params.ReplyMarkup = kb
			}
			msg, err = p.api.SendMessage(ctx, params)
			return err
		})
	})
	if err != nil {
		return "", classify(err)
	}
	return strconv.Itoa(msg.ID), nil
}

// sendMedia sends each attachment (photo, animation, voice message, audio
// or document); the text rides as
// the first one's caption when it fits, else it goes first on its own,
// and so does an attachment's own caption over Telegram's 1,024. Each
// message is a part of the send (the text 0, attachment i i+1, its
// caption sent apart n+1+i): a retry after a later part failed skips the
// parts already sent (platform.SentPart).
func (p *Platform) sendMedia(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	t := req.GetTarget()
	caption := req.GetText()
	first := ""
	if caption != "" && utf16Len(caption) > maxCaption {
		id, sent := platform.SentPart(ctx, 0)
		if !sent {
			text := &deliveryv1.SendRequested{Target: t, Text: caption, Format: req.GetFormat(), ChunkIndex: req.GetChunkIndex()}
			var err error
			if id, err = p.Send(ctx, text); err != nil {
				return "", err
			}
			platform.RecordPart(ctx, 0, id)
		}
		first, caption = id, ""
	}
	for i, a := range req.GetAttachments() {
		if id, sent := platform.SentPart(ctx, i+1); sent {
			if first == "" {
				first = id
			}
			caption = ""
			continue
		}
		input, kind, err := p.inputFile(ctx, a)
		if err != nil {
			return first, fmt.Errorf("attachment %d: %w", i, err)
		}
		sub := &deliveryv1.SendRequested{Target: t, Text: caption, Format: req.GetFormat(), ChunkIndex: req.GetChunkIndex()}
		if first != "" || i > 0 {
			sub.ChunkIndex = 1 // reply-thread only the first message
		}
		if sub.Text == "" {
			sub.Text = a.GetCaption()
			if utf16Len(sub.Text) > maxCaption {
				// Its own caption is over Telegram's bound for captions:
				// it goes first on its own, as the send's text does, a
				// part after the attachments' (n+1+i), rather than the
				// file being refused with it.
				id, err := p.sendCaption(ctx, sub, len(req.GetAttachments()), i)
				if err != nil {
					return first, err
				}
				if first == "" {
					first = id
				}
				sub.Text, sub.ChunkIndex = "", 1
			}
		}
		id, err := p.sendFile(ctx, sub, input, kind)
		if err != nil && urlRefused(err) && isWebURL(a.GetUrl()) {
			id, err = p.sendFetched(ctx, sub, a, err)
		}
		if err != nil {
			return first, classify(err)
		}
		platform.RecordPart(ctx, i+1, id)
		if first == "" {
			first = id
		}
		caption = ""
	}
	return first, nil
}

// sendCaption sends sub's text, attachment i's own caption of n, on its
// own before the attachment, unless an earlier attempt did, and returns
// its first message's id. A caption is not cut by delivery: one over
// Telegram's 4,096 for a text goes as several messages (platform.Pieces,
// the first part n+1+i, the others platform.CaptionPiecePart), rather
// than Telegram refusing it and the file with it.
func (p *Platform) sendCaption(ctx context.Context, sub *deliveryv1.SendRequested, n, i int) (string, error) {
	part := func(j int) int {
		if j == 0 {
			return n + 1 + i
		}
		return platform.CaptionPiecePart(n, i, j)
	}
	pieces := platform.Pieces(sub.GetText(), chunk.Limit{Max: maxText, Measure: chunk.UTF16})
	if len(pieces) == 1 {
		if id, sent := platform.SentPart(ctx, part(0)); sent {
			return id, nil
		}
		id, err := p.Send(ctx, &deliveryv1.SendRequested{Target: sub.GetTarget(), Text: sub.GetText(), Format: sub.GetFormat(), ChunkIndex: sub.GetChunkIndex()})
		if err != nil {
			return "", err
		}
		platform.RecordPart(ctx, part(0), id)
		return id, nil
	}
	return platform.SendPieces(ctx, pieces, part, func(ctx context.Context, j int, piece string) (string, error) {
		msg := &deliveryv1.SendRequested{Target: sub.GetTarget(), Text: piece, Format: sub.GetFormat(), ChunkIndex: sub.GetChunkIndex()}
		if j > 0 {
			msg.ChunkIndex = 1 // reply-thread only the first message
		}
		return p.Send(ctx, msg)
	})
}

// fileKind is how a file goes to Telegram.
type fileKind int

const (
	asDocument fileKind = iota
	asPhoto
	// asAnimation: a GIF, sent with sendAnimation so that it plays in
	// the chat (sendPhoto would make a still picture of it), as Hermes's
	// send_animation does.
	asAnimation
	// asVoice: a voice message (sendVoice: Opus in Ogg, MP3 or M4A),
	// which Telegram shows with a waveform and plays in place, as
	// Hermes's send_voice does for its voice replies.
	asVoice
	// asAudio: an audio file (sendAudio: MP3 or M4A), shown in the
	// chat's music player.
	asAudio
)

// fileKindOf is how an attachment whose bytes are of mimeType and size
// (0: unknown, a URL) goes: a voice message (ATTACHMENT_KIND_VOICE) in a
// format Telegram plays as one with sendVoice, an audio file in MP3 or
// M4A with sendAudio, a picture as pictureKind says, anything else as a
// document.
func fileKindOf(a *eventsv1.Attachment, mimeType string, size int) fileKind {
	mt := strings.ToLower(a.GetMimeType())
	if mt == "" {
		mt = strings.ToLower(mimeType)
	}
	mt, _, _ = strings.Cut(mt, ";")
	name := strings.ToLower(a.GetFileName())
	voiceFormat := mt == "audio/ogg" || mt == "audio/opus" || strings.HasSuffix(name, ".ogg") || strings.HasSuffix(name, ".oga") || strings.HasSuffix(name, ".opus")
	audioFormat := mt == "audio/mpeg" || mt == "audio/mp3" || mt == "audio/mp4" || mt == "audio/m4a" || mt == "audio/x-m4a" ||
		strings.HasSuffix(name, ".mp3") || strings.HasSuffix(name, ".m4a")
	switch a.GetKind() {
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE:
		if voiceFormat || audioFormat {
			return asVoice
		}
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO:
		if audioFormat {
			return asAudio
		}
	}
	return pictureKind(a, mimeType, size)
}

// isGIF reports whether a picture is a GIF: its type says so, or its
// URL's path ends in .gif (Hermes's _is_animation_url: the query left
// out, any case).
func isGIF(a *eventsv1.Attachment, mimeType string) bool {
	if strings.EqualFold(mimeType, "image/gif") || strings.EqualFold(a.GetMimeType(), "image/gif") {
		return true
	}
	u, _, _ := strings.Cut(a.GetUrl(), "?")
	u, _, _ = strings.Cut(u, "#")
	return isWebURL(a.GetUrl()) && strings.HasSuffix(strings.ToLower(u), ".gif")
}

// pictureKind is how a picture of size bytes (0: unknown, a URL) goes:
// a GIF as an animation (up to 50 MB), any other as a photo up to
// Telegram's 10 MB for photos, a document above.
func pictureKind(a *eventsv1.Attachment, mimeType string, size int) fileKind {
	if a.GetKind() != eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE {
		return asDocument
	}
	if isGIF(a, mimeType) {
		return asAnimation
	}
	if size > maxPhotoUpload {
		return asDocument
	}
	return asPhoto
}

// sendFile sends one file as a photo, an animation or a document, sub's
// text as its caption. An animation Telegram refuses (not a GIF it can
// play) goes as a photo, as Hermes's send_animation falls back.
func (p *Platform) sendFile(ctx context.Context, sub *deliveryv1.SendRequested, input func() models.InputFile, kind fileKind) (string, error) {
	id, err := p.sendFileAs(ctx, sub, input, kind)
	refused := err != nil && errors.Is(err, bot.ErrorBadRequest) && !urlRefused(err) && !isTopicGone(err) && !isEntityError(err)
	switch {
	case kind == asAnimation && refused:
		p.log.Info("telegram refused the animation; sending it as a photo", "err", err)
		return p.sendFileAs(ctx, sub, input, asPhoto)
	case (kind == asVoice || kind == asAudio) && refused:
		// A user whose privacy settings refuse voice messages
		// (VOICE_MESSAGES_FORBIDDEN), or audio Telegram cannot play:
		// the file still arrives, as a document.
		p.log.Info("telegram refused the voice message or audio; sending it as a file", "err", err)
		return p.sendFileAs(ctx, sub, input, asDocument)
	}
	return id, err
}

func (p *Platform) sendFileAs(ctx context.Context, sub *deliveryv1.SendRequested, input func() models.InputFile, kind fileKind) (string, error) {
	t := sub.GetTarget()
	var msg *models.Message
	err := p.inTopic(t, func(thread int) error {
		return p.withPlainFallback(sub, func(text string, mode models.ParseMode) error {
			var err error
			in := input()
			switch kind {
			case asPhoto:
				msg, err = p.api.SendPhoto(ctx, &bot.SendPhotoParams{ChatID: chatID(t.GetChatId()), MessageThreadID: thread,
					Photo: in, Caption: text, ParseMode: mode, ReplyParameters: p.replyTo(sub)})
			case asAnimation:
				msg, err = p.api.SendAnimation(ctx, &bot.SendAnimationParams{ChatID: chatID(t.GetChatId()), MessageThreadID: thread,
					Animation: in, Caption: text, ParseMode: mode, ReplyParameters: p.replyTo(sub)})
			case asVoice:
				msg, err = p.api.SendVoice(ctx, &bot.SendVoiceParams{ChatID: chatID(t.GetChatId()), MessageThreadID: thread,
					Voice: in, Caption: text, ParseMode: mode, ReplyParameters: p.replyTo(sub)})
			case asAudio:
				msg, err = p.api.SendAudio(ctx, &bot.SendAudioParams{ChatID: chatID(t.GetChatId()), MessageThreadID: thread,
					Audio: in, Caption: text, ParseMode: mode, ReplyParameters: p.replyTo(sub)})
			default:
				msg, err = p.api.SendDocument(ctx, &bot.SendDocumentParams{ChatID: chatID(t.GetChatId()), MessageThreadID: thread,
					Document: in, Caption: text, ParseMode: mode, ReplyParameters: p.replyTo(sub)})
			}
			return err
		})
	})
	if err != nil {
		return "", err
	}
	return strconv.Itoa(msg.ID), nil
}

// urlRefused reports whether Telegram refused a file given by URL for
// the file itself: it could not fetch the URL (unreachable, not an
// image, too large for it) or not process what it got.
func urlRefused(err error) bool {
	if !errors.Is(err, bot.ErrorBadRequest) {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"http url", "wrong file identifier", "web page content", "wrong remote file", "failed to get",
		"image_process_failed", "photo_invalid_dimensions", "photo_save_file_invalid", "file is too big"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func isWebURL(u string) bool {
	return strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")
}

// sendFetched is Hermes's fallback for a file Telegram could not take
// by URL (send_image): the gateway downloads it (public addresses only,
// unless attachments.urls allows more) and uploads it, a picture as a
// photo (a document over 10 MB), a GIF as an animation; when that fails too, the caption and
// the link go as a text message, so the user still gets the file's
// address rather than nothing. refused is Telegram's answer to the URL.
func (p *Platform) sendFetched(ctx context.Context, sub *deliveryv1.SendRequested, a *eventsv1.Attachment, refused error) (string, error) {
	p.log.Info("telegram could not take a file by URL; uploading it", "err", refused)
	src := &eventsv1.Attachment{Location: &eventsv1.Attachment_Url{Url: a.GetUrl()}, MimeType: a.GetMimeType()}
	data, mimeType, err := platform.ReadOutbound(ctx, src, nil, p.downloads, maxDocumentUpload)
	if err == nil {
		kind := fileKindOf(a, mimeType, len(data))
		name := platform.FileName(a, mimeType)
		id, err := p.sendFile(ctx, sub, func() models.InputFile { return &models.InputFileUpload{Filename: name, Data: bytes.NewReader(data)} }, kind)
		if err == nil || !errors.Is(err, bot.ErrorBadRequest) || isTopicGone(err) {
			return id, err
		}
		p.log.Info("telegram refused the uploaded file; sending its link", "err", err)
	} else {
		p.log.Info("file to send not downloaded; sending its link", "err", err)
	}
	text := strings.TrimSpace(strings.TrimSpace(sub.GetText()) + "\n" + a.GetUrl())
	return p.Send(ctx, &deliveryv1.SendRequested{Target: sub.GetTarget(), Text: text, Format: sub.GetFormat(), ChunkIndex: sub.GetChunkIndex()})
}

// Telegram's limits of a file a bot uploads: a photo, any other file.
const (
	maxPhotoUpload    = 10 << 20
	maxDocumentUpload = 50 << 20
)

// inputFile is how an attachment to send reaches Telegram, made afresh
// for each attempt (an upload's reader is spent by the one before): an
// http(s) URL or a Telegram file id as it is (Telegram fetches it),
// bytes (a data: URL, or kept in the attachment store) uploaded. kind
// is how it goes (pictureKind): a GIF as an animation, another picture
// as a photo unless its bytes are over Telegram's 10 MB for photos
// (then as a document, up to 50 MB), any other file as a document.
func (p *Platform) inputFile(ctx context.Context, a *eventsv1.Attachment) (input func() models.InputFile, kind fileKind, err error) {
	u := a.GetUrl()
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") || (u == "" && a.GetBytesRef() == "" && a.GetPlatformFileId() != "") {
		file := u
		if file == "" {
			file = a.GetPlatformFileId()
		}
		return func() models.InputFile { return &models.InputFileString{Data: file} }, fileKindOf(a, "", 0), nil
	}
	if u == "" && a.GetBytesRef() == "" {
		return nil, asDocument, platform.Permanent(errors.New("no url, kept bytes or telegram file id"))
	}
	data, mimeType, err := platform.ReadOutbound(ctx, a, p.store, nil, maxDocumentUpload)
	if err != nil {
		return nil, asDocument, err
	}
	name := platform.FileName(a, mimeType)
	return func() models.InputFile { return &models.InputFileUpload{Filename: name, Data: bytes.NewReader(data)} }, fileKindOf(a, mimeType, len(data)), nil
}

// Edit replaces a message's text (streaming, an approval prompt's
// answer, a picker's page or answer). Sent without reply_markup, the
// edit takes an inline keyboard off. "message is not modified" counts as success.
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	id, err := strconv.Atoi(req.GetMessageId())
	if err != nil {
		return platform.Permanent(fmt.Errorf("message id %q is not a telegram message id", req.GetMessageId()))
	}
	if to := p.movedMessage(req.GetTarget().GetChatId(), req.GetMessageId()); to != "" {
		req = inChat(req, to) // sent to the supergroup in the old group's place
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return platform.Permanent(errors.New("empty message"))
	}
	if err := checkLength(req.GetText(), maxText); err != nil {
		return err
	}
	err = p.withPlainFallback(req, func(text string, mode models.ParseMode) error {
		params := &bot.EditMessageTextParams{ChatID: chatID(req.GetTarget().GetChatId()), MessageID: id, Text: text, ParseMode: mode}
		if kb := replyMarkup(req); kb != nil {
			params.ReplyMarkup = kb // a picker's next page
		}
		_, err := p.api.EditMessageText(ctx, params)
		return err
	})
	if err != nil && errors.Is(err, bot.ErrorBadRequest) && strings.Contains(err.Error(), "message is not modified") {
		return nil
	}
	return classify(err)
}

// Delete removes a message; one already gone counts as deleted.
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	id, err := strconv.Atoi(req.GetMessageId())
	if err != nil {
		return platform.Permanent(fmt.Errorf("message id %q is not a telegram message id", req.GetMessageId()))
	}
	if to := p.movedMessage(req.GetTarget().GetChatId(), req.GetMessageId()); to != "" {
		req = inChat(req, to) // sent to the supergroup in the old group's place
	}
	_, err = p.api.DeleteMessage(ctx, &bot.DeleteMessageParams{ChatID: chatID(req.GetTarget().GetChatId()), MessageID: id})
	if err != nil && errors.Is(err, bot.ErrorBadRequest) && strings.Contains(err.Error(), "message to delete not found") {
		return nil
	}
	return classify(err)
}

// Typing sends the typing chat action (it shows for about 5 s) into the
// target's topic. Unlike a message, the action names a forum's General
// topic by its id, 1: sent without a thread, Telegram's clients show it
// in no topic, and General's view never shows the bot typing (Hermes's
// _message_thread_id_for_typing, kept apart from its sends' on purpose).
// Should Telegram refuse thread 1 as not found (a chat that is no forum
// any more), the action goes without a thread. A group upgraded to a
// supergroup sees it in the supergroup (followMigration).
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	_, err := p.followMigration(req, func(req *deliveryv1.SendRequested) error { return p.typing(ctx, req) })
	return err
}

func (p *Platform) typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	t := req.GetTarget()
	thread := threadID(t)
	if t.GetThreadId() == generalTopic {
		thread = 1
	}
	action := func(thread int) error {
		_, err := p.api.SendChatAction(ctx, &bot.SendChatActionParams{ChatID: chatID(t.GetChatId()), MessageThreadID: thread, Action: models.ChatActionTyping})
		return err
	}
	err := action(thread)
	if thread == 1 && t.GetThreadId() == generalTopic && isTopicGone(err) {
		err = action(0)
	}
	return classify(err)
}

// classify maps library errors to delivery's error classes: flood wait →
// RATE_LIMITED with retry_after; 400/403/401/404 → PERMANENT (chat not
// found, blocked, migrated, bad request); everything else (network, 5xx)
// stays retryable.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var tmr *bot.TooManyRequestsError
	if errors.As(err, &tmr) {
		return platform.RateLimited(err, secondsDur(tmr.RetryAfter))
	}
	var mig *bot.MigrateError
	if errors.As(err, &mig) {
		return platform.Permanent(fmt.Errorf("group migrated to supergroup %d: %w", mig.MigrateToChatID, err))
	}
	switch {
	case isEntityError(err):
		return platform.FormatRejected(err)
	case errors.Is(err, bot.ErrorForbidden), errors.Is(err, bot.ErrorBadRequest),
		errors.Is(err, bot.ErrorUnauthorized), errors.Is(err, bot.ErrorNotFound):
		return platform.Permanent(err)
	}
	return err
}
