// Package bbfake is a local BlueBubbles server for tests: the REST API
// calls the gateway makes (ping, server info, webhooks, chat query, text
// sends, attachment uploads, new chats, message queries, typing, read
// receipts, attachment downloads), each with the
// ?password= checked, answering in BlueBubbles's envelope ({"status",
// "message", "data"} or "error"), and the server's side of the webhook:
// new-message events as BlueBubbles posts them. Errors can be injected.
package bbfake

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// Fake is one BlueBubbles server (one Apple ID).
type Fake struct {
	Password string
	// PrivateAPI: the server reports the Private API helper connected.
	PrivateAPI bool

	srv *httptest.Server

	mu          sync.Mutex
	chats       []Chat
	sent        map[string][]Sent // chat guid → what the bot sent
	attachments map[string]Attachment
	webhooks    []Webhook
	nextHook    int
	failures    []Failure
	typing      map[string]int
	read        map[string]int
	downloads   int
	queries     int
	// slow holds each send this long before it is sent and answered;
	// queued are the tempGuids of the sends held (BlueBubbles's send
	// cache: a send whose tempGuid is queued is refused 400).
	slow   time.Duration
	queued map[string]bool
	// heldFail is how many of the next held sends fail on the Mac
	// (Messages keeps them with an error code).
	heldFail int
	// unmatched is how many of the next sends go out but are answered
	// as BlueBubbles answers a send it stopped waiting for.
	unmatched int
	// log is every message the bot sent or tried to, as the Messages
	// database keeps them, for message queries.
	log     []logged
	newChat int
	// hooksDown: the webhook API answers 500 (BreakWebhookAPI).
	hooksDown bool

	// downloadFailures are answered, in order, to the next downloads.
	downloadFailures []Failure
}

// logged is a message in the Messages database: sent, or failed with an
// error code.
type logged struct {
	Sent
	Error   int
	Created time.Time
}

// Chat is a chat the server knows.
type Chat struct {
	GUID           string
	ChatIdentifier string
	DisplayName    string
	Participants   []string
}

// Sent is one message the bot sent.
type Sent struct {
	GUID                string
	ChatGUID            string
	Text                string
	Method              string
	TempGUID            string
	SelectedMessageGUID string
	// An uploaded attachment: its name, type, bytes and whether it was
	// sent as a voice message.
	FileName     string
	MimeType     string
	Data         []byte
	AudioMessage bool
}

// Attachment is an inbound attachment the fake serves.
type Attachment struct {
	MimeType string
	Data     []byte
}

