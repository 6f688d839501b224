package googlechat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var _ platform.Fetcher = (*Platform)(nil)

// outgoing is a message the app creates or patches.
type outgoing struct {
	Text   string  `json:"text"`
	Thread *Thread `json:"thread,omitempty"`
}

// chatMarkup is the syntax the text is written in (format): Google
// Chat's own markup.
const chatMarkup = "MARKUP_SYNTAX_CHAT"

// MarshalJSON writes the message with markupSyntax MARKUP_SYNTAX_CHAT,
// the syntax format writes: a Chat app created now reads a text that
// names none as Markdown, by its default markup syntax, which shows
// *bold* in italics and ~strike~ as it is.
func (m outgoing) MarshalJSON() ([]byte, error) {
	type message outgoing
	return json.Marshal(struct {
		message
		MarkupSyntax string `json:"markupSyntax"`
	}{message(m), chatMarkup})
}

// created is the Chat API's answer: the message.
type created struct {
	Name   string  `json:"name"`
	Sender User    `json:"sender"`
	Text   string  `json:"text"`
	Thread *Thread `json:"thread"`
}

// format converts the agent's Markdown to Google Chat's formatting
// (*bold*, _italic_, ~strike~, `code`, ``` blocks, <url|text> links), as
// Hermes does; a plain request is sent as it is.
func format(req *deliveryv1.SendRequested) string {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return req.GetText()
	}
	return markup.GoogleChat.Convert(req.GetText())
}

// space is the target's space name, checked.
func space(t *deliveryv1.Target) (string, error) {
	s := t.GetChatId()
	if !validName(s, "spaces/") || strings.Count(s, "/") != 1 {
		return "", platform.Permanent(errors.New("no google chat space name"))
	}
	return s, nil
}

// requestID is the Chat API's idempotency key for a send: the same
// idempotency key always names the same message, so a retried create
// returns the message the first one made.
func requestID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sb-" + hex.EncodeToString(sum[:16])
}

// Send creates a message in the target's space (spaces.messages.create):
// in the target's thread when it has one (messageReplyOption
// REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD), with requestId set from the
// idempotency key; as several messages, each with a requestId of its
// own, when the text is over 4,096 characters once converted: the
// first's name is the send's message id, and those after it are its
// follow-on messages (followID), which an edit of it rewrites.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	sp, err := space(req.GetTarget())
	if err != nil {
		return "", err
	}
	text := format(req)
	links, err := attachmentLinks(req.GetAttachments())
	if err != nil {
		return "", err
	}
	if body := strings.TrimRight(text, "\n"); links != "" && strings.TrimSpace(body) != "" {
		text = body + "\n" + links
	} else if links != "" {
		text = links
	}
	if strings.TrimSpace(text) == "" {
		return "", platform.Permanent(errors.New("empty message"))
	}
	var thread *Thread
	if th := req.GetTarget().GetThreadId(); th != "" {
		if !validName(th, sp+"/threads/") {
			return "", platform.Permanent(fmt.Errorf("thread %q is not in space %s", th, sp))
		}
		thread = &Thread{Name: th}
	}
	// Delivery cut the Markdown to Google Chat's 4,096 characters, but
	// the conversion ("> " for a quote's ">", a code block's missing
	// close) and the links may make it longer: then it goes as several
	// messages, rather than Chat refusing the one.
	pieces := platform.Pieces(text, chunk.Limit{Max: maxText, Measure: chunk.Runes})
	var first string // the first piece's message
	var fs *follows  // its follow-ons, noted before the first is made
	id, err := platform.SendPieces(ctx, pieces, func(i int) int { return i }, func(ctx context.Context, i int, piece string) (string, error) {
		msg := outgoing{Text: piece, Thread: thread}
		reqID := pieceRequestID(req.GetIdempotencyKey(), i)
		if i == 0 {
			name, err := p.create(ctx, sp, msg, reqID, "")
			first = name
			return name, err
		}
		if first == "" {
			// An earlier attempt posted it (SendPieces skipped it).
			first, _ = platform.SentPart(ctx, 0)
		}
		if first == "" {
			return "", errors.New("google chat send: the first piece's message is not known")
		}
		if fs == nil {
			var err error
			if fs, err = p.noteSentFollows(ctx, first, len(pieces)-1); err != nil {
				return "", err
			}
		}
		return p.create(ctx, sp, msg, reqID, followID(first, i))
	})
	if err == nil && fs != nil {
		// What they show, so that an edit patches only those it changes.
		for i, piece := range pieces[1:] {
			fs.F[i].Sum = textSum(piece)
		}
		if err := fs.save(ctx, first); err != nil {
			p.log.Warn("google chat: note the follow-on messages of a send", "err", err)
		}
	}
	return id, err
}

