package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/renderer"
	"github.com/yuin/goldmark/renderer/html"
	"github.com/yuin/goldmark/util"
	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/format"
	"maunium.net/go/mautrix/format/mdext"
	"maunium.net/go/mautrix/id"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxAttachmentBytes is Hermes's MATRIX_MAX_MEDIA_BYTES default (100 MB).
const maxAttachmentBytes = 100 << 20

var _ platform.Fetcher = (*Platform)(nil)
var _ platform.Reactor = (*Platform)(nil)

// roomOf checks a target's room id.
func roomOf(t *deliveryv1.Target) (id.RoomID, error) {
	rid := id.RoomID(t.GetChatId())
	if !strings.HasPrefix(rid.String(), "!") || !strings.Contains(rid.String(), ":") && len(rid) < 2 {
		return "", platform.Permanent(fmt.Errorf("matrix: %q is not a room id (!room:server)", t.GetChatId()))
	}
	return rid, nil
}

// Transaction ids. Every PUT /send/{type}/{txnId} and
// /redact/{eventId}/{txnId} names one that is the same on a retry of the
// same logical operation, so the homeserver (which keeps a token's
// transaction ids for a day: Synapse) answers the event it made the first
// time instead of making another, and differs between operations, so
// that one is never taken for another and silently skipped:
//
//   - Send, Edit: the delivery's idempotency key, with the part (each
//     attachment, the text, the edit). A request without a key gets a
//     fresh id from mautrix per call: it is not safe to retry, and
//     nothing retries one. Every send and edit delivery makes has a key
//     (the outbox refuses a row without one; reply rows are keyed by
//     turn and sequence, the proactive gRPC Send makes one when the
//     caller gives none), so only a request published to the gateway's
//     send subject by hand goes without, once.
//   - Typing (PUT /typing/{userId}) and read receipts (POST /receipt)
//     take no transaction id and need none: each sets a state (typing
//     for 30 s, read up to an event), which a repeat sets again.
//   - React: the message, the emoji and the turn that marks it
//     (platform.ReactionTurn): the same turn marking the message again
//     (a repeated final, another replica) makes one reaction; a later
//     turn's, after the first was taken off, is a new one.
//   - Redactions (Delete, Unreact): the event redacted. Redacting one
//     event twice is one operation, whoever asks.
//
// Uploads (POST /upload) take no transaction id. A keyed send records,
// beside its receipt (the kit's send marks), the content URI of each
// attachment it uploaded, and the event id of each attachment it posted
// (the kit's parts): a retry posts an uploaded attachment under the same
// URI instead of uploading a second copy, and skips one posted already
// (no download, no upload). A send without a key records nothing.
//
// Hermes passes no transaction id (send_message_event without txn_id):
// mautrix-python makes a new one per call, so a retried send can post
// twice; we differ on purpose.

// txnID turns an idempotency key into a transaction id: a send retried
// with its key reuses it, and the homeserver answers the event it made
// the first time instead of posting again.
func txnID(key, part string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key + "\x00" + part))
	return "sb" + hex.EncodeToString(sum[:16])
}

// reactTxn is the transaction id of the bot's reaction emoji on msg for
// turn ("" for a reaction outside a turn: one per message and emoji).
func reactTxn(rid id.RoomID, msg, emoji, turn string) string {
	return txnID(reactionKey(rid, msg, emoji)+"|"+turn, "react")
}

// redactTxn is the transaction id of the redaction of event eid.
func redactTxn(rid id.RoomID, eid id.EventID) string {
	return txnID(rid.String()+"|"+eid.String(), "redact")
}

// markdown renders the agent's Markdown as mautrix's RenderMarkdown
// does without HTML (raw HTML escaped), but without goldmark's unsafe
// mode, which mautrix turns on: a link whose target runs code
// (javascript:, vbscript:, file:, a data: URL other than an image's)
// keeps its text and loses its target.
var markdown = goldmark.New(format.Extensions, goldmark.WithRendererOptions(html.WithHardWraps(),
	renderer.WithNodeRenderers(util.Prioritized(imageRenderer{}, 100))),
	goldmark.WithExtensions(mdext.EscapeHTML))

