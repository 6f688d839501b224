package line

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	attach "github.com/switchboard-chat/switchboard/pkg/attachment"
	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

const (
	// maxText is the most characters one text message takes (LINE's
	// limit).
	maxText = 5000
	// maxMessages is the most message objects one reply or push takes.
	maxMessages = 5
	// maxAnswer is the text delivery hands the gateway in one send: the
	// five messages of one reply, as Hermes batches an answer into up to
	// five bubbles of one call (pkg/chunk's "line" limit). A longer
	// answer comes as several sends, each split here.
	maxAnswer = maxText * maxMessages
	// loadingSeconds is how long one loading animation lasts at most (a
	// multiple of 5 up to 60); the answer's first message ends it.
	loadingSeconds = 20
)

// formatted is the text as LINE shows it: the model's Markdown as plain
// text (emphasis and code markers dropped, links as "text (url)"),
// unless the request is plain text already.
func formatted(req *deliveryv1.SendRequested) string {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return strings.TrimSpace(req.GetText())
	}
	return strings.TrimSpace(markup.Plain.Convert(req.GetText()))
}

// lineMessage is one message object of a reply or push.
type lineMessage struct {
	Type               string `json:"type"`
	Text               string `json:"text,omitempty"`
	OriginalContentURL string `json:"originalContentUrl,omitempty"`
	PreviewImageURL    string `json:"previewImageUrl,omitempty"`
	// QuickReply: an approval prompt's buttons, on its last message.
	QuickReply *quickReply `json:"quickReply,omitempty"`
}

// sentAnswer is the reply and push endpoints' answer.
type sentAnswer struct {
	SentMessages []struct {
		ID string `json:"id"`
	} `json:"sentMessages"`
}

// messages builds the message objects of req: its text, cut into
// messages of at most maxText UTF-16 units (at a paragraph, line or
// word, as delivery cuts), then its attachments, which LINE takes only
// as public https URLs (no uploads): a picture an image message shows
// (JPEG or PNG) as one, after its caption; anything else (a document, a
// video, a voice note, a GIF) as its caption and link in a text message,
// which LINE opens, as Hermes falls back to a link for media a platform
// cannot show. An approval prompt's buttons go on the last message
// (buttons.go). Send posts them five to a call.
func messages(req *deliveryv1.SendRequested) ([]lineMessage, error) {
	out := textMessages(formatted(req))
	for _, a := range req.GetAttachments() {
		u := a.GetUrl()
		if !strings.HasPrefix(u, "https://") {
			return nil, platform.Permanent(fmt.Errorf("line sends media only from a public https url; this attachment (a %s) has none", attachmentType(a)))
		}
		caption := strings.TrimSpace(a.GetCaption())
		if caption == strings.TrimSpace(req.GetText()) {
			caption = ""
		}
		if !picture(a) {
			out = append(out, textMessages(strings.TrimSpace(caption+"\n"+u))...)
			continue
		}
		out = append(out, textMessages(caption)...)
		out = append(out, lineMessage{Type: "image", OriginalContentURL: u, PreviewImageURL: u})
	}
	if len(out) == 0 {
		return nil, platform.Permanent(errors.New("empty message"))
	}
	out[len(out)-1].QuickReply = approvalQuickReply(req.GetApproval())
	return out, nil
}

// textMessages cuts text into text messages of at most maxText UTF-16
// units; none for empty text.
func textMessages(text string) []lineMessage {
	if text == "" {
		return nil
	}
	var out []lineMessage
	for _, part := range chunk.Parts(text, chunk.Limit{Max: maxText, Measure: chunk.UTF16}) {
		// The parts go out together: no "(i/N)" counter.
		out = append(out, lineMessage{Type: "text", Text: part.Reopen + part.Body + part.Close})
	}
	return out
}

// picture reports whether a is what an image message shows: declared a
// picture (or undeclared), and a JPEG or PNG (attachment.IsJPEGOrPNG).
func picture(a *eventsv1.Attachment) bool {
	switch a.GetKind() {
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_UNSPECIFIED:
		return attach.IsJPEGOrPNG(a)
	}
	return false
}

// attachmentType names what an attachment is, for an error.
func attachmentType(a *eventsv1.Attachment) string {
	if mt, _, err := mime.ParseMediaType(a.GetMimeType()); err == nil && len(mt) <= 64 {
		return mt
	}
	return strings.ToLower(strings.TrimPrefix(a.GetKind().String(), "ATTACHMENT_KIND_"))
}

// Send posts one answer, five messages to a call: the first call with
// the chat's reply token while one is valid (free; POST
// /v2/bot/message/reply), else by push (POST /v2/bot/message/push,
// metered), as are the calls after it, each with an X-Line-Retry-Key
// derived from the idempotency key and the call's place, so that a push
// retried after a lost answer is not shown twice. A reply token LINE no
// longer takes falls back to a push at once. Each call that went out is
// recorded, so a retry after a failed later call sends only what is
// missing. The id is the first message's.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	to := strings.TrimSpace(req.GetTarget().GetChatId())
	if to == "" {
		return "", platform.Permanent(errors.New("no line chat"))
	}
	msgs, err := messages(req)
	if err != nil {
		return "", err
	}
	first := ""
	for call := 0; call*maxMessages < len(msgs); call++ {
		batch := msgs[call*maxMessages : min((call+1)*maxMessages, len(msgs))]
		id, sent := platform.SentPart(ctx, call)
		if !sent {
			if id, err = p.sendCall(ctx, req, to, call, batch); err != nil {
				return "", err
			}
			platform.RecordPart(ctx, call, id)
		}
		if call == 0 {
			first = id
		}
	}
	return first, nil
}

