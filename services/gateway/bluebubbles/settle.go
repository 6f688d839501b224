package bluebubbles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// An attempt of a send can end without knowing whether BlueBubbles sent
// the message: the gateway stopped waiting for a slow AppleScript send
// (the server goes on with it), the server answered an error after it
// took the send (500 "Message send timeout": it stopped waiting for the
// message to show, which Messages may send all the same), or a retry was
// refused because the server still sends that tempGuid ("Message is
// already queued to be sent!"), which may yet fail on the Mac. Such an
// attempt marks the send
// unsure (a mark beside its receipt, seen by every replica); the next
// attempt first looks the message up among the chat's messages sent since
// the first attempt (POST /api/v1/message/query) and counts it sent only
// when the server shows it sent without an error. BlueBubbles keeps no
// tempGuid in the Messages database, so the lookup matches what the
// message holds: its text, or an attachment's name.

const (
	// markFirst holds when the send's first attempt began (Unix ms).
	markFirst = "bb-first"
	// markUnsure: an attempt ended without knowing whether the message
	// went out.
	markUnsure = "bb-unsure"
	// queuedRetry is how long delivery waits before it looks again for a
	// message the server still sends; delivery's max_attempts bounds the
	// waiting.
	queuedRetry = 5 * time.Second
	// clockSkew reaches the lookup back before the first attempt, for a
	// Mac whose clock is behind the gateway's.
	clockSkew = 30 * time.Second
	// unknownFirst is how far back the lookup reaches for a send that
	// keeps no marks (no idempotency key).
	unknownFirst = 2 * time.Minute
	// maxLookup is how many of the chat's latest messages a lookup reads.
	maxLookup = 50
)

// foundMessage is a message of the REST API as the lookup reads it.
type foundMessage struct {
	GUID        string `json:"guid"`
	Text        string `json:"text"`
	IsFromMe    bool   `json:"isFromMe"`
	Error       int    `json:"error"`
	DateCreated int64  `json:"dateCreated"`
	Attachments []struct {
		TransferName string `json:"transferName"`
	} `json:"attachments"`
}

// firstTry records the first attempt's start (when the send keeps marks)
// and returns it; for a send without marks, a while ago.
func firstTry(ctx context.Context, now time.Time) time.Time {
	v, ok := platform.SendMark(ctx, markFirst, strconv.FormatInt(now.UnixMilli(), 10))
	if !ok {
		return now.Add(-unknownFirst)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return now.Add(-unknownFirst)
	}
	return time.UnixMilli(ms)
}

// attempt is one send of a message (a text or an upload) to a chat.
type attempt struct {
	chat  string // chat guid
	temp  string // tempGuid
	since time.Time
	// match reports whether a message the bot sent is this one.
	match func(*foundMessage) bool
}

// settled looks, before an attempt posts, whether an earlier attempt
// that ended unsure sent the message: its guid when the server shows it
// sent. Otherwise ("" and nil) the attempt posts: the message is not
// there or failed on the Mac, and if the server still sends the first
// attempt it refuses the post as queued again.
func (p *Platform) settled(ctx context.Context, a attempt) (string, error) {
	if _, unsure := platform.SendMarked(ctx, markUnsure); !unsure {
		return "", nil
	}
	m, err := p.findSent(ctx, a)
	if err != nil {
		return "", classify(fmt.Errorf("look for an earlier attempt of the message: %w", err))
	}
	if m != nil && m.Error == 0 {
		p.log.Info("bluebubbles sent an earlier attempt of this message; not sent again", "temp_guid", a.temp)
		return m.GUID, nil
	}
	return "", nil
}

// unsure handles a post that failed: a refusal for a tempGuid still being
// sent, or a failure that leaves unknown whether the server sent it (no
// answer, or a server error after it took the send), marks the send
// unsure. A queued message the server shows sent
// already is the message; else delivery looks again after queuedRetry.
func (p *Platform) unsure(ctx context.Context, a attempt, err error) (string, error) {
	if queued(err) {
		platform.SendMark(ctx, markUnsure, "queued")
		if m, ferr := p.findSent(ctx, a); ferr == nil && m != nil && m.Error == 0 {
			p.log.Info("bluebubbles sent an earlier attempt of this message; not sent again", "temp_guid", a.temp)
			return m.GUID, nil
		}
		p.log.Info("bluebubbles is still sending an earlier attempt of this message; looking again later", "temp_guid", a.temp)
		return "", &platform.SendError{Class: deliveryv1.ErrorClass_ERROR_CLASS_RETRYABLE, RetryAfter: queuedRetry,
			Err: fmt.Errorf("bluebubbles is still sending an earlier attempt of this message: %w", err)}
	}
	var ae *APIError
	switch {
	case !errors.As(err, &ae):
		// No answer: the server may have taken the send.
		platform.SendMark(ctx, markUnsure, "no answer")
	case ae.Status >= 500:
		// The server handed the message to Messages and then failed:
		// most often it stopped waiting for the message to show in the
		// Messages database ("Message send timeout": its timeout, or a
		// sent message it did not match to the send), and Messages may
		// have sent it. A message that failed on the Mac shows with its
		// error, and is posted again.
		platform.SendMark(ctx, markUnsure, "server error")
	}
	return "", classify(err)
}

