package whatsapp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// WhatsApp's limits, in characters: a text message (Hermes's practical
// limit; the API takes 4,096) and a media caption.
const (
	maxText    = 4096
	maxCaption = 1024
)

// recipient is the "to" of a chat id: a wa_id, also when given as
// +number or a Hermes bridge JID (15551234567@s.whatsapp.net).
func recipient(chatID string) string {
	to := strings.TrimPrefix(strings.TrimSpace(chatID), "+")
	if i := strings.IndexAny(to, ":@"); i >= 0 {
		to = to[:i]
	}
	return to
}

// businessScoped reports whether a recipient is a business-scoped user
// id (BSUID: a country code, ".", then letters and digits, such as
// "US.13491208655302741918" or "US.ENT.1181…") rather than a wa_id,
// which is digits.
func businessScoped(id string) bool {
	return len(id) > 3 && id[0] >= 'A' && id[0] <= 'Z' && id[1] >= 'A' && id[1] <= 'Z' && id[2] == '.'
}

// sent is the Graph API's answer to a message: its wamid.
type sent struct {
	Messages []struct {
		ID string `json:"id"`
	} `json:"messages"`
}

// postMessage sends one message object (without messaging_product and
// to, which it adds) and returns its wamid. part is the message's part
// of the send (platform.SendTag), noPart for a message outside a send's
// records (a reaction): a part's retry after an attempt that ended
// without an answer first looks for WhatsApp's report of it (resend.go).
func (p *Platform) postMessage(ctx context.Context, to string, msg map[string]any, part int) (string, error) {
	if to == "" {
		return "", platform.Permanent(errors.New("no whatsapp recipient"))
	}
	tag, tagged := "", false
	if part != noPart {
		tag, tagged = platform.SendTag(ctx, part)
	}
	if tagged {
		if id, err := p.reported(ctx, part); id != "" || err != nil {
			return id, err
		}
		msg["biz_opaque_callback_data"] = tag
	}
	msg["messaging_product"] = "whatsapp"
	msg["recipient_type"] = "individual"
	if businessScoped(to) {
		// A user whose username hides their number: "to" takes phone
		// numbers only, a BSUID goes in "recipient".
		msg["recipient"] = to
	} else {
		msg["to"] = to
	}
	var out sent
	err := p.graph.post(ctx, "messages", msg, &out)
	if err == nil && (len(out.Messages) == 0 || out.Messages[0].ID == "") {
		err = errors.New("graph api answered a message without its id")
	}
	if err != nil {
		err = classify(err)
		if tagged && unanswered(err) {
			p.markUnsure(ctx, part)
		}
		return "", err
	}
	return out.Messages[0].ID, nil
}

// quote makes the message quote the user's: the first chunk of an answer
// only, as Hermes does.
func quote(msg map[string]any, req *deliveryv1.SendRequested) {
	if id := req.GetTarget().GetReplyToMessageId(); id != "" && req.GetChunkIndex() == 0 {
		msg["context"] = map[string]any{"message_id": id}
	}
}

// formatted is the text as WhatsApp shows it: the model's Markdown
// converted to WhatsApp's formatting, unless the request is plain text.
func formatted(req *deliveryv1.SendRequested) string {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return req.GetText()
	}
	return markup.WhatsApp.Convert(req.GetText())
}

// Send posts a text message, or the attachments with the text as the
// first one's caption.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if len(req.GetAttachments()) > 0 {
		return p.sendMedia(ctx, req)
	}
	return p.sendText(ctx, req, func(i int) int { return i })
}

// sendText posts req's text, its piece i as part part(i) of the send.
// Delivery cut the Markdown to WhatsApp's 4,096 characters, but the
// conversion may make it longer ("> " for a quote's ">", a code block's
// missing close): then it goes as several messages (platform.Pieces),
// rather than WhatsApp refusing the one.
func (p *Platform) sendText(ctx context.Context, req *deliveryv1.SendRequested, part func(i int) int) (string, error) {
	text := formatted(req)
	if strings.TrimSpace(text) == "" {
		return "", platform.Permanent(errors.New("empty message"))
	}
	pieces := []string{text}
	if req.GetFormat() != deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		pieces = platform.Pieces(text, chunk.Limit{Max: maxText, Measure: chunk.Runes})
	}
	return p.postPieces(ctx, req, pieces, part)
}