// Webhook is a registered webhook.
type Webhook struct {
	ID     int      `json:"id"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

// Failure is an error answer to the next send.
type Failure struct {
	Status     int
	Message    string
	RetryAfter int // seconds; 0: none
	// Cut, on a download's failure, sends the first half of the file,
	// then drops the connection (Status is not used).
	Cut bool
}

// New starts a fake; it stops when the test ends.
func New(t testing.TB) *Fake {
	f := &Fake{Password: "bb-server-password", sent: map[string][]Sent{}, attachments: map[string]Attachment{},
		typing: map[string]int{}, read: map[string]int{}, queued: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/ping", f.auth(func(w http.ResponseWriter, _ *http.Request) { ok(w, "Ping received!", "pong") }))
	mux.HandleFunc("GET /api/v1/server/info", f.auth(f.info))
	mux.HandleFunc("GET /api/v1/webhook", f.auth(f.hooksUp(f.listHooks)))
	mux.HandleFunc("POST /api/v1/webhook", f.auth(f.hooksUp(f.addHook)))
	mux.HandleFunc("DELETE /api/v1/webhook/{id}", f.auth(f.hooksUp(f.deleteHook)))
	mux.HandleFunc("POST /api/v1/chat/query", f.auth(f.query))
	mux.HandleFunc("POST /api/v1/chat/new", f.auth(f.create))
	mux.HandleFunc("POST /api/v1/message/query", f.auth(f.messages))
	mux.HandleFunc("POST /api/v1/message/text", f.auth(f.text))
	mux.HandleFunc("POST /api/v1/message/attachment", f.auth(f.attachment))
	mux.HandleFunc("POST /api/v1/chat/{guid}/typing", f.auth(f.count(f.typing)))
	mux.HandleFunc("POST /api/v1/chat/{guid}/read", f.auth(f.count(f.read)))
	mux.HandleFunc("GET /api/v1/attachment/{guid}/download", f.auth(f.download))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the server URL for gateways.bluebubbles.server_url.
func (f *Fake) URL() string { return f.srv.URL }

// AddChat makes the server know a chat.
func (f *Fake) AddChat(c Chat) {
	f.mu.Lock()
	f.chats = append(f.chats, c)
	f.mu.Unlock()
}

// AddAttachment serves data as attachment guid and returns the guid.
func (f *Fake) AddAttachment(mimeType string, data []byte) string {
	g := "at_0_" + strings.ToUpper(randomHex(16))
	f.mu.Lock()
	f.attachments[g] = Attachment{MimeType: mimeType, Data: data}
	f.mu.Unlock()
	return g
}

// Fail makes the next sends fail with these failures, one each.
func (f *Fake) Fail(fs ...Failure) {
	f.mu.Lock()
	f.failures = append(f.failures, fs...)
	f.mu.Unlock()
}

// FailDownloads makes the next attachment downloads fail with these
// failures, one each; a zero Failure lets its download through.
func (f *Fake) FailDownloads(fs ...Failure) {
	f.mu.Lock()
	f.downloadFailures = append(f.downloadFailures, fs...)
	f.mu.Unlock()
}

// DownloadFailuresLeft counts the download failures no download reached.
func (f *Fake) DownloadFailuresLeft() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.downloadFailures)
}

// SlowSends makes every later send take d before it is sent and
// answered, as an AppleScript send can; meanwhile a send with the same
// tempGuid is refused as BlueBubbles refuses it (400, "Message is
// already queued to be sent!"), and the held one is sent even when its
// caller gave up waiting.
func (f *Fake) SlowSends(d time.Duration) {
	f.mu.Lock()
	f.slow = d
	f.mu.Unlock()
}

// FailHeld makes the next n held sends (SlowSends) fail on the Mac once
// held: Messages keeps each with an error code, the server answers 500
// and forgets the tempGuid, as BlueBubbles does.
func (f *Fake) FailHeld(n int) {
	f.mu.Lock()
	f.heldFail = n
	f.mu.Unlock()
}

// TimeOutSends makes the next n sends go out (Messages sends them) but
// be answered as BlueBubbles answers a send whose message it did not see
// appear in the Messages database in time (its MessagePromise's timeout,
// or a message it failed to match to the send): 500, an "iMessage Error"
// whose message is "Message send timeout"; the tempGuid is forgotten, so
// a retry is taken as a new send.
func (f *Fake) TimeOutSends(n int) {
	f.mu.Lock()
	f.unmatched = n
	f.mu.Unlock()
}

// timedOut answers a send just recorded as timed out when TimeOutSends
// says so (f.mu held).
func (f *Fake) timedOut(w http.ResponseWriter) bool {
	if f.unmatched == 0 {
		return false
	}
	f.unmatched--
	write(w, http.StatusInternalServerError, map[string]any{"status": 500, "message": "Message Send Error",
		"error": map[string]any{"type": "iMessage Error", "message": "Message send timeout"}})
	return true
}

// hold keeps s queued for the slow duration; false when its tempGuid is
// queued already (answered 400 then) or the held send failed (answered
// 500, kept with an error).
func (f *Fake) hold(w http.ResponseWriter, s Sent, refusal string) bool {
	f.mu.Lock()
	d := f.slow
	if f.queued[s.TempGUID] {
		f.mu.Unlock()
		fail(w, http.StatusBadRequest, "Validation Error", refusal)
		return false
	}
	if d > 0 {
		f.queued[s.TempGUID] = true
	}
	f.mu.Unlock()
	if d == 0 {
		return true
	}
	time.Sleep(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.queued, s.TempGUID)
	if f.heldFail > 0 {
		f.heldFail--
		s.GUID = NewGUID()
		f.log = append(f.log, logged{Sent: s, Error: 22, Created: time.Now()})
		fail(w, http.StatusInternalServerError, "iMessage Error", "Failed to send message! See attached message error code.")
		return false
	}
	return true
}

// record keeps a message the bot sent.
func (f *Fake) record(s Sent) {
	f.sent[s.ChatGUID] = append(f.sent[s.ChatGUID], s)
	f.log = append(f.log, logged{Sent: s, Created: time.Now()})
}

// NewChats is how many chats were started through /api/v1/chat/new.
func (f *Fake) NewChats() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.newChat
}

// Sent returns what the bot sent to chat guid, oldest first.
func (f *Fake) Sent(chatGUID string) []Sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Sent(nil), f.sent[chatGUID]...)
}

// Webhooks returns the registered webhooks.
func (f *Fake) Webhooks() []Webhook {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Webhook(nil), f.webhooks...)
}

// AddWebhook registers a webhook as an operator (or an older gateway) did.
func (f *Fake) AddWebhook(url string, events ...string) {
	f.mu.Lock()
	f.nextHook++
	f.webhooks = append(f.webhooks, Webhook{ID: f.nextHook, URL: url, Events: events})
	f.mu.Unlock()
}

// BreakWebhookAPI makes the webhook API (list, add, remove) answer 500
// while broken is true, as a server that cannot read its database does;
// the rest of the API answers.
func (f *Fake) BreakWebhookAPI(broken bool) {
	f.mu.Lock()
	f.hooksDown = broken
	f.mu.Unlock()
}

func (f *Fake) hooksUp(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		down := f.hooksDown
		f.mu.Unlock()
		if down {
			fail(w, http.StatusInternalServerError, "Server Error", "SQLITE_BUSY: database is locked")
			return
		}
		h(w, r)
	}
}

// Counts are how often chat guid was marked typing and read, and how
// many attachments were downloaded and chat queries made in all.
func (f *Fake) Counts(chatGUID string) (typing, read, downloads, queries int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typing[chatGUID], f.read[chatGUID], f.downloads, f.queries
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewGUID is a message guid as iMessage writes them.
func NewGUID() string {
	h := strings.ToUpper(randomHex(16))
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func ok(w http.ResponseWriter, msg string, data any) {
	write(w, http.StatusOK, map[string]any{"status": 200, "message": msg, "data": data})
}

func fail(w http.ResponseWriter, status int, typ, msg string) {
	write(w, status, map[string]any{"status": status, "message": msg, "error": map[string]any{"type": typ, "message": msg}})
}

// auth answers 401 as BlueBubbles does unless ?password= (or ?guid=) is
// the server password.
func (f *Fake) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		pw := q.Get("password")
		if pw == "" {
			pw = q.Get("guid")
		}
		if pw != f.Password {
			fail(w, http.StatusUnauthorized, "Unauthorized", "You are not authorized to access this resource")
			return
		}
		h(w, r)
	}
}

func (f *Fake) info(w http.ResponseWriter, _ *http.Request) {
	ok(w, "Successfully fetched server info", map[string]any{
		"os_version": "14.5", "server_version": "1.9.9", "private_api": f.PrivateAPI,
		"helper_connected": f.PrivateAPI, "proxy_service": "lan-url", "detected_icloud": "bot@icloud.com",
	})
}

func (f *Fake) listHooks(w http.ResponseWriter, _ *http.Request) {
	ok(w, "Successfully fetched webhooks", f.Webhooks())
}

func (f *Fake) addHook(w http.ResponseWriter, r *http.Request) {
	var in struct {
		URL    string   `json:"url"`
		Events []string `json:"events"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.URL == "" || len(in.Events) == 0 {
		fail(w, http.StatusBadRequest, "Validation Error", "url and events are required")
		return
	}
	f.AddWebhook(in.URL, in.Events...)
	ok(w, "Successfully created webhook", map[string]any{"url": in.URL, "events": in.Events})
}