// imageRenderer renders Markdown images as Matrix clients can show them.
// Clients load inline images (<img>) only from the media repository
// (mxc://; Element drops any other src), so an image on mxc:// stays an
// <img>, one on http(s) becomes a link to it (its alt text, else the URL,
// as the link's text), and any other (a data: URL) leaves its alt text.
// An image inside a link keeps only its text (links do not nest).
//
// We do not upload http(s) images to the media repository as we do
// attachments: that would fetch any URL the model writes, at send time,
// and a slow or failed download would hold up or fail the text. An image
// the agent means to send goes as a media reply (an attachment), which is
// uploaded. Hermes differs: its base adapter takes Markdown images out of
// the answer and sends each as an image of its own (send_image downloads
// it, after an SSRF check, and uploads it), and its formatted-body
// sanitizer allows no <img>. Doing that here would be a delivery-wide
// feature, not the Matrix renderer's.
type imageRenderer struct{}

func (imageRenderer) RegisterFuncs(reg renderer.NodeRendererFuncRegisterer) {
	reg.Register(ast.KindImage, renderImage)
}

func renderImage(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.Image)
	dest := string(n.Destination)
	alt := altText(source, n)
	scheme, _, ok := strings.Cut(strings.ToLower(dest), "://")
	if !ok {
		scheme = "" // a relative URL, data:, javascript: …
	}
	inLink := false
	for a := n.Parent(); a != nil; a = a.Parent() {
		if a.Kind() == ast.KindLink || a.Kind() == ast.KindAutoLink {
			inLink = true
		}
	}
	switch {
	case scheme == "mxc":
		_, _ = w.WriteString(`<img src="`)
		_, _ = w.Write(util.EscapeHTML(util.URLEscape(n.Destination, true)))
		_, _ = w.WriteString(`" alt="`)
		_, _ = w.Write(util.EscapeHTML(alt))
		_ = w.WriteByte('"')
		if n.Title != nil {
			_, _ = w.WriteString(` title="`)
			_, _ = w.Write(util.EscapeHTML(n.Title))
			_ = w.WriteByte('"')
		}
		_, _ = w.WriteString(">")
	case (scheme == "http" || scheme == "https") && !inLink:
		text := alt
		if len(strings.TrimSpace(string(text))) == 0 {
			text = n.Destination
		}
		_, _ = w.WriteString(`<a href="`)
		_, _ = w.Write(util.EscapeHTML(util.URLEscape(n.Destination, true)))
		_, _ = w.WriteString(`">`)
		_, _ = w.Write(util.EscapeHTML(text))
		_, _ = w.WriteString("</a>")
	default:
		_, _ = w.Write(util.EscapeHTML(alt))
	}
	return ast.WalkSkipChildren, nil
}

// altText is an image's description as plain text (its children's text,
// emphasis and code taken off), unescaped.
func altText(source []byte, n ast.Node) []byte {
	var b []byte
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch t := c.(type) {
		case *ast.String:
			b = append(b, t.Value...)
		case *ast.Text:
			b = append(b, t.Segment.Value(source)...)
			if t.SoftLineBreak() || t.HardLineBreak() {
				b = append(b, ' ')
			}
		default:
			b = append(b, altText(source, c)...)
		}
	}
	return b
}

// content renders the text: Markdown to org.matrix.custom.html with the
// plain text in body (raw HTML in the Markdown is escaped, links that run
// code dropped), or plain.
func content(text string, f deliveryv1.TextFormat) event.MessageEventContent {
	if f == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return event.MessageEventContent{MsgType: event.MsgText, Body: text}
	}
	c := format.RenderMarkdownCustom(text, markdown)
	// The body stays the agent's Markdown (what clients without HTML
	// show), as Hermes sends it.
	c.Body = text
	c.Mentions = nil
	return c
}

// mentions is the text the bot writes with "@room" neutralised, unless
// gateways.matrix.allow_room_mentions lets it notify the room.
func (p *Platform) mentions(text string) string {
	if p.cfg.AllowRoomMentions {
		return text
	}
	return neutralizeRoomMentions(text)
}

