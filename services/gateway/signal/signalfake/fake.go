// Package signalfake is a fake signal-cli daemon in HTTP mode (`signal-cli
// daemon --http`) for tests: JSON-RPC 2.0 at POST /api/v1/rpc (send,
// sendTyping, sendReaction, getAttachment, receive, with signal-cli's
// answers and error shapes), received messages as Server-Sent Events at
// GET /api/v1/events (keepalive comments; with SetReplay, as a proposed
// signal-cli change does, event ids "<start>-<sequence>" and the last
// 1000 events replayed after a Last-Event-ID), and GET /api/v1/check.
// With SetReceiveMode(Manual) it is a daemon started with
// --receive-mode=manual: messages wait (as on Signal's servers) until a
// receive call or an event stream takes them. Tests push envelopes,
// inject JSON-RPC errors, drop the event streams and receive calls and
// read what the gateway sent.
package signalfake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxEvents is how many events signal-cli keeps for reconnecting clients.
const maxEvents = 1000

// Contact is a Signal user.
type Contact struct {
	Number, UUID, Name string
}

// Mention mentions a contact at a UTF-16 position of the text (where the
// text has U+FFFC).
type Mention struct {
	Contact       Contact
	Start, Length int
}

// Attachment of a received message.
type Attachment struct {
	ID, ContentType, Filename string
	Size                      int64
}

// Quote is the message a received one replies to.
type Quote struct {
	ID     int64
	Author Contact
	Text   string
}

// Message is a message a contact sends to the account.
type Message struct {
	From        Contact
	Text        string
	GroupID     string
	GroupName   string
	Mentions    []Mention
	Attachments []Attachment
	Quote       *Quote
	// Timestamp, 0: the fake's next one.
	Timestamp int64
}

// Call is one JSON-RPC request the fake answered.
type Call struct {
	Method string
	Params map[string]any
}

// RPCError is a JSON-RPC error answer.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// ReceiveMode is signal-cli's daemon --receive-mode.
type ReceiveMode string

const (
	// OnStart, signal-cli's default: the daemon receives from the start
	// and hands each message to the event streams open at the time; a
	// receive call is refused.
	OnStart ReceiveMode = "on-start"
	// Manual: the daemon receives only during a receive call, or while
	// an event stream is open (which then refuses receive calls);
	// meanwhile messages wait on Signal's servers.
	Manual ReceiveMode = "manual"
)

// AlreadyReceiving is signal-cli's answer to a receive call while it
// receives on its own (not in manual mode, or an event stream is open)
// or for another call.
func AlreadyReceiving() *RPCError {
	return &RPCError{Code: -1, Message: "Receive command cannot be used if messages are already being received."}
}

// Sent is a message the account sent.
type Sent struct {
	// Chat is the recipient, or "group:<id>".
	Chat        string
	Text        string
	Timestamp   int64
	Styles      []string
	Attachments []string
	// QuoteTimestamp and QuoteAuthor of a reply that quotes.
	QuoteTimestamp int64
	QuoteAuthor    string
}

type event struct {
	seq  int64
	data string
}

// Fake is the daemon.
type Fake struct {
	// URL is the daemon's base URL (SIGNAL_HTTP_URL).
	URL string
	// Account is the account's number (SIGNAL_ACCOUNT).
	Account string
	srv     *httptest.Server

	mu          sync.Mutex
	prefix      string
	seq         int64
	events      []event
	clients     map[*client]struct{}
	connections int
	lastEventID []string
	calls       []Call
	fail        map[string][]*RPCError
	holds       map[string][]chan struct{}
	closing     chan struct{} // closed by Close: held calls go on
	closeOnce   sync.Once
	sent        []Sent
	reactions   map[string]string
	attachments map[string][]byte
	clock       int64
	keepalive   time.Duration
	keepalives  int // keepalive comments written
	replay      bool

	mode    ReceiveMode
	pending []event       // manual mode: waiting on Signal's servers
	wake    chan struct{} // closed when a message arrives
	dropped chan struct{} // closed by Drop: receive calls in flight fail
	polls   int           // receive calls taken
	checks  int           // GET /api/v1/check calls: one per gateway connection
	polling int           // receive calls in flight
	lost    []string      // messages a receive call took and answered nobody
}

type client struct {
	ch     chan event
	closed chan struct{}
	once   sync.Once
}