func (f *Fake) deleteHook(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, h := range f.webhooks {
		if fmt.Sprint(h.ID) == r.PathValue("id") {
			f.webhooks = append(f.webhooks[:i], f.webhooks[i+1:]...)
			ok(w, "Successfully deleted webhook", nil)
			return
		}
	}
	fail(w, http.StatusNotFound, "Not Found", "webhook does not exist")
}

func (f *Fake) query(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.queries++
	var out []map[string]any
	for _, c := range f.chats {
		var parts []map[string]any
		for _, a := range c.Participants {
			parts = append(parts, map[string]any{"address": a, "service": "iMessage"})
		}
		out = append(out, map[string]any{"guid": c.GUID, "chatIdentifier": c.ChatIdentifier, "displayName": c.DisplayName, "participants": parts})
	}
	f.mu.Unlock()
	ok(w, "Successfully fetched chats", out)
}

func (f *Fake) text(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ChatGUID            string `json:"chatGuid"`
		Message             string `json:"message"`
		Method              string `json:"method"`
		TempGUID            string `json:"tempGuid"`
		SelectedMessageGUID string `json:"selectedMessageGuid"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ChatGUID == "" || in.TempGUID == "" {
		fail(w, http.StatusBadRequest, "Validation Error", "chatGuid, message and tempGuid are required")
		return
	}
	if !f.hold(w, Sent{ChatGUID: in.ChatGUID, Text: in.Message, Method: in.Method, TempGUID: in.TempGUID}, "Message is already queued to be sent! (Temp GUID: "+in.TempGUID+")") {
		return
	}
	f.mu.Lock()
	if len(f.failures) > 0 {
		fl := f.failures[0]
		f.failures = f.failures[1:]
		f.mu.Unlock()
		if fl.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(fl.RetryAfter))
		}
		fail(w, fl.Status, "Server Error", fl.Message)
		return
	}
	known := false
	for _, c := range f.chats {
		known = known || c.GUID == in.ChatGUID
	}
	if !known {
		f.mu.Unlock()
		fail(w, http.StatusBadRequest, "Server Error", "Chat does not exist")
		return
	}
	if in.SelectedMessageGUID != "" && (in.Method != "private-api" || !f.PrivateAPI) {
		f.mu.Unlock()
		fail(w, http.StatusBadRequest, "Server Error", "replies need the private api")
		return
	}
	s := Sent{GUID: NewGUID(), ChatGUID: in.ChatGUID, Text: in.Message, Method: in.Method, TempGUID: in.TempGUID, SelectedMessageGUID: in.SelectedMessageGUID}
	f.record(s)
	if f.timedOut(w) {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	ok(w, "Message sent!", map[string]any{
		"guid": s.GUID, "tempGuid": in.TempGUID, "text": in.Message, "isFromMe": true,
		"dateCreated": time.Now().UnixMilli(), "chats": []map[string]any{{"guid": in.ChatGUID}},
	})
}

// attachment takes a multipart upload: chatGuid, tempGuid, name,
// isAudioMessage and the file as "attachment".
func (f *Fake) attachment(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		fail(w, http.StatusBadRequest, "Validation Error", "not a multipart form")
		return
	}
	file, hdr, err := r.FormFile("attachment")
	chat, temp, name := r.FormValue("chatGuid"), r.FormValue("tempGuid"), r.FormValue("name")
	if err != nil || chat == "" || temp == "" || name == "" {
		fail(w, http.StatusBadRequest, "Validation Error", "chatGuid, tempGuid, name and attachment are required")
		return
	}
	data, _ := io.ReadAll(file)
	_ = file.Close()
	if !f.hold(w, Sent{ChatGUID: chat, TempGUID: temp, FileName: name}, "Attachment is already queued to be sent!") {
		return
	}
	f.mu.Lock()
	known := false
	for _, c := range f.chats {
		known = known || c.GUID == chat
	}
	if !known {
		f.mu.Unlock()
		fail(w, http.StatusBadRequest, "Server Error", "Chat does not exist")
		return
	}
	s := Sent{GUID: NewGUID(), ChatGUID: chat, TempGUID: temp, FileName: name, MimeType: hdr.Header.Get("Content-Type"),
		Data: data, AudioMessage: r.FormValue("isAudioMessage") == "true"}
	f.record(s)
	if f.timedOut(w) {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	ok(w, "Attachment sent!", map[string]any{"guid": s.GUID, "tempGuid": temp, "isFromMe": true,
		"attachments": []map[string]any{{"guid": "at_0_" + strings.ToUpper(randomHex(8)), "transferName": name}}})
}

// create starts a chat with addresses by sending the message (POST
// /api/v1/chat/new), as BlueBubbles does through the Private API; it
// answers the chat with its participants and the message.
func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Addresses []string `json:"addresses"`
		Message   string   `json:"message"`
		Method    string   `json:"method"`
		TempGUID  string   `json:"tempGuid"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Addresses) == 0 {
		fail(w, http.StatusBadRequest, "Validation Error", "addresses are required")
		return
	}
	if in.Method == "private-api" && !f.PrivateAPI {
		fail(w, http.StatusBadRequest, "Validation Error", "iMessage Private API is not enabled!")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.newChat++
	c := Chat{GUID: "iMessage;-;" + in.Addresses[0], ChatIdentifier: in.Addresses[0], Participants: in.Addresses}
	if len(in.Addresses) > 1 {
		c = Chat{GUID: "iMessage;+;chat" + randomHex(6), ChatIdentifier: "chat" + randomHex(6), Participants: in.Addresses}
	}
	f.chats = append(f.chats, c)
	s := Sent{GUID: NewGUID(), ChatGUID: c.GUID, Text: in.Message, Method: in.Method, TempGUID: in.TempGUID}
	f.record(s)
	var parts []map[string]any
	for _, a := range c.Participants {
		parts = append(parts, map[string]any{"address": a, "service": "iMessage"})
	}
	ok(w, "Successfully created chat!", map[string]any{"guid": c.GUID, "chatIdentifier": c.ChatIdentifier, "style": 45,
		"participants": parts, "messages": []map[string]any{{"guid": s.GUID, "text": s.Text, "isFromMe": true, "tempGuid": in.TempGUID}}})
}

