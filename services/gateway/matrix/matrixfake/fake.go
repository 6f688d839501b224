// Package matrixfake is a fake Matrix homeserver speaking the part of
// the client-server API the Matrix gateway uses: whoami and password
// login, /sync with since and a long-polled timeout, sends idempotent by
// transaction id, redactions, joins (invites), typing, read receipts,
// joined members, room names, m.direct, relations, limited timelines
// with /messages to page back through the gap, and the media
// repository (upload, authenticated download). Tests add rooms, inject
// room events and invites, and make the next calls of an endpoint fail.
package matrixfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is the homeserver's name in ids.
const Server = "fake.test"

// Event is a room event as the homeserver serves it.
type Event struct {
	Type     string         `json:"type"`
	EventID  string         `json:"event_id"`
	Sender   string         `json:"sender"`
	TS       int64          `json:"origin_server_ts"`
	Content  map[string]any `json:"content"`
	StateKey *string        `json:"state_key,omitempty"`
	RoomID   string         `json:"room_id,omitempty"`
	// raw, when set, is served instead (a malformed event).
	raw json.RawMessage
}

// MarshalJSON serves raw when set.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.raw != nil {
		return e.raw, nil
	}
	type plain Event
	return json.Marshal(plain(e))
}

type logged struct {
	pos   int
	room  string
	ev    Event
	state bool
}

type room struct {
	id      string
	name    string
	members map[string]string // user → display name
	direct  bool
	joined  bool // the bot joined
	invited string
	// invitedAt is the position of the invite: as a homeserver does, an
	// incremental sync carries it only when it is news since the token
	// (an initial sync, without one, always).
	invitedAt int
}

// Fail is a refusal the fake answers instead of the next call.
type Fail struct {
	Status  int
	ErrCode string
	// RetryAfterMS is sent as retry_after_ms (M_LIMIT_EXCEEDED), and
	// in whole seconds as Retry-After.
	RetryAfterMS int
	// BodyOnly sends RetryAfterMS in the body alone, without a
	// Retry-After, as homeservers before Matrix 1.10 (MSC4041) do.
	BodyOnly bool
	// RetryAfter, when set, is the Retry-After sent (seconds or a date)
	// in place of RetryAfterMS's seconds: a header that names another
	// wait than the body.
	RetryAfter string
	// After lets that many calls of the endpoint through first.
	After int
}

// Fake is a running fake homeserver.
type Fake struct {
	URL   string
	Bot   string
	Token string
	srv   *httptest.Server

	mu       sync.Mutex
	wake     chan struct{}
	log      []logged
	rooms    map[string]*room
	txns     map[string]string // txn key → event id
	media    map[string]media
	redacted map[string]bool
	fails    map[string][]Fail
	lose     map[string]int
	calls    map[string]int
	receipts map[string]string // room → event id
	typing   map[string]int
	// typingUntil is when the bot's typing notice in a room lapses.
	typingUntil map[string]time.Time
	drop        bool
	seq         int
	now         int64
	// limit is the most timeline events one room gets in a sync answer
	// (0: all), as a homeserver's default filter has it (Synapse: 10).
	limit int
	// firstToken is the oldest position a since token may name: what
	// is older the homeserver no longer knows (ForgetSyncTokens).
	firstToken int
	// stall is how many of the next syncs are never answered.
	stall int
	// refuseSince: every sync from a token is answered 400
	// M_INVALID_PARAM (a parameter the homeserver takes badly with one).
	refuseSince bool
	// slow is how many of the next syncs with timeout 0 are answered
	// slowFor late.
	slow    int
	slowFor time.Duration
	// sinces are the since tokens of the syncs answered, in order (""
	// for an initial sync).
	sinces []string
}

type media struct {
	data []byte
	ct   string
}

// New starts a fake for bot (@bot:fake.test) with access token token.
func New(bot, token string) *Fake {
	f := &Fake{Bot: bot, Token: token, wake: make(chan struct{}), rooms: map[string]*room{}, txns: map[string]string{},
		media: map[string]media{}, redacted: map[string]bool{}, fails: map[string][]Fail{}, lose: map[string]int{}, calls: map[string]int{},
		receipts: map[string]string{}, typing: map[string]int{}, typingUntil: map[string]time.Time{}, now: time.Now().UnixMilli()}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	f.URL = f.srv.URL
	return f
}

