// Package linefake is a local LINE Messaging API for tests: the calls the
// LINE gateway makes (GET /v2/bot/info, POST /v2/bot/message/reply with
// single-use reply tokens, POST /v2/bot/message/push honouring
// X-Line-Retry-Key, POST /v2/bot/chat/loading/start, and GET
// /v2/bot/message/{id}/content and its /transcoding status on the
// content host, for content still being prepared too), each with the
// channel's bearer token checked, and LINE's side of the webhook:
// deliveries in LINE's JSON, signed with the channel secret
// (X-Line-Signature). Errors can be injected (429, 500, 400 …).
package linefake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
)

// Fake is one LINE channel.
type Fake struct {
	Token  string // channel access token
	Secret string // channel secret
	BotID  string // the bot's user id

	srv *httptest.Server

	mu         sync.Mutex
	seq        int64
	tokens     map[string]time.Time // reply token → expiry
	tokenChat  map[string]string    // reply token → chat
	sent       map[string][]Message // chat → what the bot sent
	retryKeys  map[string]string    // X-Line-Retry-Key → request id
	content    map[string]Content   // message id → content
	failures   []Failure
	dlFailures []Failure // the answers of the next content downloads
	loading    map[string]int
	attempts   int
	downloads  int
	refuseAuth bool
}

// Message is one message object the bot sent, with the endpoint used.
type Message struct {
	ID       string
	Via      string // reply, push
	Type     string
	Text     string
	ImageURL string
	// Buttons are the message's quick reply postback buttons.
	Buttons []Button
}

// Button is a quick reply postback button the bot sent.
type Button struct {
	Label, Data, DisplayText string
}

// Content is a media message's content.
type Content struct {
	MimeType string
	Data     []byte
	// Preparing is how many more checks (a download, a transcoding
	// status) find a video's or audio's content still being prepared:
	// the download is answered 202 without the content, the status
	// "processing", as LINE answers before it has converted the file.
	Preparing int
	// PrepareFailed: LINE could not prepare it (status "failed").
	PrepareFailed bool
}

// Failure is an error answer to the next reply or push.
type Failure struct {
	Status     int
	Message    string
	RetryAfter int // seconds; 0: no header
	// Skip lets that many replies or pushes through first.
	Skip int
	// Lost: LINE takes the call (the messages are shown, a reply token
	// is spent) and its answer is this failure, as when the answer is
	// lost on the way back.
	Lost bool
}

// Common failures.
var (
	ErrTooManyRequests = Failure{Status: http.StatusTooManyRequests, Message: "The API rate limit has been exceeded. Try again later."}
	ErrMonthlyLimit    = Failure{Status: http.StatusTooManyRequests, Message: "You have reached your monthly limit."}
	ErrInternal        = Failure{Status: http.StatusInternalServerError, Message: "An error occurred in the server."}
	ErrBadRequest      = Failure{Status: http.StatusBadRequest, Message: "The request body has 1 error(s)"}
)

// New starts a fake channel, closed when t ends.
func New(t testing.TB) *Fake {
	f := &Fake{
		Token: "tok-" + randHex(8), Secret: randHex(16), BotID: "U" + randHex(16),
		tokens: map[string]time.Time{}, tokenChat: map[string]string{}, sent: map[string][]Message{},
		retryKeys: map[string]string{}, content: map[string]Content{}, loading: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/bot/info", f.info)
	mux.HandleFunc("POST /v2/bot/message/reply", f.reply)
	mux.HandleFunc("POST /v2/bot/message/push", f.push)
	mux.HandleFunc("POST /v2/bot/chat/loading/start", f.startLoading)
	mux.HandleFunc("GET /v2/bot/message/{id}/content", f.download)
	mux.HandleFunc("GET /v2/bot/message/{id}/content/transcoding", f.transcoding)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// BaseURL serves both hosts (api.line.me and api-data.line.me).
func (f *Fake) BaseURL() string { return f.srv.URL }

// Fail answers the next reply or push calls with fs, in order.
func (f *Fake) Fail(fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fs...)
}

// FailDownloads answers the next content downloads with fs, one each,
// in order (a 429 with its Retry-After, a 5xx …); the ones after them
// are served as before.
func (f *Fake) FailDownloads(fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dlFailures = append(f.dlFailures, fs...)
}

// RefuseToken makes every call answer 401, as for a revoked token.
func (f *Fake) RefuseToken() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseAuth = true
}

// Sent is what the bot sent to chat, in order.
func (f *Fake) Sent(chat string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Message(nil), f.sent[chat]...)
}

// Attempts counts reply and push calls, failed ones included.
func (f *Fake) Attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

// Loading counts loading animations started in chat.
func (f *Fake) Loading(chat string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loading[chat]
}