func (c *client) close() { c.once.Do(func() { close(c.closed) }) }

// New starts a fake daemon for account.
func New(account string) *Fake {
	f := &Fake{
		Account: account, prefix: strconv.FormatInt(time.Now().UnixMilli(), 10) + "-",
		clients: map[*client]struct{}{}, fail: map[string][]*RPCError{}, holds: map[string][]chan struct{}{}, closing: make(chan struct{}), reactions: map[string]string{},
		attachments: map[string][]byte{}, clock: time.Now().UnixMilli(), keepalive: 15 * time.Second,
		mode: OnStart, wake: make(chan struct{}), dropped: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/rpc", f.rpc)
	mux.HandleFunc("/api/v1/events", f.stream)
	mux.HandleFunc("/api/v1/check", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		f.mu.Lock()
		f.checks++
		f.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	f.srv = httptest.NewServer(mux)
	f.URL = f.srv.URL
	return f
}

// Close drops the streams and stops the server.
func (f *Fake) Close() {
	f.closeOnce.Do(func() { close(f.closing) })
	f.Drop()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// SetKeepalive sets how often an idle stream gets a keepalive comment
// (signal-cli: 15 s).
func (f *Fake) SetKeepalive(d time.Duration) {
	f.mu.Lock()
	f.keepalive = d
	f.mu.Unlock()
}

// Keepalives counts the keepalive comments written to streams so far.
func (f *Fake) Keepalives() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keepalives
}

// SetReplay numbers the events and replays the kept ones after a
// Last-Event-ID, as a proposed signal-cli change does. Off (the default,
// as signal-cli 0.14.6), events carry no id and a new stream gets only
// new events.
func (f *Fake) SetReplay(on bool) {
	f.mu.Lock()
	f.replay = on
	f.mu.Unlock()
}

// SetReceiveMode sets the daemon's --receive-mode (default OnStart).
func (f *Fake) SetReceiveMode(m ReceiveMode) {
	f.mu.Lock()
	f.mode = m
	f.mu.Unlock()
}

// Checks counts GET /api/v1/check calls: the gateway makes one as it
// connects.
func (f *Fake) Checks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checks
}

// Polls counts the receive calls taken so far.
func (f *Fake) Polls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

// Polling counts the receive calls in flight now.
func (f *Fake) Polling() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polling
}

// Pending counts the messages waiting for a receive call (manual mode).
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// Lost returns the messages a receive call took (acknowledged to Signal)
// and answered to nobody: its caller had gone, or Drop broke it.
func (f *Fake) Lost() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lost...)
}

// Now returns a new message timestamp (milliseconds, each one unique).
func (f *Fake) Now() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tick()
}

func (f *Fake) tick() int64 {
	f.clock++
	return f.clock
}

// PushRaw sends one event with data as it is; it returns the event id.
func (f *Fake) PushRaw(data string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	ev := event{seq: f.seq, data: data}
	if f.mode == Manual && len(f.clients) == 0 {
		// Nobody receives: the message waits on Signal's servers.
		f.pending = append(f.pending, ev)
		close(f.wake)
		f.wake = make(chan struct{})
		return f.prefix + strconv.FormatInt(ev.seq, 10)
	}
	f.events = append(f.events, ev)
	if len(f.events) > maxEvents {
		f.events = f.events[1:]
	}
	for c := range f.clients {
		select {
		case c.ch <- ev:
		default:
			c.close() // too slow: signal-cli drops the client too
		}
	}
	return f.prefix + strconv.FormatInt(ev.seq, 10)
}

// Push sends a receive notification ({"envelope": …, "account": …}).
func (f *Fake) Push(notification map[string]any) string {
	b, err := json.Marshal(notification)
	if err != nil {
		panic(err)
	}
	return f.PushRaw(string(b))
}

// Receive makes a contact's message arrive; it returns the message's
// timestamp.
func (f *Fake) Receive(m Message) int64 {
	n, ts := f.Envelope(m)
	f.Push(n)
	return ts
}