// Close stops the server.
func (f *Fake) Close() {
	f.mu.Lock()
	f.drop = true
	f.notify()
	f.mu.Unlock()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// notify wakes the long polls; f.mu held.
func (f *Fake) notify() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// Room describes a room the bot is in.
type Room struct {
	ID, Name string
	// Members are the other members: user id → display name.
	Members map[string]string
	// BotName is the bot's display name in the room.
	BotName string
	Direct  bool
}

// AddRoom puts the bot in a room (its state shows in the next initial
// sync and as state events in the timeline of incremental ones).
func (f *Fake) AddRoom(r Room) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rm := &room{id: r.ID, name: r.Name, members: map[string]string{f.Bot: r.BotName}, direct: r.Direct, joined: true}
	for u, n := range r.Members {
		rm.members[u] = n
	}
	f.rooms[r.ID] = rm
	f.appendState(rm)
	f.notify()
}

// appendState logs a room's state events; f.mu held.
func (f *Fake) appendState(rm *room) {
	empty := ""
	f.append(rm.id, Event{Type: "m.room.create", Sender: f.Bot, StateKey: &empty, Content: map[string]any{"creator": f.Bot}}, true)
	if rm.name != "" {
		f.append(rm.id, Event{Type: "m.room.name", Sender: f.Bot, StateKey: &empty, Content: map[string]any{"name": rm.name}}, true)
	}
	for u, n := range rm.members {
		key := u
		c := map[string]any{"membership": "join"}
		if n != "" {
			c["displayname"] = n
		}
		f.append(rm.id, Event{Type: "m.room.member", Sender: u, StateKey: &key, Content: c}, true)
	}
}

// append logs an event; f.mu held.
func (f *Fake) append(roomID string, ev Event, state bool) Event {
	f.seq++
	if ev.EventID == "" {
		ev.EventID = fmt.Sprintf("$ev%d:%s", f.seq, Server)
	}
	if ev.TS == 0 {
		// The homeserver's clock, never twice the same.
		f.now = max(f.now+1, time.Now().UnixMilli())
		ev.TS = f.now
	}
	f.log = append(f.log, logged{pos: f.seq, room: roomID, ev: ev, state: state})
	return ev
}

// Inject adds a room event sent by sender and returns its event id.
func (f *Fake) Inject(roomID, sender, typ string, content map[string]any) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := f.append(roomID, Event{Type: typ, Sender: sender, Content: content}, false)
	f.notify()
	return ev.EventID
}

// Message injects an m.room.message with msgtype m.text.
func (f *Fake) Message(roomID, sender, body string) string {
	return f.Inject(roomID, sender, "m.room.message", map[string]any{"msgtype": "m.text", "body": body})
}

// InjectRaw adds an event whose JSON is served as given (a malformed one).
func (f *Fake) InjectRaw(roomID, raw string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.append(roomID, Event{raw: json.RawMessage(raw)}, false)
	f.notify()
}

// Replay serves an event again after the current position, as a
// homeserver does for a client that did not move its token.
func (f *Fake) Replay(eventID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.log {
		if l.ev.EventID == eventID {
			f.seq++
			f.log = append(f.log, logged{pos: f.seq, room: l.room, ev: l.ev, state: l.state})
			f.notify()
			return
		}
	}
}

// JoinMember makes user (display name name) join a room the bot is in:
// an m.room.member state event, news for the next sync.
func (f *Fake) JoinMember(roomID, user, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rm := f.rooms[roomID]
	rm.members[user] = name
	c := map[string]any{"membership": "join"}
	if name != "" {
		c["displayname"] = name
	}
	f.append(roomID, Event{Type: "m.room.member", Sender: user, StateKey: &user, Content: c}, true)
	f.notify()
}

// LeaveMember makes user leave a room the bot is in.
func (f *Fake) LeaveMember(roomID, user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rooms[roomID].members, user)
	f.append(roomID, Event{Type: "m.room.member", Sender: user, StateKey: &user, Content: map[string]any{"membership": "leave"}}, true)
	f.notify()
}

