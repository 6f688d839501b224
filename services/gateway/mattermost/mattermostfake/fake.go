// Package mattermostfake is a fake Mattermost server for tests. It speaks
// the parts of the real wire protocol the gateway uses: REST API v4
// (users/me, posts with root_id and pending_post_id, post patches and
// deletes, typing, reactions, file upload and download, a channel's
// posts since a time) with Mattermost's error bodies and rate-limit
// headers, and the websocket event stream (/api/v4/websocket) with the
// authentication_challenge handshake (or the token on the request),
// hello with its connection_id, and posted events whose data.post is a
// JSON string. Like the real server it keeps the events of a connection
// gone for a client that resumes it (connection_id, sequence_number),
// up to a full queue, and none for a client never connected.
package mattermostfake

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// TeamID is the one team of the fake.
const TeamID = "team0000000000000000000000"

// maxPostRunes is the server's post limit.
const maxPostRunes = 16383

// Post is a post as the fake keeps it.
type Post struct {
	ID            string   `json:"id"`
	CreateAt      int64    `json:"create_at"`
	UpdateAt      int64    `json:"update_at"`
	EditAt        int64    `json:"edit_at"`
	DeleteAt      int64    `json:"delete_at"`
	UserID        string   `json:"user_id"`
	ChannelID     string   `json:"channel_id"`
	RootID        string   `json:"root_id"`
	Message       string   `json:"message"`
	Type          string   `json:"type"`
	FileIDs       []string `json:"file_ids"`
	PendingPostID string   `json:"pending_post_id"`
	// Props are the post's properties (the gateway's marker of the
	// send it made the post for).
	Props    map[string]any `json:"props,omitempty"`
	Metadata struct {
		Files []FileInfo `json:"files,omitempty"`
	} `json:"metadata"`
}

// FileInfo is an uploaded file's description.
type FileInfo struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Extension string `json:"extension"`
	Size      int64  `json:"size"`
	MimeType  string `json:"mime_type"`
}

// Channel is a channel: Type is D, G, O or P.
type Channel struct {
	ID, Type, DisplayName, Name string
}

// Fail is an injected failure of a REST call: the status and, for a 429,
// the X-Ratelimit-Reset seconds; Skip lets that many calls through first.
type Fail struct {
	Status int
	Reset  int
	Skip   int
	// Lost: the call is carried out (a post made) and answered with the
	// failure, as when the answer is lost on the way back.
	Lost bool
	// Delay holds the call this long first (a slow server); with Status
	// 0 it is then carried out and answered as usual.
	Delay time.Duration
}

// Fake is the server. Its methods are safe for concurrent use.
type Fake struct {
	URL string

	srv            *httptest.Server
	botID, botName string
	token          string

	mu        sync.Mutex
	users     map[string]string // id → username
	bots      map[string]bool   // the users that are bot accounts
	channels  map[string]Channel
	posts     map[string]*Post
	order     []string // post ids in creation order
	pending   map[string]string
	files     map[string]file
	reactions map[string][]string // post id → the bot's emoji names
	typing    map[string]int      // channel → typing calls
	typingIn  map[string]int      // channel + "/" + parent post → typing calls
	calls     map[string]int
	fails     map[string][]Fail
	conns     map[*wsConn]bool
	// inactive are the connections gone, by id, still sent the events
	// (into their log) until their client resumes them or their log is
	// full, as the server's hub keeps them for reliable websockets.
	inactive map[string]*wsConn
	resumed  int
	accepted int
	lastTime int64
	// channelWide are the bot's posts (created or edited) that notified
	// their whole channel: their message at the time.
	channelWide []string
	// noFileMetadata: posted events carry no metadata of their files.
	noFileMetadata bool
	// authReplyDelay holds the answer to the authentication challenge
	// after the connection is registered (a busy hub): events reach it
	// before the answer.
	authReplyDelay time.Duration
}

type file struct {
	info FileInfo
	data []byte
	post string // the post that claimed it ("" while none has)
}