// noteSentFollows notes, before a send makes them, that message first
// may have n follow-on messages, showing what is not known yet, and
// returns the note; nothing is noted for a send performed without the
// platform runner.
func (p *Platform) noteSentFollows(ctx context.Context, first string, n int) (*follows, error) {
	fs, err := readFollows(ctx, first)
	if errors.Is(err, platform.ErrNoNotes) {
		return &follows{F: make([]follow, n)}, nil
	}
	if err != nil || len(fs.F) >= n {
		return fs, err // noted by an earlier attempt of the send
	}
	for len(fs.F) < n {
		fs.F = append(fs.F, follow{})
	}
	return fs, fs.save(ctx, first)
}

// followID is the client-assigned id (spaces.messages.create's
// messageId: "client-", then lowercase letters, digits and hyphens, 63
// at most) of follow-on message i ≥ 1 of message first: the pieces of a
// send after its first, and the messages an edit of first over the
// limit goes on in. Through it an edit of first finds them (get,
// patch, delete spaces/…/messages/client-…), to rewrite them or delete
// those its text no longer needs.
func followID(first string, i int) string {
	sum := sha256.Sum256([]byte(first + "\x00follow\x00" + strconv.Itoa(i)))
	return "client-sb-" + hex.EncodeToString(sum[:20])
}

// maxFollow bounds the follow-on messages an edit looks for: far more
// than a text delivery cut to the limit ever needs.
const maxFollow = 64

// pieceRequestID is the requestId of piece i of a send with the
// idempotency key key: the send's own for the first, so that every
// piece of a retried send names the message its first attempt made;
// none without a key.
func pieceRequestID(key string, i int) string {
	switch {
	case key == "":
		return ""
	case i == 0:
		return requestID(key)
	}
	return requestID(strconv.Itoa(i) + "\x00" + key)
}

// create creates msg in space sp, with the requestId reqID and the
// client-assigned id clientID unless empty, and returns the message's
// name.
func (p *Platform) create(ctx context.Context, sp string, msg outgoing, reqID, clientID string) (string, error) {
	out, err := p.createMessage(ctx, sp, msg, reqID, clientID)
	return out.Name, err
}

// createMessage creates msg in space sp, with the requestId reqID and
// the client-assigned id (messageId) clientID unless empty, and returns
// the message (the one an earlier create with reqID made, as it is
// now).
func (p *Platform) createMessage(ctx context.Context, sp string, msg outgoing, reqID, clientID string) (created, error) {
	q := url.Values{}
	if reqID != "" {
		q.Set("requestId", reqID)
	}
	if clientID != "" {
		q.Set("messageId", clientID)
	}
	if msg.Thread != nil {
		q.Set("messageReplyOption", "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD")
	}
	path := "/v1/" + sp + "/messages"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out created
	if err := p.api.Do(ctx, http.MethodPost, p.base+path, msg, &out); err != nil {
		return created{}, err
	}
	if out.Name == "" {
		return created{}, errors.New("chat api answered a create without the message name")
	}
	p.self.learn(out.Sender.Name)
	return out, nil
}

// attachmentLinks are the attachments as Google Chat shows them from an
// app with a service account, as Hermes sends them: their http(s) URLs on
// lines of their own (Chat previews an image's). Anything else (an
// inline data: URL, a file only the store has) cannot be sent:
// media.upload refuses service accounts.
func attachmentLinks(atts []*eventsv1.Attachment) (string, error) {
	var lines []string
	for _, a := range atts {
		u := a.GetUrl()
		if !httpURL(u) || strings.ContainsAny(u, " \n") {
			return "", platform.Permanent(errors.New("google chat apps cannot upload files with a service account: only http(s) links can be sent"))
		}
		lines = append(lines, u)
	}
	return strings.Join(lines, "\n"), nil
}

// message is the request's message name, checked to be in its space.
func message(req *deliveryv1.SendRequested) (string, error) {
	sp, err := space(req.GetTarget())
	if err != nil {
		return "", err
	}
	id := req.GetMessageId()
	if !validName(id, sp+"/messages/") || strings.Count(id, "/") != 3 {
		return "", platform.Permanent(errors.New("no google chat message name in the target's space"))
	}
	return id, nil
}

// Edit replaces the text of one of the app's messages (messages.patch);
// text over 4,096 characters once converted goes on in messages after
// it (rewriteFollows). An edit whose message took its text but whose later
// step failed (a follow-on refused) is done in part (platform.PartDone):
// delivery does not post its whole text again as a new message, which
// would show the answer twice.
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	id, err := message(req)
	if err != nil {
		return err
	}
	text := format(req)
	if strings.TrimSpace(text) == "" {
		return platform.Permanent(errors.New("empty message"))
	}
	// Delivery cut the Markdown to 4,096 characters, but the conversion
	// may make it longer, and Chat refuses such an edit for good: the
	// message would keep what it showed before (a stream's final edit
	// lost). An edit cannot be several messages: the message shows the
	// text cut to the limit (platform.Pieces), and the rest follows it in
	// its thread, in its follow-on messages (followID: a split send's
	// later pieces, or ones made for an edit); those the text no longer
	// needs are deleted.
	pieces := platform.Pieces(text, chunk.Limit{Max: maxText, Measure: chunk.Runes})
	var out created
	if err := p.api.Do(ctx, http.MethodPatch, p.base+"/v1/"+id+"?updateMask=text", outgoing{Text: pieces[0]}, &out); err != nil {
		return err
	}
	sp, _ := space(req.GetTarget())
	thread := out.Thread
	if thread == nil || !validName(thread.Name, sp+"/threads/") {
		thread = nil
		if th := req.GetTarget().GetThreadId(); validName(th, sp+"/threads/") {
			thread = &Thread{Name: th}
		}
	}
	if err := p.rewriteFollows(ctx, sp, id, req.GetIdempotencyKey(), pieces[1:], thread); err != nil {
		return platform.PartDone(fmt.Errorf("the rest of the edit of %s: %w", id, err))
	}
	return nil
}

