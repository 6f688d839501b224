package delivery

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
)

// Image modes of a platform (delivery.images, delivery.platforms.<p>.images).
const (
	// ImagesNative: the images a final answer references (Markdown
	// ![alt](https://…), HTML <img src="https://…">) are taken out of its
	// text and sent after it as image attachments, which the gateway
	// posts as pictures.
	ImagesNative = "native"
	// ImagesLink: the answer's text goes as written; the platform shows
	// the image syntax its own way (a link, an unfurled preview).
	ImagesLink = "link"
)

// answerImage is an image a final answer references.
type answerImage struct {
	url, alt string
}

// maxAnswerImages bounds the images one answer sends natively; the ones
// after it stay in the text as written. Hermes sends every one.
const maxAnswerImages = 10

// Hermes's patterns (BasePlatformAdapter.extract_images,
// gateway/platforms/base.py): a Markdown image with an http(s) URL, and an
// HTML <img> tag whose src is one.
var (
	markdownImage = regexp.MustCompile(`!\[([^\]]*)\]\((https?://[^\s)]+)\)`)
	htmlImage     = regexp.MustCompile(`<img\s+src=["']?(https?://[^\s"'<>]+)["']?\s*/?>\s*(?:</img>)?`)
	blankLines    = regexp.MustCompile(`\n{3,}`)
	fencedCode    = regexp.MustCompile("(?s)```[^\n]*\n.*?```")
	inlineCode    = regexp.MustCompile("`[^`\n]+`")
)

// imageMarks are what a Markdown image's URL must contain to be taken as
// a picture, as Hermes has them: an image extension or a known image
// host (fal.ai, Replicate). An <img> tag's src is a picture regardless.
var imageMarks = []string{".png", ".jpg", ".jpeg", ".gif", ".webp", "fal.media", "fal-cdn", "replicate.delivery"}

func looksLikeImage(url string) bool {
	u := strings.ToLower(url)
	for _, m := range imageMarks {
		if strings.Contains(u, m) {
			return true
		}
	}
	return false
}

// extractImages finds the images text references and returns them with
// the text they were taken out of, as Hermes's extract_images does: each
// extracted image's syntax removed, runs of blank lines left behind
// collapsed to one, the text trimmed. Where it differs: images inside
// code (fenced blocks, inline spans) are left alone, as Hermes's
// extract_local_files leaves paths there (a Markdown example stays
// intact), a fence never closed running to the end of the text as
// CommonMark has it; a URL referenced twice is sent once; at most maxAnswerImages
// are taken, the rest stay in the text. Without images the text is
// returned unchanged.
func extractImages(text string) ([]answerImage, string) {
	if !strings.Contains(text, "](http") && !strings.Contains(text, "<img") {
		return nil, text
	}
	code := codeSpans(text)
	inCode := func(i int) bool {
		for _, r := range code {
			if i >= r[0] && i < r[1] {
				return true
			}
		}
		return false
	}
	type match struct {
		start, end int
		img        answerImage
	}
	var found []match
	for _, m := range markdownImage.FindAllStringSubmatchIndex(text, -1) {
		u := text[m[4]:m[5]]
		if looksLikeImage(u) && !inCode(m[0]) {
			found = append(found, match{m[0], m[1], answerImage{url: u, alt: strings.TrimSpace(text[m[2]:m[3]])}})
		}
	}
	for _, m := range htmlImage.FindAllStringSubmatchIndex(text, -1) {
		if !inCode(m[0]) {
			found = append(found, match{m[0], m[1], answerImage{url: text[m[2]:m[3]]}})
		}
	}
	if len(found) == 0 {
		return nil, text
	}
	// In the order they appear; a Markdown image inside an <img> match
	// (or the reverse) cannot happen, the two never overlap.
	for i := 1; i < len(found); i++ {
		for j := i; j > 0 && found[j].start < found[j-1].start; j-- {
			found[j], found[j-1] = found[j-1], found[j]
		}
	}
	var images []answerImage
	taken := map[string]bool{}
	var b strings.Builder
	last := 0
	for _, m := range found {
		if m.start < last {
			continue
		}
		if !taken[m.img.url] {
			if len(images) == maxAnswerImages {
				continue // stays in the text
			}
			taken[m.img.url] = true
			images = append(images, m.img)
		}
		b.WriteString(text[last:m.start])
		last = m.end
	}
	b.WriteString(text[last:])
	return images, strings.TrimSpace(blankLines.ReplaceAllString(b.String(), "\n\n"))
}

