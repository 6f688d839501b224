// Package slackfake is a local Slack for tests: the Web API methods the
// gateway uses (auth.test, apps.connections.open, chat.postMessage,
// chat.update, chat.delete, reactions.add, reactions.remove,
// assistant.threads.setStatus, and conversations.history and
// conversations.replies over the bot's own messages, their metadata
// included), a Socket Mode websocket that sends
// events_api and interactive envelopes and waits for envelope acks, the sending side of
// the HTTP Events API (signed requests, retries with X-Slack-Retry-Num),
// and files.slack.com: shared files served to the bot token, the sign-in
// page to anyone else.
package slackfake

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// Fake is one Slack workspace with one app installed.
type Fake struct {
	TeamID    string
	BotUserID string
	BotID     string
	AppID     string
	BotToken  string
	AppToken  string

	srv *httptest.Server

	mu          sync.Mutex
	conns       int
	pending     int  // connections counted whose session is not current yet
	dropPending bool // Drop came while one was pending: close it
	cur         *socket
	connected   chan struct{} // closed and replaced on each new connection
	messages    map[string][]*Message
	lastTS      int64         // the last message's ts, in microseconds
	loseAnswer  bool          // a chat.postMessage's answer is lost (the message is made, the connection closed) …
	loseSkip    int           // … once this many more posts were answered
	historyFail string        // conversations.history and .replies answer this error code; "": they succeed
	reads       []string      // the conversations.history and .replies calls, as "method channel"
	rateLimit   time.Duration // the next chat.postMessage answers 429 with this Retry-After
	rateSkip    int           // posts that go through before rateLimit applies
	rateBare    bool          // the 429 names no Retry-After (as a proxy's may not)
	envelopeSeq atomic.Int64
	fileSeq     atomic.Int64
	files       map[string]hostedFile // file id → file
	downloads   int
	fileGets    []string            // the URLs of the requests for files, in order
	noFilesRead bool                // the bot token lacks files:read
	fileFails   []FileFailure       // the answers of the next file requests, in order, before they are served again
	fileInfos   int                 // files.info calls
	reactions   map[string][]string // channel/ts → the bot's reactions, in order
	reactCalls  int
	reactFail   int                // reactions.* answer this HTTP status (429, 500 …); 0: they succeed
	uploads     map[string]*upload // file id → a file the bot is uploading
	statuses    map[string]string  // channel/thread_ts → the thread's assistant status
	statusCalls []StatusCall
	statusFail  string        // assistant.threads.setStatus answers this error code; "": it succeeds
	statusStall time.Duration // assistant.threads.setStatus answers this late
}

// StatusCall is one assistant.threads.setStatus call, as the bot made it
// (refused ones included); Status "" clears the thread's status.
type StatusCall struct {
	Channel, ThreadTS, Status string
}

// upload is a file the bot uploads (files.getUploadURLExternal, the
// upload, files.completeUploadExternal).
type upload struct {
	name   string
	length int
	data   []byte
}

// SharedFile is a file the bot shared into a channel.
type SharedFile struct {
	ID, Name string
	Data     []byte
}

// hostedFile is a file shared in the workspace.
type hostedFile struct {
	name, mimetype string
	data           []byte
}

// Message is one message the bot posted.
type Message struct {
	Channel  string
	TS       string
	ThreadTS string
	Text     string
	// Blocks are the message's Block Kit blocks as posted (JSON), nil
	// for none; chat.update without blocks, or with blocks=[], takes
	// them off.
	Blocks  json.RawMessage
	Edits   int
	Deleted bool
	// Files are the files the bot shared with the message (an upload's
	// completion; Text is its initial comment).
	Files []SharedFile
	// Metadata is the message's metadata as posted (chat.postMessage's
	// metadata: event_type and event_payload), nil for none. Slack
	// shows it to no one; conversations.history and .replies return it
	// with include_all_metadata. chat.update without metadata keeps it.
	Metadata json.RawMessage
}

// Buttons are the buttons of a message's actions blocks, in order.
func (m Message) Buttons() []Button {
	var blocks []struct {
		Type     string `json:"type"`
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
			Style    string `json:"style"`
			Text     struct {
				Text string `json:"text"`
			} `json:"text"`
		} `json:"elements"`
	}
	_ = json.Unmarshal(m.Blocks, &blocks)
	var out []Button
	for _, b := range blocks {
		if b.Type != "actions" {
			continue
		}
		for _, e := range b.Elements {
			if e.Type == "button" {
				out = append(out, Button{Label: e.Text.Text, ActionID: e.ActionID, Value: e.Value, Style: e.Style})
			}
		}
	}
	return out
}

// Button is one Block Kit button.
type Button struct {
	Label, ActionID, Value, Style string
}

