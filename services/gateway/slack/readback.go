package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// A chat.postMessage whose answer was lost (a timeout, a connection
// reset after the request went out, a 5xx after Slack made the message)
// is asked for again by delivery under the same idempotency key. Slack
// takes no idempotency key, so the retry would post the answer twice.
// Instead every message of a keyed send carries, in its metadata (which
// Slack shows no one), a marker of its send and piece; a retry first
// reads the bot's recent messages back (conversations.history at a
// channel's top level, conversations.replies in a thread: the history
// scopes) and takes a message carrying its marker for sent, as
// Mattermost's read-back and Discord's nonce do. A token without the
// scopes, or any other refused read, never costs the answer: the retry
// posts, as before, and the gateway says so once; nor does a read that
// keeps failing (readTries).

// sendEventType is the metadata event type of the bot's messages; its
// payload's sendField names the send and piece (sendMarker).
const (
	sendEventType = "switchboard_send"
	sendField     = "send"
)

// sendMarker is the marker of piece part of the send keyed key ("" for a
// send without a key: it carries none): 32 hex digits of a hash of
// both. It depends on nothing else, so every attempt of the send, on
// any replica and after any restart, looks for the same one.
func sendMarker(key string, part int) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key + "\x00" + strconv.Itoa(part)))
	return hex.EncodeToString(sum[:16])
}

// metadata is the message metadata that carries marker.
func metadata(marker string) slackapi.MsgOption {
	return slackapi.MsgOptionMetadata(slackapi.SlackMetadata{EventType: sendEventType, EventPayload: map[string]any{sendField: marker}})
}

const (
	// clockSkew is how much earlier than an attempt's start, by our
	// clock, the read-back looks: Slack's clock, which stamps the ts,
	// may be behind ours.
	clockSkew = 2 * time.Minute
	// unknownWindow is how far back the read-back looks when the first
	// attempt's start is unknown (its mark could not be written or
	// read): delivery's retries come at most 5 minutes apart, so this
	// covers the last few attempts.
	unknownWindow = 30 * time.Minute
	// readPage and readPages bound one read-back: at most 1,000 of the
	// conversation's latest messages since the first attempt.
	readPage  = 200
	readPages = 5
)

// earlier records, for the send being performed with ctx, that an
// attempt is about to post piece part, and reports whether an earlier
// attempt may have posted it (retry), and since when. False when the
// send keeps no records (no idempotency key, or no receipts bucket).
// True, with since unknownWindow ago, when it keeps them but the mark
// could not be written or read: the attempt may be a retry.
func earlier(ctx context.Context, part int, now time.Time) (since time.Time, retry bool) {
	if _, records := platform.SendTag(ctx, part); !records {
		return time.Time{}, false
	}
	// The attempt's start, and a nonce that tells it from another
	// attempt started in the same millisecond.
	mine := strconv.FormatInt(now.UnixMilli(), 10) + "." + strconv.FormatUint(rand.Uint64(), 36)
	first, ok := platform.SendMark(ctx, "posting"+strconv.Itoa(part), mine)
	switch {
	case !ok:
		return now.Add(-unknownWindow), true
	case first == mine:
		return time.Time{}, false
	}
	ms, _, _ := strings.Cut(first, ".")
	at, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return now.Add(-unknownWindow), true
	}
	return time.UnixMilli(at).Add(-clockSkew), true
}

// readTries is how many failures of a piece's read-back that a later
// attempt may get past (rate limited, a 5xx, Slack out of reach) fail
// their attempts, to be retried; the attempt after them posts without
// the read. A read that keeps failing would otherwise fail every
// attempt until delivery dead-letters the answer (max_attempts, or its
// TTL): a lost answer is worse than one that may show twice. Slack's
// tier 1 limit on conversations.history and .replies for apps outside
// its Marketplace (one call a minute, 15 messages a page) fails a
// read-back of more than one page every time.
const readTries = 3

// readFailed records that the read-back of piece part failed in a way a
// later attempt may get past, and reports whether this attempt is to
// fail, to be retried (one of the piece's first readTries such
// failures), or to post without the read (a later one, or one whose
// count cannot be kept: the gateway's records failing, which would
// leave it unbounded).
func readFailed(ctx context.Context, part int) bool {
	mine := strconv.FormatUint(rand.Uint64(), 36)
	for n := 1; n <= readTries; n++ {
		kept, ok := platform.SendMark(ctx, "readfailed"+strconv.Itoa(part)+"."+strconv.Itoa(n), mine)
		if !ok {
			return false
		}
		if kept == mine {
			return true
		}
	}
	return false
}

