package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/command"
	"github.com/switchboard-chat/switchboard/pkg/export"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /save <json|md|html> [filename] [redact] is Hermes's
// (gateway/run.py, _handle_save_command): the chat's current
// conversation, rendered as a JSON snapshot, a Markdown transcript or a
// standalone HTML page (pkg/export), comes to the chat as a file;
// redact masks API keys, tokens and credentials first (secret.Redact).
// A bare /save answers the usage, an unknown format Hermes's error and
// the usage. Mid-turn it is refused with the "⏳ Agent is running" text
// (refusedMidTurn): it would export half a turn.
//
// The router renders it: the transcript is in Postgres, which it reads
// for /context already (sessionstore.Export), and the file goes the way
// a voice reply goes, its bytes kept in the attachment store and a
// Media reply event naming them, which delivery sends and the
// platform's gateway uploads as a document. Read-only, so not once: a
// redelivered /save renders again, but the file is kept under a name
// and published under a bus message id and seq that come from the
// inbound event (as its notices' are), so the bus and delivery's
// idempotency key take it once.
//
// Differs from Hermes: a conversation over router.save_max_bytes
// (stored text, or the rendered file) is not sent, with an answer
// saying so (Hermes bounds the stored size); the file name is made safe
// and given the format's extension (command.SaveFileName); on platforms
// whose gateways cannot upload a file from the store (savePlatforms),
// the API among them, /save answers that it cannot send one here.

// defaultSaveMaxBytes is router.save_max_bytes's default.
const defaultSaveMaxBytes = 8 << 20

// maxInlineSave bounds a file sent inline as a data: URL when the
// attachment store cannot keep it: a bus message holds 1 MB by default.
const maxInlineSave = 512 << 10

// savePlatforms are the platforms whose gateways upload a file whose
// bytes are in the attachment store as a document (Telegram
// sendDocument, Discord and Mattermost file uploads, Slack
// files.uploadV2, Matrix m.file, WhatsApp, Signal, BlueBubbles and
// email attachments): voicePlatforms' gateways. The others send files
// only by public URL (LINE, Google Chat, SMS), show none (Home
// Assistant), take no kept bytes (Teams), or answer a program (api,
// webhook).
var savePlatforms = voicePlatforms

// saveNoFiles answers /save where no file can be sent.
const saveNoFiles = "📄 /save sends the conversation as a file, and this platform cannot receive files from the gateway. Use /save from Telegram, Discord, Slack, Matrix, Mattermost, WhatsApp, Signal, BlueBubbles or email."

// saveNoFilesAPI answers /save over the API: the answer is the response
// body, which carries no file.
const saveNoFilesAPI = "📄 /save sends the conversation as a file, which an API response cannot carry. The conversation's messages are yours already; use /save from a chat platform (Telegram, Discord, Slack, …) to get the file."

// saveCommand answers /save.
func (s *Service) saveCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	req, err := command.ParseSave(args)
	switch {
	case errors.Is(err, command.ErrSaveUsage):
		return reply(command.SaveUsage)
	case err != nil:
		return reply(err.Error() + "\n\n" + command.SaveUsage)
	}
	switch {
	case m.platform == "api":
		return reply(saveNoFilesAPI)
	case !savePlatforms[m.platform]:
		return reply(saveNoFiles)
	}
	limit := s.cfg.SaveMaxBytes
	if limit <= 0 {
		limit = defaultSaveMaxBytes
	}
	e, err := s.store.Export(ctx, m.key, sess.ID, limit)
	var big *sessionstore.ExportTooLargeError
	if errors.As(err, &big) {
		return reply(saveTooLarge(big.Bytes, limit, "stored"))
	}
	if err != nil {
		return err
	}
	if len(e.Messages) == 0 {
		return reply(fmt.Sprintf("No messages to save in session `%s` yet: send a message first.", sess.ID))
	}
	e.Title, e.Platform, e.Started = sess.Title, m.platform, sess.CreatedAt
	e.Model = sess.ModelOverride
	if e.Model == "" {
		e.Model = s.provider.Model
	}
	if req.Redact {
		e = export.Redacted(e)
	}
	data, err := export.Render(e, req.Format)
	if err != nil {
		return err
	}
	if int64(len(data)) > limit {
		return reply(saveTooLarge(int64(len(data)), limit, "as "+req.Format))
	}
	name := command.SaveFileName(req.FileName, sess.ID, req.Format)
	caption := "💾 " + name
	if req.Redact {
		caption += " (redacted)"
	}
	a, err := s.keepFile(ctx, m, name, export.MediaType(req.Format), caption, data)
	if err != nil {
		s.log.WarnContext(ctx, "save: file not kept", "err", err, "bytes", len(data))
		return reply("⚠️ Save failed: the file could not be stored for sending. Try again in a moment.")
	}
	if err := s.publishMedia(ctx, m, sess.Generation, a); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "conversation exported", "format", req.Format, "bytes", len(data),
		"messages", len(e.Messages), "redact", req.Redact, "session_key", m.key)
	text := fmt.Sprintf("💾 Saved %s: %s, %s.", plural(len(e.Messages), "message"), name, attachment.Size(int64(len(data))))
	if req.Redact {
		text += " API keys, tokens and credentials are masked."
	}
	return reply(text)
}

// saveTooLarge answers an export over the limit.
func saveTooLarge(size, limit int64, what string) string {
	return fmt.Sprintf("⚠️ This conversation is too large to save: %s %s, the limit is %s (router.save_max_bytes). /new starts a fresh one; /compress does not shrink the export, which keeps every message.",
		attachment.Size(size), what, attachment.Size(limit))
}

// keepFile keeps data in the attachment store under a name that comes
// from the inbound event (a redelivery overwrites the same object) and
// returns the attachment naming it; when the store cannot keep it, a
// small file goes inline as a data: URL, as a voice reply does.
func (s *Service) keepFile(ctx context.Context, m *msgCtx, name, mime, caption string, data []byte) (*eventsv1.Attachment, error) {
	a := &eventsv1.Attachment{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT, MimeType: mime,
		SizeBytes: int64(len(data)), FileName: name, Caption: caption}
	sum := sha256.Sum256([]byte(m.dedupeID))
	ref := "save/" + hex.EncodeToString(sum[:20])
	_, err := s.files.Keep(ctx, ref, mime, bytes.NewReader(data))
	switch {
	case err == nil:
		a.Location = &eventsv1.Attachment_BytesRef{BytesRef: ref}
	case len(data) <= maxInlineSave:
		s.log.InfoContext(ctx, "save: file inlined, the attachment store did not keep it", "err", err)
		a.Location = &eventsv1.Attachment_Url{Url: "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(data)}
	default:
		return nil, fmt.Errorf("keep export (%d bytes): %w", len(data), err)
	}
	return a, nil
}

// publishMedia publishes a file as the next reply about the inbound
// event, as publishNotice a text (publishNext).
func (s *Service) publishMedia(ctx context.Context, m *msgCtx, gen int64, a *eventsv1.Attachment) error {
	ev := &repliesv1.ReplyEvent{Body: &repliesv1.ReplyEvent_Media{Media: &repliesv1.Media{Attachment: a}}}
	return s.publishNext(ctx, m, gen, target(m.ev), ev, "file")
}
