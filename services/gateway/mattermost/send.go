package mattermost

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxAttachmentBytes bounds a file the gateway uploads (Mattermost's
// default MaxFileSize is 100 MB).
const maxAttachmentBytes = 100 << 20

// maxFilesPerPost is how many files one post carries.
const maxFilesPerPost = 5

var _ platform.Fetcher = (*Platform)(nil)
var _ platform.Reactor = (*Platform)(nil)

// validID reports whether s is a Mattermost id: 26 lowercase letters
// and digits.
func validID(s string) bool {
	if len(s) != 26 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// channelOf checks a target's channel id.
func channelOf(t *deliveryv1.Target) (string, error) {
	id := t.GetChatId()
	if !validID(id) {
		return "", platform.Permanent(fmt.Errorf("mattermost: %q is not a channel id", id))
	}
	return id, nil
}

// postOf checks a message id.
func postOf(id string) (string, error) {
	if !validID(id) {
		return "", platform.Permanent(fmt.Errorf("mattermost: %q is not a post id", id))
	}
	return id, nil
}

// pendingID turns an idempotency key into a pending_post_id, shaped as
// the web app makes them (<user id>:<13 digits>): a post retried with it
// within the server's dedupe window (30 s; the id is not stored with the
// post) is answered with the first one.
func (p *Platform) pendingID(key, part string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key + "\x00" + part))
	n := binary.BigEndian.Uint64(sum[:8]) % 1e13
	return fmt.Sprintf("%s:%013d", p.rules.BotID, n)
}

// sendProp is the post property that names the send (and part) a post
// was made for: its pending_post_id, which the server does not keep.
const sendProp = "switchboard_send"

// unsurePart is where the kit's part records note that part i's create
// got no clear answer (a network error, a 5xx): the time it was sent
// (Unix ms). Negative, so it never meets a part's own record.
func unsurePart(i int) int { return -1 - i }

// unclear reports whether a create's failure leaves open whether the
// server made the post: no answer, or a server error.
func unclear(err error) bool {
	var ae *apiError
	return !errors.As(err, &ae) || ae.Status >= 500
}

// findSent looks for the post an earlier, unclear attempt of a part may
// have made: the bot's post in the channel since that attempt whose
// sendProp is the part's marker ("" when there is none). The server
// answers a repeated pending_post_id with its first post for 30 s
// only; after that, this is how a retry knows.
func (p *Platform) findSent(ctx context.Context, ch, since, marker string) (string, error) {
	ms, err := strconv.ParseInt(since, 10, 64)
	if err != nil {
		return "", nil
	}
	// Two minutes before it, for the server's clock differing from ours.
	list, err := p.cli.postsSince(ctx, ch, ms-int64((2*time.Minute)/time.Millisecond))
	if err != nil {
		return "", classify(fmt.Errorf("mattermost: look for the post of an unclear attempt: %w", err))
	}
	for _, po := range list.Posts {
		if po == nil || po.UserID != p.rules.BotID || len(po.Props) == 0 {
			continue
		}
		var props struct {
			Send string `json:"switchboard_send"`
		}
		if json.Unmarshal(po.Props, &props) == nil && props.Send == marker && po.DeleteAt == 0 {
			return po.ID, nil
		}
	}
	return "", nil
}

// imageLink is Markdown's ![alt](url): Hermes sends the URL alone,
// which Mattermost previews.
var imageLink = regexp.MustCompile(`!\[([^\]]*)\]\(([^)]+)\)`)

// format is the post's message: Mattermost renders Markdown, so the
// agent's text goes as is, images as their URL, and channel-wide
// mentions neutralised unless allow_channel_mentions is set.
func (p *Platform) format(text string) string {
	text = imageLink.ReplaceAllString(text, "$2")
	if !p.cfg.AllowChannelMentions {
		text = neutralizeChannelMentions(text)
	}
	return text
}

// rootOf is the thread a send goes in: the target's thread, else, in
// reply mode "thread", the message it answers.
func (p *Platform) rootOf(t *deliveryv1.Target) string {
	if th := t.GetThreadId(); th != "" {
		return th
	}
	if p.cfg.ReplyMode == ReplyThread {
		return t.GetReplyToMessageId()
	}
	return ""
}

