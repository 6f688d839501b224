package teams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// outgoing is a message activity the bot sends.
type outgoing struct {
	Type        string               `json:"type"`
	ID          string               `json:"id,omitempty"`
	Text        string               `json:"text,omitempty"`
	TextFormat  string               `json:"textFormat,omitempty"`
	ReplyToID   string               `json:"replyToId,omitempty"`
	Attachments []outgoingAttachment `json:"attachments,omitempty"`
}

type outgoingAttachment struct {
	ContentType string `json:"contentType"`
	ContentURL  string `json:"contentUrl,omitempty"`
	Name        string `json:"name,omitempty"`
	// Content is a card's (an approval prompt's buttons).
	Content any `json:"content,omitempty"`
}

// resourceResponse is the connector's answer to a send: the activity id.
type resourceResponse struct {
	ID string `json:"id"`
}

// textFormat: Teams renders a subset of Markdown (bold, italic, code,
// lists, links) in a markdown activity, as Hermes sends them; a plain
// request is sent as plain text.
func textFormat(req *deliveryv1.SendRequested) string {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return "plain"
	}
	return "markdown"
}

// conversation is the target's conversation id, checked.
func conversation(t *deliveryv1.Target) (string, error) {
	c := t.GetChatId()
	if !validID(c) {
		return "", platform.Permanent(errors.New("no teams conversation id"))
	}
	return c, nil
}

// Send posts a message: text as Markdown, pictures by URL (other files,
// which Teams refuses so, as links under the text; captions under the
// text), an approval prompt's buttons as an Adaptive Card (buttons.go).
// A reply to one of the user's messages (a numeric activity id, as
// Hermes checks) goes to POST …/activities/{id}, which threads it where
// Teams threads; when the connector refuses that (group chats do), it is
// posted to the conversation instead.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	if req.GetTarget().GetInteraction().GetComponent() {
		return p.refusePress(ctx, req)
	}
	conv, err := conversation(req.GetTarget())
	if err != nil {
		return "", err
	}
	text := req.GetText()
	act := outgoing{Type: "message", TextFormat: textFormat(req)}
	// lines go under the text: each attachment's caption (a picture's
	// alt text), as Hermes sends a picture's caption as the message's
	// text, and the link of each file Teams does not take by URL, under
	// its caption, as Hermes's "caption\n📎 File: …".
	var lines []string
	for _, a := range req.GetAttachments() {
		oa, link, err := outgoingFile(a)
		if err != nil {
			return "", err
		}
		if c := strings.TrimSpace(a.GetCaption()); c != "" && c != strings.TrimSpace(text) && c != link && !slices.Contains(lines, c) {
			lines = append(lines, c)
		}
		if link != "" {
			lines = append(lines, link)
		} else {
			act.Attachments = append(act.Attachments, oa)
		}
	}
	if len(lines) > 0 {
		// Each on a line of its own under the text. Teams reads a
		// markdown activity's single line break as a space (a soft
		// break), which would run a link on at the end of the text's
		// last line (or into its last list item or quote): there, each
		// is a paragraph of its own.
		sep := "\n"
		if act.TextFormat == "markdown" {
			sep = "\n\n"
		}
		if body := strings.TrimRight(text, "\n"); strings.TrimSpace(body) != "" {
			lines = append([]string{body}, lines...)
		}
		text = strings.Join(lines, sep)
	}
	if n := utf8.RuneCountInString(text); n > maxText {
		return "", platform.Permanent(fmt.Errorf("text is %d characters, teams allows %d", n, maxText))
	}
	act.Text = text
	if strings.TrimSpace(text) == "" && len(act.Attachments) == 0 {
		return "", platform.Permanent(errors.New("empty message"))
	}
	if card := approvalCard(req.GetApproval()); card != nil {
		act.Attachments = append(act.Attachments, *card)
	}
	base, err := p.serviceURL(ctx, conv)
	if err != nil {
		return "", err
	}
	var out resourceResponse
	if reply := req.GetTarget().GetReplyToMessageId(); numeric(reply) {
		act.ReplyToID = reply
		err = p.connector.Do(ctx, http.MethodPost, activitiesURL(base, conv, reply), act, &out)
		var se *platform.SendError
		if err == nil || !errors.As(err, &se) || se.Class != deliveryv1.ErrorClass_ERROR_CLASS_PERMANENT {
			return p.sent(ctx, conv, out, err)
		}
		p.log.Debug("teams reply refused; posting to the conversation", "err", err)
		act.ReplyToID = ""
	}
	err = p.connector.Do(ctx, http.MethodPost, activitiesURL(base, conv, ""), act, &out)
	return p.sent(ctx, conv, out, err)
}