// Envelope builds the notification of m as signal-cli writes it, for a
// test that changes it before Push.
func (f *Fake) Envelope(m Message) (map[string]any, int64) {
	ts := m.Timestamp
	if ts == 0 {
		ts = f.Now()
	}
	data := map[string]any{"timestamp": ts, "message": nullable(m.Text), "expiresInSeconds": 0, "viewOnce": false}
	if m.GroupID != "" {
		data["groupInfo"] = map[string]any{"groupId": m.GroupID, "groupName": m.GroupName, "revision": 3, "type": "DELIVER"}
	}
	var mentions []map[string]any
	for _, x := range m.Mentions {
		mentions = append(mentions, map[string]any{"name": x.Contact.Name, "number": nullable(x.Contact.Number),
			"uuid": x.Contact.UUID, "start": x.Start, "length": x.Length})
	}
	if mentions != nil {
		data["mentions"] = mentions
	}
	var atts []map[string]any
	for _, a := range m.Attachments {
		atts = append(atts, map[string]any{"contentType": a.ContentType, "filename": nullable(a.Filename), "id": a.ID,
			"size": a.Size, "width": nil, "height": nil, "caption": nil, "uploadTimestamp": ts})
	}
	if atts != nil {
		data["attachments"] = atts
	}
	if q := m.Quote; q != nil {
		data["quote"] = map[string]any{"id": q.ID, "author": firstOf(q.Author.Number, q.Author.UUID),
			"authorNumber": nullable(q.Author.Number), "authorUuid": q.Author.UUID, "text": q.Text, "attachments": []any{}}
	}
	env := map[string]any{
		"source": firstOf(m.From.Number, m.From.UUID), "sourceNumber": nullable(m.From.Number), "sourceUuid": m.From.UUID,
		"sourceName": m.From.Name, "sourceDevice": 1, "timestamp": ts, "serverReceivedTimestamp": ts + 40,
		"serverDeliveredTimestamp": ts + 41, "dataMessage": data,
	}
	return map[string]any{"envelope": env, "account": f.Account}, ts
}

// NoteToSelf makes the account's owner write to themselves from their
// phone: a sync transcript with the account as destination.
func (f *Fake) NoteToSelf(self Contact, text string, ts int64) map[string]any {
	if ts == 0 {
		ts = f.Now()
	}
	return map[string]any{"account": f.Account, "envelope": map[string]any{
		"source": f.Account, "sourceNumber": f.Account, "sourceUuid": self.UUID, "sourceName": self.Name, "sourceDevice": 1,
		"timestamp": ts, "serverReceivedTimestamp": ts, "serverDeliveredTimestamp": ts,
		"syncMessage": map[string]any{"sentMessage": map[string]any{
			"destination": f.Account, "destinationNumber": f.Account, "destinationUuid": self.UUID,
			"timestamp": ts, "message": text, "expiresInSeconds": 0, "viewOnce": false,
		}},
	}}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// Drop closes every event stream from the daemon's side and breaks the
// receive calls in flight (their connections close without an answer).
func (f *Fake) Drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.clients {
		c.close()
	}
	close(f.dropped)
	f.dropped = make(chan struct{})
}

// Connections counts the event streams opened so far.
func (f *Fake) Connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connections
}

// Connected counts the event streams open now.
func (f *Fake) Connected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}

// LastEventIDs are the Last-Event-ID headers of the streams opened so
// far ("" for none).
func (f *Fake) LastEventIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lastEventID...)
}

// FailNext makes the next call of method answer err (queued in order).
func (f *Fake) FailNext(method string, err *RPCError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = append(f.fail[method], err)
}

// HoldNext makes the next call of method wait, before the daemon does
// anything, until release is called, as signal-cli busy with a slow
// send does. The call then goes on and answers whether or not its
// caller still waits: signal-cli does not stop a send whose client went
// away.
func (f *Fake) HoldNext(method string) (release func()) {
	h := make(chan struct{})
	f.mu.Lock()
	f.holds[method] = append(f.holds[method], h)
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(h) }) }
}

// RateLimited is signal-cli's answer to a send Signal refused for rate
// limiting (0.14.3 and later): code -5 with each recipient's result.
func RateLimited(recipient string, retryAfterSeconds int) *RPCError {
	return &RPCError{Code: -5, Message: "Failed to send message due to rate limiting", Data: map[string]any{"response": map[string]any{
		"timestamp": time.Now().UnixMilli(), "results": []any{map[string]any{
			"recipientAddress": map[string]any{"number": recipient}, "type": "RATE_LIMIT_FAILURE", "retryAfterSeconds": retryAfterSeconds}},
	}}}
}