// Send posts the attachments (uploaded, up to five a post) and the text
// (split at the post limit, code fences kept whole) in the channel, in
// the thread when there is one. The last text post's id is the message
// id (the last file post's when there is no text). Each post sent is
// recorded, so a retry after a partial failure skips it.
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	ch, err := channelOf(req.GetTarget())
	if err != nil {
		return "", err
	}
	text := p.format(req.GetText())
	if strings.TrimSpace(text) == "" && len(req.GetAttachments()) == 0 {
		return "", platform.Permanent(errors.New("mattermost: empty message"))
	}
	root := p.rootOf(req.GetTarget())
	if root != "" && !validID(root) {
		return "", platform.Permanent(fmt.Errorf("mattermost: %q is not a post id", root))
	}
	var last string
	part := 0
	post := func(np newPost) error {
		defer func() { part++ }()
		if id, sent := platform.SentPart(ctx, part); sent {
			last = id
			return nil
		}
		np.ChannelID, np.RootID = ch, root
		np.PendingPostID = p.pendingID(req.GetIdempotencyKey(), strconv.Itoa(part))
		if np.PendingPostID != "" {
			np.Props = map[string]string{sendProp: np.PendingPostID}
			if at, unsure := platform.SentPart(ctx, unsurePart(part)); unsure {
				id, err := p.findSent(ctx, ch, at, np.PendingPostID)
				if err != nil {
					return err
				}
				if id != "" {
					platform.RecordPart(ctx, part, id)
					last = id
					return nil
				}
			}
		}
		started := time.Now()
		out, err := p.cli.createPost(ctx, np)
		if err != nil {
			if np.PendingPostID != "" && unclear(err) {
				platform.RecordPart(ctx, unsurePart(part), strconv.FormatInt(started.UnixMilli(), 10))
			}
			return classify(err)
		}
		platform.RecordPart(ctx, part, out.ID)
		last = out.ID
		return nil
	}
	atts := req.GetAttachments()
	for i := 0; i < len(atts); i += maxFilesPerPost {
		group := atts[i:min(i+maxFilesPerPost, len(atts))]
		if _, sent := platform.SentPart(ctx, part); sent {
			if err := post(newPost{}); err != nil {
				return "", err
			}
			continue
		}
		np := newPost{}
		var captions []string
		for j, a := range group {
			id, err := p.uploadAttachment(ctx, ch, a, i+j)
			if err != nil {
				return "", fmt.Errorf("mattermost attachment %d: %w", i+j, err)
			}
			np.FileIDs = append(np.FileIDs, id)
			// Every file's caption, once, but not the text that is posted
			// after the files anyway.
			if c := strings.TrimSpace(a.GetCaption()); c != "" && c != strings.TrimSpace(req.GetText()) && !slices.Contains(captions, c) {
				captions = append(captions, c)
			}
		}
		if len(captions) > 0 {
			np.Message = p.format(strings.Join(captions, "\n"))
		}
		if err := post(np); err != nil {
			return "", err
		}
	}
	if strings.TrimSpace(text) != "" {
		for _, c := range chunk.SplitLimit(text, chunk.Limit{Max: maxPostRunes, Measure: chunk.Runes}) {
			if err := post(newPost{Message: c}); err != nil {
				return "", err
			}
		}
	}
	return last, nil
}

// Edit replaces a post's message (PUT /posts/{id}/patch): delivery
// streams an answer by editing its post.
func (p *Platform) Edit(ctx context.Context, req *deliveryv1.SendRequested) error {
	id, err := postOf(req.GetMessageId())
	if err != nil {
		return err
	}
	text := p.format(req.GetText())
	if strings.TrimSpace(text) == "" {
		return platform.Permanent(errors.New("mattermost: edit to an empty message"))
	}
	if n := utf8.RuneCountInString(text); n > maxPostRunes {
		return platform.Permanent(fmt.Errorf("mattermost: edit of %d characters, the limit is %d", n, maxPostRunes))
	}
	return classify(p.cli.patchPost(ctx, id, text))
}

// Delete removes a post.
func (p *Platform) Delete(ctx context.Context, req *deliveryv1.SendRequested) error {
	id, err := postOf(req.GetMessageId())
	if err != nil {
		return err
	}
	err = p.cli.deletePost(ctx, id)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil // gone already
	}
	return classify(err)
}

