// Package smsfake is a local Twilio for tests: the REST API calls the SMS
// gateway makes (GET /2010-04-01/Accounts/{sid}.json, POST and GET
// /2010-04-01/Accounts/{sid}/Messages.json, the media of inbound MMS and
// Twilio's redirect to their storage), each with the account's basic auth
// checked, and Twilio's side of the webhook: a message's form parameters
// as Twilio posts them, signed with the auth token over the public URL
// (X-Twilio-Signature). Errors can be injected (429, 21211, 21610 …), and
// answers lost after the message was created.
package smsfake

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
)

// Fake is one Twilio account with one phone number.
type Fake struct {
	AccountSID  string
	AuthToken   string
	PhoneNumber string // E.164
	// PublicURL is the webhook URL configured on the number, which Twilio
	// signs; Post sends to the gateway's own address (as a proxy would).
	PublicURL string

	srv *httptest.Server

	mu           sync.Mutex
	messages     map[string][]Message // recipient → what the business sent
	media        map[string]Media     // ME sid → media
	downloads    int
	failures     []Failure // answered, in order, to the next sends
	unsubscribed map[string]bool
	attempts     int
	lists        int
	// hangUps is how many of the next sends create their message and
	// then close the connection without an answer.
	hangUps int
}

// Message is one message the business sent.
type Message struct {
	SID       string
	To, From  string
	Body      string
	MediaURLs []string
	Created   time.Time
}

// Media is an inbound MMS's file the fake serves.
type Media struct {
	MimeType string
	Data     []byte
}

// Failure is a REST API error answer.
type Failure struct {
	Status     int // HTTP status
	Code       int
	Message    string
	RetryAfter int // seconds; 0: no Retry-After header
}

// Common failures.
var (
	// ErrTooManyRequests: 429 with code 20429.
	ErrTooManyRequests = Failure{Status: http.StatusTooManyRequests, Code: 20429, Message: "Too Many Requests"}
	// ErrInternal: 500 without a Twilio body.
	ErrInternal = Failure{Status: http.StatusInternalServerError}
)