// New starts a fake workspace; it stops when the test ends.
func New(t testing.TB) *Fake {
	f := &Fake{
		TeamID: "T0WORKSPACE", BotUserID: "U0BOT", BotID: "B0BOT", AppID: "A0APP",
		BotToken: "xoxb-test-token", AppToken: "xapp-test-token",
		connected: make(chan struct{}),
		messages:  map[string][]*Message{},
		files:     map[string]hostedFile{},
		reactions: map[string][]string{},
		uploads:   map[string]*upload{},
		statuses:  map[string]string{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/auth.test", f.authTest)
	mux.HandleFunc("/api/apps.connections.open", f.connectionsOpen)
	mux.HandleFunc("/api/chat.postMessage", f.postMessage)
	mux.HandleFunc("/api/chat.update", f.update)
	mux.HandleFunc("/api/chat.delete", f.delete)
	mux.HandleFunc("/api/files.getUploadURLExternal", f.uploadURL)
	mux.HandleFunc("POST /upload/{file}", f.receiveUpload)
	mux.HandleFunc("/api/files.completeUploadExternal", f.completeUpload)
	mux.HandleFunc("/api/files.info", f.fileInfo)
	mux.HandleFunc("/api/reactions.add", f.react)
	mux.HandleFunc("/api/reactions.remove", f.react)
	mux.HandleFunc("/api/assistant.threads.setStatus", f.setStatus)
	mux.HandleFunc("/api/conversations.history", f.history)
	mux.HandleFunc("/api/conversations.replies", f.replies)
	mux.HandleFunc("/link", f.link)
	mux.HandleFunc("GET /files-pri/{file}/{name}", f.file)
	mux.HandleFunc("GET /files-pri/{file}/download/{name}", f.file)
	mux.HandleFunc("GET /{$}", f.signIn)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		f.Drop()
		f.srv.Close()
	})
	return f
}

// APIURL is the Web API base for slack.OptionAPIURL (ends in /api/).
func (f *Fake) APIURL() string { return f.srv.URL + "/api/" }

// Connections counts accepted Socket Mode connections.
func (f *Fake) Connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns
}

// RateLimitNext makes the next chat.postMessage answer 429 with Retry-After.
func (f *Fake) RateLimitNext(d time.Duration) {
	f.mu.Lock()
	f.rateLimit, f.rateSkip, f.rateBare = d, 0, false
	f.mu.Unlock()
}

// RateLimitNextBare makes the next chat.postMessage answer 429 without
// Retry-After: Slack always names the wait, a proxy in front of it may
// not.
func (f *Fake) RateLimitNextBare() {
	f.mu.Lock()
	f.rateLimit, f.rateSkip, f.rateBare = time.Second, 0, true
	f.mu.Unlock()
}

// RateLimitAfter lets the next n chat.postMessage calls through and
// makes the one after them answer 429 with Retry-After.
func (f *Fake) RateLimitAfter(n int, d time.Duration) {
	f.mu.Lock()
	f.rateLimit, f.rateSkip, f.rateBare = d, n, false
	f.mu.Unlock()
}

// Messages returns what the bot posted in channel, oldest first.
func (f *Fake) Messages(channel string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Message, 0, len(f.messages[channel]))
	for _, m := range f.messages[channel] {
		out = append(out, *m)
	}
	return out
}

// AddFile shares data as a file in the workspace and returns it for
// Event.Files, with url_private and url_private_download on the fake as
// files.slack.com has them. They serve the file to the bot token (while it
// has files:read, SetFilesRead); any other request is redirected, as
// Slack does, to the workspace's sign-in page, an HTML page answered 200.
func (f *Fake) AddFile(name, mimetype string, data []byte) File {
	id := fmt.Sprintf("F%08d", f.fileSeq.Add(1))
	f.mu.Lock()
	f.files[id] = hostedFile{name: name, mimetype: mimetype, data: append([]byte(nil), data...)}
	f.mu.Unlock()
	base := f.srv.URL + "/files-pri/" + f.TeamID + "-" + id + "/"
	return File{ID: id, Name: name, Mimetype: mimetype, Size: int64(len(data)),
		URL: base + url.PathEscape(name), DownloadURL: base + "download/" + url.PathEscape(name)}
}

// SetFilesRead grants or takes away the bot token's files:read scope
// (granted at first): without it, file URLs answer the sign-in page.
func (f *Fake) SetFilesRead(ok bool) {
	f.mu.Lock()
	f.noFilesRead = !ok
	f.mu.Unlock()
}

// FileFailure is an answer of files.slack.com other than the file: a
// status (429, 500, 503 …) with the Retry-After it names ("": none),
// or, Cut, the first half of the file, after which the connection drops
// (platformtest.CutFile).
type FileFailure struct {
	Status     int
	RetryAfter string
	Cut        bool
}

// FailFiles makes the next file requests, one each, answer these
// failures in order; the requests after them are served again.
func (f *Fake) FailFiles(fails ...FileFailure) {
	f.mu.Lock()
	f.fileFails = append(f.fileFails, fails...)
	f.mu.Unlock()
}

// Downloads counts requests for files, authorized or not.
func (f *Fake) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads
}

// FileRequests are the URLs (without query) of the requests for files so
// far, authorized or not, in order: a file's url_private and its
// url_private_download are told apart.
func (f *Fake) FileRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.fileGets...)
}