// postPieces posts pieces as text messages to req's target, piece i as
// part part(i) of the send, the first quoting the user's message when
// req's is the answer's first chunk.
func (p *Platform) postPieces(ctx context.Context, req *deliveryv1.SendRequested, pieces []string, part func(i int) int) (string, error) {
	if n := utf8.RuneCountInString(pieces[0]); n > maxText {
		return "", platform.Permanent(fmt.Errorf("text is %d characters, whatsapp allows %d", n, maxText))
	}
	to := recipient(req.GetTarget().GetChatId())
	return platform.SendPieces(ctx, pieces, part, func(ctx context.Context, i int, piece string) (string, error) {
		msg := map[string]any{"type": "text", "text": map[string]any{"body": piece, "preview_url": true}}
		if i == 0 {
			quote(msg, req)
		}
		return p.postMessage(ctx, to, msg, part(i))
	})
}

// mediaType is the Cloud API message type an attachment is sent as.
func mediaType(a *eventsv1.Attachment) string {
	switch a.GetKind() {
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE:
		return "image"
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO:
		return "video"
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE:
		return "audio"
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER:
		return "sticker"
	}
	return "document"
}

// captioned reports whether a message type takes a caption.
func captioned(typ string) bool { return typ == "image" || typ == "video" || typ == "document" }

// sendMedia sends each attachment as a message of its own; the text
// rides as the first one's caption when it can (images, videos and
// documents take 1,024 characters), else it goes first on its own. Each
// message is a part of the send (the text 0, or its pieces textPart,
// attachment i i+1, its caption sent apart captionPart, that caption's
// later pieces platform.CaptionPiecePart): a retry after a later part
// failed skips the parts already sent.
func (p *Platform) sendMedia(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	to := recipient(req.GetTarget().GetChatId())
	atts := req.GetAttachments()
	caption := formatted(req)
	first := ""
	if strings.TrimSpace(caption) != "" && (!captioned(mediaType(atts[0])) || utf8.RuneCountInString(caption) > maxCaption) {
		id, done := platform.SentPart(ctx, 0)
		if !done {
			text := &deliveryv1.SendRequested{Target: req.GetTarget(), Text: req.GetText(), Format: req.GetFormat(), ChunkIndex: req.GetChunkIndex()}
			var err error
			if id, err = p.sendText(ctx, text, func(i int) int { return textPart(len(atts), i) }); err != nil {
				return "", err
			}
			platform.RecordPart(ctx, 0, id)
		}
		first, caption = id, ""
	}
	for i, a := range atts {
		if id, done := platform.SentPart(ctx, i+1); done {
			if first == "" {
				first = id
			}
			caption = ""
			continue
		}
		typ := mediaType(a)
		obj, err := p.mediaObject(ctx, a)
		if err != nil {
			return first, err
		}
		if caption == "" {
			caption = a.GetCaption()
			if own := strings.TrimSpace(caption); own != "" && (!captioned(typ) || utf8.RuneCountInString(own) > maxCaption) {
				// WhatsApp would refuse it with the attachment (or it
				// would be dropped): it goes before it, as a text.
				id, done := platform.SentPart(ctx, captionPart(len(atts), i))
				if !done {
					text := &deliveryv1.SendRequested{Target: req.GetTarget(), Text: own, Format: deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, ChunkIndex: 1}
					if first == "" && i == 0 {
						text.ChunkIndex = req.GetChunkIndex() // the first message quotes the user's
					}
					// Delivery never cut it: over a text's 4,096 it goes
					// as several texts, the first its caption's part, the
					// others parts of their own.
					piecePart := func(j int) int {
						if j == 0 {
							return captionPart(len(atts), i)
						}
						return platform.CaptionPiecePart(len(atts), i, j)
					}
					pieces := platform.Pieces(own, chunk.Limit{Max: maxText, Measure: chunk.Runes})
					if id, err = p.postPieces(ctx, text, pieces, piecePart); err != nil {
						return first, err
					}
					platform.RecordPart(ctx, captionPart(len(atts), i), id)
				}
				if first == "" {
					first = id
				}
				caption = ""
			}
		}
		var msg map[string]any
		if linkOnly(typ, a) {
			// WhatsApp would accept the image and then fail to deliver
			// it: its caption and link go as a text, which WhatsApp
			// previews.
			msg = map[string]any{"type": "text", "text": map[string]any{
				"body": strings.TrimSpace(strings.TrimSpace(caption) + "\n" + a.GetUrl()), "preview_url": true}}
		} else {
			if captioned(typ) && strings.TrimSpace(caption) != "" {
				obj["caption"] = caption
			}
			if typ == "document" && a.GetFileName() != "" {
				obj["filename"] = a.GetFileName()
			}
			msg = map[string]any{"type": typ, typ: obj}
		}
		if first == "" && i == 0 {
			quote(msg, req)
		}
		id, err := p.postMessage(ctx, to, msg, i+1)
		if err != nil {
			return first, err
		}
		platform.RecordPart(ctx, i+1, id)
		if first == "" {
			first = id
		}
		caption = ""
	}
	return first, nil
}