// Send posts the attachments (uploaded to the media repository) and the
// text as m.room.message events, in the thread or as a reply as the
// target says. The text's event id is the message id (the last
// attachment's when there is no text).
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	rid, err := roomOf(req.GetTarget())
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(req.GetText()) == "" && len(req.GetAttachments()) == 0 {
		return "", platform.Permanent(errors.New("matrix: empty message"))
	}
	rel := p.relation(req)
	var last id.EventID
	for i, a := range req.GetAttachments() {
		if eid, sent := platform.SentPart(ctx, i); sent {
			last = id.EventID(eid) // an earlier attempt posted it
			continue
		}
		c, err := p.mediaContent(ctx, a, i)
		if err != nil {
			return "", fmt.Errorf("matrix attachment %d: %w", i, err)
		}
		c.RelatesTo = rel
		resp, err := p.cli.SendMessageEvent(ctx, rid, event.EventMessage, c, mautrix.ReqSendEvent{TransactionID: txnID(req.GetIdempotencyKey(), fmt.Sprint("a", i))})
		if err != nil {
			return "", classify(err)
		}
		platform.RecordPart(ctx, i, resp.EventID.String())
		last = resp.EventID
	}
	if strings.TrimSpace(req.GetText()) != "" {
		c := content(p.mentions(req.GetText()), req.GetFormat())
		c.RelatesTo = rel
		resp, err := p.cli.SendMessageEvent(ctx, rid, event.EventMessage, &c, mautrix.ReqSendEvent{TransactionID: txnID(req.GetIdempotencyKey(), "text")})
		if err != nil {
			return "", classify(err)
		}
		last = resp.EventID
	}
	if th := req.GetTarget().GetThreadId(); th != "" && p.markSeen != nil {
		// The bot takes part in this thread: its room messages need no
		// mention (Hermes's thread participation).
		if err := p.markSeen(context.WithoutCancel(ctx), th); err != nil {
			p.log.Warn("matrix: recording a thread the bot answered in failed", "err", err)
		}
	}
	return last.String(), nil
}

// relation is the m.relates_to of a send: in a thread (m.thread, with the
// reply it answers as the fallback), or a reply (m.in_reply_to).
func (p *Platform) relation(req *deliveryv1.SendRequested) *event.RelatesTo {
	t := req.GetTarget()
	reply := id.EventID(t.GetReplyToMessageId())
	if th := id.EventID(t.GetThreadId()); th != "" {
		fallback := reply
		if fallback == "" {
			fallback = th
		}
		return &event.RelatesTo{Type: event.RelThread, EventID: th, InReplyTo: &event.InReplyTo{EventID: fallback}, IsFallingBack: true}
	}
	if reply != "" {
		return &event.RelatesTo{InReplyTo: &event.InReplyTo{EventID: reply}}
	}
	return nil
}

// Edit replaces a sent message's text (m.replace): "* text" for clients
// that show edits as new messages, the new content in m.new_content.
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	rid, err := roomOf(req.GetTarget())
	if err != nil {
		return err
	}
	if req.GetMessageId() == "" {
		return platform.Permanent(errors.New("matrix: edit without a message id"))
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return platform.Permanent(errors.New("matrix: edit to an empty message"))
	}
	nc := content(p.mentions(req.GetText()), req.GetFormat())
	c := event.MessageEventContent{MsgType: event.MsgText, Body: "* " + nc.Body, NewContent: &nc,
		RelatesTo: &event.RelatesTo{Type: event.RelReplace, EventID: id.EventID(req.GetMessageId())}}
	if nc.FormattedBody != "" {
		c.Format, c.FormattedBody = event.FormatHTML, "* "+nc.FormattedBody
	}
	_, err = p.cli.SendMessageEvent(ctx, rid, event.EventMessage, &c, mautrix.ReqSendEvent{TransactionID: txnID(req.GetIdempotencyKey(), "edit")})
	return classify(err)
}

// Delete redacts a message.
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	rid, err := roomOf(req.GetTarget())
	if err != nil {
		return err
	}
	if req.GetMessageId() == "" {
		return platform.Permanent(errors.New("matrix: delete without a message id"))
	}
	eid := id.EventID(req.GetMessageId())
	_, err = p.cli.RedactEvent(ctx, rid, eid, mautrix.ReqRedact{TxnID: redactTxn(rid, eid)})
	return classify(err)
}

// typingFor is how long one typing notice lasts; delivery repeats it
// while the turn runs.
const typingFor = 30 * time.Second