func (f *Fake) file(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.PathValue("file"), f.TeamID+"-")
	f.mu.Lock()
	f.downloads++
	f.fileGets = append(f.fileGets, f.srv.URL+r.URL.EscapedPath())
	file, ok := f.files[id]
	denied := f.noFilesRead || r.Header.Get("Authorization") != "Bearer "+f.BotToken
	var failure *FileFailure
	if len(f.fileFails) > 0 {
		failure = &f.fileFails[0]
		f.fileFails = f.fileFails[1:]
	}
	f.mu.Unlock()
	switch {
	case failure != nil && failure.Cut && ok:
		platformtest.CutFile(w, file.mimetype, file.data)
	case failure != nil && !failure.Cut:
		if failure.RetryAfter != "" {
			w.Header().Set("Retry-After", failure.RetryAfter)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(failure.Status)
		_, _ = io.WriteString(w, http.StatusText(failure.Status))
	case denied:
		http.Redirect(w, r, "/?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
	case !ok || r.PathValue("name") != file.name:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "File not found")
	default:
		w.Header().Set("Content-Type", file.mimetype)
		w.Header().Set("Content-Length", strconv.Itoa(len(file.data)))
		if strings.Contains(r.URL.Path, "/download/") {
			w.Header().Set("Content-Disposition", "attachment; filename=\""+file.name+"\"")
		}
		_, _ = w.Write(file.data)
	}
}

// signIn is the workspace's sign-in page.
func (f *Fake) signIn(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, `<!DOCTYPE html><html lang="en-US"><head><title>Sign in | Slack</title></head>`+
		`<body><form action="/" method="post"><input type="email" name="email"><button>Sign in with email</button></form></body></html>`)
}

func token(r *http.Request) string {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimPrefix(h, "Bearer ")
	}
	return r.FormValue("token")
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code string) {
	reply(w, map[string]any{"ok": false, "error": code})
}

// form parses a Web API call sent as a form or as JSON.
func form(r *http.Request) map[string]string {
	out := map[string]string{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		for k, v := range m {
			if s, ok := v.(string); ok {
				out[k] = s
			}
		}
		return out
	}
	_ = r.ParseForm()
	for k := range r.Form {
		out[k] = r.Form.Get(k)
	}
	return out
}

func (f *Fake) authTest(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	reply(w, map[string]any{"ok": true, "url": "https://fake.slack.test/", "team": "Fake", "user": "bot",
		"team_id": f.TeamID, "user_id": f.BotUserID, "bot_id": f.BotID})
}

func (f *Fake) connectionsOpen(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.AppToken {
		fail(w, "invalid_auth")
		return
	}
	u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/link?ticket=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	reply(w, map[string]any{"ok": true, "url": u})
}

// MaxText is the longest text chat.postMessage and chat.update take:
// Slack refuses a longer one with msg_too_long.
const MaxText = 40000

func (f *Fake) postMessage(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	f.mu.Lock()
	if d := f.rateLimit; d > 0 && f.rateSkip == 0 {
		bare := f.rateBare
		f.rateLimit, f.rateBare = 0, false
		f.mu.Unlock()
		if !bare {
			w.Header().Set("Retry-After", strconv.Itoa(int(d.Seconds())))
		}
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	if f.rateSkip > 0 {
		f.rateSkip--
	}
	defer f.mu.Unlock()
	ch := p["channel"]
	switch {
	case ch == "" || strings.HasPrefix(ch, "Cmissing"):
		fail(w, "channel_not_found")
		return
	case p["text"] == "":
		fail(w, "no_text")
		return
	case utf8.RuneCountInString(p["text"]) > MaxText:
		fail(w, "msg_too_long")
		return
	}
	m := &Message{Channel: ch, ThreadTS: p["thread_ts"], Text: p["text"]}
	if b := p["blocks"]; b != "" && b != "[]" {
		if !validBlocks(b) {
			fail(w, "invalid_blocks")
			return
		}
		m.Blocks = json.RawMessage(b)
	}
	if md := p["metadata"]; md != "" {
		var meta struct {
			EventType    string         `json:"event_type"`
			EventPayload map[string]any `json:"event_payload"`
		}
		if json.Unmarshal([]byte(md), &meta) != nil || meta.EventType == "" || meta.EventPayload == nil {
			fail(w, "invalid_metadata_format")
			return
		}
		m.Metadata = json.RawMessage(md)
	}
	m.TS = f.newTS()
	f.messages[ch] = append(f.messages[ch], m)
	if m.ThreadTS != "" {
		// As Slack, the app's reply in a thread clears the thread's
		// assistant status.
		delete(f.statuses, ch+"/"+m.ThreadTS)
	}
	if f.loseAnswer {
		if f.loseSkip == 0 {
			f.loseAnswer = false
			hangUp(w)
			return
		}
		f.loseSkip--
	}
	ts := m.TS
	reply(w, map[string]any{"ok": true, "channel": ch, "ts": ts, "message": map[string]any{"type": "message", "text": p["text"], "ts": ts, "bot_id": f.BotID}})
}

// newTS is a new message ts, as Slack makes them: the time it was
// made, in seconds with six decimals, later than every earlier one.
// Called with f.mu held.
func (f *Fake) newTS() string {
	us := max(time.Now().UnixMicro(), f.lastTS+1)
	f.lastTS = us
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = c.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

// LosePostAnswerAfter lets the next n chat.postMessage calls that Slack
// carries out be answered and makes the one after them lose its answer:
// the message is made, and the connection closes before the response
// is written, as a connection reset after the request went through.
func (f *Fake) LosePostAnswerAfter(n int) {
	f.mu.Lock()
	f.loseAnswer, f.loseSkip = true, n
	f.mu.Unlock()
}

// FailHistory makes conversations.history and conversations.replies
// answer Slack's error code (missing_scope, as for a token without the
// history scopes; not_in_channel; ratelimited; any other); "" lets
// them succeed again.
func (f *Fake) FailHistory(code string) {
	f.mu.Lock()
	f.historyFail = code
	f.mu.Unlock()
}

// Reads are the conversations.history and conversations.replies calls so
// far, in order, each as "<method> <channel>".
func (f *Fake) Reads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reads...)
}