// ProofRequired is the answer when Signal wants a captcha before more
// sends: a rate-limit failure carrying a challenge token.
func ProofRequired(recipient string, retryAfterSeconds int) *RPCError {
	return &RPCError{Code: -5, Message: "Failed to send message due to rate limiting", Data: map[string]any{"response": map[string]any{
		"timestamp": time.Now().UnixMilli(), "results": []any{map[string]any{
			"recipientAddress": map[string]any{"number": recipient}, "type": "RATE_LIMIT_FAILURE", "token": "challenge-token",
			"retryAfterSeconds": retryAfterSeconds}},
	}}}
}

// Unregistered is the answer to a send to a number not on Signal.
func Unregistered(recipient string) *RPCError {
	return &RPCError{Code: -1, Message: "Failed to send message", Data: map[string]any{"response": map[string]any{
		"timestamp": time.Now().UnixMilli(), "results": []any{map[string]any{
			"recipientAddress": map[string]any{"number": recipient}, "type": "UNREGISTERED_FAILURE"}},
	}}}
}

// NetworkFailure is the answer when Signal's servers could not be reached.
func NetworkFailure(recipient string) *RPCError {
	return &RPCError{Code: -1, Message: "Failed to send message", Data: map[string]any{"response": map[string]any{
		"timestamp": time.Now().UnixMilli(), "results": []any{map[string]any{
			"recipientAddress": map[string]any{"number": recipient}, "type": "NETWORK_FAILURE"}},
	}}}
}

// Calls returns the calls of method so far ("" for all).
func (f *Fake) Calls(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Sent returns the messages the account sent to chat (a number, or
// "group:<id>"), in order.
func (f *Fake) Sent(chat string) []Sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Sent
	for _, s := range f.sent {
		if s.Chat == chat {
			out = append(out, s)
		}
	}
	return out
}

// Reactions returns the account's reaction on a message (author and
// timestamp) in chat: none or one, as Signal keeps one per person.
func (f *Fake) Reactions(chat, author string, ts int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.reactions[reactionKey(chat, author, ts)]; ok {
		return []string{e}
	}
	return nil
}

func reactionKey(chat, author string, ts int64) string {
	return chat + "|" + author + ":" + strconv.FormatInt(ts, 10)
}

// AddAttachment stores a received attachment's bytes under its id.
func (f *Fake) AddAttachment(id string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attachments[id] = data
}

func (f *Fake) stream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if a := r.URL.Query().Get("account"); a != "" && a != f.Account {
		w.WriteHeader(http.StatusBadRequest) // multi-account mode: no such account
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	c := &client{ch: make(chan event, maxEvents+16), closed: make(chan struct{})}
	last := r.Header.Get("Last-Event-ID")
	f.mu.Lock()
	f.connections++
	// A stream starts the daemon receiving, in manual mode too: what
	// waited on Signal's servers comes first.
	for _, ev := range f.pending {
		f.events = append(f.events, ev)
		if len(f.events) > maxEvents {
			f.events = f.events[1:]
		}
		if len(c.ch) < cap(c.ch) {
			c.ch <- ev
		}
	}
	f.pending = nil
	f.lastEventID = append(f.lastEventID, last)
	replay := f.replay
	if _, has := r.Header["Last-Event-Id"]; has && replay {
		after := int64(0)
		if rest, ok := strings.CutPrefix(last, f.prefix); ok {
			after, _ = strconv.ParseInt(rest, 10, 64)
		}
		for _, ev := range f.events {
			if ev.seq > after {
				c.ch <- ev
			}
		}
	}
	f.clients[c] = struct{}{}
	keepalive := f.keepalive
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.clients, c)
		f.mu.Unlock()
	}()

	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.closed:
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ":\n"); err != nil {
				return
			}
			fl.Flush()
			f.mu.Lock()
			f.keepalives++
			f.mu.Unlock()
		case ev := <-c.ch:
			id := ""
			if replay {
				id = "id:" + f.prefix + strconv.FormatInt(ev.seq, 10) + "\n"
			}
			if _, err := fmt.Fprintf(w, "%sevent:receive\ndata:%s\n\n", id, ev.data); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

type request struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	ID      json.RawMessage `json:"id"`
}