// sent is a send's outcome: the activity id, recorded as the bot's
// when replies to the bot's messages must be told apart
// (require_mention).
func (p *Platform) sent(ctx context.Context, conv string, out resourceResponse, err error) (string, error) {
	id, err := sentID(out, err)
	if err == nil && p.cfg.RequireMention {
		p.rememberSent(ctx, conv, id)
	}
	return id, err
}

func sentID(out resourceResponse, err error) (string, error) {
	if err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", errors.New("bot connector answered a send without the activity id")
	}
	return out.ID, nil
}

// numeric reports whether id is a Teams message id (digits, not 0).
func numeric(id string) bool {
	if id == "" || id == "0" || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// outgoingFile is an attachment as Teams takes it: a picture by its
// http(s) URL or an inline data: URL as its contentUrl (as Hermes sends
// pictures). Teams answers any other file sent so "Unknown attachment
// type" (a file goes through a consent card or Graph): one with an
// http(s) URL is sent as its link (link) in the text, as Hermes sends
// files it cannot attach; an inline one cannot be sent.
func outgoingFile(a *eventsv1.Attachment) (att outgoingAttachment, link string, err error) {
	u := a.GetUrl()
	mt := a.GetMimeType()
	web := strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")
	switch {
	case web:
		if mt == "" {
			mt = mime.TypeByExtension(path.Ext(strings.SplitN(u, "?", 2)[0]))
		}
	case strings.HasPrefix(u, "data:"):
		_, dmt, _, err := attachment.ParseDataURL(u)
		if err != nil {
			return outgoingAttachment{}, "", platform.Permanent(fmt.Errorf("attachment data url: %w", err))
		}
		if mt == "" {
			mt = dmt
		}
	default:
		return outgoingAttachment{}, "", platform.Permanent(errors.New("attachment has no url or data for teams"))
	}
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.ToLower(strings.TrimSpace(mt))
	switch {
	case strings.HasPrefix(mt, "image/"):
	case a.GetKind() == eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE:
		mt = "image/png" // a picture of no known type, as Hermes sends one
	case web && !strings.ContainsAny(u, " \n"):
		return outgoingAttachment{}, u, nil
	default:
		return outgoingAttachment{}, "", platform.Permanent(fmt.Errorf("teams takes no %s file inline, only pictures", cmp.Or(mt, "untyped")))
	}
	return outgoingAttachment{ContentType: mt, ContentURL: u, Name: a.GetFileName()}, "", nil
}

// Edit replaces the text of one of the bot's messages (PUT
// …/activities/{id}).
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	conv, err := conversation(req.GetTarget())
	if err != nil {
		return err
	}
	id := req.GetMessageId()
	if !validID(id) {
		return platform.Permanent(errors.New("edit without a message id"))
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return platform.Permanent(errors.New("empty message"))
	}
	base, err := p.serviceURL(ctx, conv)
	if err != nil {
		return err
	}
	return p.connector.Do(ctx, http.MethodPut, activitiesURL(base, conv, id),
		outgoing{Type: "message", ID: id, Text: req.GetText(), TextFormat: textFormat(req)}, nil)
}

// Delete removes one of the bot's messages (DELETE …/activities/{id}).
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	conv, err := conversation(req.GetTarget())
	if err != nil {
		return err
	}
	id := req.GetMessageId()
	if !validID(id) {
		return platform.Permanent(errors.New("delete without a message id"))
	}
	base, err := p.serviceURL(ctx, conv)
	if err != nil {
		return err
	}
	return p.connector.Do(ctx, http.MethodDelete, activitiesURL(base, conv, id), nil, nil)
}

// Typing sends a typing activity: Teams shows the indicator for a few
// seconds or until the bot's next message.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	conv, err := conversation(req.GetTarget())
	if err != nil {
		return err
	}
	base, err := p.serviceURL(ctx, conv)
	if err != nil {
		return err
	}
	return p.connector.Do(ctx, http.MethodPost, activitiesURL(base, conv, ""), outgoing{Type: "typing"}, nil)
}