// tsOf is t as a Slack ts (seconds, six decimals).
func tsOf(t time.Time) string {
	us := t.UnixMicro()
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// errReadRefused is a read-back Slack refused (a missing scope, a
// channel the bot cannot read): the send posts without it.
var errReadRefused = errors.New("slack refused the read-back")

// findSent looks for the bot's message carrying marker in channel ch
// (in thread's replies when thread is set, else at its top level),
// posted since since: the message an earlier attempt of this piece
// made. nil when there is none within the bound (readPages). A read
// Slack refuses for good is errReadRefused; one that may succeed later
// (rate limited, a 5xx, Slack out of reach) is a send error to retry,
// readTries times (readFailed).
func (p *Platform) findSent(ctx context.Context, ch, thread string, since time.Time, marker string) (*slackapi.Message, error) {
	oldest := tsOf(since)
	cursor := ""
	for range readPages {
		var msgs []slackapi.Message
		var next string
		var err error
		method := "conversations.history"
		if thread != "" {
			method = "conversations.replies"
			msgs, _, next, err = p.api.GetConversationRepliesContext(ctx, &slackapi.GetConversationRepliesParameters{
				ChannelID: ch, Timestamp: thread, Oldest: oldest, Inclusive: true, Limit: readPage, Cursor: cursor, IncludeAllMetadata: true})
		} else {
			var h *slackapi.GetConversationHistoryResponse
			h, err = p.api.GetConversationHistoryContext(ctx, &slackapi.GetConversationHistoryParameters{
				ChannelID: ch, Oldest: oldest, Inclusive: true, Limit: readPage, Cursor: cursor, IncludeAllMetadata: true})
			if h != nil {
				msgs, next = h.Messages, h.ResponseMetaData.NextCursor
			}
		}
		if err != nil {
			var se slackapi.SlackErrorResponse
			if errors.As(err, &se) && se.Err == "thread_not_found" {
				// No thread there yet: nothing was posted in it.
				return nil, nil
			}
			if readRefused(err) {
				return nil, fmt.Errorf("%w: %s: %w", errReadRefused, method, err)
			}
			return nil, sendError(method+" (read back an earlier attempt)", err)
		}
		for i := range msgs {
			if m := &msgs[i]; p.carries(m, marker) {
				return m, nil
			}
		}
		if next == "" {
			return nil, nil
		}
		cursor = next
	}
	return nil, nil
}

// carries reports whether m is the bot's message carrying marker.
func (p *Platform) carries(m *slackapi.Message, marker string) bool {
	mine := m.User != "" && m.User == p.id.BotUserID || m.BotID != "" && m.BotID == p.id.BotID
	if !mine || m.Metadata.EventType != sendEventType {
		return false
	}
	got, _ := m.Metadata.EventPayload[sendField].(string)
	return got == marker
}

// readRefused reports whether a read-back's failure is Slack refusing it
// for good (an error code other than a rate limit or a passing fault, a
// 4xx), not one a later attempt may get past.
func readRefused(err error) bool {
	var rl *slackapi.RateLimitedError
	if errors.As(err, &rl) {
		return false
	}
	var se slackapi.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err != "ratelimited" && !retryableCodes[se.Err]
	}
	var sc slackapi.StatusCodeError
	return errors.As(err, &sc) && sc.Code >= 400 && sc.Code < 500 && sc.Code != http.StatusTooManyRequests
}

// readRefusedOnce warns, the first time only, that a read-back was
// refused; later ones are logged at debug.
func (p *Platform) readRefusedOnce(err error) {
	if p.readWarned.CompareAndSwap(false, true) {
		attrs := []any{"err", err}
		var se slackapi.SlackErrorResponse
		if errors.As(err, &se) && se.Needed != "" {
			attrs = append(attrs, "needed", se.Needed)
		}
		p.log.Warn("slack: cannot read the bot's messages back; a send whose answer was lost may show twice (grant channels:history, groups:history, im:history and mpim:history)",
			attrs...)
		return
	}
	p.log.Debug("slack: read-back refused; posting", "err", err)
}