func (f *Fake) rpc(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		w.WriteHeader(http.StatusUnsupportedMediaType)
		return
	}
	var req request
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&req); err != nil {
		answer(w, nil, nil, &RPCError{Code: -32700, Message: "Parse error"})
		return
	}
	if req.Method == "" {
		answer(w, req.ID, nil, &RPCError{Code: -32600, Message: "method field must be set"})
		return
	}
	params := map[string]any{}
	if len(req.Params) > 0 {
		d := json.NewDecoder(strings.NewReader(string(req.Params)))
		d.UseNumber()
		if err := d.Decode(&params); err != nil {
			answer(w, req.ID, nil, &RPCError{Code: -32602, Message: "params must be an object"})
			return
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, Call{Method: req.Method, Params: params})
	var injected *RPCError
	if q := f.fail[req.Method]; len(q) > 0 {
		injected, f.fail[req.Method] = q[0], q[1:]
	}
	var hold chan struct{}
	if q := f.holds[req.Method]; len(q) > 0 {
		hold, f.holds[req.Method] = q[0], q[1:]
	}
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-f.closing:
		}
	}
	if injected != nil {
		answer(w, req.ID, nil, injected)
		return
	}
	if a, ok := params["account"].(string); ok && a != f.Account {
		answer(w, req.ID, nil, &RPCError{Code: -32602, Message: "Specified account does not exist"})
		return
	}
	if req.Method == "receive" {
		result, rerr := f.receive(r, params)
		answer(w, req.ID, result, rerr)
		return
	}
	result, rerr := f.handle(req.Method, params)
	answer(w, req.ID, result, rerr)
}

// receive is signal-cli's receive method (ReceiveCommand, ReceiveHelper):
// refused unless the daemon is in manual mode with no event stream open
// and no other call running; it waits up to timeout seconds (default 3;
// again after each message; negative: no end; 0: answers at once with
// nothing) and answers the messages it took, at most maxMessages
// (default -1: no bound). A message taken is gone from the queue: a call
// whose caller went away, or that Drop broke, loses what it took.
func (f *Fake) receive(r *http.Request, p map[string]any) (any, *RPCError) {
	timeout, limit := 3.0, int64(-1)
	if v, ok := p["timeout"].(json.Number); ok {
		x, err := v.Float64()
		if err != nil {
			return nil, &RPCError{Code: -32602, Message: "timeout must be a number"}
		}
		timeout = x
	}
	if _, ok := p["maxMessages"]; ok {
		limit = num(p["maxMessages"])
	}
	f.mu.Lock()
	if f.mode != Manual || len(f.clients) > 0 || f.polling > 0 {
		f.mu.Unlock()
		return nil, AlreadyReceiving()
	}
	f.polls++
	f.polling++
	dropped := f.dropped
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.polling--
		f.mu.Unlock()
	}()

	var took []string
	for timeout != 0 && (limit < 0 || int64(len(took)) < limit) {
		f.mu.Lock()
		if len(f.pending) > 0 {
			took = append(took, f.pending[0].data)
			f.pending = f.pending[1:]
			f.mu.Unlock()
			continue
		}
		wake := f.wake
		f.mu.Unlock()
		var expired <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(time.Duration(timeout * float64(time.Second)))
			expired = t.C
			defer t.Stop()
		}
		arrived := false
		select {
		case <-wake:
			arrived = true
		case <-dropped:
			f.mu.Lock()
			f.lost = append(f.lost, took...)
			f.mu.Unlock()
			panic(http.ErrAbortHandler) // the connection closes without an answer
		case <-expired:
		}
		if !arrived {
			break
		}
	}
	if r.Context().Err() != nil { // the caller went away: answered to nobody
		f.mu.Lock()
		f.lost = append(f.lost, took...)
		f.mu.Unlock()
	}
	out := make([]json.RawMessage, 0, len(took))
	for _, d := range took {
		if !json.Valid([]byte(d)) {
			b, _ := json.Marshal(d)
			d = string(b)
		}
		out = append(out, json.RawMessage(d))
	}
	return out, nil
}