// Typing shows the bot typing in the channel (and thread); the server
// shows it for a few seconds, and delivery repeats it while the turn
// runs.
func (p *Platform) Typing(ctx context.Context, req *deliveryv1.SendRequested) error {
	ch, err := channelOf(req.GetTarget())
	if err != nil {
		return err
	}
	// Where the answer will be: in reply mode "thread" a channel
	// message's answer opens a thread on it, so the typing shows there.
	root := p.rootOf(req.GetTarget())
	if root != "" && !validID(root) {
		root = ""
	}
	return classify(p.cli.typing(ctx, p.rules.BotID, ch, root))
}

// Reactions are Hermes's processing marks in Mattermost's emoji names:
// :eyes: while a turn runs, then :white_check_mark: or :x:. Off unless
// configured (Hermes's adapter sets none).
func (p *Platform) Reactions() platform.Reactions {
	if !p.cfg.Reactions {
		return platform.Reactions{}
	}
	return platform.Reactions{Processing: "eyes", Success: "white_check_mark", Failure: "x"}
}

// React adds the bot's reaction to a post; one it has already is no
// error (the server answers it again).
func (p *Platform) React(ctx context.Context, _ *deliveryv1.Target, messageID, emoji string) error {
	if _, err := postOf(messageID); err != nil {
		return err
	}
	return classify(p.cli.addReaction(ctx, p.rules.BotID, messageID, emoji))
}

// Unreact removes the bot's reaction from a post; one it does not have
// is no error.
func (p *Platform) Unreact(ctx context.Context, _ *deliveryv1.Target, messageID, emoji string) error {
	if _, err := postOf(messageID); err != nil {
		return err
	}
	err := p.cli.removeReaction(ctx, p.rules.BotID, messageID, emoji)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil
	}
	return classify(err)
}

// Fetch downloads a received file (GET /files/{id}) with the bot's token.
func (p *Platform) Fetch(ctx context.Context, a *eventsv1.Attachment) (io.ReadCloser, string, error) {
	id := a.GetPlatformFileId()
	if !validID(id) {
		return nil, "", platform.ErrNotFetched
	}
	resp, err := p.cli.file(ctx, id)
	if err != nil {
		return nil, "", err
	}
	ct := resp.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		ct = mt
	}
	return resp.Body, ct, nil
}

// fileMark names the send mark of attachment i's uploaded file.
func fileMark(i int) string { return "file" + strconv.Itoa(i) }

// uploadAttachment uploads attachment i of the send to the channel and
// returns its file id. A keyed send keeps the id beside its receipt (a
// send mark), so a retry after the post failed attaches the file the
// first attempt uploaded instead of leaving it unattached and uploading
// another (Mattermost keeps an upload no post claims until an operator
// cleans it up). The file is the bot's and claimed by no post while its
// post was not made: an unclear create that did make it is found by
// findSent before the file is reused.
func (p *Platform) uploadAttachment(ctx context.Context, ch string, a *eventsv1.Attachment, i int) (string, error) {
	if id, ok := platform.SendMarked(ctx, fileMark(i)); ok && validID(id) {
		return id, nil
	}
	data, mimeType, err := platform.ReadOutbound(ctx, a, p.store, p.downloads, maxAttachmentBytes)
	if err != nil {
		return "", err
	}
	name := platform.FileName(a, mimeType)
	id, err := p.cli.upload(ctx, ch, name, mimeType, data)
	if err != nil {
		return "", classify(err)
	}
	kept, _ := platform.SendMark(ctx, fileMark(i), id)
	return kept, nil
}

// classify maps a server's answer to delivery's error classes: 429 is
// retried after X-Ratelimit-Reset (or Retry-After); 5xx, 408 and network
// errors are retried; any other 4xx (401 a revoked token, 403 no access
// to the channel, 404, 400 a bad post) is permanent.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.Status == http.StatusTooManyRequests:
		return platform.RateLimited(err, ae.RetryAfter)
	case ae.Status >= 500 || ae.Status == http.StatusRequestTimeout:
		return err
	case ae.Status >= 400:
		return platform.Permanent(err)
	}
	return err
}