type wsConn struct {
	c    *websocket.Conn
	out  chan []byte
	seq  int64
	done chan struct{}
	// id is the connection id its hello names; log the last events sent
	// on it (maxQueued), which a client that reconnects with the id and
	// the next sequence number is sent again.
	id  string
	log []queued
}

// queued is an event sent on a connection.
type queued struct {
	seq int64
	b   []byte
}

// maxQueued is how many events a connection's log keeps; a connection
// gone that misses more is forgotten, as the server drops one whose
// queue fills.
const maxQueued = 256

// New starts a fake with a bot user and its token.
func New(botID, botName, token string) *Fake {
	f := &Fake{
		botID: botID, botName: botName, token: token,
		users: map[string]string{botID: botName}, bots: map[string]bool{botID: true}, channels: map[string]Channel{}, posts: map[string]*Post{},
		pending: map[string]string{}, files: map[string]file{}, reactions: map[string][]string{},
		typing: map[string]int{}, typingIn: map[string]int{}, calls: map[string]int{}, fails: map[string][]Fail{}, conns: map[*wsConn]bool{},
		inactive: map[string]*wsConn{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v4/users/me", f.auth("users/me", f.me))
	mux.HandleFunc("GET /api/v4/users/{id}", f.auth("user", f.user))
	mux.HandleFunc("POST /api/v4/posts", f.auth("create post", f.createPost))
	mux.HandleFunc("PUT /api/v4/posts/{id}/patch", f.auth("patch", f.patchPost))
	mux.HandleFunc("DELETE /api/v4/posts/{id}", f.auth("delete", f.deletePost))
	mux.HandleFunc("POST /api/v4/users/{id}/typing", f.auth("typing", f.userTyping))
	mux.HandleFunc("POST /api/v4/reactions", f.auth("reaction", f.addReaction))
	mux.HandleFunc("DELETE /api/v4/users/{uid}/posts/{pid}/reactions/{emoji}", f.auth("unreaction", f.removeReaction))
	mux.HandleFunc("POST /api/v4/files", f.auth("upload", f.upload))
	mux.HandleFunc("GET /api/v4/files/{id}", f.auth("file", f.download))
	mux.HandleFunc("GET /api/v4/files/{id}/info", f.auth("file info", f.fileInfo))
	mux.HandleFunc("GET /api/v4/channels/{id}/posts", f.auth("channel posts", f.channelPosts))
	mux.HandleFunc("GET /api/v4/websocket", f.websocket)
	f.srv = httptest.NewServer(mux)
	f.URL = f.srv.URL
	return f
}

// Close drops every connection and stops the server.
func (f *Fake) Close() {
	f.Drop()
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// RevokeToken makes the server refuse the bot's token from now on, on
// REST calls and websocket handshakes alike.
func (f *Fake) RevokeToken() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token = "\x00revoked"
}

func (f *Fake) tokenOK(got string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return got == f.token
}

// AddUser names a user.
func (f *Fake) AddUser(id, username string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[id] = username
}

// AddBot names a bot account: GET /users/{id} says is_bot, and its
// posts carry the props from_bot "true", as the server sets them, unless
// the post is added with props of its own (Add), as a bot whose posts the
// server does not mark.
func (f *Fake) AddBot(id, username string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[id] = username
	f.bots[id] = true
}

// AddChannel adds a channel the bot is a member of.
func (f *Fake) AddChannel(c Channel) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.Name == "" {
		c.Name = c.ID
	}
	f.channels[c.ID] = c
}

// FailNext makes the next n calls of op ("create post", "patch",
// "typing", "reaction", "upload", "file", "channel posts" …) fail so.
func (f *Fake) FailNext(op string, n int, fail Fail) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.fails[op] = append(f.fails[op], fail)
	}
}

// Unattached counts the uploaded files no post claims (orphans, which
// the server keeps until an operator cleans them up).
func (f *Fake) Unattached() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, fl := range f.files {
		if fl.post == "" {
			n++
		}
	}
	return n
}