// makeFollow creates follow-on message i of message id showing msg, once
// for the edit with idempotency key key (followRequestID), and returns
// its name. Where Chat keeps the follow-on's id for a message deleted
// before (an edit that shrank it), the follow-on is created without it,
// under its name in the note.
func (p *Platform) makeFollow(ctx context.Context, sp, id, key string, i int, msg outgoing) (string, error) {
	reqID := followRequestID(id, key, i)
	out, err := p.createMessage(ctx, sp, msg, reqID, followID(id, i))
	if apiStatus(err, http.StatusConflict) {
		// The id is taken: by the follow-on itself, which the note did
		// not know (it expired), or by one deleted since.
		name := sp + "/messages/" + followID(id, i)
		var cur created
		switch gerr := p.api.Do(ctx, http.MethodGet, p.base+"/v1/"+name, nil, &cur); {
		case gerr == nil && cur.Text == msg.Text:
			return name, nil
		case gerr == nil:
			return name, p.api.Do(ctx, http.MethodPatch, p.base+"/v1/"+name+"?updateMask=text", outgoing{Text: msg.Text}, nil)
		case !apiStatus(gerr, http.StatusNotFound):
			return "", gerr
		}
		out, err = p.createMessage(ctx, sp, msg, reqID, "")
	}
	if err != nil || out.Text == msg.Text {
		return out.Name, err
	}
	// The message an earlier attempt of this edit made, showing other
	// text since.
	if !validName(out.Name, sp+"/messages/") || strings.Count(out.Name, "/") != 3 {
		return "", fmt.Errorf("chat api answered a create with the message name %q", out.Name)
	}
	return out.Name, p.api.Do(ctx, http.MethodPatch, p.base+"/v1/"+out.Name+"?updateMask=text", outgoing{Text: msg.Text}, nil)
}

// followRequestID is the requestId of the create of follow-on message i
// of message id by the edit with idempotency key key: a retry of the
// edit names the message its first attempt made, and another edit (one
// that makes the follow-on again after an edit that shrank the message
// deleted it) a new one, not the deleted message. None without a key.
func followRequestID(id, key string, i int) string {
	if key == "" {
		return ""
	}
	return requestID(id + "\x00overflow\x00" + strconv.Itoa(i) + "\x00" + key)
}

// apiStatus reports whether err is the Chat API's answer with HTTP
// status code.
func apiStatus(err error, code int) bool {
	var e *APIError
	return errors.As(err, &e) && e.HTTPStatus == code
}

// Delete removes one of the app's messages (messages.delete), and the
// follow-on messages its text goes on in (its note's), which would go
// on showing the rest of a text that is gone: those first, so that a
// retry after a failure still knows them (the note outlives the
// message) and finds the message to delete.
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	id, err := message(req)
	if err != nil {
		return err
	}
	sp, _ := space(req.GetTarget())
	fs, err := p.loadFollows(ctx, sp, id)
	if err != nil {
		return err
	}
	for i := len(fs.F); i >= 1; i-- {
		err := p.api.Do(ctx, http.MethodDelete, p.base+"/v1/"+fs.name(sp, id, i), nil, nil)
		if err != nil && !apiStatus(err, http.StatusNotFound) {
			return fmt.Errorf("a follow-on message of %s: %w", id, err)
		}
	}
	return p.api.Do(ctx, http.MethodDelete, p.base+"/v1/"+id, nil, nil)
}

// Typing: the Chat API has no typing indicator.
func (p *Platform) Typing(context.Context, *deliveryv1.SendRequested) error {
	return platform.ErrUnsupported
}

// Fetch downloads a user's attachment when a turn reads it, through
// media.download (GET /v1/media/{resourceName}?alt=media) with the app's
// token: the only host it goes to is the Chat API's. A 429 (the Chat
// API's quota) or a 5xx is asked again (platform.Download).
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	ref := a.GetPlatformFileId()
	if ref == "" || strings.ContainsAny(ref, "?#") || strings.Contains(ref, "..") {
		return nil, "", platform.ErrNotFetched
	}
	resp, err := platform.Download(ctx, p.hc, func(ctx context.Context) (*http.Request, error) {
		tok, err := p.tokens.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("token for an attachment: %w", err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/v1/media/"+ref+"?alt=media", nil)
		if err != nil {
			return nil, platform.ErrNotFetched
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return req, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("google chat media download: %w", err)
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}