// New starts a fake; it stops when the test ends.
func New(t testing.TB) *Fake {
	f := &Fake{
		AccountSID: "AC" + strings.Repeat("0123456789abcdef", 2), AuthToken: "twilio-auth-token",
		PhoneNumber: "+15550006789", PublicURL: "https://sms.example.com/webhooks/twilio",
		messages: map[string][]Message{}, media: map[string]Media{}, unsubscribed: map[string]bool{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2010-04-01/Accounts/{file}", f.account)
	mux.HandleFunc("POST /2010-04-01/Accounts/{sid}/Messages.json", f.send)
	mux.HandleFunc("GET /2010-04-01/Accounts/{sid}/Messages.json", f.list)
	mux.HandleFunc("GET /2010-04-01/Accounts/{sid}/Messages/{msg}/Media/{media}", f.mediaRedirect)
	mux.HandleFunc("GET /storage/{media}", f.download)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// BaseURL is the REST API base for gateways.sms.api_base_url.
func (f *Fake) BaseURL() string { return f.srv.URL }

// Fail makes the next sends fail with these failures, one each.
func (f *Fake) Fail(fs ...Failure) {
	f.mu.Lock()
	f.failures = append(f.failures, fs...)
	f.mu.Unlock()
}

// HangUp makes the next n sends create their message and close the
// connection without answering, as when the network fails after Twilio
// took the request: the caller cannot tell whether it was sent.
func (f *Fake) HangUp(n int) {
	f.mu.Lock()
	f.hangUps += n
	f.mu.Unlock()
}

// Lists counts message list requests.
func (f *Fake) Lists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// Unsubscribe makes sends to number fail with 21610, as after the user
// replied STOP.
func (f *Fake) Unsubscribe(number string) {
	f.mu.Lock()
	f.unsubscribed[number] = true
	f.mu.Unlock()
}

// Messages returns what the business sent to number, oldest first.
func (f *Fake) Messages(number string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.messages[number]...)
}

// Attempts counts send requests, failed ones included.
func (f *Fake) Attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// Downloads counts media downloads.
func (f *Fake) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads
}

// NewSID returns a fresh sid with prefix (SM, MM, ME).
func NewSID(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// AddMedia stores a file as media of inbound message msgSID and returns
// its URL, as Twilio's MediaUrl<i>.
func (f *Fake) AddMedia(msgSID, mimeType string, data []byte) string {
	me := NewSID("ME")
	f.mu.Lock()
	f.media[me] = Media{MimeType: mimeType, Data: data}
	f.mu.Unlock()
	return f.srv.URL + "/2010-04-01/Accounts/" + f.AccountSID + "/Messages/" + msgSID + "/Media/" + me
}

func (f *Fake) authorized(w http.ResponseWriter, r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if ok && user == f.AccountSID && pass == f.AuthToken {
		return true
	}
	writeError(w, Failure{Status: http.StatusUnauthorized, Code: 20003, Message: "Authenticate"})
	return false
}

func writeError(w http.ResponseWriter, fl Failure) {
	if fl.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
	}
	if fl.Code == 0 {
		http.Error(w, "<html>Internal Server Error</html>", fl.Status)
		return
	}
	writeJSON(w, fl.Status, map[string]any{
		"code": fl.Code, "message": fl.Message, "status": fl.Status,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", fl.Code),
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) account(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	if r.PathValue("file") != f.AccountSID+".json" {
		writeError(w, Failure{Status: http.StatusNotFound, Code: 20404, Message: "The requested resource was not found"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sid": f.AccountSID, "status": "active", "type": "Full"})
}

func e164(s string) bool {
	d, ok := strings.CutPrefix(s, "+")
	if !ok || len(d) < 7 || len(d) > 15 || d[0] == '0' {
		return false
	}
	return strings.Trim(d, "0123456789") == ""
}

func (f *Fake) send(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	if r.PathValue("sid") != f.AccountSID {
		writeError(w, Failure{Status: http.StatusNotFound, Code: 20404, Message: "The requested resource was not found"})
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, Failure{Status: http.StatusBadRequest, Code: 21601, Message: "bad form"})
		return
	}
	f.mu.Lock()
	f.attempts++
	if len(f.failures) > 0 {
		fl := f.failures[0]
		f.failures = f.failures[1:]
		f.mu.Unlock()
		writeError(w, fl)
		return
	}
	unsub := f.unsubscribed[r.PostForm.Get("To")]
	f.mu.Unlock()
	to, from, body := r.PostForm.Get("To"), r.PostForm.Get("From"), r.PostForm.Get("Body")
	switch {
	case to == "":
		writeError(w, Failure{Status: 400, Code: 21604, Message: "A 'To' phone number is required."})
	case !e164(to):
		writeError(w, Failure{Status: 400, Code: 21211, Message: fmt.Sprintf("Invalid 'To' Phone Number: %s", to)})
	case from != f.PhoneNumber:
		writeError(w, Failure{Status: 400, Code: 21606, Message: fmt.Sprintf("The 'From' phone number provided (%s) is not a valid message-capable Twilio phone number for this destination/account", from)})
	case body == "" && len(r.PostForm["MediaUrl"]) == 0:
		writeError(w, Failure{Status: 400, Code: 21602, Message: "Message body is required."})
	case len(utf16.Encode([]rune(body))) > 1600: // a character outside the BMP counts twice
		writeError(w, Failure{Status: 400, Code: 21617, Message: "The concatenated message body exceeds the 1600 character limit."})
	case unsub:
		writeError(w, Failure{Status: 400, Code: 21610, Message: "Attempt to send to unsubscribed recipient"})
	default:
		m := Message{SID: NewSID("SM"), To: to, From: from, Body: body, MediaURLs: r.PostForm["MediaUrl"], Created: time.Now().UTC()}
		f.mu.Lock()
		f.messages[to] = append(f.messages[to], m)
		hangUp := f.hangUps > 0
		if hangUp {
			f.hangUps--
		}
		f.mu.Unlock()
		if hangUp {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{
			"sid": m.SID, "account_sid": f.AccountSID, "to": to, "from": from, "body": body,
			"status": "queued", "num_segments": "1", "num_media": strconv.Itoa(len(m.MediaURLs)), "api_version": "2010-04-01",
		})
	}
}

// list answers GET Messages.json as Twilio does, newest first, filtered
// by To and From, at most PageSize (50 by default) messages: the
// business's messages, with direction outbound-api.
func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	if r.PathValue("sid") != f.AccountSID {
		writeError(w, Failure{Status: http.StatusNotFound, Code: 20404, Message: "The requested resource was not found"})
		return
	}
	q := r.URL.Query()
	size, err := strconv.Atoi(q.Get("PageSize"))
	if err != nil || size <= 0 || size > 1000 {
		size = 50
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	var out []map[string]any
	for to, ms := range f.messages {
		if q.Get("To") != "" && q.Get("To") != to {
			continue
		}
		for i := len(ms) - 1; i >= 0; i-- {
			m := ms[i]
			if q.Get("From") != "" && q.Get("From") != m.From {
				continue
			}
			out = append(out, map[string]any{
				"sid": m.SID, "account_sid": f.AccountSID, "to": m.To, "from": m.From, "body": m.Body,
				"direction": "outbound-api", "status": "sent", "num_media": strconv.Itoa(len(m.MediaURLs)),
				"date_created": m.Created.Format(time.RFC1123Z), "date_sent": m.Created.Format(time.RFC1123Z),
			})
		}
	}
	if len(out) > size {
		out = out[:size]
	}
	if out == nil {
		out = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out, "page": 0, "page_size": size})
}

// mediaRedirect answers a media URL as Twilio does: a redirect to where
// the file is stored.
func (f *Fake) mediaRedirect(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	_, ok := f.media[r.PathValue("media")]
	f.mu.Unlock()
	if !ok || r.PathValue("sid") != f.AccountSID {
		writeError(w, Failure{Status: http.StatusNotFound, Code: 20404, Message: "The requested resource was not found"})
		return
	}
	http.Redirect(w, r, "/storage/"+r.PathValue("media"), http.StatusTemporaryRedirect)
}

func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	m, ok := f.media[r.PathValue("media")]
	if ok {
		f.downloads++
	}
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", m.MimeType)
	_, _ = w.Write(m.Data)
}

// Inbound is one message a user texts the business number.
type Inbound struct {
	SID  string // MessageSid; NewSID("SM") (or "MM" with media) when empty
	From string // E.164
	Body string
	// Media are MediaUrl<i> (AddMedia makes them) with their types.
	Media      []string
	MediaTypes []string
}

// Form is the webhook's parameters for in, as Twilio posts them.
func (f *Fake) Form(in Inbound) url.Values {
	sid := in.SID
	if sid == "" {
		sid = NewSID("SM")
		if len(in.Media) > 0 {
			sid = NewSID("MM")
		}
	}
	v := url.Values{
		"ToCountry": {"US"}, "ToState": {"CA"}, "SmsMessageSid": {sid}, "NumMedia": {strconv.Itoa(len(in.Media))},
		"ToCity": {"SAN FRANCISCO"}, "FromZip": {"94105"}, "SmsSid": {sid}, "FromState": {"CA"}, "SmsStatus": {"received"},
		"FromCity": {"SAN FRANCISCO"}, "Body": {in.Body}, "FromCountry": {"US"}, "To": {f.PhoneNumber},
		"ToZip": {"94105"}, "NumSegments": {"1"}, "MessageSid": {sid}, "AccountSid": {f.AccountSID},
		"From": {in.From}, "ApiVersion": {"2010-04-01"},
	}
	for i, u := range in.Media {
		v.Set("MediaUrl"+strconv.Itoa(i), u)
		if i < len(in.MediaTypes) {
			v.Set("MediaContentType"+strconv.Itoa(i), in.MediaTypes[i])
		}
	}
	return v
}

// Sign is the X-Twilio-Signature of a call to fullURL with params: the
// URL and each parameter's name and value in name order (a repeated
// name's distinct values, sorted, as Twilio's libraries compute it),
// HMAC-SHA1 keyed with token, base64.
func Sign(token, fullURL string, params url.Values) string {
	return SignWith(sha1.New, token, fullURL, params)
}

// SignWith is Sign with another hash and key: a Webhooks Rule's SharedKey
// secret and algorithm (HMAC-SHA256).
func SignWith(alg func() hash.Hash, key, fullURL string, params url.Values) string {
	var b strings.Builder
	b.WriteString(fullURL)
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		vs := append([]string(nil), params[k]...)
		sort.Strings(vs)
		for i, v := range vs {
			if i == 0 || v != vs[i-1] {
				b.WriteString(k + v)
			}
		}
	}
	mac := hmac.New(alg, []byte(key))
	mac.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Post posts form to the gateway's webhook at gatewayURL, signed with the
// auth token over PublicURL as Twilio does, and returns the status, the
// content type and the body of the answer.
func (f *Fake) Post(ctx context.Context, gatewayURL string, form url.Values) (int, string, string, error) {
	return PostSigned(ctx, gatewayURL, Sign(f.AuthToken, f.PublicURL, form), form.Encode())
}

// PostSigned posts body as a form with the given signature ("" for none).
func PostSigned(ctx context.Context, gatewayURL, signature, body string) (int, string, string, error) {
	return PostSignedSettings(ctx, gatewayURL, signature, "", body)
}

// PostSignedSettings is PostSigned with X-Twilio-Webhooks-Signature-Settings
// (when not ""), as Twilio sends a call a Webhooks Rule signs.
func PostSignedSettings(ctx context.Context, gatewayURL, signature, settings, body string) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gatewayURL, strings.NewReader(body))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "TwilioProxy/1.1")
	if signature != "" {
		req.Header.Set("X-Twilio-Signature", signature)
	}
	if settings != "" {
		req.Header.Set("X-Twilio-Webhooks-Signature-Settings", settings)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b), nil
}