// Typing shows the bot typing in the room.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	rid, err := roomOf(req.GetTarget())
	if err != nil {
		return err
	}
	_, err = p.cli.UserTyping(ctx, rid, true, typingFor)
	return classify(err)
}

var _ platform.TypingEnder = (*Platform)(nil)

// EndTyping takes the bot's typing notice down (typing false) once a
// turn's final message is out, as Hermes's stop_typing does: the
// homeserver keeps it up for the notice's whole 30 s, the bot's messages
// notwithstanding, so the room would read "typing…" under the answer.
func (p *Platform) EndTyping(ctx context.Context, req *deliveryv1.SendRequested) error {
	rid, err := roomOf(req.GetTarget())
	if err != nil {
		return err
	}
	_, err = p.cli.UserTyping(ctx, rid, false, 0)
	return classify(err)
}

// Reactions are Hermes's: 👀 while a turn runs, then ✅ or ❌ (the 👀
// redacted).
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "👀", Success: "✅", Failure: "❌"}
}

func reactionKey(rid id.RoomID, msg, emoji string) string {
	return rid.String() + "|" + msg + "|" + emoji
}

// errDuplicateAnnotation is Synapse's answer to a second live reaction
// with the same emoji from the same sender.
const errDuplicateAnnotation = "M_DUPLICATE_ANNOTATION"

// React annotates a message with an emoji (m.reaction). One the message
// already has from the bot (M_DUPLICATE_ANNOTATION) is no error.
func (p *Platform) React(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	rid, err := roomOf(t)
	if err != nil {
		return err
	}
	c := event.ReactionEventContent{RelatesTo: event.RelatesTo{Type: event.RelAnnotation, EventID: id.EventID(messageID), Key: emoji}}
	txn := reactTxn(rid, messageID, emoji, platform.ReactionTurn(ctx))
	resp, err := p.cli.SendMessageEvent(ctx, rid, event.EventReaction, &c, mautrix.ReqSendEvent{TransactionID: txn})
	var he mautrix.HTTPError
	if errors.As(err, &he) && he.RespError != nil && he.RespError.ErrCode == errDuplicateAnnotation {
		return nil // Unreact finds its event id among the relations
	}
	if err != nil {
		return classify(err)
	}
	p.mu.Lock()
	p.reactions[reactionKey(rid, messageID, emoji)] = resp.EventID
	p.mu.Unlock()
	return nil
}

// Unreact redacts the bot's reaction. The reaction's event id is known to
// the replica that reacted; another replica looks it up among the
// message's annotations.
func (p *Platform) Unreact(ctx context.Context, t *deliveryv1.Target, messageID, emoji string) error {
	rid, err := roomOf(t)
	if err != nil {
		return err
	}
	k := reactionKey(rid, messageID, emoji)
	p.mu.Lock()
	eid, ok := p.reactions[k]
	delete(p.reactions, k)
	p.mu.Unlock()
	if !ok {
		eid, err = p.findReaction(ctx, rid, id.EventID(messageID), emoji)
		if err != nil || eid == "" {
			return err
		}
	}
	_, err = p.cli.RedactEvent(ctx, rid, eid, mautrix.ReqRedact{TxnID: redactTxn(rid, eid)})
	return classify(err)
}

// Pages of a message's annotations findReaction reads: the homeserver
// answers /relations a page at a time, newest first (Synapse: 5 unless
// asked for more), and the bot's reaction, made as the turn began, is
// behind every one added since.
const (
	relationsPage     = 100
	maxRelationsPages = 50
)

// findReaction returns the bot's reaction with emoji on a message ("" for
// none), from the message's m.annotation relations, page after page.
func (p *Platform) findReaction(ctx context.Context, rid id.RoomID, msg id.EventID, emoji string) (id.EventID, error) {
	req := &mautrix.ReqGetRelations{RelationType: event.RelAnnotation, EventType: event.EventReaction, Dir: mautrix.DirectionBackward, Limit: relationsPage}
	for range maxRelationsPages {
		resp, err := p.cli.GetRelations(ctx, rid, msg, req)
		if err != nil {
			return "", classify(err)
		}
		for _, ev := range resp.Chunk {
			if ev == nil || !isBot(ev.Sender, id.UserID(p.cfg.UserID)) {
				continue
			}
			_ = ev.Content.ParseRaw(event.EventReaction)
			if r, ok := ev.Content.Parsed.(*event.ReactionEventContent); ok && r.RelatesTo.Key == emoji {
				return ev.ID, nil
			}
		}
		if resp.NextBatch == "" || resp.NextBatch == req.From {
			return "", nil
		}
		req.From = resp.NextBatch
	}
	p.log.Warn("matrix: the bot's reaction was not among the newest annotations of a message; it stays",
		"chat_id", rid.String(), "read", relationsPage*maxRelationsPages)
	return "", nil
}

