package bluebubbles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxUploadBytes bounds an attachment the gateway sends (iMessage takes
// about 100 MB; an answer's files are far smaller).
const maxUploadBytes = 64 << 20

// sendAttachments uploads each attachment as a message of its own (POST
// /api/v1/message/attachment, multipart: chatGuid, tempGuid, name and the
// file as "attachment"; a voice message with isAudioMessage), then the
// text, as Hermes sends a caption after its file. Each message is a part
// of the send (attachment i is part i, the text the last): a retry after
// a later part failed skips the parts already sent. It returns the first
// message's guid.
func (p *Platform) sendAttachments(ctx context.Context, req *deliveryv1.SendRequested, guid string, since time.Time) (string, error) {
	atts := req.GetAttachments()
	first := ""
	for i, a := range atts {
		id, done := platform.SentPart(ctx, i)
		if !done {
			data, mt, err := platform.ReadOutbound(ctx, a, p.store, p.downloads, maxUploadBytes)
			if err != nil {
				return first, err
			}
			if id, err = p.upload(ctx, attempt{chat: guid, temp: tempGUID(req) + fmt.Sprintf(".%d", i), since: since}, a, data, mt); err != nil {
				return first, err
			}
			platform.RecordPart(ctx, i, id)
		}
		if first == "" {
			first = id
		}
	}
	text := formatted(req)
	if text == "" {
		return first, nil
	}
	if _, done := platform.SentPart(ctx, len(atts)); done {
		return first, nil
	}
	id, err := p.sendText(ctx, req, guid, text, since)
	if err != nil {
		return first, err
	}
	platform.RecordPart(ctx, len(atts), id)
	return first, nil
}

// extensions name a file of a media type that came without a name.
var extensions = map[string]string{"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp",
	"audio/mpeg": ".mp3", "audio/ogg": ".ogg", "audio/mp4": ".m4a", "audio/x-caf": ".caf", "video/mp4": ".mp4", "application/pdf": ".pdf"}

// upload posts one file to the chat and returns the message's guid.
func (p *Platform) upload(ctx context.Context, at attempt, a *eventsv1.Attachment, data []byte, mt string) (string, error) {
	if mt == "" {
		mt = http.DetectContentType(data)
		mt, _, _ = strings.Cut(mt, ";")
	}
	name := cleanName(a.GetFileName())
	if name == "" {
		name = "file" + extensions[mt]
		if exts, _ := mime.ExtensionsByType(mt); extensions[mt] == "" && len(exts) > 0 {
			name = "file" + exts[0]
		}
	}
	at.match = fileIs(name)
	if id, err := p.settled(ctx, at); id != "" || err != nil {
		return id, err
	}
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	_ = w.WriteField("chatGuid", at.chat)
	_ = w.WriteField("tempGuid", at.temp)
	_ = w.WriteField("name", name)
	if a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE {
		_ = w.WriteField("isAudioMessage", "true")
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="attachment"; filename=%q`, name))
	h.Set("Content-Type", mt)
	part, err := w.CreatePart(h)
	if err != nil {
		return "", err
	}
	_, _ = part.Write(data)
	if err := w.Close(); err != nil {
		return "", err
	}
	var out sentMessage
	if err := p.api.send(ctx, http.MethodPost, "/api/v1/message/attachment", w.FormDataContentType(), &body, &out); err != nil {
		return p.unsure(ctx, at, err)
	}
	if out.GUID == "" {
		return "", errors.New("bluebubbles answered an attachment without the message's guid")
	}
	return out.GUID, nil
}
