// Package whatsappfake is a local WhatsApp Business Cloud API for tests:
// the Graph API calls the gateway makes (GET /{phone-number-id}, POST
// /{phone-number-id}/messages for texts, media, reactions and read
// receipts with the typing indicator, POST /{phone-number-id}/media,
// GET /{media-id} and the media download it points to), with the access
// token checked on each, and Meta's side of the webhook: notifications
// in the real wire format, signed with the app secret (X-Hub-Signature-256)
// and posted to the gateway. Errors can be injected (429, 131047 …).
package whatsappfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Version is the Graph API version in the fake's base URL.
const Version = "v21.0"

// Fake is one WhatsApp Business account with one phone number.
type Fake struct {
	AccessToken   string
	PhoneNumberID string
	DisplayNumber string // the business number as users see it, digits
	AppSecret     string
	VerifyToken   string

	srv *httptest.Server
	seq atomic.Int64

	mu        sync.Mutex
	messages  map[string][]Message // recipient wa_id → what the business sent
	reads     []Read
	media     map[string]Media // media id → media the fake holds
	downloads int
	failures  []Failure // answered, in order, to the next messages sent
	lost      []Failure // answered, in order, to the next messages sent, which are kept all the same
	// mediaFailures are answered, in order, to the next media requests
	// (GET /{media-id} and the downloads it points to).
	mediaFailures []Failure
}

// Message is one message the business sent.
type Message struct {
	ID      string
	To      string
	Type    string // text, image, document, audio, video, sticker, reaction
	Text    string // text body or caption
	ReplyTo string // context.message_id
	Link    string // media link
	MediaID string // media id
	Name    string // document filename
	// Reaction: the message reacted to and the emoji ("" removes).
	ReactTo, Emoji string
	// CallbackData is the send's biz_opaque_callback_data, which Meta
	// returns in the message's statuses (StatusOf).
	CallbackData string
	Raw          json.RawMessage
}

// Read is one read receipt the business sent.
type Read struct {
	MessageID string
	Typing    bool // with the typing indicator
}

// Media is a file the fake serves by media id.
type Media struct {
	MimeType string
	Data     []byte
}

// Failure is a Graph API error answer.
type Failure struct {
	Status     int // HTTP status
	Code       int
	Message    string
	RetryAfter int // seconds; 0: no Retry-After header
}

// Common failures.
var (
	// ErrThroughput is Cloud API throughput reached (HTTP 429, 130429).
	ErrThroughput = Failure{Status: http.StatusTooManyRequests, Code: 130429, Message: "Rate limit hit"}
	// ErrPairRateLimit: too many messages to one user (131056).
	ErrPairRateLimit = Failure{Status: http.StatusBadRequest, Code: 131056, Message: "(Business Account, Consumer Account) pair rate limit hit"}
	// ErrReengagement: the user last wrote over 24 hours ago (131047).
	ErrReengagement = Failure{Status: http.StatusBadRequest, Code: 131047, Message: "Re-engagement message"}
	// ErrTokenExpired: the access token is invalid (190).
	ErrTokenExpired = Failure{Status: http.StatusUnauthorized, Code: 190, Message: "Error validating access token: Session has expired"}
)