// Calls counts the calls of op so far (failed ones included).
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Connections counts the websocket connections authenticated so far.
func (f *Fake) Connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.accepted
}

// Connected reports how many websocket connections are open now.
func (f *Fake) Connected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// Drop closes every websocket connection from the server's side.
func (f *Fake) Drop() {
	f.mu.Lock()
	conns := make([]*wsConn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
		f.deactivate(c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		_ = c.c.CloseNow()
	}
}

// deactivate moves a connection gone to the inactive ones; f.mu held.
func (f *Fake) deactivate(c *wsConn) {
	if f.conns[c] {
		delete(f.conns, c)
		f.inactive[c.id] = c
	}
}

// ForgetConnections forgets the connections gone, as a restarted server
// has: a client that asks to resume one gets a new connection.
func (f *Fake) ForgetConnections() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.inactive)
}

// Resumed counts the connections a client resumed (connection_id and
// sequence_number) instead of starting afresh.
func (f *Fake) Resumed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resumed
}

// Message posts a message as user in channel and returns the post id.
func (f *Fake) Message(channel, user, text string) string {
	return f.Add(Post{ChannelID: channel, UserID: user, Message: text})
}

// Add creates a post as a user would (its id and times are set when
// empty) and sends its posted event to the connected clients.
func (f *Fake) Add(p Post) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	np := f.store(p)
	f.broadcastPosted(np)
	return np.ID
}

// AddSilently stores a post without sending its event, as one made
// while the client was disconnected.
func (f *Fake) AddSilently(p Post) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.store(p).ID
}

// Replay sends a stored post's posted event again.
func (f *Fake) Replay(postID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.posts[postID]; ok {
		f.broadcastPosted(p)
	}
}

// InjectRaw sends a raw websocket message to the connected clients.
func (f *Fake) InjectRaw(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.send([]byte(msg))
	}
}

// Upload stores a file as a user's client uploads it and returns its id.
func (f *Fake) Upload(name, mimeType string, data []byte) FileInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.putFile(name, mimeType, data)
}

// Posts returns the channel's posts (not deleted) in creation order.
func (f *Fake) Posts(channel string) []Post {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Post
	for _, id := range f.order {
		if p := f.posts[id]; p.ChannelID == channel && p.DeleteAt == 0 {
			out = append(out, *p)
		}
	}
	return out
}

// BotPosts returns the bot's posts in the channel, in creation order.
func (f *Fake) BotPosts(channel string) []Post {
	var out []Post
	for _, p := range f.Posts(channel) {
		if p.UserID == f.botID {
			out = append(out, p)
		}
	}
	return out
}

// File returns an uploaded file's bytes and description.
func (f *Fake) File(id string) ([]byte, FileInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.files[id]
	return fl.data, fl.info, ok
}

// Reactions returns the bot's reactions on a post.
func (f *Fake) Reactions(postID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reactions[postID])
}

// ExpirePending forgets the pending_post_ids seen, as the server does
// 30 s after it saw one: a repeat then makes a second post.
func (f *Fake) ExpirePending() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.pending)
}

// Typing counts the typing calls in a channel.
func (f *Fake) Typing(channel string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typing[channel]
}

// TypingIn counts the typing calls in a channel's thread (parent ""
// for the channel itself).
func (f *Fake) TypingIn(channel, parent string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typingIn[channel+"/"+parent]
}

// now is a strictly increasing Unix ms time; f.mu held.
func (f *Fake) now() int64 {
	t := max(time.Now().UnixMilli(), f.lastTime+1)
	f.lastTime = t
	return t
}

