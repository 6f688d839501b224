package sms

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf16"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/markup"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// maxText is the most characters one message takes (Twilio's limit,
// about ten segments; Hermes's too), counted as Twilio counts them: in
// UTF-16 units, an emoji two (21617 otherwise).
const maxText = 1600

// recipient is the To of a chat id: the number in E.164, also when
// written with spaces, dashes or without "+".
func recipient(chatID string) string {
	s := strings.TrimSpace(chatID)
	d := strings.Map(func(r rune) rune {
		switch {
		case r >= '0' && r <= '9':
			return r
		case r == ' ' || r == '-' || r == '(' || r == ')' || r == '.':
			return -1
		}
		return 'x'
	}, strings.TrimPrefix(s, "+"))
	if d == "" || strings.Contains(d, "x") {
		return s // not a number: Twilio says why (21211)
	}
	return "+" + d
}

// formatted is the text as an SMS shows it: the model's Markdown as
// plain text (emphasis and code markers dropped, links as "text (url)"),
// unless the request is plain text already.
func formatted(req *deliveryv1.SendRequested) string {
	if req.GetFormat() == deliveryv1.TextFormat_TEXT_FORMAT_PLAIN {
		return strings.TrimSpace(req.GetText())
	}
	return strings.TrimSpace(markup.Plain.Convert(req.GetText()))
}

// sent is the Messages API's answer: the message's sid.
type sent struct {
	SID string `json:"sid"`
}

// Send posts one message from the business number (POST
// /2010-04-01/Accounts/{AccountSid}/Messages.json with To, From, Body),
// with the attachments as MMS media when they have public http(s) URLs
// (Twilio fetches media itself; it takes no uploads). An attempt after one
// whose answer was lost first looks for the message that one may have
// created (settle.go).
func (p *Platform) Send(ctx context.Context, req *deliveryv1.SendRequested) (string, error) {
	to := recipient(req.GetTarget().GetChatId())
	if to == "" {
		return "", platform.Permanent(errors.New("no sms recipient"))
	}
	text := formatted(req)
	form := url.Values{"To": {to}, "From": {p.cfg.PhoneNumber}}
	for _, a := range req.GetAttachments() {
		u := a.GetUrl()
		if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
			return "", platform.Permanent(errors.New("twilio sends media only from a public http(s) url; this attachment has none"))
		}
		form.Add("MediaUrl", u)
	}
	if len(form["MediaUrl"]) > maxMedia {
		return "", platform.Permanent(fmt.Errorf("%d attachments, twilio sends at most %d in one message", len(form["MediaUrl"]), maxMedia))
	}
	if text == "" && len(form["MediaUrl"]) == 0 {
		return "", platform.Permanent(errors.New("empty message"))
	}
	if n := len(utf16.Encode([]rune(text))); n > maxText {
		return "", platform.Permanent(fmt.Errorf("text is %d characters, twilio allows %d", n, maxText))
	}
	if text != "" {
		form.Set("Body", text)
	}
	first, marked := firstTry(ctx, time.Now())
	if marked {
		if sid, err := p.settled(ctx, form, first); err != nil || sid != "" {
			return sid, err
		}
	}
	var out sent
	if err := p.twilio.postForm(ctx, "Messages.json", form, &out); err != nil {
		if marked && unsure(err) {
			platform.SendMark(ctx, markUnsure, "no answer")
		}
		return "", classify(err)
	}
	if out.SID == "" {
		return "", errors.New("twilio answered a message without its sid")
	}
	return out.SID, nil
}

// Edit: an SMS cannot be edited once sent.
func (p *Platform) Edit(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("sms cannot edit a sent message: %w", platform.ErrUnsupported)
}

// Delete: an SMS cannot be taken back once sent.
func (p *Platform) Delete(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("sms cannot delete a sent message: %w", platform.ErrUnsupported)
}

// Typing: SMS has no typing indicator (delivery sends none to sms).
func (p *Platform) Typing(context.Context, *deliveryv1.SendRequested) error {
	return fmt.Errorf("sms has no typing indicator: %w", platform.ErrUnsupported)
}