// Downloads counts content downloads: those answered with the content
// or with a failure FailDownloads queued (not a 202 nor a 404).
func (f *Fake) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads
}

// ExpireReplyTokens makes every issued reply token invalid.
func (f *Fake) ExpireReplyTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.tokens)
}

func (f *Fake) nextID() string {
	f.seq++
	return strconv.FormatInt(500000000000000000+f.seq, 10)
}

// AddContent stores the content of a new media message and returns its id.
func (f *Fake) AddContent(mimeType string, data []byte) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.nextID()
	f.content[id] = Content{MimeType: mimeType, Data: data}
	return id
}

// AddPreparingContent stores the content of a new video or audio
// message that LINE is still preparing for the next checks (Content's
// Preparing) and returns its id.
func (f *Fake) AddPreparingContent(mimeType string, data []byte, checks int, failed bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.nextID()
	f.content[id] = Content{MimeType: mimeType, Data: data, Preparing: checks, PrepareFailed: failed}
	return id
}

// preparing reports (under mu) whether id's content is not ready at this
// check, and counts the check.
func (f *Fake) preparing(id string) (c Content, ok, notReady bool) {
	c, ok = f.content[id]
	if !ok {
		return c, false, false
	}
	if c.PrepareFailed {
		return c, true, true
	}
	if c.Preparing > 0 {
		c.Preparing--
		f.content[id] = c
		return c, true, true
	}
	return c, true, false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, fl Failure) {
	if fl.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
	}
	writeJSON(w, fl.Status, map[string]any{"message": fl.Message})
}

func (f *Fake) authorized(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	refuse := f.refuseAuth
	f.mu.Unlock()
	if refuse || r.Header.Get("Authorization") != "Bearer "+f.Token {
		writeError(w, Failure{Status: http.StatusUnauthorized, Message: "Authentication failed. Confirm that the access token in the authorization header is valid."})
		return false
	}
	return true
}

func (f *Fake) info(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"userId": f.BotID, "basicId": "@000fake", "displayName": "Fake Bot", "chatMode": "bot", "markAsReadMode": "auto"})
}

type wireMessage struct {
	Type               string `json:"type"`
	Text               string `json:"text"`
	OriginalContentURL string `json:"originalContentUrl"`
	PreviewImageURL    string `json:"previewImageUrl"`
	QuickReply         *struct {
		Items []struct {
			Type   string `json:"type"`
			Action struct {
				Type        string `json:"type"`
				Label       string `json:"label"`
				Data        string `json:"data"`
				DisplayText string `json:"displayText"`
			} `json:"action"`
		} `json:"items"`
	} `json:"quickReply"`
}

// checkMessages validates message objects as LINE does: 1 to 5, text
// of 1 to 5,000 characters, images with https URLs.
func checkMessages(ms []wireMessage) string {
	if len(ms) == 0 || len(ms) > 5 {
		return fmt.Sprintf("messages: size must be between 1 and 5 (%d)", len(ms))
	}
	for i, m := range ms {
		switch m.Type {
		case "text":
			if n := len(utf16.Encode([]rune(m.Text))); n == 0 || n > 5000 {
				return fmt.Sprintf("messages[%d].text: length must be between 1 and 5000", i)
			}
		case "image":
			if !strings.HasPrefix(m.OriginalContentURL, "https://") || !strings.HasPrefix(m.PreviewImageURL, "https://") {
				return fmt.Sprintf("messages[%d].originalContentUrl: must be https", i)
			}
		default:
			return fmt.Sprintf("messages[%d].type: unsupported", i)
		}
		if q := m.QuickReply; q != nil {
			if len(q.Items) == 0 || len(q.Items) > 13 {
				return fmt.Sprintf("messages[%d].quickReply.items: size must be between 1 and 13", i)
			}
			for j, it := range q.Items {
				a := it.Action
				switch {
				case it.Type != "action" || a.Type != "postback":
					return fmt.Sprintf("messages[%d].quickReply.items[%d]: not a postback action", i, j)
				case a.Label == "" || len([]rune(a.Label)) > 20:
					return fmt.Sprintf("messages[%d].quickReply.items[%d].action.label: length must be between 1 and 20", i, j)
				case a.Data == "" || len(a.Data) > 300 || len([]rune(a.DisplayText)) > 300:
					return fmt.Sprintf("messages[%d].quickReply.items[%d].action.data: length must be between 1 and 300", i, j)
				}
			}
		}
	}
	return ""
}