// codeSpans are the byte ranges of text's code: fenced blocks, a fence
// left open (to the end of the text, as CommonMark renders it), inline
// spans outside blocks.
func codeSpans(text string) [][]int {
	if !strings.Contains(text, "`") {
		return nil
	}
	code := fencedCode.FindAllStringIndex(text, -1)
	end := 0
	if len(code) > 0 {
		end = code[len(code)-1][1]
	}
	if i := strings.Index(text[end:], "```"); i >= 0 {
		code = append(code, []int{end + i, len(text)})
	}
	return append(code, inlineCode.FindAllStringIndex(text, -1)...)
}

// streamedText is what a message streaming text shows when the final
// answer's images go natively: the text as the final will have it
// (extractImages), without a possible image being written at its end
// (an unfinished "![alt](https://exa" or "<img src=…"), which the
// final may take out. The images themselves go with the final.
func streamedText(text string) string {
	text = text[:partialImage(text)]
	_, text = extractImages(text)
	return text
}

// partialImage is where a Markdown image or <img> tag that the text
// could yet complete starts on its last line (outside code): len(text)
// when there is none. A lone "!" or "<" at the end counts, "![alt]("
// needs an http(s) URL under way, a line break in the alt text ends the
// candidate (an alt text rarely has one).
func partialImage(text string) int {
	line := strings.LastIndexByte(text, '\n') + 1
	var code [][]int
	for i := line; i < len(text); i++ {
		if c := text[i]; c != '!' && c != '<' {
			continue
		}
		if !couldBeImage(text[i:]) {
			continue
		}
		if code == nil {
			code = append(codeSpans(text), nil)
		}
		inCode := false
		for _, r := range code {
			if r != nil && i >= r[0] && i < r[1] {
				inCode = true
				break
			}
		}
		if !inCode {
			return i
		}
	}
	return len(text)
}

// couldBeImage reports whether s, the end of a text, is the beginning of
// a Markdown image or an <img> tag that is not finished yet.
func couldBeImage(s string) bool {
	if s[0] == '!' {
		return couldBeMarkdownImage(s)
	}
	return couldBeImgTag(s)
}

func couldBeMarkdownImage(s string) bool {
	// ![alt](url)
	s = s[1:]
	if s == "" {
		return true
	}
	if s[0] != '[' {
		return false
	}
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return !strings.Contains(s, "\n")
	}
	s = s[end+1:]
	if s == "" {
		return true
	}
	if s[0] != '(' {
		return false
	}
	return unfinishedURL(s[1:], ")")
}

// unfinishedURL reports whether s is the start of an http(s) URL that
// has not ended (no whitespace, nor one of stops, yet).
func unfinishedURL(s, stops string) bool {
	for _, scheme := range []string{"https://", "http://"} {
		if len(s) <= len(scheme) {
			if strings.HasPrefix(scheme, s) {
				return true
			}
			continue
		}
		if strings.HasPrefix(s, scheme) {
			return !strings.ContainsAny(s, " \t\r\n\f\v"+stops)
		}
	}
	return false
}