// readPage is how many messages one history page holds when the call
// names no limit (Slack's default).
const readPage = 100

// read answers conversations.history (thread "": the channel's top
// level, newest first) and conversations.replies (the thread's parent
// and replies, oldest first) over the bot's messages, as Slack does:
// oldest and latest bound the ts (inclusive only with inclusive=1),
// limit and cursor page, and a message's metadata is returned only with
// include_all_metadata=1.
func (f *Fake) read(w http.ResponseWriter, r *http.Request, method string) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := p["channel"]
	f.reads = append(f.reads, method+" "+ch)
	if f.historyFail != "" {
		if f.historyFail == "missing_scope" {
			reply(w, map[string]any{"ok": false, "error": "missing_scope", "needed": "channels:history,groups:history,im:history,mpim:history",
				"provided": "chat:write,reactions:write"})
			return
		}
		fail(w, f.historyFail)
		return
	}
	if ch == "" || strings.HasPrefix(ch, "Cmissing") {
		fail(w, "channel_not_found")
		return
	}
	thread := p["ts"]
	if method == "conversations.replies" && thread == "" {
		fail(w, "invalid_arguments")
		return
	}
	inclusive := p["inclusive"] == "1" || p["inclusive"] == "true"
	within := func(ts string) bool {
		t, err := strconv.ParseFloat(ts, 64)
		if err != nil {
			return false
		}
		if s := p["oldest"]; s != "" {
			o, _ := strconv.ParseFloat(s, 64)
			if t < o || t == o && !inclusive {
				return false
			}
		}
		if s := p["latest"]; s != "" {
			l, _ := strconv.ParseFloat(s, 64)
			if t > l || t == l && !inclusive {
				return false
			}
		}
		return true
	}
	var list []*Message
	found := false
	for _, m := range f.messages[ch] {
		if m.Deleted {
			continue
		}
		var in bool
		if method == "conversations.replies" {
			in = m.TS == thread || m.ThreadTS == thread
			found = found || in
		} else {
			in = m.ThreadTS == "" || m.ThreadTS == m.TS
		}
		if in && within(m.TS) {
			list = append(list, m)
		}
	}
	if method == "conversations.replies" && !found {
		fail(w, "thread_not_found")
		return
	}
	if method == "conversations.history" {
		slices.Reverse(list)
	}
	limit := readPage
	if n, err := strconv.Atoi(p["limit"]); err == nil && n > 0 {
		limit = min(n, 999)
	}
	start := 0
	if c := p["cursor"]; c != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "next:"))
		if err != nil || n < 0 || n > len(list) {
			fail(w, "invalid_cursor")
			return
		}
		start = n
	}
	end := min(start+limit, len(list))
	out := []map[string]any{}
	for _, m := range list[start:end] {
		msg := map[string]any{"type": "message", "ts": m.TS, "text": m.Text, "user": f.BotUserID, "bot_id": f.BotID, "app_id": f.AppID}
		if m.ThreadTS != "" {
			msg["thread_ts"] = m.ThreadTS
		}
		if m.Blocks != nil {
			msg["blocks"] = m.Blocks
		}
		if m.Edits > 0 {
			msg["edited"] = map[string]any{"user": f.BotUserID, "ts": m.TS}
		}
		if m.Metadata != nil && (p["include_all_metadata"] == "1" || p["include_all_metadata"] == "true") {
			msg["metadata"] = m.Metadata
		}
		out = append(out, msg)
	}
	answer := map[string]any{"ok": true, "messages": out, "has_more": end < len(list)}
	if end < len(list) {
		answer["response_metadata"] = map[string]any{"next_cursor": "next:" + strconv.Itoa(end)}
	}
	reply(w, answer)
}

func (f *Fake) history(w http.ResponseWriter, r *http.Request) {
	f.read(w, r, "conversations.history")
}