// messages answers a message query (POST /api/v1/message/query): the
// messages of chatGuid created after the given Unix ms, sorted by
// dateCreated (DESC or ASC), at most limit, with their attachments.
func (f *Fake) messages(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ChatGUID string   `json:"chatGuid"`
		After    int64    `json:"after"`
		Sort     string   `json:"sort"`
		Limit    int      `json:"limit"`
		With     []string `json:"with"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || (in.Sort != "" && in.Sort != "ASC" && in.Sort != "DESC") || in.Limit < 0 || in.Limit > 1000 {
		fail(w, http.StatusBadRequest, "Validation Error", "bad message query")
		return
	}
	if in.Limit == 0 {
		in.Limit = 100
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []map[string]any{}
	for i := range f.log {
		m := f.log[i]
		if in.Sort == "DESC" {
			m = f.log[len(f.log)-1-i]
		}
		if (in.ChatGUID != "" && m.ChatGUID != in.ChatGUID) || m.Created.UnixMilli() < in.After || len(out) >= in.Limit {
			continue
		}
		atts := []map[string]any{}
		if m.FileName != "" {
			atts = append(atts, map[string]any{"guid": "at_0_" + m.GUID, "transferName": m.FileName, "mimeType": m.MimeType})
		}
		out = append(out, map[string]any{"guid": m.GUID, "text": m.Text, "isFromMe": true, "error": m.Error,
			"dateCreated": m.Created.UnixMilli(), "attachments": atts, "handle": nil})
	}
	write(w, http.StatusOK, map[string]any{"status": 200, "message": "Successfully fetched messages!", "data": out,
		"metadata": map[string]any{"offset": 0, "limit": in.Limit, "count": len(out)}})
}

func (f *Fake) count(m map[string]int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		m[r.PathValue("guid")]++
		f.mu.Unlock()
		ok(w, "Success", nil)
	}
}

func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	var cut bool
	if len(f.downloadFailures) > 0 {
		fl := f.downloadFailures[0]
		f.downloadFailures = f.downloadFailures[1:]
		cut = fl.Cut
		if fl.Status != 0 && !cut {
			f.mu.Unlock()
			if fl.RetryAfter > 0 {
				w.Header().Set("Retry-After", fmt.Sprint(fl.RetryAfter))
			}
			fail(w, fl.Status, "Server Error", fl.Message)
			return
		}
	}
	a, found := f.attachments[r.PathValue("guid")]
	if found && !cut {
		f.downloads++
	}
	f.mu.Unlock()
	if !found {
		fail(w, http.StatusNotFound, "Not Found", "Attachment does not exist")
		return
	}
	if cut {
		platformtest.CutFile(w, a.MimeType, a.Data)
	}
	w.Header().Set("Content-Type", a.MimeType)
	_, _ = w.Write(a.Data)
}

// Inbound is a message BlueBubbles reports.
type Inbound struct {
	GUID     string // a new guid when empty
	ChatGUID string // iMessage;-;<address> for a DM, iMessage;+;chat… for a group
	From     string // the sender's address
	Text     string
	FromMe   bool
	// Tapback: associatedMessageType (2000 love …) on AssociatedGUID.
	Tapback        int
	AssociatedGUID string
	ReplyTo        string // threadOriginatorGuid
	Attachments    []InboundAttachment
}

// InboundAttachment is an attachment of an inbound message.
type InboundAttachment struct {
	GUID, MimeType, TransferName string
	TotalBytes                   int
}

// Event is the new-message webhook body BlueBubbles posts for in (the
// v1.9 shape: the chat under data.chats), and the message guid.
func Event(in Inbound) ([]byte, string) {
	if in.GUID == "" {
		in.GUID = NewGUID()
	}
	style := 45
	if strings.Contains(in.ChatGUID, ";+;") {
		style = 43
	}
	ident := in.ChatGUID[strings.LastIndex(in.ChatGUID, ";")+1:]
	var atts []map[string]any
	for _, a := range in.Attachments {
		atts = append(atts, map[string]any{"guid": a.GUID, "mimeType": a.MimeType, "transferName": a.TransferName,
			"totalBytes": a.TotalBytes, "uti": "public.data", "originalROWID": 7})
	}
	if atts == nil {
		atts = []map[string]any{}
	}
	data := map[string]any{
		"originalROWID": 1234, "guid": in.GUID, "text": in.Text, "subject": nil,
		"handle":   map[string]any{"originalROWID": 12, "address": in.From, "service": "iMessage", "country": "us"},
		"handleId": 12, "isFromMe": in.FromMe, "itemType": 0, "groupActionType": 0, "error": 0,
		"dateCreated": time.Now().UnixMilli(), "dateRead": nil, "dateDelivered": nil,
		"attachments": atts, "associatedMessageGuid": nil, "associatedMessageType": nil,
		"threadOriginatorGuid": nil, "balloonBundleId": nil, "hasAttachments": len(atts) > 0,
		"chats": []map[string]any{{"originalROWID": 3, "guid": in.ChatGUID, "style": style, "chatIdentifier": ident, "isArchived": false, "displayName": ""}},
	}
	if in.Tapback != 0 {
		data["associatedMessageType"], data["associatedMessageGuid"] = in.Tapback, "p:0/"+in.AssociatedGUID
	}
	if in.ReplyTo != "" {
		data["threadOriginatorGuid"] = in.ReplyTo
	}
	b, _ := json.Marshal(map[string]any{"type": "new-message", "data": data})
	return b, in.GUID
}

// Post posts a webhook body to url (the registered URL, secret included)
// as BlueBubbles does, returning the status and body of the answer.
func Post(ctx context.Context, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}