func couldBeImgTag(s string) bool {
	// <img src="url"> or </img> after one
	for _, tag := range []string{"<img", "</img>"} {
		if len(s) < len(tag) && strings.HasPrefix(tag, s) {
			return true
		}
	}
	if !strings.HasPrefix(s, "<img") {
		return false
	}
	s = s[len("<img"):]
	t := strings.TrimLeft(s, " \t\r\n\f\v")
	if t == "" {
		return true
	}
	if len(t) == len(s) {
		return false // <imgx
	}
	const src = "src="
	if len(t) <= len(src) {
		return strings.HasPrefix(src, t)
	}
	if !strings.HasPrefix(t, src) {
		return false
	}
	t = t[len(src):]
	if t != "" && (t[0] == '"' || t[0] == '\'') {
		t = t[1:]
	}
	if t == "" {
		return true
	}
	if unfinishedURL(t, "\"'<>") {
		return true
	}
	// The URL is written; what may follow it before the ">".
	u := strings.IndexAny(t, " \t\r\n\f\v\"'<>")
	if u < 0 {
		return false
	}
	if url := t[:u]; !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") || strings.HasSuffix(url, "//") {
		return false
	}
	rest := t[u:]
	if rest[0] == '"' || rest[0] == '\'' {
		rest = rest[1:]
	}
	rest = strings.TrimLeft(rest, " \t\r\n\f\v")
	return rest == "" || rest == "/"
}

// answerImages takes the images out of a final answer's text when the
// platform of ev sends them natively (delivery.images and the platform's
// images mode); otherwise the text is returned as it is.
func (s *Service) answerImages(ev *repliesv1.ReplyEvent, text string) ([]answerImage, string) {
	if !s.cfg.nativeImages(ev.GetTarget().GetPlatform()) {
		return nil, text
	}
	return extractImages(text)
}

// imageKeyPart marks the idempotency key of an answer's image:
// "<turn_id>:<seq>:img<i>". The keys come from the final event, so a
// redelivered final queues the same rows again, which the outbox (and the
// gateway, by key) takes once.
const imageKeyPart = ":img"

// imageLinkSuffix ends the key of the link sent in place of an image that
// could not be sent.
const imageLinkSuffix = ":link"

// imageRequests are the sends of an answer's images, one attachment each,
// after its text. The last is the turn's final message when the answer
// had no text left.
func (s *Service) imageRequests(ctx context.Context, ev *repliesv1.ReplyEvent, images []answerImage, final bool) []*deliveryv1.SendRequested {
	base := keyBase(ctx, ev)
	reqs := make([]*deliveryv1.SendRequested, len(images))
	for i, img := range images {
		r := s.request(ev, fmt.Sprintf("%s%s%d", base, imageKeyPart, i), deliveryv1.SendOp_SEND_OP_SEND)
		// The answer's usage and hop times belong to its text.
		r.Usage, r.HopTimes = nil, nil
		r.Attachments = []*eventsv1.Attachment{{
			Kind:     eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE,
			Location: &eventsv1.Attachment_Url{Url: img.url},
			Caption:  img.alt,
		}}
		r.Final = final && i == len(images)-1
		reqs[i] = r
	}
	return reqs
}

// isImageRow reports whether a row is one of an answer's images.
func isImageRow(r outbox.Row) bool {
	i := strings.LastIndex(r.Key, imageKeyPart)
	if i < 0 || r.Request.GetOp() != deliveryv1.SendOp_SEND_OP_SEND || len(r.Request.GetAttachments()) != 1 {
		return false
	}
	n := r.Key[i+len(imageKeyPart):]
	return n != "" && strings.Trim(n, "0123456789") == ""
}