// linkOnly reports whether an attachment sent as an image is a picture
// by http(s) URL that an image message cannot show: not a JPEG or PNG
// (attachment.IsJPEGOrPNG). Graph accepts such an image message and fails
// it later (131053, in a status notification, after the send's receipt
// said ok), so the picture would never arrive.
func linkOnly(typ string, a *eventsv1.Attachment) bool {
	u := a.GetUrl()
	if typ != "image" || !(strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
		return false
	}
	return !attachment.IsJPEGOrPNG(a)
}

// captionPart is the part of a send that is attachment i's own caption
// sent as a text (after the text, 0, and the attachments, 1…n).
func captionPart(n, i int) int { return n + 1 + i }

// textPart is the part of a send that is piece i of its text sent on its
// own (sendText), after the attachments' and their captions' parts; part
// 0 is the whole text, recorded once every piece went.
func textPart(n, i int) int { return 2*n + 1 + i }

// mediaObject says where WhatsApp takes an attachment from: a public
// http(s) URL as a link, a media id the gateway knows (the user's own
// media, by platform_file_id) as the id, an inline data: URL uploaded to
// the phone number's media first.
func (p *Platform) mediaObject(ctx context.Context, a *eventsv1.Attachment) (map[string]any, error) {
	u := a.GetUrl()
	switch {
	case strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://"):
		return map[string]any{"link": u}, nil
	case strings.HasPrefix(u, "data:"):
		data, mt, _, err := attachment.ParseDataURL(u)
		if err != nil {
			return nil, platform.Permanent(fmt.Errorf("attachment data url: %w", err))
		}
		if a.GetMimeType() != "" {
			mt = a.GetMimeType()
		}
		id, err := p.upload(ctx, data, mt, a.GetFileName())
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id}, nil
	case a.GetBytesRef() != "":
		// Kept in the attachment store (a voice reply, /voice):
		// uploaded as a data: URL's bytes are, as audio.
		data, mt, err := platform.ReadOutbound(ctx, a, p.store, nil, maxMediaUpload)
		if err != nil {
			return nil, err
		}
		id, err := p.upload(ctx, data, mt, a.GetFileName())
		if err != nil {
			return nil, err
		}
		return map[string]any{"id": id}, nil
	case a.GetPlatformFileId() != "":
		return map[string]any{"id": a.GetPlatformFileId()}, nil
	}
	return nil, platform.Permanent(errors.New("attachment has no url, data, kept bytes or whatsapp media id"))
}

// maxMediaUpload is the largest file the Cloud API takes (a document's
// 100 MB; audio's is 16 MB, which it enforces itself).
const maxMediaUpload = 100 << 20

// upload stores data as media of the phone number (POST
// /{phone-number-id}/media, multipart) and returns its id.
func (p *Platform) upload(ctx context.Context, data []byte, mediaType, name string) (string, error) {
	if mediaType == "" {
		mediaType = "application/octet-stream"
	}
	if name == "" {
		name = "file"
	}
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	_ = w.WriteField("messaging_product", "whatsapp")
	_ = w.WriteField("type", mediaType)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
	h.Set("Content-Type", mediaType)
	part, err := w.CreatePart(h)
	if err != nil {
		return "", err
	}
	_, _ = part.Write(data)
	if err := w.Close(); err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.graph.base+"/"+p.graph.phoneID+"/media", &body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	var out struct {
		ID string `json:"id"`
	}
	if err := p.graph.do(req, &out); err != nil {
		return "", classify(err)
	}
	if out.ID == "" {
		return "", errors.New("graph api answered a media upload without its id")
	}
	return out.ID, nil
}

// Edit: the Cloud API cannot edit a sent message. Delivery streams to
// WhatsApp without edits (only the final text is sent), so no edit is
// asked for; one that is gets a permanent error.
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("whatsapp cannot edit a sent message: %w", platform.ErrUnsupported)
}

// Delete: the Cloud API cannot delete a sent message.
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("whatsapp cannot delete a sent message: %w", platform.ErrUnsupported)
}

// Typing marks the user's message read and shows the typing indicator
// (one call: the indicator lasts up to 25 s or until the answer arrives),
// as Hermes does. The Cloud API attaches both to a message the user sent:
// the last one the turn answers. Without one there is nothing to show.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	id := req.GetTarget().GetReplyToMessageId()
	if ids := req.GetInputMessageIds(); len(ids) > 0 {
		id = ids[len(ids)-1]
	}
	if id == "" {
		return nil
	}
	return classify(p.graph.post(ctx, "messages", map[string]any{
		"messaging_product": "whatsapp", "status": "read", "message_id": id,
		"typing_indicator": map[string]any{"type": "text"},
	}, nil))
}