// Fetch downloads a received file from the media repository by its
// mxc:// URI (authenticated media, /_matrix/client/v1/media/download,
// with the bot's token). A 429 (M_LIMIT_EXCEEDED, after the wait the
// homeserver names: downloadRefused) or a 5xx is asked again, three
// attempts in all within ctx, as Hermes retries media downloads
// (platform.DownloadReading): mautrix's client would not, its retries
// being off for every call, so the first such answer lost the file to
// the turn.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	uri, err := id.ParseContentURI(a.GetPlatformFileId())
	if err != nil || uri.IsEmpty() {
		return nil, "", platform.ErrNotFetched
	}
	u := p.cli.BuildURL(mautrix.ClientURLPath{"v1", "media", "download", uri.Homeserver, uri.FileID})
	resp, err := platform.DownloadReading(ctx, p.cli.Client, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+p.cli.AccessToken)
		req.Header.Set("User-Agent", p.cli.UserAgent)
		return req, nil
	}, downloadRefused)
	if err != nil {
		return nil, "", fmt.Errorf("matrix media %s: %w", uri, err)
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		ct = mt
	}
	return resp.Body, ct, nil
}

// downloadRefused reads a media download's answer other than 200: a 429
// or a 5xx is asked again (platform.Download's rule), after the wait it
// names as namedWait reads it (the Retry-After header, else the body's
// retry_after_ms, at most maxNamedWait), else platform.Download's (1.5 s
// then 3 s). A homeserver before Matrix 1.10 (MSC4041) names the wait
// in the body alone: before, it was asked again after 1.5 s however
// long it had asked for, even past the fetch's bound (where the download
// now fails at once, as for a Retry-After). Its error is a
// *platform.StatusError.
func downloadRefused(resp *http.Response, body []byte) (bool, error) {
	retry := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	var err error = &platform.StatusError{Code: resp.StatusCode, Status: resp.Status}
	if !retry {
		return false, err
	}
	he := mautrix.HTTPError{Response: resp}
	var re mautrix.RespError
	if json.Unmarshal(body, &re) == nil {
		he.RespError = &re
	}
	if d, ok := namedWait(he); ok {
		err = &platform.WaitError{Err: err, Wait: d}
	}
	return retry, err
}

// uploaded is what a send mark keeps of an attachment's upload: enough
// to post it again without reading or uploading it.
type uploaded struct {
	URI  string `json:"uri"`
	Mime string `json:"mime"`
	Name string `json:"name"`
	Size int    `json:"size"`
}

// uploadMark names the mark of attachment i's upload.
func uploadMark(i int) string { return "mxc" + strconv.Itoa(i) }

// upload reads attachment i of the send and uploads it to the media
// repository, unless an earlier attempt of the send did (its mark).
// A homeserver that purged the unreferenced upload meanwhile (media
// retention, days) is not asked about: the event would show a missing
// image, as any old one whose media was purged.
func (p *Platform) upload(ctx context.Context, a *eventsv1.Attachment, i int) (uploaded, error) {
	if v, ok := platform.SendMarked(ctx, uploadMark(i)); ok {
		var u uploaded
		if err := json.Unmarshal([]byte(v), &u); err == nil && u.URI != "" {
			return u, nil
		}
	}
	data, mimeType, err := platform.ReadOutbound(ctx, a, p.store, p.downloads, maxAttachmentBytes)
	if err != nil {
		return uploaded{}, err
	}
	name := platform.FileName(a, mimeType)
	up, err := p.cli.UploadMedia(ctx, mautrix.ReqUploadMedia{ContentBytes: data, ContentType: mimeType, FileName: name})
	if err != nil {
		return uploaded{}, classify(err)
	}
	u := uploaded{URI: string(up.ContentURI.CUString()), Mime: mimeType, Name: name, Size: len(data)}
	if b, err := json.Marshal(u); err == nil {
		platform.SendMark(ctx, uploadMark(i), string(b))
	}
	return u, nil
}