// imageFallback sends, in place of an answer's image r that was given
// up (the gateway could not fetch or post it, or every attempt failed),
// its link as text, as Hermes's send_image does on a platform without
// native images ("<alt>\n<url>"): the answer never loses it. The link
// takes the image's row, and so its place in the chat's order: nothing
// queued behind the image (a later answer) goes before it. Giving the
// image up and queueing its link are that one statement (outbox
// Replace): both happen or neither. When it fails (the database refused
// it, the connection or the replica died), the row is still the image's,
// claimed: once its lease runs out it is taken again, like any row whose
// sender died, the platform refuses the image again and the link takes
// its place then, queued, and sent, once. It reports whether the link
// took the image's row (no undelivered notice is due: the answer's text
// went on its own).
func (s *Service) imageFallback(ctx context.Context, log warner, r outbox.Row, reason string) bool {
	err := s.store.Replace(ctx, r.ID, s.owner, imageLink(r), "image given up, its link sent instead: "+reason, s.now(), s.cfg.TTL)
	if errors.Is(err, outbox.ErrLostClaim) {
		log.Warn("image given up, but another sender has its row now", "err", reason)
		return false
	}
	if err != nil {
		log.Warn("put an image's link in its place failed; the image is tried again when its lease runs out", "err", err)
		s.expiry.note(r.ExpiresAt) // it may expire, with its link, meanwhile
		return false
	}
	log.Warn("image given up; its link takes its place", "err", reason)
	s.kick()
	return true
}

// expiringImage decides, in the transaction of the expiry pass at now,
// what becomes of row r, due to expire: an answer's image whose answer's other
// messages were not given up (nor are due to expire) — the text
// arrived, or is still on its way — takes its link instead (delivery.ttl
// went by before the gateway could post it: its URL kept answering 5xx,
// the platform kept rate limiting), in the image's place in the chat's
// order, and without the link the user would lose the image silently.
// When one of them expired or was dead-lettered too, the answer as a
// whole is stale (the chat was unreachable for the TTL): a link on its
// own, long after, would come out of nowhere, so none is sent, and the
// image row expires with the others; an operator can requeue it. Any
// other row expires. The link gets its own TTL. An error (the look-up of
// the answer failed) aborts the pass: nothing expires, and the next pass
// decides again. Hermes keeps no outbox, so it has no expiry: its
// send_image falls back to the link only when the upload fails.
func (s *Service) expiringImage(ctx context.Context, q outbox.Querier, r outbox.Row, now time.Time) (*deliveryv1.SendRequested, string, error) {
	if !isImageRow(r) {
		return nil, "", nil
	}
	if turn := r.Request.GetTurnId(); turn != "" {
		var lost bool
		// The answer's other rows: its text, its streamed messages and
		// their edits (keys "<turn>:<seq>…" without ":img"); typing and
		// links excluded.
		err := q.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM delivery_outbox
	WHERE turn_id = $1 AND id <> $2
	  AND (state IN ('failed', 'expired') OR state IN ('queued', 'sending') AND expires_at <= $4)
	  AND position(':img' in idempotency_key) = 0
	  AND right(idempotency_key, length($3)) <> $3)`, turn, r.ID, undeliveredSuffix, now).Scan(&lost)
		if err != nil {
			return nil, "", fmt.Errorf("look up the answer of expiring image %s: %w", r.Key, err)
		}
		if lost {
			s.log.Warn("an expired image's answer was given up too; its link is not sent", "delivery_id", r.ID, "key", r.Key, "turn_id", turn)
			return nil, "", nil
		}
	}
	return imageLink(r), "image expired, its link sent instead: " + r.LastError, nil
}

// imageLink is the text sent in place of image row r: "<alt>\n<url>",
// keyed "<image key>:link" at the gateway.
func imageLink(r outbox.Row) *deliveryv1.SendRequested {
	a := r.Request.GetAttachments()[0]
	text := a.GetUrl()
	if c := a.GetCaption(); c != "" {
		text = c + "\n" + text
	}
	return &deliveryv1.SendRequested{
		IdempotencyKey:       r.Key + imageLinkSuffix,
		Op:                   deliveryv1.SendOp_SEND_OP_SEND,
		Target:               r.Request.GetTarget(),
		TurnId:               r.Request.GetTurnId(),
		SessionKey:           r.Request.GetSessionKey(),
		InputMessageIds:      r.Request.GetInputMessageIds(),
		NoReactionMessageIds: r.Request.GetNoReactionMessageIds(),
		Text:                 text,
		Format:               deliveryv1.TextFormat_TEXT_FORMAT_PLAIN,
		Final:                r.Request.GetFinal(),
	}
}