// New starts a fake; it stops when the test ends.
func New(t testing.TB) *Fake {
	f := &Fake{
		AccessToken: "EAAG-test-token", PhoneNumberID: "106540352242922", DisplayNumber: "15550783881",
		AppSecret: "app-secret", VerifyToken: "verify-me",
		messages: map[string][]Message{}, media: map[string]Media{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{version}/{id}", f.get)
	mux.HandleFunc("POST /{version}/{phone}/messages", f.postMessage)
	mux.HandleFunc("POST /{version}/{phone}/media", f.upload)
	mux.HandleFunc("GET /download/{id}", f.download)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// BaseURL is the Graph API base for gateways.whatsapp.api_base_url.
func (f *Fake) BaseURL() string { return f.srv.URL + "/" + Version }

// Fail makes the next messages the business sends (POST /messages other
// than read receipts) fail with these failures, one each; a zero Failure
// lets its message through.
func (f *Fake) Fail(fs ...Failure) {
	f.mu.Lock()
	f.failures = append(f.failures, fs...)
	f.mu.Unlock()
}

// LoseAnswers makes the next messages the business sends go out and
// their answers be these failures (Meta's 500 "Something went wrong",
// 131000, by default), one each: what a sender sees when Graph times
// out after it took a message.
func (f *Fake) LoseAnswers(n int, fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		fl := Failure{Status: http.StatusInternalServerError, Code: 131000, Message: "Something went wrong"}
		if i < len(fs) {
			fl = fs[i]
		}
		f.lost = append(f.lost, fl)
	}
}

// FailMedia makes the next media requests (GET /{media-id} and the
// downloads its URLs point to, in the order they come) fail with these
// failures, one each; a zero Failure lets its request through.
func (f *Fake) FailMedia(fs ...Failure) {
	f.mu.Lock()
	f.mediaFailures = append(f.mediaFailures, fs...)
	f.mu.Unlock()
}

// MediaFailuresLeft counts the media failures no request has reached.
func (f *Fake) MediaFailuresLeft() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mediaFailures)
}

// mediaFailed answers the next injected media failure, if any.
func (f *Fake) mediaFailed(w http.ResponseWriter) bool {
	f.mu.Lock()
	var fl Failure
	if len(f.mediaFailures) > 0 {
		fl, f.mediaFailures = f.mediaFailures[0], f.mediaFailures[1:]
	}
	f.mu.Unlock()
	if fl.Status == 0 {
		return false
	}
	writeError(w, fl)
	return true
}

// Messages returns what the business sent to wa_id, oldest first.
func (f *Fake) Messages(waID string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.messages[waID]...)
}

// Reads returns the read receipts sent, oldest first.
func (f *Fake) Reads() []Read {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Read(nil), f.reads...)
}

// AddMedia makes data available as media id (what a user's upload is).
func (f *Fake) AddMedia(id, mimeType string, data []byte) {
	f.mu.Lock()
	f.media[id] = Media{MimeType: mimeType, Data: data}
	f.mu.Unlock()
}

// MediaByID returns media the fake holds (uploaded by the business, or added).
func (f *Fake) MediaByID(id string) (Media, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.media[id]
	return m, ok
}

// Downloads counts media downloads served.
func (f *Fake) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads
}

func (f *Fake) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") == "Bearer "+f.AccessToken {
		return true
	}
	writeError(w, Failure{Status: http.StatusUnauthorized, Code: 190, Message: "Invalid OAuth access token - Cannot parse access token"})
	return false
}

func writeError(w http.ResponseWriter, fl Failure) {
	if fl.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
	}
	typ := "OAuthException"
	if fl.Code != 190 {
		typ = "GraphMethodException"
	}
	writeJSON(w, fl.Status, map[string]any{"error": map[string]any{
		"message": fl.Message, "type": typ, "code": fl.Code,
		"error_data": map[string]any{"messaging_product": "whatsapp", "details": fl.Message},
		"fbtrace_id": "AbCdEfGh",
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func badParameter(w http.ResponseWriter, msg string) {
	writeError(w, Failure{Status: http.StatusBadRequest, Code: 100, Message: "Invalid parameter: " + msg})
}

// get answers GET /{phone-number-id} and GET /{media-id}.
func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	id := r.PathValue("id")
	if id == f.PhoneNumberID {
		writeJSON(w, http.StatusOK, map[string]any{"display_phone_number": "+1 555-078-3881", "verified_name": "Switchboard Test", "id": id})
		return
	}
	if f.mediaFailed(w) {
		return
	}
	f.mu.Lock()
	m, ok := f.media[id]
	f.mu.Unlock()
	if !ok {
		writeError(w, Failure{Status: http.StatusBadRequest, Code: 100,
			Message: fmt.Sprintf("Unsupported get request. Object with ID '%s' does not exist", id)})
		return
	}
	sum := sha256.Sum256(m.Data)
	writeJSON(w, http.StatusOK, map[string]any{
		"messaging_product": "whatsapp", "id": id, "mime_type": m.MimeType, "sha256": hex.EncodeToString(sum[:]),
		"file_size": len(m.Data), "url": f.srv.URL + "/download/" + id + "?ext=1&hash=x",
	})
}

// download serves media bytes, to the access token only.
func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) || f.mediaFailed(w) {
		return
	}
	f.mu.Lock()
	m, ok := f.media[r.PathValue("id")]
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

// upload takes POST /{phone}/media (multipart: messaging_product, type, file).
func (f *Fake) upload(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	if r.PathValue("phone") != f.PhoneNumberID {
		badParameter(w, "unknown phone number")
		return
	}
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		badParameter(w, "not multipart")
		return
	}
	if r.FormValue("messaging_product") != "whatsapp" {
		badParameter(w, "messaging_product must be whatsapp")
		return
	}
	file, hdr, err := r.FormFile("file")
	if err != nil {
		badParameter(w, "file is required")
		return
	}
	defer file.Close()
	data, _ := io.ReadAll(file)
	mt := r.FormValue("type")
	if mt == "" {
		mt = hdr.Header.Get("Content-Type")
	}
	id := strconv.FormatInt(900000000000000+f.seq.Add(1), 10)
	f.AddMedia(id, mt, data)
	writeJSON(w, http.StatusOK, map[string]any{"id": id})
}