// store keeps a new post; f.mu held.
func (f *Fake) store(p Post) *Post {
	if p.ID == "" {
		p.ID = newID()
	}
	if p.CreateAt == 0 {
		p.CreateAt = f.now()
	}
	p.UpdateAt = p.CreateAt
	if f.bots[p.UserID] && p.UserID != f.botID && p.Props == nil {
		// The server marks a bot account's posts.
		p.Props = map[string]any{"from_bot": "true"}
	}
	if p.FileIDs == nil {
		p.FileIDs = []string{}
	}
	p.Metadata.Files = nil
	for _, id := range p.FileIDs {
		if fl, ok := f.files[id]; ok {
			p.Metadata.Files = append(p.Metadata.Files, fl.info)
			fl.post = p.ID
			f.files[id] = fl
		}
	}
	np := &p
	f.posts[p.ID] = np
	f.order = append(f.order, p.ID)
	return np
}

// OmitFileMetadata makes the posted events carry their posts' file ids
// without the files' metadata (omit true), which a client cannot count
// on, or with it again; the posts the API returns keep it.
func (f *Fake) OmitFileMetadata(omit bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noFileMetadata = omit
}

// DelayAuthReply holds the answer to each authentication challenge this
// long after the connection is registered and greeted (hello), as a busy
// server's hub may: the events of that time reach the connection first.
func (f *Fake) DelayAuthReply(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.authReplyDelay = d
}

// broadcastPosted sends a posted event; f.mu held.
func (f *Fake) broadcastPosted(p *Post) {
	ch := f.channels[p.ChannelID]
	sent := *p
	if f.noFileMetadata {
		sent.Metadata.Files = nil
	}
	postJSON, _ := json.Marshal(&sent)
	data := map[string]any{
		"channel_display_name": ch.DisplayName, "channel_name": ch.Name, "channel_type": ch.Type,
		"post": string(postJSON), "sender_name": "@" + f.users[p.UserID], "set_online": true, "team_id": TeamID,
	}
	if ch.Type == "D" {
		data["channel_display_name"] = "@" + f.users[p.UserID]
	}
	// As the server does, the mentions list names the users a post
	// notifies: the bot when it is @named, every member (the fake's
	// users) for @channel, @all or @here.
	var mentioned []string
	if channelWide.MatchString(p.Message) {
		for id := range f.users {
			if id != p.UserID {
				mentioned = append(mentioned, id)
			}
		}
	} else if mentionOf(f.botName).MatchString(p.Message) {
		mentioned = []string{f.botID}
	}
	if mentioned != nil {
		m, _ := json.Marshal(mentioned)
		data["mentions"] = string(m)
	}
	f.broadcast("posted", data, p.ChannelID)
}

// broadcast sends an event to every connection; f.mu held.
func (f *Fake) broadcast(event string, data map[string]any, channel string) {
	bc := map[string]any{"omit_users": nil, "user_id": "", "channel_id": channel, "team_id": ""}
	for c := range f.conns {
		c.send(c.event(event, data, bc))
	}
	for id, c := range f.inactive {
		c.event(event, data, bc)
		if len(c.log) >= maxQueued {
			delete(f.inactive, id)
		}
	}
}

// event numbers an event on the connection and keeps it in its log; f.mu
// held.
func (c *wsConn) event(event string, data, broadcast map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"event": event, "data": data, "seq": c.seq, "broadcast": broadcast})
	c.seq++
	c.log = append(c.log, queued{seq: c.seq - 1, b: b})
	if len(c.log) > maxQueued {
		c.log = c.log[1:]
	}
	return b
}

func (c *wsConn) send(b []byte) {
	select {
	case c.out <- b:
	default:
		// A client that does not read: the server drops it.
		_ = c.c.CloseNow()
	}
}

func (f *Fake) putFile(name, mimeType string, data []byte) FileInfo {
	ext := ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		ext = name[i+1:]
	}
	info := FileInfo{ID: newID(), Name: name, Extension: ext, Size: int64(len(data)), MimeType: mimeType}
	f.files[info.ID] = file{info: info, data: slices.Clone(data)}
	return info
}

// channelWide matches the mentions that notify a whole channel.
var channelWide = regexp.MustCompile(`(?i)@(channel|all|here)($|[^a-z0-9_-])`)