// Invite invites the bot to a room from inviter.
func (f *Fake) Invite(roomID, inviter string, direct bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++ // an invite is news for the next sync
	f.rooms[roomID] = &room{id: roomID, members: map[string]string{inviter: ""}, direct: direct, invited: inviter, invitedAt: f.seq}
	f.notify()
}

// SetTimelineLimit makes each sync answer carry at most n timeline
// events per room, the latest, marked limited with a prev_batch token
// from which /messages pages back to the rest (0: no limit).
func (f *Fake) SetTimelineLimit(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = n
}

// ForgetSyncTokens makes the homeserver forget the sync tokens it gave
// out so far, as one whose database was replaced (wiped, or moved to
// another server) does: a sync from one of them is answered 400 with
// M_UNKNOWN "Invalid stream token", as Synapse answers a token it cannot
// read; a sync without a token starts again from its current state.
func (f *Fake) ForgetSyncTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.firstToken = f.seq
	f.notify()
}

// StallSyncs makes the next n syncs go unanswered, whatever their
// timeout, until the client gives up on them: a connection gone silent
// (a NAT or proxy that dropped it without a reset) looks so to the
// client.
func (f *Fake) StallSyncs(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stall += n
}

// RefuseSyncTokens makes every sync from a token, old or new, answered
// 400 M_INVALID_PARAM, while a sync without one is answered: a
// homeserver that takes a parameter badly beside since looks so.
func (f *Fake) RefuseSyncTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuseSince = true
	f.notify()
}

// SlowCatchUps makes the next n syncs with timeout 0 (a client catching
// up) wait d before they are looked at, as a homeserver building a large
// answer (what happened during a long absence) does; a client that gives
// up meanwhile gets nothing.
func (f *Fake) SlowCatchUps(n int, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slow, f.slowFor = n, d
}

// SyncSinces returns the since token of each sync answered so far, in
// order ("" for an initial sync).
func (f *Fake) SyncSinces() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sinces...)
}

// Joined reports whether the bot joined the room.
func (f *Fake) Joined(roomID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rooms[roomID]
	return r != nil && r.joined
}

// FailNext makes the next n calls of an endpoint (sync, send, typing,
// receipt, redact, upload, download, join, members) fail.
func (f *Fake) FailNext(endpoint string, n int, fail Fail) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fails[endpoint] = append(f.fails[endpoint], fail)
	}
}

// LoseNextAnswers makes the next n calls of an endpoint (send, redact)
// take effect and then answer 504, as a proxy in front of the homeserver
// does when it gives up waiting: the client cannot tell the call from
// one that failed.
func (f *Fake) LoseNextAnswers(endpoint string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lose[endpoint] += n
}