// outgoing is the body of POST /messages.
type outgoing struct {
	MessagingProduct string `json:"messaging_product"`
	RecipientType    string `json:"recipient_type"`
	To               string `json:"to"`
	// Recipient is a business-scoped user id (BSUID), for a user whose
	// username hides their number; To takes precedence.
	Recipient       string `json:"recipient"`
	Type            string `json:"type"`
	Status          string `json:"status"`
	MessageID       string `json:"message_id"`
	TypingIndicator *struct {
		Type string `json:"type"`
	} `json:"typing_indicator"`
	Context *struct {
		MessageID string `json:"message_id"`
	} `json:"context"`
	CallbackData string `json:"biz_opaque_callback_data"`
	Text         *struct {
		Body       string `json:"body"`
		PreviewURL bool   `json:"preview_url"`
	} `json:"text"`
	Reaction *struct {
		MessageID string `json:"message_id"`
		Emoji     string `json:"emoji"`
	} `json:"reaction"`
}

type mediaObject struct {
	ID       string `json:"id"`
	Link     string `json:"link"`
	Caption  string `json:"caption"`
	Filename string `json:"filename"`
}

func (f *Fake) postMessage(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	if r.PathValue("phone") != f.PhoneNumberID {
		badParameter(w, "unknown phone number")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var o outgoing
	if err == nil {
		err = json.Unmarshal(raw, &o)
	}
	if err != nil || o.MessagingProduct != "whatsapp" {
		badParameter(w, "messaging_product must be whatsapp")
		return
	}
	f.mu.Lock()
	if len(f.failures) > 0 && o.Status != "read" {
		fl := f.failures[0]
		f.failures = f.failures[1:]
		if fl != (Failure{}) {
			f.mu.Unlock()
			writeError(w, fl)
			return
		}
	}
	f.mu.Unlock()

	if o.Status == "read" {
		if o.MessageID == "" {
			badParameter(w, "message_id is required")
			return
		}
		f.mu.Lock()
		f.reads = append(f.reads, Read{MessageID: o.MessageID, Typing: o.TypingIndicator != nil && o.TypingIndicator.Type == "text"})
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"success": true})
		return
	}
	to := o.To
	switch {
	case to == "" && o.Recipient == "":
		badParameter(w, "to or recipient is required")
		return
	case to == "":
		to = o.Recipient
	case !phoneNumber(to):
		// A BSUID goes in recipient; to takes a phone number only.
		writeError(w, Failure{Status: http.StatusBadRequest, Code: 100, Message: "Invalid parameter: to is not a valid phone number"})
		return
	}
	m := Message{To: to, Type: o.Type, Raw: raw, CallbackData: o.CallbackData}
	if o.Context != nil {
		m.ReplyTo = o.Context.MessageID
	}
	switch o.Type {
	case "text":
		if o.Text == nil || strings.TrimSpace(o.Text.Body) == "" {
			badParameter(w, "text.body is required")
			return
		}
		if n := len([]rune(o.Text.Body)); n > 4096 {
			badParameter(w, fmt.Sprintf("text.body is %d characters, at most 4096", n))
			return
		}
		m.Text = o.Text.Body
	case "reaction":
		if o.Reaction == nil || o.Reaction.MessageID == "" {
			badParameter(w, "reaction.message_id is required")
			return
		}
		m.ReactTo, m.Emoji = o.Reaction.MessageID, o.Reaction.Emoji
	case "image", "video", "audio", "document", "sticker":
		var body map[string]json.RawMessage
		_ = json.Unmarshal(raw, &body)
		var mo mediaObject
		if err := json.Unmarshal(body[o.Type], &mo); err != nil || (mo.ID == "") == (mo.Link == "") {
			badParameter(w, o.Type+" needs exactly one of id and link")
			return
		}
		if mo.ID != "" {
			if _, ok := f.MediaByID(mo.ID); !ok {
				badParameter(w, "unknown media id "+mo.ID)
				return
			}
		}
		if mo.Caption != "" && (o.Type == "audio" || o.Type == "sticker") {
			badParameter(w, o.Type+" takes no caption")
			return
		}
		if n := len([]rune(mo.Caption)); n > 1024 {
			badParameter(w, fmt.Sprintf("caption is %d characters, at most 1024", n))
			return
		}
		m.Link, m.MediaID, m.Text, m.Name = mo.Link, mo.ID, mo.Caption, mo.Filename
	default:
		badParameter(w, "unsupported type "+o.Type)
		return
	}
	m.ID = "wamid.OUT" + strconv.FormatInt(f.seq.Add(1), 10)
	f.mu.Lock()
	f.messages[to] = append(f.messages[to], m)
	var lost *Failure
	if len(f.lost) > 0 && o.Type != "reaction" {
		lost = &f.lost[0]
		f.lost = f.lost[1:]
	}
	f.mu.Unlock()
	if lost != nil {
		writeError(w, *lost)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messaging_product": "whatsapp",
		"contacts":          []any{contact(o.To, to)},
		"messages":          []any{map[string]any{"id": m.ID, "message_status": "accepted"}},
	})
}

