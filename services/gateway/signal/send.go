package signal

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxAttachmentBytes is Hermes's bound on one attachment (100 MB).
const maxAttachmentBytes = 100 << 20

// maxAttachments is Signal's bound on attachments per message.
const maxAttachments = 32

// target adds the routing parameter of a chat: groupId for
// "group:<id>", else the recipient.
func target(params map[string]any, chatID string) error {
	if chatID == "" {
		return platform.Permanent(errors.New("signal: no chat id"))
	}
	if gid, ok := strings.CutPrefix(chatID, groupPrefix); ok {
		if gid == "" {
			return platform.Permanent(fmt.Errorf("signal: chat id %q names no group", chatID))
		}
		params["groupId"] = gid
		return nil
	}
	params["recipient"] = []string{chatID}
	return nil
}

// Send posts a message: the text with its style ranges (Markdown is
// converted as Hermes converts it), the attachments, and, with
// quote_replies, a quote of the user's message on the first chunk. The
// platform message id is "<account>:<timestamp>". A retry after an
// attempt whose answer did not come takes that attempt's outcome
// (settle.go).
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	params := map[string]any{}
	if err := target(params, req.GetTarget().GetChatId()); err != nil {
		return "", err
	}
	text := req.GetText()
	if req.GetFormat() != deliveryv1.TextFormat_TEXT_FORMAT_PLAIN && text != "" {
		plain, styles := styled(text)
		text = plain
		switch len(styles) {
		case 0:
		case 1:
			params["textStyle"] = styles[0].String()
		default:
			list := make([]string, len(styles))
			for i, s := range styles {
				list[i] = s.String()
			}
			params["textStyles"] = list
		}
	}
	if n := len(req.GetAttachments()); n > maxAttachments {
		return "", platform.Permanent(fmt.Errorf("signal: %d attachments in one message, at most %d", n, maxAttachments))
	}
	var files []string
	for i, a := range req.GetAttachments() {
		f, err := p.attachmentData(ctx, a)
		if err != nil {
			return "", fmt.Errorf("signal attachment %d: %w", i, err)
		}
		files = append(files, f)
	}
	if strings.TrimSpace(text) == "" && len(files) == 0 {
		return "", platform.Permanent(errors.New("signal: empty message"))
	}
	params["message"] = text
	if len(files) > 0 {
		params["attachments"] = files
	}
	if p.cfg.QuoteReplies && req.GetChunkIndex() == 0 {
		if author, ts, ok := splitMessageID(req.GetTarget().GetReplyToMessageId()); ok {
			params["quoteTimestamp"], params["quoteAuthor"] = ts, author
		}
	}
	return p.post(ctx, params)
}

// Edit is not offered: see Capabilities.
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Delete is not offered.
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Typing shows the typing indicator (Signal shows it for about 15 s,
// or until a message of the bot arrives).
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	params := map[string]any{}
	if err := target(params, req.GetTarget().GetChatId()); err != nil {
		return err
	}
	return classify(p.client.call(ctx, "sendTyping", params, nil))
}

// attachmentData turns an attachment into what signal-cli's send takes:
// a data URI ("data:<type>;filename=<name>;base64,<data>"). An inline
// data: URL is passed on; a kept attachment (bytes_ref) or an http(s)
// URL is read (platform.ReadOutbound).
func (p *Platform) attachmentData(ctx context.Context, a *eventsv1.Attachment) (string, error) {
	if strings.HasPrefix(a.GetUrl(), "data:") {
		return withFileName(a.GetUrl(), a.GetFileName()), nil
	}
	data, mimeType, err := platform.ReadOutbound(ctx, a, p.store, p.downloads, maxAttachmentBytes)
	if err != nil {
		return "", err
	}
	return "data:" + mimeType + fileNameParam(a.GetFileName()) + ";base64," + base64.StdEncoding.EncodeToString(data), nil
}

// fileNameParam is a data URI's filename parameter as signal-cli reads it
// (DataURI.of): the value form-encoded, as Java's URLDecoder decodes it
// ('+' is a space; '=' and ';' escaped, for it splits the parameters at
// the last '='). "" for no name.
func fileNameParam(name string) string {
	if name == "" {
		return ""
	}
	return ";filename=" + url.QueryEscape(name)
}

// withFileName adds a filename parameter to a data URL that has none. The
// URL's other parameters (a charset …) are dropped: signal-cli reads a
// data URI's parameters as one, whose name runs to the last '=', so a
// filename beside another parameter would be lost.
func withFileName(dataURL, name string) string {
	head, body, ok := strings.Cut(dataURL, ",")
	if !ok || name == "" || strings.Contains(head, ";filename=") {
		return dataURL
	}
	head, b64 := strings.CutSuffix(head, ";base64")
	mediaType, _, _ := strings.Cut(head, ";")
	head = mediaType + fileNameParam(name)
	if b64 {
		head += ";base64"
	}
	return head + "," + body
}