func (f *Fake) replies(w http.ResponseWriter, r *http.Request) {
	f.read(w, r, "conversations.replies")
}

// Status is the assistant status the thread thread_ts of channel shows
// ("" for none): what assistant.threads.setStatus set last, unless the
// bot replied in the thread since, which clears it as Slack does.
func (f *Fake) Status(channel, threadTS string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[channel+"/"+threadTS]
}

// StatusCalls are the assistant.threads.setStatus calls so far, in order.
func (f *Fake) StatusCalls() []StatusCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]StatusCall(nil), f.statusCalls...)
}

// FailStatus makes assistant.threads.setStatus answer Slack's error code
// (missing_scope, as for a token without chat:write or assistant:write;
// invalid_thread_ts, a thread Slack does not take; any other); "" lets
// it succeed again.
func (f *Fake) FailStatus(code string) {
	f.mu.Lock()
	f.statusFail = code
	f.mu.Unlock()
}

// StallStatus makes assistant.threads.setStatus answer only after d (or
// once its caller gave up), as a Slack that hangs on it; 0 answers at once.
func (f *Fake) StallStatus(d time.Duration) {
	f.mu.Lock()
	f.statusStall = d
	f.mu.Unlock()
}

// setStatus is assistant.threads.setStatus: channel_id and thread_ts name
// the thread, status is shown beside the app's name there, and an empty
// status clears it.
func (f *Fake) setStatus(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	ch, thread, status := p["channel_id"], p["thread_ts"], p["status"]
	f.mu.Lock()
	f.statusCalls = append(f.statusCalls, StatusCall{Channel: ch, ThreadTS: thread, Status: status})
	stall := f.statusStall
	f.mu.Unlock()
	if stall > 0 {
		t := time.NewTimer(stall)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.statusFail == "missing_scope":
		reply(w, map[string]any{"ok": false, "error": "missing_scope", "needed": "assistant:write", "provided": "chat:write"})
		return
	case f.statusFail != "":
		fail(w, f.statusFail)
		return
	case ch == "" || thread == "":
		fail(w, "invalid_arguments")
		return
	case strings.HasPrefix(ch, "Cmissing"):
		fail(w, "channel_not_found")
		return
	}
	if status == "" {
		delete(f.statuses, ch+"/"+thread)
	} else {
		f.statuses[ch+"/"+thread] = status
	}
	reply(w, map[string]any{"ok": true})
}

// uploadURL answers files.getUploadURLExternal: a file id and the URL
// to post the file's bytes to.
func (f *Fake) uploadURL(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	n, err := strconv.Atoi(p["length"])
	if p["filename"] == "" || err != nil || n <= 0 {
		fail(w, "invalid_arguments")
		return
	}
	id := fmt.Sprintf("F0UP%04d", f.fileSeq.Add(1))
	f.mu.Lock()
	f.uploads[id] = &upload{name: p["filename"], length: n}
	f.mu.Unlock()
	reply(w, map[string]any{"ok": true, "upload_url": f.srv.URL + "/upload/" + id, "file_id": id})
}

// receiveUpload takes a file's bytes (multipart, field "file", or the
// raw body), as Slack's upload URL does.
func (f *Fake) receiveUpload(w http.ResponseWriter, r *http.Request) {
	var data []byte
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		file, _, err := r.FormFile("file")
		if err != nil {
			http.Error(w, "no file", http.StatusBadRequest)
			return
		}
		defer file.Close()
		data, _ = io.ReadAll(file)
	} else {
		data, _ = io.ReadAll(r.Body)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.uploads[r.PathValue("file")]
	if u == nil {
		http.Error(w, "unknown upload", http.StatusNotFound)
		return
	}
	u.data = data
	_, _ = io.WriteString(w, "OK - "+strconv.Itoa(len(data)))
}

// completeUpload answers files.completeUploadExternal: the uploaded
// files are shared into channel_id (and thread_ts) as one message.
func (f *Fake) completeUpload(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	var files []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(p["files"]), &files); err != nil || len(files) == 0 {
		fail(w, "invalid_arguments")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := p["channel_id"]
	if strings.HasPrefix(ch, "Cmissing") {
		fail(w, "channel_not_found")
		return
	}
	var shared []SharedFile
	var out []map[string]any
	for _, fl := range files {
		u := f.uploads[fl.ID]
		if u == nil || len(u.data) != u.length {
			fail(w, "file_upload_not_found")
			return
		}
		delete(f.uploads, fl.ID)
		shared = append(shared, SharedFile{ID: fl.ID, Name: u.name, Data: u.data})
		out = append(out, map[string]any{"id": fl.ID, "title": fl.Title})
	}
	if ch != "" {
		f.messages[ch] = append(f.messages[ch], &Message{Channel: ch, TS: f.newTS(), ThreadTS: p["thread_ts"], Text: p["initial_comment"], Files: shared})
	}
	reply(w, map[string]any{"ok": true, "files": out})
}