// phoneNumber reports whether to is a phone number as the Cloud API
// takes it in "to": digits, with an optional "+" and spacing.
func phoneNumber(to string) bool {
	n := 0
	for i, c := range to {
		switch {
		case c >= '0' && c <= '9':
			n++
		case c == '+' && i == 0, c == ' ', c == '-', c == '(', c == ')':
		default:
			return false
		}
	}
	return n > 0
}

// contact is the send answer's contact: the wa_id for a send to a
// number, the user_id for one to a BSUID.
func contact(phone, to string) map[string]any {
	if phone != "" {
		return map[string]any{"input": to, "wa_id": to}
	}
	return map[string]any{"input": to, "user_id": to}
}

// Inbound is one message a user sends the business, for Notification.
type Inbound struct {
	ID   string // wamid; NewID makes one
	From string // wa_id
	Name string // profile name
	// Type and its object, as the Cloud API writes it: "text" with
	// {"body": …}, "image" with {"id", "mime_type", "caption"} …
	Type   string
	Object any
	// ReplyTo quotes a message (context.id); its author is the business
	// when FromBusiness.
	ReplyTo      string
	FromBusiness bool
	Time         time.Time
}

// NewID returns a fresh inbound wamid.
func (f *Fake) NewID() string {
	return fmt.Sprintf("wamid.HBgLMTU1NTAxMjM0NTY3FQIAEhgg%08d", f.seq.Add(1))
}

// Text is a text message from wa_id.
func Text(id, from, name, body string) Inbound {
	return Inbound{ID: id, From: from, Name: name, Type: "text", Object: map[string]any{"body": body}}
}