// begin counts an attempt and takes the next injected failure: one that
// is Lost is answered by end, after the call is carried out.
func (f *Fake) begin(w http.ResponseWriter, r *http.Request) (bool, *Failure) {
	if !f.authorized(w, r) {
		return false, nil
	}
	f.mu.Lock()
	f.attempts++
	var fl *Failure
	switch {
	case len(f.failures) > 0 && f.failures[0].Skip > 0:
		f.failures[0].Skip--
	case len(f.failures) > 0:
		fl = &f.failures[0]
		f.failures = f.failures[1:]
	}
	f.mu.Unlock()
	if fl != nil && fl.Lost {
		return true, fl
	}
	if fl != nil {
		writeError(w, *fl)
		return false, nil
	}
	return true, nil
}

// answer writes a carried-out call's answer, or its lost one.
func answer(w http.ResponseWriter, lost *Failure, v any) {
	if lost != nil {
		writeError(w, *lost)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (f *Fake) record(chat, via string, ms []wireMessage) []map[string]string {
	var out []map[string]string
	for _, m := range ms {
		id := f.nextID()
		msg := Message{ID: id, Via: via, Type: m.Type, Text: m.Text, ImageURL: m.OriginalContentURL}
		if m.QuickReply != nil {
			for _, it := range m.QuickReply.Items {
				msg.Buttons = append(msg.Buttons, Button{Label: it.Action.Label, Data: it.Action.Data, DisplayText: it.Action.DisplayText})
			}
		}
		f.sent[chat] = append(f.sent[chat], msg)
		out = append(out, map[string]string{"id": id, "quoteToken": "q" + id})
	}
	return out
}

func (f *Fake) reply(w http.ResponseWriter, r *http.Request) {
	ok, lost := f.begin(w, r)
	if !ok {
		return
	}
	var body struct {
		ReplyToken string        `json:"replyToken"`
		Messages   []wireMessage `json:"messages"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil {
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "The request body could not be parsed as JSON"})
		return
	}
	if msg := checkMessages(body.Messages); msg != "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "The request body has 1 error(s)", "details": []map[string]string{{"message": msg, "property": "messages"}}})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	exp, ok := f.tokens[body.ReplyToken]
	if !ok || time.Now().After(exp) {
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "Invalid reply token"})
		return
	}
	delete(f.tokens, body.ReplyToken)
	answer(w, lost, map[string]any{"sentMessages": f.record(f.tokenChat[body.ReplyToken], "reply", body.Messages)})
}

func (f *Fake) push(w http.ResponseWriter, r *http.Request) {
	ok, lost := f.begin(w, r)
	if !ok {
		return
	}
	var body struct {
		To       string        `json:"to"`
		Messages []wireMessage `json:"messages"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil || body.To == "" {
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "The request body could not be parsed as JSON"})
		return
	}
	if msg := checkMessages(body.Messages); msg != "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "The request body has 1 error(s)", "details": []map[string]string{{"message": msg, "property": "messages"}}})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.Header.Get("X-Line-Retry-Key")
	if key != "" {
		if id, ok := f.retryKeys[key]; ok {
			w.Header().Set("X-Line-Accepted-Request-Id", id)
			writeError(w, Failure{Status: http.StatusConflict, Message: "The retry key is already accepted"})
			return
		}
	}
	if !strings.HasPrefix(body.To, "U") && !strings.HasPrefix(body.To, "C") && !strings.HasPrefix(body.To, "R") {
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "The property, 'to', in the request body is invalid (line: -, column: -)"})
		return
	}
	if key != "" {
		f.retryKeys[key] = "req-" + randHex(8)
	}
	answer(w, lost, map[string]any{"sentMessages": f.record(body.To, "push", body.Messages)})
}

func (f *Fake) startLoading(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	var body struct {
		ChatID  string `json:"chatId"`
		Seconds int    `json:"loadingSeconds"`
	}
	if json.NewDecoder(r.Body).Decode(&body) != nil || !strings.HasPrefix(body.ChatID, "U") || body.Seconds%5 != 0 || body.Seconds < 5 || body.Seconds > 60 {
		writeError(w, Failure{Status: http.StatusBadRequest, Message: "The request body has 1 error(s)"})
		return
	}
	f.mu.Lock()
	f.loading[body.ChatID]++
	f.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]any{})
}

func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	if len(f.dlFailures) > 0 {
		fail := f.dlFailures[0]
		f.dlFailures = f.dlFailures[1:]
		f.downloads++
		f.mu.Unlock()
		writeError(w, fail)
		return
	}
	c, ok, notReady := f.preparing(r.PathValue("id"))
	if ok && !notReady {
		f.downloads++
	}
	f.mu.Unlock()
	switch {
	case !ok:
		writeError(w, Failure{Status: http.StatusNotFound, Message: "Not found"})
		return
	case notReady:
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", c.MimeType)
	_, _ = w.Write(c.Data)
}