func (f *Fake) find(ch, ts string) *Message {
	for _, m := range f.messages[ch] {
		if m.TS == ts && !m.Deleted {
			return m
		}
	}
	return nil
}

// MaxSectionText is the longest text a section block takes: Slack
// refuses a message with a longer one (invalid_blocks).
const MaxSectionText = 3000

// validBlocks reports whether Slack takes blocks: JSON, each section's
// text at most MaxSectionText characters.
func validBlocks(b string) bool {
	var blocks []struct {
		Type string `json:"type"`
		Text *struct {
			Text string `json:"text"`
		} `json:"text"`
	}
	if json.Unmarshal([]byte(b), &blocks) != nil {
		return false
	}
	for _, bl := range blocks {
		if bl.Type == "section" && bl.Text != nil && utf8.RuneCountInString(bl.Text.Text) > MaxSectionText {
			return false
		}
	}
	return true
}

func (f *Fake) update(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(p["channel"], p["ts"])
	if m == nil {
		fail(w, "message_not_found")
		return
	}
	if utf8.RuneCountInString(p["text"]) > MaxText {
		fail(w, "msg_too_long")
		return
	}
	if b := p["blocks"]; b != "" && b != "[]" && !validBlocks(b) {
		fail(w, "invalid_blocks")
		return
	}
	m.Text = p["text"]
	m.Blocks = nil
	if b := p["blocks"]; b != "" && b != "[]" {
		m.Blocks = json.RawMessage(b)
	}
	m.Edits++
	reply(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS, "text": m.Text})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(p["channel"], p["ts"])
	if m == nil {
		fail(w, "message_not_found")
		return
	}
	m.Deleted = true
	reply(w, map[string]any{"ok": true, "channel": m.Channel, "ts": m.TS})
}

// Reactions returns the bot's reactions on the message ts of channel (by
// name, without colons), in the order added.
func (f *Fake) Reactions(channel, ts string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reactions[channel+"/"+ts]...)
}

// ReactionCalls counts reactions.add and reactions.remove calls, failed
// ones included.
func (f *Fake) ReactionCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reactCalls
}

// FailReactions makes reactions.add and reactions.remove answer this HTTP
// status (429 with Retry-After, or 500 …); 0 lets them succeed again.
func (f *Fake) FailReactions(status int) {
	f.mu.Lock()
	f.reactFail = status
	f.mu.Unlock()
}

// react is reactions.add and reactions.remove, with Slack's answers for
// a reaction already there (already_reacted) and one that is not
// (no_reaction).
func (f *Fake) react(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	p := form(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reactCalls++
	switch f.reactFail {
	case 0:
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	default:
		w.WriteHeader(f.reactFail)
		return
	}
	ch, ts, name := p["channel"], p["timestamp"], p["name"]
	switch {
	case ch == "" || strings.HasPrefix(ch, "Cmissing"):
		fail(w, "channel_not_found")
		return
	case ts == "":
		fail(w, "no_item_specified")
		return
	case name == "":
		fail(w, "invalid_name")
		return
	}
	k := ch + "/" + ts
	have := slices.Contains(f.reactions[k], name)
	switch {
	case strings.HasSuffix(r.URL.Path, ".add") && have:
		fail(w, "already_reacted")
		return
	case strings.HasSuffix(r.URL.Path, ".add"):
		f.reactions[k] = append(f.reactions[k], name)
	case !have:
		fail(w, "no_reaction")
		return
	default:
		f.reactions[k] = slices.DeleteFunc(f.reactions[k], func(e string) bool { return e == name })
	}
	reply(w, map[string]any{"ok": true})
}

// socket is one Socket Mode connection.
type socket struct {
	c    *websocket.Conn
	mu   sync.Mutex
	acks map[string]chan struct{}
	done chan struct{}
}

func (f *Fake) link(w http.ResponseWriter, r *http.Request) {
	// The connection is counted before the handshake's answer goes out:
	// slack-go reports it connected (socketmode's EventTypeConnected, on
	// which the gateway says it is up) as soon as its dial returns,
	// before the hello, so a count read then must already see it.
	f.mu.Lock()
	f.conns++
	f.pending++
	f.mu.Unlock()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: []string{"api.slack.com"}})
	if err != nil {
		f.mu.Lock()
		f.conns--
		f.pending--
		f.mu.Unlock()
		return
	}
	c.SetReadLimit(1 << 20)
	s := &socket{c: c, acks: map[string]chan struct{}{}, done: make(chan struct{})}
	ctx := r.Context()
	hello := map[string]any{"type": "hello", "num_connections": 1,
		"debug_info":      map[string]any{"host": "fake", "approximate_connection_time": 3600},
		"connection_info": map[string]any{"app_id": f.AppID}}
	data, _ := json.Marshal(hello)
	// The session is made current before its hello goes out, and the
	// hello is written under the lock: a Drop after the client saw the
	// hello must find this session, while a Push waits for the hello to
	// be out before writing its envelope.
	f.mu.Lock()
	f.pending--
	if f.dropPending && f.pending == 0 {
		// Dropped before it was current (see Drop).
		f.dropPending = false
		f.mu.Unlock()
		_ = c.CloseNow()
		return
	}
	if f.cur != nil {
		_ = f.cur.c.Close(websocket.StatusGoingAway, "replaced")
	}
	f.cur = s
	err = c.Write(ctx, websocket.MessageText, data)
	if err == nil {
		close(f.connected)
		f.connected = make(chan struct{})
	}
	f.mu.Unlock()
	defer func() {
		close(s.done)
		f.mu.Lock()
		if f.cur == s {
			f.cur = nil
		}
		f.mu.Unlock()
	}()
	if err != nil {
		return
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		if ch, ok := s.acks[ack.EnvelopeID]; ok {
			close(ch)
			delete(s.acks, ack.EnvelopeID)
		}
		s.mu.Unlock()
	}
}

