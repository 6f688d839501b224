package sms

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// Twilio's Messages API takes no idempotency key: a send whose answer was
// lost (a timeout or a connection that failed after Twilio took the
// request, a gateway or proxy error in front of it) may have created the
// message. Such an attempt marks the send unsure (a mark beside its
// receipt, seen by every replica); the next attempt first lists the
// messages the business number sent to the recipient (GET
// Messages.json?To=…&From=…, newest first) and, when one created since
// the first attempt has the same body and media count and did not fail,
// answers its sid instead of texting the user again.

const (
	// markFirst holds when the send's first attempt began (Unix ms).
	markFirst = "sms-first"
	// markUnsure: an attempt ended without knowing whether Twilio took
	// the message.
	markUnsure = "sms-unsure"
	// clockSkew reaches the lookup back before the first attempt, for a
	// gateway clock ahead of Twilio's.
	clockSkew = 30 * time.Second
	// maxLookup is how many of the recipient's latest messages a lookup
	// reads.
	maxLookup = 50
)

// listed is a message of Twilio's message list as the lookup reads it.
type listed struct {
	SID         string `json:"sid"`
	Body        string `json:"body"`
	Direction   string `json:"direction"`
	Status      string `json:"status"`
	NumMedia    string `json:"num_media"`
	DateCreated string `json:"date_created"`
}

// firstTry records the first attempt's start and returns it; ok is false
// for a send that keeps no marks (no idempotency key).
func firstTry(ctx context.Context, now time.Time) (time.Time, bool) {
	v, ok := platform.SendMark(ctx, markFirst, strconv.FormatInt(now.UnixMilli(), 10))
	if !ok {
		return now, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return now, false
	}
	return time.UnixMilli(ms), true
}

// settled returns the sid of the message an earlier attempt of this send
// created, when that attempt ended unsure and Twilio shows the message;
// "" when the attempt must post.
func (p *Platform) settled(ctx context.Context, form url.Values, since time.Time) (string, error) {
	if _, unsure := platform.SendMarked(ctx, markUnsure); !unsure {
		return "", nil
	}
	q := url.Values{"To": {form.Get("To")}, "From": {form.Get("From")}, "PageSize": {strconv.Itoa(maxLookup)}}
	var page struct {
		Messages []listed `json:"messages"`
	}
	if err := p.twilio.get(ctx, p.twilio.accountURL()+"/Messages.json?"+q.Encode(), &page); err != nil {
		return "", classify(fmt.Errorf("look for an earlier attempt of the message: %w", err))
	}
	for _, m := range page.Messages {
		if sameMessage(m, form, since.Add(-clockSkew)) {
			p.log.Info("twilio took an earlier attempt of this message; not sent again", "message_sid", m.SID)
			return m.SID, nil
		}
	}
	return "", nil
}

// sameMessage reports whether a listed message is the one form posts: sent
// by the API from the business number since since, with its body and its
// number of media, and not failed.
func sameMessage(m listed, form url.Values, since time.Time) bool {
	created, err := time.Parse(time.RFC1123Z, m.DateCreated)
	if err != nil || created.Before(since) || m.SID == "" {
		return false
	}
	switch m.Status {
	case "failed", "undelivered", "canceled":
		return false
	}
	n, _ := strconv.Atoi(m.NumMedia)
	return strings.HasPrefix(m.Direction, "outbound") && m.Body == form.Get("Body") && n == len(form["MediaUrl"])
}

// unsure reports whether a failed post may have created the message: no
// answer came (the network, a timeout), or a gateway error answered in
// Twilio's place (502, 503, 504 without a Twilio error code).
func unsure(err error) bool {
	var te *TwilioError
	if !errors.As(err, &te) {
		return true
	}
	return te.Code == 0 && (te.Status == 502 || te.Status == 503 || te.Status == 504)
}