// transcoding answers GET /v2/bot/message/{id}/content/transcoding:
// processing, succeeded or failed.
func (f *Fake) transcoding(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	c, ok, notReady := f.preparing(r.PathValue("id"))
	f.mu.Unlock()
	switch {
	case !ok:
		writeError(w, Failure{Status: http.StatusNotFound, Message: "Not found"})
	case c.PrepareFailed:
		writeJSON(w, http.StatusOK, map[string]string{"status": "failed"})
	case notReady:
		writeJSON(w, http.StatusOK, map[string]string{"status": "processing"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "succeeded"})
	}
}

// Inbound describes one message event a user sends.
type Inbound struct {
	// Source: a user id alone is a 1:1 chat; with GroupID or RoomID the
	// event comes from that group or room.
	UserID, GroupID, RoomID string
	// Type is text (default), image, video, audio, file, sticker,
	// location, or postback: a tap on a postback button, whose data is
	// Text.
	Type string
	Text string
	// ContentID is the message id of a media message (AddContent).
	ContentID string
	FileName  string
	Keywords  []string
	// MentionBot: the text mentions the bot.
	MentionBot bool
	// Redelivery marks the event as LINE's redelivery of an earlier one.
	Redelivery bool
	// ExpiredToken: the event's reply token is already past its minute
	// (an answer that took too long).
	ExpiredToken bool
	// EventID is the webhookEventId; empty gets a fresh one.
	EventID string
}

// Event builds one webhook event in LINE's JSON, issuing a reply token
// valid for a minute.
func (f *Fake) Event(in Inbound) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	src := map[string]any{"type": "user", "userId": in.UserID}
	chat := in.UserID
	switch {
	case in.GroupID != "":
		src, chat = map[string]any{"type": "group", "groupId": in.GroupID, "userId": in.UserID}, in.GroupID
	case in.RoomID != "":
		src, chat = map[string]any{"type": "room", "roomId": in.RoomID, "userId": in.UserID}, in.RoomID
	}
	typ := in.Type
	if typ == "" {
		typ = "text"
	}
	id := in.ContentID
	if id == "" {
		id = f.nextID()
	}
	msg := map[string]any{"id": id, "type": typ}
	switch typ {
	case "text":
		msg["text"], msg["quoteToken"] = in.Text, "q"+id
		if in.MentionBot {
			msg["mention"] = map[string]any{"mentionees": []map[string]any{{"index": 0, "length": 4, "type": "user", "userId": f.BotID, "isSelf": true}}}
		}
	case "image", "video", "audio":
		msg["contentProvider"] = map[string]any{"type": "line"}
	case "file":
		msg["fileName"], msg["fileSize"] = in.FileName, 4
	case "sticker":
		msg["packageId"], msg["stickerId"], msg["stickerResourceType"], msg["keywords"] = "446", "1988", "STATIC", in.Keywords
	case "location":
		msg["title"], msg["address"], msg["latitude"], msg["longitude"] = "Tokyo Tower", "4-2-8 Shibakoen, Minato-ku", 35.6586, 139.7454
	}
	token := randHex(16)
	f.tokens[token] = time.Now().Add(time.Minute)
	if in.ExpiredToken {
		f.tokens[token] = time.Now().Add(-time.Second)
	}
	f.tokenChat[token] = chat
	eid := in.EventID
	if eid == "" {
		eid = "01" + strings.ToUpper(randHex(12))
	}
	if typ == "postback" {
		return map[string]any{
			"type": "postback", "mode": "active", "timestamp": time.Now().UnixMilli(),
			"source": src, "webhookEventId": eid, "replyToken": token, "postback": map[string]any{"data": in.Text},
			"deliveryContext": map[string]any{"isRedelivery": in.Redelivery},
		}
	}
	return map[string]any{
		"type": "message", "mode": "active", "timestamp": time.Now().UnixMilli(),
		"source": src, "webhookEventId": eid, "replyToken": token, "message": msg,
		"deliveryContext": map[string]any{"isRedelivery": in.Redelivery},
	}
}

// Body is a webhook delivery of events to the bot.
func (f *Fake) Body(events ...map[string]any) []byte {
	if events == nil {
		events = []map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"destination": f.BotID, "events": events})
	return b
}

// Sign is LINE's X-Line-Signature of body.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Post delivers body to the gateway's webhook signed with the channel
// secret, as LINE does, and returns the status and answer.
func (f *Fake) Post(ctx context.Context, webhookURL string, body []byte) (int, string, error) {
	return PostSigned(ctx, webhookURL, Sign(f.Secret, body), body)
}

// PostSigned delivers body with the given signature (forgeries).
func PostSigned(ctx context.Context, webhookURL, signature string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhookURL, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "LineBotWebhook/2.0")
	if signature != "" {
		req.Header.Set("X-Line-Signature", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}