// Drop closes the current Socket Mode connection from Slack's side.
func (f *Fake) Drop() {
	f.mu.Lock()
	s := f.cur
	f.cur = nil
	if s == nil && f.pending > 0 {
		// A connection the client already took for up (its dial
		// returned) is not current yet: it is closed once it would be.
		f.dropPending = true
	}
	f.mu.Unlock()
	if s != nil {
		_ = s.c.CloseNow()
	}
}

// ErrNotAcked means the connection closed before the envelope was acked.
var ErrNotAcked = errors.New("envelope not acknowledged")

// Push sends one events_api envelope carrying payload (an event_callback)
// over the current Socket Mode connection, waiting for one if there is
// none, and returns once the app acked it.
func (f *Fake) Push(ctx context.Context, payload []byte, retryAttempt int) error {
	return f.PushRaw(ctx, func(envelopeID string) []byte {
		env := map[string]any{
			"envelope_id": envelopeID, "type": "events_api", "accepts_response_payload": false,
			"retry_attempt": retryAttempt, "retry_reason": "", "payload": json.RawMessage(payload),
		}
		if retryAttempt > 0 {
			env["retry_reason"] = "timeout"
		}
		data, _ := json.Marshal(env)
		return data
	})
}

// PushRaw sends the frame build returns (given a fresh envelope id) and
// waits for the ack of that envelope id.
func (f *Fake) PushRaw(ctx context.Context, build func(envelopeID string) []byte) error {
	for {
		f.mu.Lock()
		s, wait := f.cur, f.connected
		f.mu.Unlock()
		if s == nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		id := fmt.Sprintf("env-%d", f.envelopeSeq.Add(1))
		ch := make(chan struct{})
		s.mu.Lock()
		s.acks[id] = ch
		s.mu.Unlock()
		if err := s.c.Write(ctx, websocket.MessageText, build(id)); err != nil {
			return fmt.Errorf("write envelope: %w", err)
		}
		select {
		case <-ch:
			return nil
		case <-s.done:
			return ErrNotAcked
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Press is a user pressing the button whose value is value on the
// message ts of channel, as Slack delivers it in Socket Mode: a
// block_actions payload in an interactive envelope. It returns the
// payload (to push it again with PushInteractive) once the app acked
// it, or an error when the message is not there or has no such button.
func (f *Fake) Press(ctx context.Context, channel, ts, user, userName, value string) ([]byte, error) {
	f.mu.Lock()
	m := f.find(channel, ts)
	var msg Message
	if m != nil {
		msg = *m
	}
	actionTS := f.newTS()
	f.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("no message %s in %s", ts, channel)
	}
	var button *Button
	for _, b := range msg.Buttons() {
		if b.Value == value {
			button = &b
			break
		}
	}
	if button == nil {
		return nil, fmt.Errorf("message %s has no button with value %q", ts, value)
	}
	container := map[string]any{"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": false}
	message := map[string]any{"type": "message", "ts": ts, "text": msg.Text, "bot_id": f.BotID, "blocks": msg.Blocks}
	if msg.ThreadTS != "" {
		container["thread_ts"] = msg.ThreadTS
		message["thread_ts"] = msg.ThreadTS
	}
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "api_app_id": f.AppID, "token": "verification-token",
		"trigger_id":   actionTS + ".trigger",
		"team":         map[string]any{"id": f.TeamID, "domain": "fake"},
		"user":         map[string]any{"id": user, "username": userName, "name": userName, "team_id": f.TeamID},
		"channel":      map[string]any{"id": channel, "name": "channel"},
		"container":    container,
		"message":      message,
		"response_url": f.srv.URL + "/actions/" + actionTS,
		"actions": []map[string]any{{"type": "button", "action_id": button.ActionID, "block_id": "approval",
			"text": map[string]any{"type": "plain_text", "text": button.Label}, "value": button.Value, "action_ts": actionTS}},
	})
	return payload, f.PushInteractive(ctx, payload, 0)
}