// beforeAnswer reports whether req is a message sent ahead of an answer:
// the last part of a message that is not final, since the answer is
// still to come. These are the router's notices before a turn's answer
// (the home channel notice, a reset notice, a busy acknowledgement) and
// what a turn shows before its answer: its tool progress lines (on LINE,
// which cannot edit, each line is a message of its own), the text the
// model said before a call. It is pushed and leaves
// the chat's reply token to the answer, as Hermes sends its home notice
// without the reply token: the answer, up to five messages, goes free,
// and on a channel whose monthly push quota is spent the answer still
// reaches the chat (what came before it does not). Taking the token, a
// progress line left the answer to a push. The first part of an answer
// longer than one send is not final either, but not its message's last:
// it takes the token. So does an approval prompt (its last part carries
// the buttons): the turn waits on the user, whose answer (a tap, a typed
// /approve) brings a reply token of its own for what follows, so the
// prompt goes free and reaches the chat when the push quota is spent;
// pushed, it spent a push while the token expired unused.
func beforeAnswer(req *deliveryv1.SendRequested) bool {
	return !req.GetFinal() && req.GetChunkIndex() == req.GetChunkCount()-1 && req.GetApproval() == nil
}

// sendCall posts one call's messages: the first call by reply when the
// chat has a reply token, else (and every later call, and a notice
// before an answer: beforeAnswer) by push.
func (p *Platform) sendCall(ctx context.Context, req *deliveryv1.SendRequested, to string, call int, msgs []lineMessage) (string, error) {
	if call == 0 && !beforeAnswer(req) {
		// A reply of an earlier attempt of this send that got no clear
		// answer kept its token as the send's own: the chat's newer
		// token, if the user wrote again meanwhile, is not this send's
		// to learn from.
		st, mine := unclearReply(ctx)
		if !mine {
			var err error
			if st, err = p.claimStoredToken(ctx, to); err != nil {
				p.log.Warn("line reply token unreadable; pushing", "err", err)
			}
		}
		if token := st.Token; token != "" {
			var out sentAnswer
			err := p.api.post(ctx, "/v2/bot/message/reply", map[string]any{"replyToken": token, "messages": msgs}, nil, &out)
			var le *APIError
			switch {
			case err == nil:
				sends.WithLabelValues("reply").Inc()
				return firstID(out, "reply:"+token)
			case errors.As(err, &le) && le.invalidReplyToken() && mine:
				// Tokens are single-use and this one was this send's
				// alone: LINE took the earlier reply, whose answer was
				// lost. Pushing now would show it twice.
				p.log.Info("line reply of an earlier attempt was shown; not sent again")
				return "reply:" + token, nil
			case errors.As(err, &le) && le.invalidReplyToken():
				p.log.Debug("line reply token refused; pushing", "err", err)
			case errors.As(err, &le) && le.Status == http.StatusTooManyRequests:
				// Refused before it was read: the token is unused.
				if !mine {
					p.returnReplyToken(ctx, to, st)
				}
				return "", classify(err)
			case !errors.As(err, &le) || le.Status >= 500:
				// No clear answer: LINE may have shown it. The token is
				// kept as this send's (beside its receipt); the retry
				// tries it again and learns which.
				if !mine {
					keepUnclearReply(ctx, st)
				}
				return "", classify(err)
			default:
				return "", classify(err)
			}
		}
	}
	var out sentAnswer
	h := http.Header{}
	idem := req.GetIdempotencyKey()
	if idem != "" && call > 0 {
		idem += "\x00call" + strconv.Itoa(call)
	}
	if k := retryKey(p.account, idem); k != "" {
		h.Set("X-Line-Retry-Key", k)
	}
	err := p.api.post(ctx, "/v2/bot/message/push", map[string]any{"to": to, "messages": msgs}, h, &out)
	var le *APIError
	switch {
	case err == nil:
		sends.WithLabelValues("push").Inc()
		return firstID(out, "")
	case errors.As(err, &le) && le.retryKeyAccepted():
		// An earlier attempt of this call was accepted; its answer was lost.
		return "request:" + le.AcceptedRequestID, nil
	}
	return "", classify(err)
}

// firstID is the id of the first message sent, or def.
func firstID(out sentAnswer, def string) (string, error) {
	if len(out.SentMessages) > 0 && out.SentMessages[0].ID != "" {
		return out.SentMessages[0].ID, nil
	}
	if def != "" {
		return def, nil
	}
	return "", errors.New("line answered a push without its message ids")
}

// retryKey is the X-Line-Retry-Key of a send: a UUID (version 4 layout)
// taken from a hash of the channel and the idempotency key, the same for
// every attempt of one send (LINE remembers it for a day). Without an
// idempotency key there is none.
func retryKey(account, idem string) string {
	if idem == "" {
		return ""
	}
	h := sha256.Sum256([]byte("line retry\x00" + account + "\x00" + idem))
	b := h[:16]
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Edit: LINE cannot edit a sent message.
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("line cannot edit a sent message: %w", platform.ErrUnsupported)
}

// Delete: LINE's bots cannot take a sent message back.
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("line cannot delete a sent message: %w", platform.ErrUnsupported)
}

// Typing starts LINE's loading animation (POST
// /v2/bot/chat/loading/start) in a 1:1 chat; LINE shows none in groups
// and rooms, where Typing does nothing, as in Hermes.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	chat := req.GetTarget().GetChatId()
	switch {
	case chat == "":
		return platform.Permanent(errors.New("no line chat"))
	case !strings.HasPrefix(chat, "U"):
		return nil
	}
	err := p.api.post(ctx, "/v2/bot/chat/loading/start", map[string]any{"chatId": chat, "loadingSeconds": loadingSeconds}, nil, nil)
	return classify(err)
}