func answer(w http.ResponseWriter, id json.RawMessage, result any, rerr *RPCError) {
	out := map[string]any{"jsonrpc": "2.0", "id": id}
	if id == nil {
		out["id"] = nil
	}
	if rerr != nil {
		out["error"] = rerr
	} else {
		out["result"] = result
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

var styleRE = regexp.MustCompile(`^(\d+):(\d+):(BOLD|ITALIC|SPOILER|STRIKETHROUGH|MONOSPACE)$`)

func (f *Fake) handle(method string, p map[string]any) (any, *RPCError) {
	switch method {
	case "send":
		chat, rerr := chatOf(p)
		if rerr != nil {
			return nil, rerr
		}
		s := Sent{Chat: chat, Text: str(p["message"])}
		s.Styles = append(strs(p["textStyle"]), strs(p["textStyles"])...)
		for _, st := range s.Styles {
			if !styleRE.MatchString(st) {
				return nil, &RPCError{Code: -1, Message: "Invalid textStyle syntax (" + st + ") expected 'start:length:STYLE'"}
			}
		}
		s.Attachments = append(strs(p["attachment"]), strs(p["attachments"])...)
		for _, a := range s.Attachments {
			if !strings.HasPrefix(a, "data:") {
				return nil, &RPCError{Code: -1, Message: "Failed to send message: " + a + " (NoSuchFileException)"}
			}
			if _, body, ok := strings.Cut(a, ";base64,"); !ok || base64Invalid(body) {
				return nil, &RPCError{Code: -1, Message: "Invalid attachment syntax"}
			}
		}
		if s.Text == "" && len(s.Attachments) == 0 {
			return nil, &RPCError{Code: -1, Message: "Sending empty message is not allowed, either a message, attachment or sticker must be given."}
		}
		if _, has := p["quoteTimestamp"]; has {
			s.QuoteTimestamp = num(p["quoteTimestamp"])
			s.QuoteAuthor = str(p["quoteAuthor"])
			if s.QuoteAuthor == "" {
				return nil, &RPCError{Code: -1, Message: "Quote author parameter is missing"}
			}
		}
		f.mu.Lock()
		s.Timestamp = f.tick()
		f.sent = append(f.sent, s)
		f.mu.Unlock()
		return success(s.Timestamp, chat), nil
	case "sendTyping":
		chat, rerr := chatOf(p)
		if rerr != nil {
			return nil, rerr
		}
		return success(f.Now(), chat), nil
	case "sendReaction":
		chat, rerr := chatOf(p)
		if rerr != nil {
			return nil, rerr
		}
		emoji, author, ts := str(p["emoji"]), str(p["targetAuthor"]), num(p["targetTimestamp"])
		if emoji == "" || author == "" || ts <= 0 {
			return nil, &RPCError{Code: -1, Message: "emoji, targetAuthor and targetTimestamp are required"}
		}
		f.mu.Lock()
		if b, _ := p["remove"].(bool); b {
			if f.reactions[reactionKey(chat, author, ts)] == emoji {
				delete(f.reactions, reactionKey(chat, author, ts))
			}
		} else {
			f.reactions[reactionKey(chat, author, ts)] = emoji
		}
		now := f.tick()
		f.mu.Unlock()
		return success(now, chat), nil
	case "getAttachment":
		id := str(p["id"])
		if id == "" {
			return nil, &RPCError{Code: -1, Message: "Missing attachment id parameter"}
		}
		f.mu.Lock()
		data, ok := f.attachments[id]
		f.mu.Unlock()
		if !ok {
			return nil, &RPCError{Code: -1, Message: "Could not find attachment with ID: " + id}
		}
		return map[string]any{"data": base64.StdEncoding.EncodeToString(data)}, nil
	}
	return nil, &RPCError{Code: -32601, Message: "Method not implemented"}
}

func base64Invalid(s string) bool {
	_, err := base64.StdEncoding.DecodeString(s)
	return err != nil
}

func success(ts int64, chat string) map[string]any {
	addr := map[string]any{"number": chat}
	if strings.HasPrefix(chat, "group:") {
		addr = map[string]any{"number": "+15550000000"}
	}
	return map[string]any{"timestamp": ts, "results": []any{map[string]any{"recipientAddress": addr, "type": "SUCCESS"}}}
}

// chatOf reads the target of a call: groupId, or one recipient.
func chatOf(p map[string]any) (string, *RPCError) {
	if g := str(p["groupId"]); g != "" {
		return "group:" + g, nil
	}
	r := strs(p["recipient"])
	switch len(r) {
	case 0:
		return "", &RPCError{Code: -1, Message: "No recipients given"}
	case 1:
		return r[0], nil
	}
	return "", &RPCError{Code: -1, Message: "the fake takes one recipient per call"}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// strs reads a parameter given as one string or a list of them.
func strs(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func num(v any) int64 {
	switch x := v.(type) {
	case json.Number:
		n, _ := x.Int64()
		return n
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}