// mediaContent uploads attachment i and returns the message that shows
// it (m.image, m.audio, m.video or m.file).
func (p *Platform) mediaContent(ctx context.Context, a *eventsv1.Attachment, i int) (*event.MessageEventContent, error) {
	u, err := p.upload(ctx, a, i)
	if err != nil {
		return nil, err
	}
	name, mimeType := u.Name, u.Mime
	c := &event.MessageEventContent{MsgType: event.MsgFile, Body: name, FileName: name, URL: id.ContentURIString(u.URI),
		Info: &event.FileInfo{MimeType: mimeType, Size: u.Size}}
	switch a.GetKind() {
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, eventsv1.AttachmentKind_ATTACHMENT_KIND_STICKER:
		c.MsgType = event.MsgImage
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO:
		c.MsgType = event.MsgAudio
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_VOICE:
		c.MsgType, c.MSC3245Voice = event.MsgAudio, &event.MSC3245Voice{}
	case eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO:
		c.MsgType = event.MsgVideo
	}
	if cap := a.GetCaption(); cap != "" {
		c.Body = p.mentions(cap)
	}
	return c, nil
}

// classify maps a homeserver's answer to delivery's error classes:
// M_LIMIT_EXCEEDED (429) is retried after the Retry-After header (or
// retry_after_ms); M_FORBIDDEN, M_UNKNOWN_TOKEN and the other 4xx
// are permanent; 5xx and network errors are retried.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var he mautrix.HTTPError
	if !errors.As(err, &he) {
		return err // the network, a timeout: retried
	}
	status := 0
	if he.Response != nil {
		status = he.Response.StatusCode
	}
	code := ""
	if he.RespError != nil {
		code = he.RespError.ErrCode
	}
	switch {
	case code == mautrix.MLimitExceeded.ErrCode || status == http.StatusTooManyRequests:
		return platform.RateLimited(err, retryAfter(he))
	case code == mautrix.MForbidden.ErrCode, code == mautrix.MUnknownToken.ErrCode, code == mautrix.MMissingToken.ErrCode,
		code == mautrix.MNotFound.ErrCode, code == mautrix.MTooLarge.ErrCode, code == mautrix.MBadJSON.ErrCode,
		code == mautrix.MNotJSON.ErrCode, code == mautrix.MUnknown.ErrCode && status >= 400 && status < 500:
		return platform.Permanent(err)
	case status >= 500 || status == 0 || status == http.StatusRequestTimeout:
		return err
	case status >= 400:
		return platform.Permanent(err)
	}
	return err
}

// retryAfter reads the wait a 429 names (namedWait: the Retry-After
// header, else retry_after_ms in the body), else 1 s.
func retryAfter(he mautrix.HTTPError) time.Duration {
	if d, ok := namedWait(he); ok {
		return d
	}
	return time.Second
}

// maxNamedWait bounds the wait an answer names before it is made a
// time.Duration, which a larger one overflows (to 0 or less: no wait).
const maxNamedWait = 24 * time.Hour

// namedWait is the wait an answer names: its Retry-After header
// (seconds or a date), else retry_after_ms in the body, at most
// maxNamedWait; ok false when it names none (a Retry-After of 0 names
// none). The header comes first when both are sent: the Client-Server
// API's "Rate limiting" (changed in v1.10, MSC4041) has homeservers send
// Retry-After with every 429 and deprecates retry_after_ms "in favour of
// the Retry-After header", and MSC4041 has clients read the header
// first, the body's property only without it (a homeserver before 1.10).
func namedWait(he mautrix.HTTPError) (time.Duration, bool) {
	if he.Response != nil {
		if d, ok := platform.ParseRetryAfter(he.Response.Header.Get("Retry-After"), time.Now()); ok && d > 0 {
			return min(d, maxNamedWait), true
		}
	}
	if he.RespError != nil {
		if ms, ok := he.RespError.ExtraData["retry_after_ms"].(float64); ok && ms > 0 {
			if ms >= float64(maxNamedWait/time.Millisecond) {
				return maxNamedWait, true
			}
			return time.Duration(ms) * time.Millisecond, true
		}
	}
	return 0, false
}
