package sms

import (
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// maxMedia is the most media one MMS carries (Twilio's limit).
const maxMedia = 10

// errMalformed marks a webhook call that is not a Twilio message.
var errMalformed = errors.New("malformed twilio webhook")

// parseForm decodes a webhook body (application/x-www-form-urlencoded).
func parseForm(raw []byte) (url.Values, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: body is not UTF-8", errMalformed)
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	for k, vs := range form {
		for _, v := range vs {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("%w: parameter %q is not UTF-8", errMalformed, reason(k))
			}
		}
	}
	return form, nil
}

// incoming is a webhook call normalized: an event to publish, or the
// reason it produces none, or the error that makes it malformed.
type incoming struct {
	ev   *eventsv1.MessageReceived
	skip string
	err  error
}

// normalize turns a webhook call's parameters into an event for the
// account and number of cfg, as Hermes reads them: From is the chat and
// the user (E.164), Body the text (trimmed), MessageSid the id; the MMS
// media (NumMedia, MediaUrl<i>, MediaContentType<i>) become attachments
// fetched when a turn reads them. Calls about messages the business sent
// (status callbacks), for another account or number, from the business
// number itself, opt-outs (STOP, which Twilio answers itself), or with
// nothing in them are skipped.
func normalize(form url.Values, cfg *Config) incoming {
	get := func(k string) string { return strings.TrimSpace(form.Get(k)) }
	sid := get("MessageSid")
	if sid == "" {
		sid = get("SmsSid")
	}
	from, to := get("From"), get("To")
	switch {
	case get("MessageStatus") != "" && get("SmsStatus") != "received":
		return incoming{skip: "status callback"}
	case sid == "":
		return incoming{err: fmt.Errorf("%w: no MessageSid", errMalformed)}
	case !validSID(sid, "SM") && !validSID(sid, "MM"):
		return incoming{err: fmt.Errorf("%w: MessageSid %q is not a message sid", errMalformed, reason(sid))}
	case from == "":
		return incoming{err: fmt.Errorf("%w: message %s without From", errMalformed, sid)}
	case len(from) > 64:
		return incoming{err: fmt.Errorf("%w: message %s: From is %d bytes", errMalformed, sid, len(from))}
	case get("AccountSid") != "" && get("AccountSid") != cfg.AccountSID:
		return incoming{skip: "other account"}
	case to != "" && to != cfg.PhoneNumber:
		// Another number of the account points its webhook here.
		return incoming{skip: "other phone number"}
	case from == cfg.PhoneNumber:
		return incoming{skip: "own number"}
	case optOut(form.Get("OptOutType"), get("Body")):
		return incoming{skip: "opt-out"}
	}
	src := &eventsv1.SessionSource{
		Platform: "sms", Account: cfg.PhoneNumber,
		ChatId: from, ChatType: "dm", ChatName: from, UserId: from, UserName: from,
	}
	ev := &eventsv1.MessageReceived{EventId: sid, MessageId: sid, Source: src, Text: get("Body")}
	ev.Attachments = media(form, cfg)
	if ev.Text == "" && len(ev.Attachments) == 0 {
		return incoming{skip: "empty message"}
	}
	return incoming{ev: ev}
}

// optOutKeywords are the bodies Twilio's default opt-out handling takes
// as an unsubscribe (twilio.com/docs/messaging/tutorials/advanced-opt-out).
var optOutKeywords = map[string]bool{
	"STOP": true, "STOPALL": true, "UNSUBSCRIBE": true, "CANCEL": true, "END": true, "QUIT": true,
	"REVOKE": true, "OPTOUT": true,
}

// optOut reports whether a message is an opt-out: Twilio says so
// (OptOutType STOP, with Advanced Opt-Out and its own keywords), or its
// body is one of the default keywords. Twilio answers it with its own
// confirmation and refuses every send to the number until it texts START
// (21610), so an agent's answer could not reach the sender.
func optOut(optOutType, body string) bool {
	if t := strings.ToUpper(strings.TrimSpace(optOutType)); t != "" {
		return t == "STOP"
	}
	return optOutKeywords[strings.ToUpper(strings.TrimSpace(body))]
}

// media are an MMS's attachments: MediaUrl<i> for i below NumMedia (at
// most ten), each a Twilio URL of the account (others are dropped: the
// gateway downloads them with the account's credentials).
func media(form url.Values, cfg *Config) []*eventsv1.Attachment {
	n, err := strconv.Atoi(strings.TrimSpace(form.Get("NumMedia")))
	if err != nil || n <= 0 {
		return nil
	}
	n = min(n, maxMedia)
	var out []*eventsv1.Attachment
	for i := range n {
		u := strings.TrimSpace(form.Get("MediaUrl" + strconv.Itoa(i)))
		if !mediaURL(u, cfg) {
			continue
		}
		mt := baseType(form.Get("MediaContentType" + strconv.Itoa(i)))
		out = append(out, &eventsv1.Attachment{Kind: kindOf(mt), Location: &eventsv1.Attachment_Url{Url: u}, MimeType: mt})
	}
	return out
}

// mediaURL reports whether u is media of the account's messages on the
// configured API (https://api.twilio.com/2010-04-01/Accounts/AC…/Messages/MM…/Media/ME…).
func mediaURL(u string, cfg *Config) bool {
	rest, ok := strings.CutPrefix(u, cfg.APIBaseURL+"/2010-04-01/Accounts/"+cfg.AccountSID+"/Messages/")
	if !ok || len(u) > 512 {
		return false
	}
	parts := strings.Split(rest, "/")
	return len(parts) == 3 && parts[1] == "Media" && validSID(parts[0], "MM") && validSID(strings.TrimSuffix(parts[2], ".json"), "ME")
}

// kindOf is the attachment kind of a media type.
func kindOf(mt string) eventsv1.AttachmentKind {
	switch {
	case strings.HasPrefix(mt, "image/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case strings.HasPrefix(mt, "video/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	case strings.HasPrefix(mt, "audio/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	}
	return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
}

// baseType drops the parameters of a media type ("audio/amr; x=y" →
// "audio/amr"); "" when it is not one.
func baseType(mt string) string {
	if strings.TrimSpace(mt) == "" {
		return ""
	}
	t, _, err := mime.ParseMediaType(mt)
	if err != nil {
		return ""
	}
	return t
}

// reason keeps an outside string short and printable for a log line or
// a metric label.
func reason(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '?'
	}, s)
}