// PushInteractive sends payload (an interactive payload such as
// block_actions) in an interactive envelope and returns once the app
// acked it.
func (f *Fake) PushInteractive(ctx context.Context, payload []byte, retryAttempt int) error {
	return f.PushRaw(ctx, func(envelopeID string) []byte {
		data, _ := json.Marshal(map[string]any{
			"envelope_id": envelopeID, "type": "interactive", "accepts_response_payload": false,
			"retry_attempt": retryAttempt, "payload": json.RawMessage(payload),
		})
		return data
	})
}

// Sign returns the X-Slack-Signature of body at timestamp ts.
func Sign(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// PostEvent delivers an Events API request to url the way Slack does:
// signed with secret at time at, with X-Slack-Retry-Num when retry > 0.
// It returns the status code and body of the answer.
func PostEvent(ctx context.Context, url, secret string, body []byte, retry int, at time.Time) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	ts := at.Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Slack-Signature", Sign(secret, ts, body))
	if retry > 0 {
		req.Header.Set("X-Slack-Retry-Num", strconv.Itoa(retry))
		req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data, nil
}

// Event is a Slack message event, the inner part of an event_callback.
type Event struct {
	Type        string // message (default) or app_mention
	Subtype     string
	Channel     string
	ChannelType string // im, mpim, channel, group
	User        string
	BotID       string
	Text        string
	TS          string
	ThreadTS    string
	Files       []File
	// Blocks and Attachments, when set, are the event's blocks and
	// attachments as Slack sends them (a forwarded message's
	// attachment, a rich text message's blocks).
	Blocks, Attachments json.RawMessage
}

// File is a file shared with a message (AddFile hosts one).
type File struct {
	ID, Name, Mimetype string
	URL                string // url_private
	DownloadURL        string // url_private_download
	Size               int64
	// Connect: the event carries the stub Slack sends for a file shared
	// in a Slack Connect channel (its id and file_access:
	// check_file_info, nothing else); files.info has the rest.
	Connect bool
}

// FileInfos counts files.info calls.
func (f *Fake) FileInfos() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fileInfos
}

// fileInfo is files.info: a hosted file's object, with its URLs, to the
// bot token with files:read; file_not_found for any other id.
func (f *Fake) fileInfo(w http.ResponseWriter, r *http.Request) {
	if token(r) != f.BotToken {
		fail(w, "invalid_auth")
		return
	}
	id := r.FormValue("file")
	f.mu.Lock()
	f.fileInfos++
	file, ok := f.files[id]
	denied := f.noFilesRead
	f.mu.Unlock()
	switch {
	case denied:
		reply(w, map[string]any{"ok": false, "error": "missing_scope", "needed": "files:read", "provided": "chat:write"})
		return
	case !ok:
		fail(w, "file_not_found")
		return
	}
	base := f.srv.URL + "/files-pri/" + f.TeamID + "-" + id + "/"
	reply(w, map[string]any{"ok": true, "file": map[string]any{"id": id, "name": file.name, "title": file.name, "mimetype": file.mimetype,
		"size": len(file.data), "mode": "hosted", "is_external": false, "url_private": base + url.PathEscape(file.name),
		"url_private_download": base + "download/" + url.PathEscape(file.name)}})
}

// Callback wraps ev in an event_callback with eventID, as Slack sends it.
func (f *Fake) Callback(eventID string, ev Event) []byte {
	typ := ev.Type
	if typ == "" {
		typ = "message"
	}
	inner := map[string]any{"type": typ, "channel": ev.Channel, "text": ev.Text, "ts": ev.TS, "event_ts": ev.TS, "team": f.TeamID}
	if typ == "message" {
		inner["channel_type"] = ev.ChannelType
	}
	if ev.User != "" {
		inner["user"] = ev.User
	}
	if ev.BotID != "" {
		inner["bot_id"] = ev.BotID
	}
	if ev.Subtype != "" {
		inner["subtype"] = ev.Subtype
	}
	if ev.ThreadTS != "" {
		inner["thread_ts"] = ev.ThreadTS
	}
	if ev.Blocks != nil {
		inner["blocks"] = ev.Blocks
	}
	if ev.Attachments != nil {
		inner["attachments"] = ev.Attachments
	}
	if len(ev.Files) > 0 {
		files := make([]map[string]any, 0, len(ev.Files))
		for _, fl := range ev.Files {
			if fl.Connect {
				files = append(files, map[string]any{"id": fl.ID, "mode": "file_access", "file_access": "check_file_info",
					"created": 0, "timestamp": 0, "user": ""})
				continue
			}
			file := map[string]any{"id": fl.ID, "name": fl.Name, "title": fl.Name, "mimetype": fl.Mimetype, "url_private": fl.URL,
				"size": fl.Size, "mode": "hosted", "is_external": false}
			if fl.DownloadURL != "" {
				file["url_private_download"] = fl.DownloadURL
			}
			files = append(files, file)
		}
		inner["files"] = files
	}
	out := map[string]any{
		"token": "verification-token", "team_id": f.TeamID, "api_app_id": f.AppID, "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": inner,
		"authorizations": []map[string]any{{"team_id": f.TeamID, "user_id": f.BotUserID, "is_bot": true}},
	}
	data, _ := json.Marshal(out)
	return data
}