// answer writes a call's answer, or a 504 when it is to be lost; f.mu held.
func (f *Fake) answer(w http.ResponseWriter, endpoint string, v any) {
	if f.lose[endpoint] > 0 {
		f.lose[endpoint]--
		writeErr(w, http.StatusGatewayTimeout, "M_UNKNOWN", "gateway timeout")
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// annotated reports whether the bot already has a live reaction with
// key on an event; f.mu held.
func (f *Fake) annotated(roomID, eventID, key string) bool {
	for _, l := range f.log {
		if l.room != roomID || l.ev.Sender != f.Bot || l.ev.Type != "m.reaction" || f.redacted[l.ev.EventID] {
			continue
		}
		rel, _ := l.ev.Content["m.relates_to"].(map[string]any)
		if rel != nil && str(rel["event_id"]) == eventID && str(rel["key"]) == key {
			return true
		}
	}
	return false
}

// Drop fails the sync in flight (or the next one) with a 502, as a proxy
// in front of a homeserver that restarts does.
func (f *Fake) Drop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails["sync"] = append(f.fails["sync"], Fail{Status: http.StatusBadGateway, ErrCode: "M_UNKNOWN"})
	f.notify()
}

// Calls counts the calls of an endpoint (sync, send, typing, receipt …).
func (f *Fake) Calls(endpoint string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[endpoint]
}

// Connections counts the gateway's connections: each reads m.direct
// before its first sync.
func (f *Fake) Connections() int { return f.Calls("direct") }

// Receipt returns the event the bot last marked read in a room.
func (f *Fake) Receipt(roomID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.receipts[roomID]
}

// Sent is a message the bot shows in a room, edits applied.
type Sent struct {
	EventID       string
	MsgType       string
	Body          string
	FormattedBody string
	Thread        string // m.thread root
	ReplyTo       string // m.in_reply_to (a thread's fallback included)
	URL           string
	Edits         int
}

// Sent returns the bot's messages in a room, in order, redacted ones left
// out, each with its latest edit.
func (f *Fake) Sent(roomID string) []Sent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Sent
	idx := map[string]int{}
	for _, l := range f.log {
		if l.room != roomID || l.ev.Sender != f.Bot || l.ev.Type != "m.room.message" || f.redacted[l.ev.EventID] {
			continue
		}
		c := l.ev.Content
		rel, _ := c["m.relates_to"].(map[string]any)
		if rel != nil && rel["rel_type"] == "m.replace" {
			if i, ok := idx[str(rel["event_id"])]; ok {
				nc, _ := c["m.new_content"].(map[string]any)
				out[i].Body, out[i].FormattedBody = str(nc["body"]), str(nc["formatted_body"])
				out[i].Edits++
			}
			continue
		}
		s := Sent{EventID: l.ev.EventID, MsgType: str(c["msgtype"]), Body: str(c["body"]), FormattedBody: str(c["formatted_body"]), URL: str(c["url"])}
		if rel != nil {
			if rel["rel_type"] == "m.thread" {
				s.Thread = str(rel["event_id"])
			}
			if irt, ok := rel["m.in_reply_to"].(map[string]any); ok {
				s.ReplyTo = str(irt["event_id"])
			}
		}
		idx[s.EventID] = len(out)
		out = append(out, s)
	}
	return out
}

// legacyRoomMention is the homeserver's .m.rule.roomnotif: "@room" as a
// word of the body, in any case.
var legacyRoomMention = regexp.MustCompile(`(?i)@room\b`)

// RoomNotified returns the ids of the bot's messages and edits in a room
// that notified everyone in it, as a homeserver's push rules decide for a
// sender with the room's notifications.room power level (the fake gives
// the bot that power): m.mentions.room set (.m.rule.is_room_mention), or,
// for an event without m.mentions, "@room" as a word of its body
// (.m.rule.roomnotif, which intentional mentions turn off).
func (f *Fake) RoomNotified(roomID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.log {
		if l.room != roomID || l.ev.Sender != f.Bot || l.ev.Type != "m.room.message" {
			continue
		}
		c := l.ev.Content
		m, has := c["m.mentions"].(map[string]any)
		if has && m["room"] == true || !has && legacyRoomMention.MatchString(str(c["body"])) {
			out = append(out, l.ev.EventID)
		}
	}
	return out
}

// Reactions returns the bot's reactions on an event, redacted ones left
// out.
func (f *Fake) Reactions(roomID, eventID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.log {
		if l.room != roomID || l.ev.Sender != f.Bot || l.ev.Type != "m.reaction" || f.redacted[l.ev.EventID] {
			continue
		}
		rel, _ := l.ev.Content["m.relates_to"].(map[string]any)
		if rel != nil && str(rel["event_id"]) == eventID {
			out = append(out, str(rel["key"]))
		}
	}
	return out
}

// Redactions counts the bot's redaction events of an event: more than
// one means a retried redaction was done twice.
func (f *Fake) Redactions(roomID, eventID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, l := range f.log {
		if l.room == roomID && l.ev.Sender == f.Bot && l.ev.Type == "m.room.redaction" && str(l.ev.Content["redacts"]) == eventID {
			n++
		}
	}
	return n
}

// ReactionEvents counts the bot's m.reaction events on an event,
// redacted ones included.
func (f *Fake) ReactionEvents(roomID, eventID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, l := range f.log {
		rel, _ := l.ev.Content["m.relates_to"].(map[string]any)
		if l.room == roomID && l.ev.Sender == f.Bot && l.ev.Type == "m.reaction" && rel != nil && str(rel["event_id"]) == eventID {
			n++
		}
	}
	return n
}