// Notification is the webhook body Meta posts for msgs.
func (f *Fake) Notification(msgs ...Inbound) []byte {
	var messages, contacts []any
	seen := map[string]bool{}
	for _, m := range msgs {
		ts := m.Time
		if ts.IsZero() {
			ts = time.Now()
		}
		msg := map[string]any{"from": m.From, "id": m.ID, "timestamp": strconv.FormatInt(ts.Unix(), 10), "type": m.Type}
		if m.Object != nil {
			msg[m.Type] = m.Object
		}
		if m.ReplyTo != "" {
			from := m.From
			if m.FromBusiness {
				from = f.DisplayNumber
			}
			msg["context"] = map[string]any{"from": from, "id": m.ReplyTo}
		}
		messages = append(messages, msg)
		if !seen[m.From] {
			seen[m.From] = true
			contacts = append(contacts, map[string]any{"profile": map[string]any{"name": m.Name}, "wa_id": m.From})
		}
	}
	return f.wrap(map[string]any{"contacts": contacts, "messages": messages})
}

// statusErrors are the titles and details Meta gives a failed status, by
// code.
var statusErrors = map[int][2]string{
	131047: {"Re-engagement message", "Message failed to send because more than 24 hours have passed since the customer last replied to this number."},
	131026: {"Message undeliverable", "Message Undeliverable."},
	131049: {"This message was not delivered to maintain healthy ecosystem engagement.", "In order to maintain a healthy ecosystem engagement, the message failed to be delivered."},
}

// Status is the webhook body for a status of a message the business sent
// (sent, delivered, read; failed with an error code), as Meta writes it:
// a failed one carries an error with its code, title, message,
// error_data.details and href.
func (f *Fake) Status(messageID, to, status string, code int) []byte {
	s := map[string]any{"id": messageID, "status": status, "timestamp": strconv.FormatInt(time.Now().Unix(), 10)}
	addressed(s, to)
	if code != 0 {
		e, ok := statusErrors[code]
		if !ok {
			e = [2]string{"Message failed", "Message failed to send."}
		}
		s["errors"] = []any{map[string]any{"code": code, "title": e[0], "message": e[0],
			"error_data": map[string]any{"details": e[1]},
			"href":       "https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes/"}}
	}
	return f.wrap(map[string]any{"statuses": []any{s}})
}

// StatusOf is the webhook body for a status of m as Meta writes it,
// with the send's biz_opaque_callback_data when it gave one.
func (f *Fake) StatusOf(m Message, status string) []byte {
	s := map[string]any{"id": m.ID, "status": status, "timestamp": strconv.FormatInt(time.Now().Unix(), 10)}
	addressed(s, m.To)
	if m.CallbackData != "" {
		s["biz_opaque_callback_data"] = m.CallbackData
	}
	return f.wrap(map[string]any{"statuses": []any{s}})
}

// addressed names a status's recipient as Meta does: a phone number in
// recipient_id, a business-scoped user id (a message sent in
// "recipient", the number unknown) in recipient_user_id only.
func addressed(s map[string]any, to string) {
	if phoneNumber(to) {
		s["recipient_id"] = to
	} else {
		s["recipient_user_id"] = to
	}
}

func (f *Fake) wrap(value map[string]any) []byte {
	value["messaging_product"] = "whatsapp"
	value["metadata"] = map[string]any{"display_phone_number": f.DisplayNumber, "phone_number_id": f.PhoneNumberID}
	body, _ := json.Marshal(map[string]any{
		"object": "whatsapp_business_account",
		"entry": []any{map[string]any{"id": "102290129340398", "changes": []any{
			map[string]any{"value": value, "field": "messages"},
		}}},
	})
	return body
}

// Sign is the X-Hub-Signature-256 of body with secret.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Post posts body to the gateway's webhook url signed with the fake's app
// secret, as Meta does, and returns the status.
func (f *Fake) Post(ctx context.Context, url string, body []byte) (int, error) {
	return PostSigned(ctx, url, Sign(f.AppSecret, body), body)
}

// PostSigned posts body with the given signature header ("" for none).
func PostSigned(ctx context.Context, url, signature string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "facebookexternalua")
	if signature != "" {
		req.Header.Set("X-Hub-Signature-256", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Verify makes Meta's subscription handshake against the gateway's
// webhook url and returns the status and body.
func (f *Fake) Verify(ctx context.Context, url, mode, token, challenge string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	q := req.URL.Query()
	q.Set("hub.mode", mode)
	q.Set("hub.verify_token", token)
	q.Set("hub.challenge", challenge)
	req.URL.RawQuery = q.Encode()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, string(b), nil
}