// mentionOf matches @name as the server reads a mention: the name ends
// where a username character stops.
func mentionOf(name string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)@` + regexp.QuoteMeta(name) + `($|[^a-z0-9_-])`)
}

func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 26)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// apiError writes Mattermost's error body.
func apiError(w http.ResponseWriter, status int, id, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "message": msg, "status_code": status, "request_id": newID()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// auth checks the bearer token, counts the call and serves an injected
// failure before the handler.
func (f *Fake) auth(op string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[op]++
		var fail *Fail
		if q := f.fails[op]; len(q) > 0 {
			if q[0].Skip > 0 {
				q[0].Skip--
			} else {
				fail, f.fails[op] = &q[0], q[1:]
			}
		}
		f.mu.Unlock()
		if bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !f.tokenOK(bearer) {
			apiError(w, http.StatusUnauthorized, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
			return
		}
		if fail != nil && fail.Delay > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(fail.Delay):
			}
		}
		if fail != nil && fail.Status == 0 {
			h(w, r)
			return
		}
		if fail != nil && fail.Lost {
			h(httptest.NewRecorder(), r)
			apiError(w, fail.Status, "api.fake.injected.app_error", "injected failure after the call was carried out")
			return
		}
		if fail != nil {
			if fail.Status == http.StatusTooManyRequests {
				w.Header().Set("X-Ratelimit-Limit", "10")
				w.Header().Set("X-Ratelimit-Remaining", "0")
				w.Header().Set("X-Ratelimit-Reset", strconv.Itoa(fail.Reset))
				// The server's limiter (throttled's headers) names the
				// wait as Retry-After too.
				w.Header().Set("Retry-After", strconv.Itoa(fail.Reset))
				apiError(w, fail.Status, "api.context.rate_limit.app_error", "Too many requests")
				return
			}
			apiError(w, fail.Status, "api.fake.injected.app_error", "injected failure")
			return
		}
		h(w, r)
	}
}

func (f *Fake) me(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"id": f.botID, "username": f.botName, "is_bot": true})
}

func (f *Fake) user(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	name, ok := f.users[r.PathValue("id")]
	isBot := f.bots[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "app.user.missing_account.const", "We couldn't find an existing account matching your details.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": r.PathValue("id"), "username": name, "is_bot": isBot})
}

func (f *Fake) createPost(w http.ResponseWriter, r *http.Request) {
	var in Post
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
		apiError(w, http.StatusBadRequest, "api.context.invalid_body_param.app_error", "Invalid or missing post in request body.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.channels[in.ChannelID]; !ok {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	if utf8.RuneCountInString(in.Message) > maxPostRunes {
		apiError(w, http.StatusBadRequest, "model.post.is_valid.message_length.app_error", "Message property length is greater than the maximum allowed length.")
		return
	}
	if in.RootID != "" {
		root, ok := f.posts[in.RootID]
		if !ok || root.RootID != "" || root.ChannelID != in.ChannelID {
			apiError(w, http.StatusBadRequest, "api.post.create_post.root_id.app_error", "Invalid RootId parameter.")
			return
		}
	}
	if in.PendingPostID != "" {
		if id, ok := f.pending[in.PendingPostID]; ok {
			writeJSON(w, http.StatusCreated, f.posts[id])
			return
		}
	}
	for _, id := range in.FileIDs {
		if _, ok := f.files[id]; !ok {
			apiError(w, http.StatusBadRequest, "api.post.create_post.file_ids.app_error", "Invalid file id.")
			return
		}
	}
	// As the server's attachFileIDsToPost: a file another post claimed
	// already is left out of this one.
	in.FileIDs = slices.DeleteFunc(slices.Clone(in.FileIDs), func(id string) bool { return f.files[id].post != "" })
	p := f.store(Post{ChannelID: in.ChannelID, UserID: f.botID, RootID: in.RootID, Message: in.Message, FileIDs: in.FileIDs, PendingPostID: in.PendingPostID,
		Props: in.Props})
	f.noteChannelWide(p.Message)
	if in.PendingPostID != "" {
		f.pending[in.PendingPostID] = p.ID
	}
	f.broadcastPosted(p)
	writeJSON(w, http.StatusCreated, p)
}

func (f *Fake) patchPost(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Message *string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.Message == nil {
		apiError(w, http.StatusBadRequest, "api.context.invalid_body_param.app_error", "Invalid or missing patch in request body.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.posts[r.PathValue("id")]
	switch {
	case !ok || p.DeleteAt != 0:
		apiError(w, http.StatusNotFound, "app.post.get.app_error", "Unable to get the post.")
		return
	case p.UserID != f.botID:
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	case utf8.RuneCountInString(*in.Message) > maxPostRunes:
		apiError(w, http.StatusBadRequest, "model.post.is_valid.message_length.app_error", "Message property length is greater than the maximum allowed length.")
		return
	}
	p.Message, p.EditAt = *in.Message, f.now()
	p.UpdateAt = p.EditAt
	f.noteChannelWide(p.Message)
	b, _ := json.Marshal(p)
	f.broadcast("post_edited", map[string]any{"post": string(b)}, p.ChannelID)
	writeJSON(w, http.StatusOK, p)
}

func (f *Fake) deletePost(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.posts[r.PathValue("id")]
	if !ok || p.DeleteAt != 0 {
		apiError(w, http.StatusNotFound, "app.post.get.app_error", "Unable to get the post.")
		return
	}
	p.DeleteAt = f.now()
	p.UpdateAt = p.DeleteAt
	b, _ := json.Marshal(p)
	f.broadcast("post_deleted", map[string]any{"post": string(b)}, p.ChannelID)
	writeJSON(w, http.StatusOK, map[string]string{"status": "OK"})
}

func (f *Fake) userTyping(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ChannelID string `json:"channel_id"`
		ParentID  string `json:"parent_id"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&in); err != nil || in.ChannelID == "" {
		apiError(w, http.StatusBadRequest, "api.context.invalid_body_param.app_error", "Invalid or missing channel_id in request body.")
		return
	}
	if id := r.PathValue("id"); id != f.botID && id != "me" {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.channels[in.ChannelID]; !ok {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	f.typing[in.ChannelID]++
	f.typingIn[in.ChannelID+"/"+in.ParentID]++
	writeJSON(w, http.StatusOK, map[string]string{"status": "OK"})
}

func (f *Fake) addReaction(w http.ResponseWriter, r *http.Request) {
	var in struct {
		UserID    string `json:"user_id"`
		PostID    string `json:"post_id"`
		EmojiName string `json:"emoji_name"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&in); err != nil || in.EmojiName == "" {
		apiError(w, http.StatusBadRequest, "api.context.invalid_body_param.app_error", "Invalid or missing reaction in request body.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.UserID != f.botID {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	if _, ok := f.posts[in.PostID]; !ok {
		apiError(w, http.StatusNotFound, "app.post.get.app_error", "Unable to get the post.")
		return
	}
	if !slices.Contains(f.reactions[in.PostID], in.EmojiName) {
		f.reactions[in.PostID] = append(f.reactions[in.PostID], in.EmojiName)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"user_id": in.UserID, "post_id": in.PostID, "emoji_name": in.EmojiName, "create_at": f.now()})
}

func (f *Fake) removeReaction(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.PathValue("uid") != f.botID {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	pid, emoji := r.PathValue("pid"), r.PathValue("emoji")
	f.reactions[pid] = slices.DeleteFunc(f.reactions[pid], func(e string) bool { return e == emoji })
	writeJSON(w, http.StatusOK, map[string]string{"status": "OK"})
}

func (f *Fake) upload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		apiError(w, http.StatusBadRequest, "api.file.upload_file.read_request.app_error", "Unable to upload file(s). Error reading or parsing request data.")
		return
	}
	ch := r.FormValue("channel_id")
	f.mu.Lock()
	_, ok := f.channels[ch]
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	var infos []FileInfo
	for _, fh := range r.MultipartForm.File["files"] {
		rd, err := fh.Open()
		if err != nil {
			apiError(w, http.StatusBadRequest, "api.file.upload_file.read_request.app_error", err.Error())
			return
		}
		data, _ := io.ReadAll(rd)
		_ = rd.Close()
		f.mu.Lock()
		infos = append(infos, f.putFile(fh.Filename, fh.Header.Get("Content-Type"), data))
		f.mu.Unlock()
	}
	if len(infos) == 0 {
		apiError(w, http.StatusBadRequest, "api.file.upload_file.incorrect_number_of_files.app_error", "Unable to upload files. Incorrect number of files specified.")
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"file_infos": infos, "client_ids": []string{}})
}

func (f *Fake) fileInfo(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fl, ok := f.files[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "app.file_info.get.app_error", "Unable to get the file info.")
		return
	}
	writeJSON(w, http.StatusOK, fl.info)
}

func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fl, ok := f.files[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "app.file_info.get.app_error", "Unable to get the file info.")
		return
	}
	w.Header().Set("Content-Type", fl.info.MimeType)
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment;filename=%q", fl.info.Name))
	_, _ = w.Write(fl.data)
}

func (f *Fake) channelPosts(w http.ResponseWriter, r *http.Request) {
	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := r.PathValue("id")
	if _, ok := f.channels[ch]; !ok {
		apiError(w, http.StatusForbidden, "api.context.permissions.app_error", "You do not have the appropriate permissions.")
		return
	}
	out := map[string]any{}
	order := []string{}
	posts := map[string]*Post{}
	for i := len(f.order) - 1; i >= 0; i-- {
		p := f.posts[f.order[i]]
		if p.ChannelID == ch && p.UpdateAt >= since {
			order = append(order, p.ID)
			posts[p.ID] = p
		}
	}
	out["order"], out["posts"], out["next_post_id"], out["prev_post_id"] = order, posts, "", ""
	writeJSON(w, http.StatusOK, out)
}

// websocket serves /api/v4/websocket: the first message must be the
// authentication_challenge with the token; then hello and the events.
//
// A request with the token as a bearer token is authenticated as it is
// upgraded (a wrong one is answered 401), and the challenge, if sent,
// goes unanswered. Such a request may name the connection it resumes
// (connection_id, and sequence_number the seq of the first event it
// has not had): when the fake still has that connection and the events
// from there on, it sends them again and goes on numbering, without a
// hello; otherwise the connection is a new one.
func (f *Fake) websocket(w http.ResponseWriter, r *http.Request) {
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if !f.tokenOK(bearer) {
			apiError(w, http.StatusUnauthorized, "api.context.session_expired.app_error", "Invalid or expired session, please login again.")
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		q := r.URL.Query()
		f.serveConn(c, f.resume(c, q.Get("connection_id"), q.Get("sequence_number")), 0)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	_, raw, err := c.Read(ctx)
	cancel()
	if err != nil {
		return
	}
	var auth struct {
		Seq    int64  `json:"seq"`
		Action string `json:"action"`
		Data   struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	if json.Unmarshal(raw, &auth) != nil || auth.Action != "authentication_challenge" || !f.tokenOK(auth.Data.Token) {
		b, _ := json.Marshal(map[string]any{"status": "FAIL", "seq_reply": auth.Seq, "error": map[string]any{
			"id": "api.web_socket_router.not_authenticated.app_error", "message": "authentication failed", "status_code": 401}})
		_ = c.Write(r.Context(), websocket.MessageText, b)
		_ = c.Close(websocket.StatusPolicyViolation, "not authenticated")
		return
	}
	// As the server does (web_socket_router.go, hub.go): the connection
	// is registered with the hub, which says hello and from then on
	// sends it the events, before the answer to the challenge is sent.
	f.mu.Lock()
	conn := f.newConn(c)
	f.mu.Unlock()
	f.serveConn(c, conn, auth.Seq)
}

// newConn registers a new connection and says hello; f.mu held.
func (f *Fake) newConn(c *websocket.Conn) *wsConn {
	conn := &wsConn{c: c, out: make(chan []byte, 1024), done: make(chan struct{}), id: newID()}
	conn.out <- conn.event("hello", map[string]any{"server_version": "10.5.0.fake", "connection_id": conn.id},
		map[string]any{"user_id": f.botID})
	f.conns[conn] = true
	f.accepted++
	return conn
}

// resume registers the connection id names from the event numbered
// seq on, sending the events from there again, or a new connection when
// it has not got them.
func (f *Fake) resume(c *websocket.Conn, id, seq string) *wsConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.inactive[id]
	next, err := strconv.ParseInt(seq, 10, 64)
	if old == nil || err != nil || next > old.seq || (next < old.seq && (len(old.log) == 0 || next < old.log[0].seq)) {
		return f.newConn(c)
	}
	delete(f.inactive, id)
	conn := &wsConn{c: c, out: make(chan []byte, 1024), done: make(chan struct{}), id: id, seq: old.seq, log: old.log}
	for _, e := range old.log {
		if e.seq >= next {
			conn.out <- e.b
		}
	}
	f.conns[conn] = true
	f.accepted++
	f.resumed++
	return conn
}

// serveConn writes a registered connection's events until it ends; a
// challenge seq is answered first (after authReplyDelay).
func (f *Fake) serveConn(c *websocket.Conn, conn *wsConn, challenge int64) {
	if challenge != 0 {
		f.mu.Lock()
		delay := f.authReplyDelay
		f.mu.Unlock()
		if delay > 0 {
			time.Sleep(delay)
		}
		ok, _ := json.Marshal(map[string]any{"status": "OK", "seq_reply": challenge})
		f.mu.Lock()
		conn.send(ok)
		f.mu.Unlock()
	}
	defer func() {
		f.mu.Lock()
		f.deactivate(conn)
		f.mu.Unlock()
	}()
	go func() {
		defer close(conn.done)
		for {
			// Reading answers the client's pings; its actions are ignored.
			if _, _, err := c.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-conn.done:
			return
		case b := <-conn.out:
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				return
			}
		}
	}
}

// ChannelWide returns the messages of the bot's posts and edits that
// notified a whole channel (@channel, @all or @here, as the server finds
// them), in order.
func (f *Fake) ChannelWide() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.channelWide)
}

func (f *Fake) noteChannelWide(message string) {
	if channelMentioned(message) {
		f.channelWide = append(f.channelWide, message)
	}
}

// What the server leaves out before looking for mentions
// (removeCodeFromMessage in its app/notification.go).
var (
	codeBlock  = regexp.MustCompile("(?m)^[^\\S\n]*[\\`~]{3}.*$[\\s\\S]+?(^[^\\S\n]*[`~]{3}$|\\z)")
	inlineCode = regexp.MustCompile("(?m)\\`+(?:.+?|.*?\n(.*?\\S.*?\n)*.*?)\\`+")
)

// channelMentioned is the server's test for a channel-wide mention
// (GetExplicitMentions): code removed, the message split into words at
// anything but letters, digits and ":.-_@", each word also split at
// ".", "-" and ":", a word equal to @here, @channel or @all (the
// keywords are matched without regard to case).
func channelMentioned(message string) bool {
	if strings.Contains(message, "```") || strings.Contains(message, "~~~") {
		message = codeBlock.ReplaceAllString(message, "")
	}
	if strings.Contains(message, "`") {
		message = inlineCode.ReplaceAllString(message, " ")
	}
	special := func(w string) bool {
		switch strings.ToLower(w) {
		case "@here", "@channel", "@all":
			return true
		}
		return false
	}
	for _, word := range strings.FieldsFunc(message, func(c rune) bool {
		return !(c == ':' || c == '.' || c == '-' || c == '_' || c == '@' || unicode.IsLetter(c) || unicode.IsNumber(c))
	}) {
		if special(word) {
			return true
		}
		for _, sub := range strings.FieldsFunc(word, func(c rune) bool { return c == '.' || c == '-' || c == ':' }) {
			if special(sub) {
				return true
			}
		}
	}
	return false
}