// Typing counts the typing notices in a room.
func (f *Fake) Typing(roomID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typing[roomID]
}

// IsTyping reports whether the bot shows as typing in a room now: from a
// typing notice until its timeout, or until it sends typing false (a
// homeserver does not take it down when the bot sends a message).
func (f *Fake) IsTyping(roomID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Before(f.typingUntil[roomID])
}

// Upload stores media as if a user uploaded it and returns its mxc URI.
func (f *Fake) Upload(data []byte, contentType string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	mid := fmt.Sprintf("m%d", f.seq)
	f.media[mid] = media{data: data, ct: contentType}
	return "mxc://" + Server + "/" + mid
}

// Media returns uploaded bytes by mxc URI.
func (f *Fake) Media(mxc string) ([]byte, string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.media[strings.TrimPrefix(mxc, "mxc://"+Server+"/")]
	return m.data, m.ct, ok
}

func str(v any) string { s, _ := v.(string); return s }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"errcode": code, "error": msg})
}

// fail answers a queued refusal of endpoint; f.mu held.
func (f *Fake) fail(w http.ResponseWriter, endpoint string) bool {
	q := f.fails[endpoint]
	if len(q) == 0 {
		return false
	}
	if q[0].After > 0 {
		q[0].After--
		return false
	}
	fl := q[0]
	f.fails[endpoint] = q[1:]
	body := map[string]any{"errcode": fl.ErrCode, "error": "injected failure"}
	if fl.RetryAfterMS > 0 {
		body["retry_after_ms"] = fl.RetryAfterMS
		// As MSC4041 (Matrix 1.10) has homeservers send it beside the
		// body's: the wait in whole seconds, rounded up.
		if !fl.BodyOnly {
			w.Header().Set("Retry-After", strconv.Itoa((fl.RetryAfterMS+999)/1000))
		}
	}
	if fl.RetryAfter != "" {
		w.Header().Set("Retry-After", fl.RetryAfter)
	}
	writeJSON(w, fl.Status, body)
	return true
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	if r.Method == http.MethodPost && p == "/_matrix/client/v3/login" {
		f.login(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.Token {
		writeErr(w, http.StatusUnauthorized, "M_UNKNOWN_TOKEN", "unknown access token")
		return
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i := range parts {
		parts[i], _ = url.PathUnescape(parts[i])
	}
	switch {
	case p == "/_matrix/client/v3/account/whoami":
		writeJSON(w, http.StatusOK, map[string]any{"user_id": f.Bot, "device_id": "FAKEDEVICE"})
	case p == "/_matrix/client/v3/sync":
		f.sync(w, r)
	case p == "/_matrix/media/v3/upload" && r.Method == http.MethodPost:
		f.upload(w, r)
	case len(parts) == 7 && strings.HasPrefix(p, "/_matrix/client/v1/media/download/"):
		f.download(w, parts[5], parts[6])
	case len(parts) == 7 && parts[3] == "user" && parts[5] == "account_data":
		f.accountData(w, parts[6])
	case len(parts) >= 6 && parts[3] == "rooms":
		f.roomCall(w, r, parts[4], parts[5:])
	default:
		writeErr(w, http.StatusNotFound, "M_UNRECOGNIZED", "unrecognized request "+r.Method+" "+p)
	}
}

func (f *Fake) login(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Identifier struct {
			User string `json:"user"`
		} `json:"identifier"`
		Password string `json:"password"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if req.Identifier.User != f.Bot || req.Password == "" {
		writeErr(w, http.StatusForbidden, "M_FORBIDDEN", "invalid username or password")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"user_id": f.Bot, "access_token": f.Token, "device_id": "FAKEDEVICE"})
}

func (f *Fake) accountData(w http.ResponseWriter, typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if typ != "m.direct" {
		writeErr(w, http.StatusNotFound, "M_NOT_FOUND", "no account data")
		return
	}
	f.calls["direct"]++
	direct := map[string][]string{}
	for _, rm := range f.rooms {
		if rm.direct && rm.joined {
			for u := range rm.members {
				if u != f.Bot {
					direct[u] = append(direct[u], rm.id)
				}
			}
		}
	}
	if len(direct) == 0 {
		writeErr(w, http.StatusNotFound, "M_NOT_FOUND", "no account data")
		return
	}
	writeJSON(w, http.StatusOK, direct)
}

// sync serves /sync: since is "s<position>"; without it, the initial
// sync (every joined room's state and its recent timeline).
func (f *Fake) sync(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	timeout, _ := strconv.Atoi(q.Get("timeout"))
	since := -1
	if s := q.Get("since"); s != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "s"))
		if err != nil || !strings.HasPrefix(s, "s") {
			writeErr(w, http.StatusBadRequest, "M_INVALID_PARAM", "bad since token")
			return
		}
		since = n
	}
	deadline := time.After(time.Duration(timeout) * time.Millisecond)
	f.mu.Lock()
	f.calls["sync"]++
	if f.stall > 0 {
		f.stall--
		f.mu.Unlock()
		<-r.Context().Done()
		return
	}
	if f.slow > 0 && timeout <= 0 {
		f.slow--
		d := f.slowFor
		f.mu.Unlock()
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
	}
	for {
		if f.fail(w, "sync") {
			f.mu.Unlock()
			return
		}
		if since >= 0 && f.refuseSince {
			f.mu.Unlock()
			writeErr(w, http.StatusBadRequest, "M_INVALID_PARAM", "bad parameter")
			return
		}
		if since >= 0 && since < f.firstToken {
			f.mu.Unlock()
			writeErr(w, http.StatusBadRequest, "M_UNKNOWN", "Invalid stream token")
			return
		}
		if f.drop {
			f.mu.Unlock()
			writeErr(w, http.StatusServiceUnavailable, "M_UNKNOWN", "shutting down")
			return
		}
		if since < 0 || f.seq > since || timeout <= 0 {
			break
		}
		wake := f.wake
		f.mu.Unlock()
		select {
		case <-wake:
		case <-deadline:
			f.mu.Lock()
			timeout = 0
			continue
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	f.sinces = append(f.sinces, q.Get("since"))
	join := map[string]any{}
	invite := map[string]any{}
	for _, rm := range f.rooms {
		if !rm.joined {
			if rm.invited != "" && rm.invitedAt > since {
				key := f.Bot
				c := map[string]any{"membership": "invite"}
				if rm.direct {
					c["is_direct"] = true
				}
				invite[rm.id] = map[string]any{"invite_state": map[string]any{"events": []Event{
					{Type: "m.room.member", Sender: rm.invited, StateKey: &key, Content: c},
				}}}
			}
			continue
		}
		var state, timeline []Event
		var positions []int
		for _, l := range f.log {
			if l.room != rm.id || l.pos <= since {
				continue
			}
			ev := f.served(l)
			if since < 0 && l.state {
				state = append(state, ev)
				continue
			}
			timeline = append(timeline, ev)
			positions = append(positions, l.pos)
		}
		if len(state) == 0 && len(timeline) == 0 {
			continue
		}
		n := 0
		for range rm.members {
			n++
		}
		tl := map[string]any{"limited": false}
		if f.limit > 0 && len(timeline) > f.limit {
			cut := len(timeline) - f.limit
			tl["limited"], tl["prev_batch"] = true, fmt.Sprintf("s%d", positions[cut]-1)
			timeline = timeline[cut:]
		}
		tl["events"] = nonNil(timeline)
		join[rm.id] = map[string]any{
			"summary":  map[string]any{"m.joined_member_count": n},
			"state":    map[string]any{"events": nonNil(state)},
			"timeline": tl,
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"next_batch": fmt.Sprintf("s%d", f.seq),
		"rooms": map[string]any{"join": join, "invite": invite}})
}

// served is a logged event as the homeserver serves it (a redacted one
// without its content); f.mu held.
func (f *Fake) served(l logged) Event {
	ev := l.ev
	if ev.raw == nil && f.redacted[ev.EventID] {
		ev.Content = map[string]any{}
	}
	return ev
}

// messages serves GET /rooms/{id}/messages with dir=b: the room's events
// from the position from back to (not including) the position to, newest
// first, at most limit, and end when more are left; f.mu held.
func (f *Fake) messages(w http.ResponseWriter, r *http.Request, roomID string) {
	q := r.URL.Query()
	pos := func(k string, def int) (int, bool) {
		s := q.Get(k)
		if s == "" {
			return def, true
		}
		n, err := strconv.Atoi(strings.TrimPrefix(s, "s"))
		return n, err == nil && strings.HasPrefix(s, "s")
	}
	from, ok1 := pos("from", f.seq)
	to, ok2 := pos("to", 0)
	limit, err := strconv.Atoi(q.Get("limit"))
	if !ok1 || !ok2 || q.Get("dir") != "b" {
		writeErr(w, http.StatusBadRequest, "M_INVALID_PARAM", "bad from, to or dir")
		return
	}
	if err != nil || limit <= 0 {
		limit = 10
	}
	chunk := []Event{}
	end := ""
	for i := len(f.log) - 1; i >= 0; i-- {
		l := f.log[i]
		if l.room != roomID || l.pos > from || l.pos <= to {
			continue
		}
		if len(chunk) == limit {
			end = fmt.Sprintf("s%d", f.log[i].pos)
			break
		}
		ev := f.served(l)
		ev.RoomID = roomID
		chunk = append(chunk, ev)
	}
	out := map[string]any{"start": fmt.Sprintf("s%d", from), "chunk": chunk}
	if end != "" {
		out["end"] = end
	}
	writeJSON(w, http.StatusOK, out)
}

func nonNil(evs []Event) []Event {
	if evs == nil {
		return []Event{}
	}
	return evs
}

func (f *Fake) roomCall(w http.ResponseWriter, r *http.Request, roomID string, rest []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rm := f.rooms[roomID]
	if rm == nil {
		writeErr(w, http.StatusForbidden, "M_FORBIDDEN", "not in room "+roomID)
		return
	}
	endpoint := rest[0]
	f.calls[endpoint]++
	if f.fail(w, endpoint) {
		return
	}
	if endpoint == "join" && r.Method == http.MethodPost {
		rm.joined = true
		rm.members[f.Bot] = ""
		f.appendState(rm)
		f.notify()
		writeJSON(w, http.StatusOK, map[string]any{"room_id": roomID})
		return
	}
	if !rm.joined {
		writeErr(w, http.StatusForbidden, "M_FORBIDDEN", "not joined to "+roomID)
		return
	}
	switch {
	case endpoint == "messages" && len(rest) == 1 && r.Method == http.MethodGet:
		f.messages(w, r, roomID)
	case endpoint == "send" && len(rest) == 3 && r.Method == http.MethodPut:
		// Transaction ids are scoped to the access token and the path
		// (room, event type, txn id), as Synapse keys them; a repeated
		// one answers the event it made, redacted or not.
		key := roomID + "|" + rest[1] + "|" + rest[2]
		if eid, ok := f.txns[key]; ok {
			f.answer(w, endpoint, map[string]any{"event_id": eid})
			return
		}
		var c map[string]any
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil {
			writeErr(w, http.StatusBadRequest, "M_NOT_JSON", "content is not JSON")
			return
		}
		if rel, _ := c["m.relates_to"].(map[string]any); rest[1] == "m.reaction" && rel != nil && rel["rel_type"] == "m.annotation" &&
			f.annotated(roomID, str(rel["event_id"]), str(rel["key"])) {
			// Synapse refuses a second live annotation with the same key
			// from one sender.
			writeErr(w, http.StatusBadRequest, "M_DUPLICATE_ANNOTATION", "can't send same reaction twice")
			return
		}
		ev := f.append(roomID, Event{Type: rest[1], Sender: f.Bot, Content: c}, false)
		f.txns[key] = ev.EventID
		f.notify()
		f.answer(w, endpoint, map[string]any{"event_id": ev.EventID})
	case endpoint == "redact" && len(rest) == 3 && r.Method == http.MethodPut:
		key := roomID + "|redact|" + rest[1] + "|" + rest[2]
		if eid, ok := f.txns[key]; ok {
			f.answer(w, endpoint, map[string]any{"event_id": eid})
			return
		}
		f.redacted[rest[1]] = true
		ev := f.append(roomID, Event{Type: "m.room.redaction", Sender: f.Bot, Content: map[string]any{"redacts": rest[1]}}, false)
		f.txns[key] = ev.EventID
		f.notify()
		f.answer(w, endpoint, map[string]any{"event_id": ev.EventID})
	case endpoint == "typing" && r.Method == http.MethodPut:
		var c struct {
			Typing  bool  `json:"typing"`
			Timeout int64 `json:"timeout"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&c); err != nil {
			writeErr(w, http.StatusBadRequest, "M_NOT_JSON", "content is not JSON")
			return
		}
		if c.Typing {
			f.typing[roomID]++
			f.typingUntil[roomID] = time.Now().Add(time.Duration(c.Timeout) * time.Millisecond)
		} else {
			delete(f.typingUntil, roomID)
		}
		writeJSON(w, http.StatusOK, map[string]any{})
	case endpoint == "receipt" && len(rest) == 3 && r.Method == http.MethodPost:
		f.receipts[roomID] = rest[2]
		writeJSON(w, http.StatusOK, map[string]any{})
	case endpoint == "joined_members" && r.Method == http.MethodGet:
		joined := map[string]any{}
		for u, n := range rm.members {
			m := map[string]any{}
			if n != "" {
				m["display_name"] = n
			}
			joined[u] = m
		}
		writeJSON(w, http.StatusOK, map[string]any{"joined": joined})
	case endpoint == "state" && len(rest) >= 2 && rest[1] == "m.room.name" && r.Method == http.MethodGet:
		if rm.name == "" {
			writeErr(w, http.StatusNotFound, "M_NOT_FOUND", "no name")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"name": rm.name})
	case endpoint == "relations" && len(rest) >= 2 && r.Method == http.MethodGet:
		f.relations(w, r, roomID, rest[1:])
	default:
		writeErr(w, http.StatusNotFound, "M_UNRECOGNIZED", "unrecognized room request "+r.Method+" "+strings.Join(rest, "/"))
	}
}