// queued reports a send BlueBubbles refused because a send with its
// tempGuid is still under way (400 "Message is already queued to be
// sent!", "Attachment is already queued to be sent!").
func queued(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(ae.Message), "already queued")
}

// findSent reads the chat's messages since the first attempt (POST
// /api/v1/message/query, newest first) and returns the bot's message that
// matches: one sent without an error first, else one that failed, else
// nil.
func (p *Platform) findSent(ctx context.Context, a attempt) (*foundMessage, error) {
	body := map[string]any{"chatGuid": a.chat, "limit": maxLookup, "offset": 0, "sort": "DESC",
		"after": a.since.Add(-clockSkew).UnixMilli(), "with": []string{"attachment"}}
	var raw json.RawMessage
	if err := p.api.call(ctx, http.MethodPost, "/api/v1/message/query", body, &raw); err != nil {
		return nil, err
	}
	return pickSent(raw, a.match)
}

// pickSent is the bot's message among a message query's data that match
// takes: one without an error first, else one with an error.
func pickSent(raw []byte, match func(*foundMessage) bool) (*foundMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var msgs []foundMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, fmt.Errorf("bluebubbles message query: decode data: %w", err)
	}
	var failed *foundMessage
	for i := range msgs {
		m := &msgs[i]
		if !m.IsFromMe || m.GUID == "" || !match(m) {
			continue
		}
		if m.Error == 0 {
			return m, nil
		}
		if failed == nil {
			failed = m
		}
	}
	return failed, nil
}

// textIs matches a message by its text.
func textIs(text string) func(*foundMessage) bool {
	want := strings.TrimSpace(text)
	return func(m *foundMessage) bool { return strings.TrimSpace(m.Text) == want }
}

// fileIs matches a message by an attachment's name.
func fileIs(name string) func(*foundMessage) bool {
	return func(m *foundMessage) bool {
		for _, at := range m.Attachments {
			if at.TransferName == name {
				return true
			}
		}
		return false
	}
}

// looksLikeAddress is Hermes's test of a chat id that a new chat can be
// started with: an Apple ID email or a phone number in + form.
func looksLikeAddress(s string) bool {
	if strings.Contains(s, "@") {
		return !strings.ContainsAny(s, "; \t\n")
	}
	if len(s) < 2 || s[0] != '+' {
		return false
	}
	for _, r := range s[1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// newChat starts a DM with address by sending text to it (POST
// /api/v1/chat/new with the address, the message and the tempGuid), as
// Hermes does for an address no chat has, with the Private API. It
// returns the message's guid and remembers the new chat's guid for the
// address. A retry of a send that started a chat finds the chat among
// the server's chats and goes through the unsure lookup, as a text.
func (p *Platform) newChat(ctx context.Context, address, temp, text string) (string, error) {
	platform.SendMark(ctx, markUnsure, "new chat")
	body := map[string]any{"addresses": []string{address}, "message": text, "tempGuid": temp, "method": "private-api"}
	var out struct {
		GUID     string `json:"guid"`
		Messages []struct {
			GUID string `json:"guid"`
		} `json:"messages"`
	}
	if err := p.api.call(ctx, http.MethodPost, "/api/v1/chat/new", body, &out); err != nil {
		return "", classify(fmt.Errorf("start a bluebubbles chat with %s: %w", redact(address), err))
	}
	if out.GUID != "" {
		p.remember(address, out.GUID)
	}
	for _, m := range out.Messages {
		if m.GUID != "" {
			return m.GUID, nil
		}
	}
	if out.GUID == "" {
		return "", errors.New("bluebubbles answered a new chat without its guid")
	}
	p.log.Info("bluebubbles started a chat; its answer had no message guid", "chat", redact(out.GUID))
	return out.GUID, nil
}