// relations serves GET /rooms/{id}/relations/{eventId}[/{relType}[/{eventType}]]
// as Synapse does: the relations of the event (filtered by relation and
// event type when given), newest first, at most limit (5 when not
// given), from the position from (a next_batch) on, and next_batch when
// more are left; f.mu held.
func (f *Fake) relations(w http.ResponseWriter, r *http.Request, roomID string, path []string) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = 5
	}
	from := len(f.log)
	if s := q.Get("from"); s != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(s, "r"))
		if err != nil || !strings.HasPrefix(s, "r") || n < 0 || n > len(f.log) {
			writeErr(w, http.StatusBadRequest, "M_INVALID_PARAM", "bad from token")
			return
		}
		from = n
	}
	chunk := []Event{}
	next := ""
	for i := from - 1; i >= 0; i-- {
		l := f.log[i]
		rel, _ := l.ev.Content["m.relates_to"].(map[string]any)
		if l.room != roomID || rel == nil || str(rel["event_id"]) != path[0] || f.redacted[l.ev.EventID] ||
			(len(path) > 1 && str(rel["rel_type"]) != path[1]) || (len(path) > 2 && l.ev.Type != path[2]) {
			continue
		}
		if len(chunk) == limit {
			next = fmt.Sprintf("r%d", i+1)
			break
		}
		chunk = append(chunk, l.ev)
	}
	out := map[string]any{"chunk": chunk}
	if next != "" {
		out["next_batch"] = next
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Fake) upload(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.calls["upload"]++
	if f.fail(w, "upload") {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	data, err := io.ReadAll(io.LimitReader(r.Body, 200<<20))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "M_UNKNOWN", "read body")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"content_uri": f.Upload(data, r.Header.Get("Content-Type"))})
}

func (f *Fake) download(w http.ResponseWriter, server, mediaID string) {
	f.mu.Lock()
	f.calls["download"]++
	if f.fail(w, "download") {
		f.mu.Unlock()
		return
	}
	m, ok := f.media[mediaID]
	f.mu.Unlock()
	if server != Server || !ok {
		writeErr(w, http.StatusNotFound, "M_NOT_FOUND", "no such media")
		return
	}
	w.Header().Set("Content-Type", m.ct)
	_, _ = w.Write(m.data)
}
