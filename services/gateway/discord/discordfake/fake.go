// Package discordfake is a local Discord for tests: the REST calls the
// gateway makes (gateway URL, current user, channels, create/edit/delete
// message (with button components, and a nonce that enforce_nonce makes
// Discord check: a repeat within nonceWindow returns the message made
// first), typing, thread start, the bot's own
// reactions, interaction callbacks, the application's global commands
// (list, bulk overwrite validated as Discord validates it, options and
// choices kept), an interaction's response message (edit, delete,
// followups with their flags, the first followup of a deferred response
// taking its place, tokens that expire), 429s with
// rate-limit bucket headers and retry_after) and a gateway websocket (HELLO, IDENTIFY, READY with
// session_id and resume_gateway_url, HEARTBEAT/ACK, dispatches with
// sequence numbers, RESUME replaying missed events, drops on demand,
// button presses and slash commands as INTERACTION_CREATE), a CDN serving message
// attachments at signed URLs, and create message answers lost on demand
// (LoseCreateAnswerAfter).
package discordfake

import (
	"context"
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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Channel types as Discord numbers them.
const (
	TypeGuildText    = 0
	TypeDM           = 1
	TypePublicThread = 11
	TypeGuildForum   = 15
	TypeGuildMedia   = 16
)

// Fake is one Discord with one bot.
type Fake struct {
	Token   string
	BotID   string // the bot user id, equal to the application id
	BotName string

	srv *httptest.Server
	ids atomic.Int64

	mu           sync.Mutex
	channels     map[string]map[string]any
	messages     map[string][]*Message // channel → messages the bot posted
	typing       map[string]int
	rateLimit    float64 // the next create message answers 429 with this retry_after (s)
	rateSkip     int     // creates that go through before rateLimit applies
	conns        int
	identifies   int
	resumes      int
	cur          *gwConn
	connected    chan struct{}
	sessionID    string
	log          []frame // dispatches of the current session, by sequence
	overlap      int     // on resume, replay this many events the client already saw
	requests     []string
	files        map[string]cdnFile // CDN path → attachment
	downloads    int
	cdnFails     []CDNFailure        // the answers of the next CDN requests, in order, before files are served again
	withToken    int                 // CDN requests that carried an Authorization header
	refreshes    int                 // URLs asked of POST /attachments/refresh-urls
	reactions    map[string][]string // channel/message → the bot's reactions, in order
	reactCalls   int
	reactFail    int                     // reaction requests answer this status (429, 500 …); 0: they succeed
	interactions map[string]*interaction // id → a press the fake dispatched
	noThreads    map[string]bool         // channels where the bot may not open threads
	commands     []map[string]any        // the application's global commands
	overwrites   int                     // bulk overwrites Discord accepted
	refusedPuts  int                     // bulk overwrites refused (400)
	followupFail int                     // the next followup answers this status (429, 500); 0: none
	deleteDelay  time.Duration           // deleting a response message takes this long
	loseAnswer   bool                    // a create message's answer is lost (the message is made, the connection closed) …
	loseSkip     int                     // … once this many more creates were answered
}

// nonceWindow is how long Discord remembers a message's nonce for
// enforce_nonce ("the past few minutes").
const nonceWindow = 2 * time.Minute

// LoseCreateAnswerAfter lets the next n create messages that Discord
// carries out be answered and makes the one after them lose its
// answer: the message is made (or, with a nonce seen before, found),
// and the connection closes before the response is written, as a
// connection reset after the request went through.
func (f *Fake) LoseCreateAnswerAfter(n int) {
	f.mu.Lock()
	f.loseAnswer, f.loseSkip = true, n
	f.mu.Unlock()
}

// FailNextFollowup makes the next followup answer status: 429 (rate
// limited, retry_after 0.05 s, as Discord answers it) or another error
// (500 …).
func (f *Fake) FailNextFollowup(status int) {
	f.mu.Lock()
	f.followupFail = status
	f.mu.Unlock()
}

// SlowDeletes makes deleting an interaction's response message take d
// (the request is answered after d), as a slow Discord would.
func (f *Fake) SlowDeletes(d time.Duration) {
	f.mu.Lock()
	f.deleteDelay = d
	f.mu.Unlock()
}

// DenyThreads takes the bot's permission to open threads in channel:
// starting one answers 403 Missing Permissions.
func (f *Fake) DenyThreads(channel string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noThreads == nil {
		f.noThreads = map[string]bool{}
	}
	f.noThreads[channel] = true
}

// interaction is a press or a slash command and the callbacks it got.
type interaction struct {
	token     string
	callbacks []int  // response types Discord accepted (one at most)
	flags     int    // the accepted callback's data.flags (64: ephemeral)
	content   string // the accepted callback's data.content
	refused   int    // callbacks refused as already acknowledged
	// original is the response message: "" none, "deferred" (type 5
	// acknowledged), "deleted", or its content after an edit (or after
	// the first followup of a deferred response, which takes its place).
	original  string
	followups []Followup
	expired   bool // the token no longer works (ExpireInteraction)
}

// Followup is a followup message of an interaction, as Discord took it.
type Followup struct {
	ID, Content string
	Flags       int // 64: ephemeral, seen by the invoker only
}

// cdnFile is an attachment the CDN serves.
type cdnFile struct {
	contentType string
	data        []byte
}

// Message is one message the bot posted.
type Message struct {
	ID, ChannelID, Content, ReplyTo string
	Edits                           int
	Deleted                         bool
	// Files are the files uploaded with it (a multipart create).
	Files []File
	// Buttons are the buttons of its action rows, in order; an edit with
	// components=[] takes them off, one without components keeps them.
	Buttons []Button
	// Menus are the string select menus of its action rows, in order,
	// kept and taken off as Buttons are.
	Menus []Menu
	// MentionEveryone, MentionRoles and Mentions are who the message
	// notifies, as Discord sets them from its content and the request's
	// allowed_mentions (re-parsed on every edit of the content).
	MentionEveryone bool
	MentionRoles    []string
	Mentions        []string
	// Nonce is the create request's nonce ("" none), and Created when
	// the message was made.
	Nonce   string
	Created time.Time
}

// allowedMentions is a request's allowed_mentions object.
type allowedMentions struct {
	Parse []string `json:"parse"`
	Roles []string `json:"roles"`
	Users []string `json:"users"`
}

var (
	everyoneMention = regexp.MustCompile(`@(everyone|here)`)
	roleMention     = regexp.MustCompile(`<@&(\d+)>`)
	userMention     = regexp.MustCompile(`<@!?(\d+)>`)
)

// valid reports what Discord refuses with 400: a type both parsed and
// listed by id.
func (a *allowedMentions) valid() bool {
	if a == nil {
		return true
	}
	return !(slices.Contains(a.Parse, "users") && len(a.Users) > 0) && !(slices.Contains(a.Parse, "roles") && len(a.Roles) > 0)
}

// mention sets who m notifies, as Discord does: without allowed_mentions
// every mention in the content; with it, the types in parse and the ids
// listed.
func (m *Message) mention(a *allowedMentions) {
	may := func(kind, id string, ids []string) bool {
		return a == nil || slices.Contains(a.Parse, kind) || id != "" && slices.Contains(ids, id)
	}
	m.MentionEveryone = everyoneMention.MatchString(m.Content) && may("everyone", "", nil)
	m.MentionRoles, m.Mentions = nil, nil
	var roles, users []string
	if a != nil {
		roles, users = a.Roles, a.Users
	}
	for _, r := range roleMention.FindAllStringSubmatch(m.Content, -1) {
		if may("roles", r[1], roles) && !slices.Contains(m.MentionRoles, r[1]) {
			m.MentionRoles = append(m.MentionRoles, r[1])
		}
	}
	for _, u := range userMention.FindAllStringSubmatch(m.Content, -1) {
		if may("users", u[1], users) && !slices.Contains(m.Mentions, u[1]) {
			m.Mentions = append(m.Mentions, u[1])
		}
	}
}

// File is a file uploaded with a message.
type File struct {
	Name, ContentType string
	Data              []byte
}

// maxUpload is the largest file Discord takes from a bot (10 MiB
// without a server boost); a larger one is 413 Request Entity Too Large.
// maxRequest is the largest create message request Discord takes, files
// and all (25 MiB, Discord's "maximum request size when sending a
// message"); a larger one is refused as a whole, 413 with code 40005.
// maxFiles is the most files a message takes; more are refused, 400
// Invalid Form Body (code 50035).
const (
	maxUpload  = 10 << 20
	maxRequest = 25 << 20
	maxFiles   = 10
)

// Button is a button component of a message.
type Button struct {
	Label    string
	Style    int
	CustomID string
	Disabled bool
}

// Menu is a string select menu of a message (component type 3).
type Menu struct {
	CustomID, Placeholder string
	Options               []MenuOption
	Disabled              bool
}

// MenuOption is one option of a select menu.
type MenuOption struct {
	Label, Value, Description string
	Default                   bool
}

// component is one component of an action row, as a create or edit
// message body has it: a button (type 2) or a string select menu
// (type 3).
type component struct {
	Type        int    `json:"type"`
	Label       string `json:"label"`
	Style       int    `json:"style"`
	CustomID    string `json:"custom_id"`
	Disabled    bool   `json:"disabled"`
	Placeholder string `json:"placeholder"`
	MinValues   *int   `json:"min_values"`
	MaxValues   *int   `json:"max_values"`
	Options     []struct {
		Label       string `json:"label"`
		Value       string `json:"value"`
		Description string `json:"description"`
		Default     bool   `json:"default"`
	} `json:"options"`
}

// components is the components field of a create or edit message body.
type components []struct {
	Type       int         `json:"type"`
	Components []component `json:"components"`
}

// valid reports what Discord refuses with 400: more than five action
// rows or five buttons in a row, a button without a label or with one
// past 80 characters, a custom_id empty, past 100 characters or used
// twice in the message; a select menu that is not alone in its row,
// with no option or more than 25, a placeholder past 150 characters,
// min_values or max_values outside 0–25 (1–25 for max), an option's
// label or value empty or past 100 characters, its description past
// 100, or two options of one value.
func (cs components) valid() bool {
	if len(cs) > 5 {
		return false
	}
	seen := map[string]bool{}
	for _, row := range cs {
		if len(row.Components) > 5 {
			return false
		}
		for _, c := range row.Components {
			if c.Type != 2 && c.Type != 3 {
				continue
			}
			if c.CustomID == "" || len(c.CustomID) > 100 || seen[c.CustomID] {
				return false
			}
			seen[c.CustomID] = true
			if c.Type == 2 {
				if n := len([]rune(c.Label)); n == 0 || n > 80 {
					return false
				}
				continue
			}
			if len(row.Components) != 1 || !c.validMenu() {
				return false
			}
		}
	}
	return true
}

// validMenu reports whether a select menu is one Discord takes.
func (c component) validMenu() bool {
	if len(c.Options) == 0 || len(c.Options) > 25 || len([]rune(c.Placeholder)) > 150 ||
		c.MinValues != nil && (*c.MinValues < 0 || *c.MinValues > 25) || c.MaxValues != nil && (*c.MaxValues < 1 || *c.MaxValues > 25) {
		return false
	}
	values := map[string]bool{}
	for _, o := range c.Options {
		if l, v := len([]rune(o.Label)), len([]rune(o.Value)); l == 0 || l > 100 || v == 0 || v > 100 || len([]rune(o.Description)) > 100 || values[o.Value] {
			return false
		}
		values[o.Value] = true
	}
	return true
}

// buttons lists the buttons of action rows.
func (cs components) buttons() []Button {
	var out []Button
	for _, row := range cs {
		for _, c := range row.Components {
			if row.Type == 1 && c.Type == 2 {
				out = append(out, Button{Label: c.Label, Style: c.Style, CustomID: c.CustomID, Disabled: c.Disabled})
			}
		}
	}
	return out
}

// menus lists the string select menus of action rows.
func (cs components) menus() []Menu {
	var out []Menu
	for _, row := range cs {
		for _, c := range row.Components {
			if row.Type != 1 || c.Type != 3 {
				continue
			}
			m := Menu{CustomID: c.CustomID, Placeholder: c.Placeholder, Disabled: c.Disabled}
			for _, o := range c.Options {
				m.Options = append(m.Options, MenuOption{Label: o.Label, Value: o.Value, Description: o.Description, Default: o.Default})
			}
			out = append(out, m)
		}
	}
	return out
}

type frame struct {
	seq  int
	data []byte
}

// New starts a fake Discord; it stops when the test ends.
func New(t testing.TB) *Fake {
	f := &Fake{
		Token: "fake-bot-token", BotID: "100000000000000001", BotName: "switchboard",
		channels: map[string]map[string]any{}, messages: map[string][]*Message{}, typing: map[string]int{},
		files: map[string]cdnFile{}, connected: make(chan struct{}), reactions: map[string][]string{},
		interactions: map[string]*interaction{},
	}
	f.ids.Store(800000000000000000)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v9/gateway", f.gateway)
	mux.HandleFunc("GET /api/v9/gateway/bot", f.gateway)
	mux.HandleFunc("GET /api/v9/users/@me", f.me)
	mux.HandleFunc("GET /api/v9/channels/{id}", f.channel)
	mux.HandleFunc("POST /api/v9/channels/{id}/messages", f.createMessage)
	mux.HandleFunc("PATCH /api/v9/channels/{id}/messages/{mid}", f.editMessage)
	mux.HandleFunc("DELETE /api/v9/channels/{id}/messages/{mid}", f.deleteMessage)
	mux.HandleFunc("POST /api/v9/channels/{id}/typing", f.trigger)
	mux.HandleFunc("POST /api/v9/channels/{id}/messages/{mid}/threads", f.startThread)
	mux.HandleFunc("PUT /api/v9/channels/{id}/messages/{mid}/reactions/{emoji}/@me", f.react)
	mux.HandleFunc("DELETE /api/v9/channels/{id}/messages/{mid}/reactions/{emoji}/@me", f.react)
	mux.HandleFunc("POST /api/v9/interactions/{id}/{token}/callback", f.callback)
	mux.HandleFunc("GET /api/v9/applications/{app}/commands", f.listCommands)
	mux.HandleFunc("PUT /api/v9/applications/{app}/commands", f.overwriteCommands)
	mux.HandleFunc("PATCH /api/v9/webhooks/{app}/{token}/messages/@original", f.original)
	mux.HandleFunc("DELETE /api/v9/webhooks/{app}/{token}/messages/@original", f.original)
	mux.HandleFunc("POST /api/v9/webhooks/{app}/{token}", f.followup)
	mux.HandleFunc("GET /attachments/{channel}/{id}/{name}", f.cdn)
	mux.HandleFunc("POST /api/v9/attachments/refresh-urls", f.refreshURLs)
	mux.HandleFunc("/ws/", f.ws)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Recorded before routing, so a request for a path the fake does
		// not serve is seen too.
		if !strings.HasPrefix(r.URL.Path, "/ws/") {
			f.mu.Lock()
			f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
			f.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		f.Drop()
		f.srv.Close()
	})
	return f
}

// URL is the base URL that replaces https://discord.com.
func (f *Fake) URL() string { return f.srv.URL }

// NewID returns a fresh snowflake-shaped id.
func (f *Fake) NewID() string { return strconv.FormatInt(f.ids.Add(1), 10) }

// AddChannel registers a channel (type: TypeGuildText, TypeDM,
// TypePublicThread …); parent is the thread's channel.
func (f *Fake) AddChannel(id string, typ int, guild, parent string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := map[string]any{"id": id, "type": typ}
	if guild != "" {
		c["guild_id"] = guild
	}
	if parent != "" {
		c["parent_id"] = parent
	}
	f.channels[id] = c
}

// NullChannel makes the lookup of channel id answer 200 with the body
// null, a broken answer that reaches the gateway as a nil channel.
func (f *Fake) NullChannel(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.channels[id] = nil
}

// Channel returns a copy of a channel as the fake serves it (nil when
// there is none).
func (f *Fake) Channel(id string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.channels[id]
	if !ok {
		return nil
	}
	out := make(map[string]any, len(c))
	for k, v := range c {
		out[k] = v
	}
	return out
}

// RateLimitNext makes the next create message answer 429 with retry_after.
func (f *Fake) RateLimitNext(retryAfter time.Duration) {
	f.mu.Lock()
	f.rateLimit = retryAfter.Seconds()
	f.rateSkip = 0
	f.mu.Unlock()
}

// RateLimitAfter lets the next n create messages through and makes the
// one after them answer 429 with retry_after.
func (f *Fake) RateLimitAfter(n int, retryAfter time.Duration) {
	f.mu.Lock()
	f.rateLimit, f.rateSkip = retryAfter.Seconds(), n
	f.mu.Unlock()
}

// ReplayOverlap makes the next RESUME also replay the last n events the
// client already received, as Discord may.
func (f *Fake) ReplayOverlap(n int) {
	f.mu.Lock()
	f.overlap = n
	f.mu.Unlock()
}

// Messages returns what the bot posted in a channel.
func (f *Fake) Messages(channel string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Message
	for _, m := range f.messages[channel] {
		out = append(out, *m)
	}
	return out
}

// Requests returns every REST and CDN request received so far ("METHOD
// /request/uri"), in order; gateway websocket connections are not listed.
func (f *Fake) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// Typing counts typing triggers in a channel.
func (f *Fake) Typing(channel string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typing[channel]
}

// Stats counts gateway connections, identifies and resumes.
func (f *Fake) Stats() (conns, identifies, resumes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.identifies, f.resumes
}

// AddAttachment puts data on the CDN as the attachment of a message in
// channel and returns it for MessageCreate.Attachments. Its URL is signed
// as Discord's are (?ex=…&is=…&hm=…), so fetching it takes no token; a URL
// with a wrong signature, or of a file the CDN does not hold, answers 404
// as Discord's CDN does, and so does one whose signature expired (Expire).
func (f *Fake) AddAttachment(channel, filename, contentType string, data []byte) Attachment {
	id := f.NewID()
	path := "/attachments/" + channel + "/" + id + "/" + url.PathEscape(filename)
	f.mu.Lock()
	f.files[path] = cdnFile{contentType: contentType, data: append([]byte(nil), data...)}
	f.mu.Unlock()
	return Attachment{ID: id, Filename: filename, ContentType: contentType, Size: len(data),
		URL: f.signed(path, time.Now().Add(24*time.Hour))}
}

// signed is the CDN URL of path, signed to expire at ex.
func (f *Fake) signed(path string, expires time.Time) string {
	ex, is := strconv.FormatInt(expires.Unix(), 16), strconv.FormatInt(time.Now().Unix(), 16)
	return f.srv.URL + path + "?ex=" + ex + "&is=" + is + "&hm=" + sign(path, ex, is) + "&"
}

// Expire returns a with a URL whose signature expired (ex an hour ago), as
// a message's URLs are a day after it was sent: the CDN answers 404 and
// POST /attachments/refresh-urls signs it anew.
func (f *Fake) Expire(a Attachment) Attachment {
	u, err := url.Parse(a.URL)
	if err != nil {
		panic(err)
	}
	a.URL = f.signed(u.EscapedPath(), time.Now().Add(-time.Hour))
	return a
}

// Refreshes counts the URLs POST /attachments/refresh-urls was asked for.
func (f *Fake) Refreshes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refreshes
}

// refreshURLs signs anew the URLs of the files the CDN holds, by path,
// whatever their signature, as Discord does; any other URL comes back as
// it was.
func (f *Fake) refreshURLs(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	var req struct {
		URLs []string `json:"attachment_urls"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.URLs) == 0 || len(req.URLs) > 50 {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	out := []map[string]string{}
	f.mu.Lock()
	f.refreshes += len(req.URLs)
	for _, s := range req.URLs {
		fresh := s
		if u, err := url.Parse(s); err == nil {
			if _, ok := f.files[u.EscapedPath()]; ok {
				fresh = f.signed(u.EscapedPath(), time.Now().Add(24*time.Hour))
			}
		}
		out = append(out, map[string]string{"original": s, "refreshed": fresh})
	}
	f.mu.Unlock()
	writeJSON(w, 200, map[string]any{"refreshed_urls": out})
}

// sign is the hm of a CDN URL.
func sign(path, ex, is string) string {
	sum := sha256.Sum256([]byte("discordfake-cdn:" + path + ":" + ex + ":" + is))
	return hex.EncodeToString(sum[:])
}

// Downloads counts CDN requests, and those of them that carried an
// Authorization header (Discord's CDN URLs are signed; a client sends none).
func (f *Fake) Downloads() (n, withToken int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads, f.withToken
}

// CDNFailure is an answer of the CDN other than the file: a status
// (429, 502, 503 …) with the Retry-After it names ("": none).
type CDNFailure struct {
	Status     int
	RetryAfter string
}

// FailCDN makes the next CDN requests, one each, answer these failures;
// the ones after them are served as before.
func (f *Fake) FailCDN(fails ...CDNFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cdnFails = append(f.cdnFails, fails...)
}

func (f *Fake) cdn(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	f.downloads++
	if r.Header.Get("Authorization") != "" {
		f.withToken++
	}
	file, ok := f.files[r.URL.EscapedPath()]
	var fail *CDNFailure
	if len(f.cdnFails) > 0 {
		fail = &f.cdnFails[0]
		f.cdnFails = f.cdnFails[1:]
	}
	f.mu.Unlock()
	if fail != nil {
		if fail.RetryAfter != "" {
			w.Header().Set("Retry-After", fail.RetryAfter)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(fail.Status)
		_, _ = io.WriteString(w, http.StatusText(fail.Status))
		return
	}
	ex, err := strconv.ParseInt(q.Get("ex"), 16, 64)
	if !ok || q.Get("hm") != sign(r.URL.EscapedPath(), q.Get("ex"), q.Get("is")) || err != nil || time.Now().Unix() >= ex {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "This content is no longer available.")
		return
	}
	w.Header().Set("Content-Type", file.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(file.data)))
	_, _ = w.Write(file.data)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bot "+f.Token {
		writeJSON(w, 401, map[string]any{"message": "401: Unauthorized", "code": 0})
		return false
	}
	return true
}

func (f *Fake) gateway(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"url": f.wsURL(), "shards": 1,
		"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})
}

func (f *Fake) wsURL() string { return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/ws/" }

func (f *Fake) user() map[string]any {
	return map[string]any{"id": f.BotID, "username": f.BotName, "discriminator": "0", "bot": true}
}

func (f *Fake) me(w http.ResponseWriter, r *http.Request) {
	if f.authorized(w, r) {
		writeJSON(w, 200, f.user())
	}
}

func unknownChannel(w http.ResponseWriter) {
	writeJSON(w, 404, map[string]any{"message": "Unknown Channel", "code": 10003})
}

func (f *Fake) channel(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	c, ok := f.channels[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		unknownChannel(w)
		return
	}
	writeJSON(w, 200, c)
}

func (f *Fake) createMessage(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	var body struct {
		Content string `json:"content"`
		Ref     *struct {
			MessageID string `json:"message_id"`
		} `json:"message_reference"`
		Components      components       `json:"components"`
		AllowedMentions *allowedMentions `json:"allowed_mentions"`
		Nonce           json.RawMessage  `json:"nonce"`
		EnforceNonce    bool             `json:"enforce_nonce"`
	}
	// A message with files is multipart: payload_json and files[n].
	var files []File
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		if r.ContentLength > maxRequest {
			writeJSON(w, 413, map[string]any{"message": "Request entity too large", "code": 40005})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
		if err := r.ParseMultipartForm(4 * maxUpload); err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeJSON(w, 413, map[string]any{"message": "Request entity too large", "code": 40005})
				return
			}
			writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
			return
		}
		if err := json.Unmarshal([]byte(r.FormValue("payload_json")), &body); err != nil {
			writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
			return
		}
		for i := 0; ; i++ {
			fhs := r.MultipartForm.File["files["+strconv.Itoa(i)+"]"]
			if len(fhs) == 0 {
				break
			}
			if fhs[0].Size > maxUpload {
				writeJSON(w, 413, map[string]any{"message": "Request entity too large", "code": 40005})
				return
			}
			fr, err := fhs[0].Open()
			if err != nil {
				writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
				return
			}
			data, _ := io.ReadAll(fr)
			_ = fr.Close()
			files = append(files, File{Name: fhs[0].Filename, ContentType: fhs[0].Header.Get("Content-Type"), Data: data})
		}
		if len(files) > maxFiles {
			writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035, "errors": map[string]any{
				"attachments": map[string]any{"_errors": []any{map[string]any{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 10 or fewer in length."}}}}})
			return
		}
	} else if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	ch := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	bucket := "bucket-" + ch
	w.Header().Set("X-RateLimit-Bucket", bucket)
	w.Header().Set("X-RateLimit-Limit", "5")
	if ra := f.rateLimit; ra > 0 && f.rateSkip == 0 {
		f.rateLimit = 0
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", strconv.FormatFloat(ra, 'f', 3, 64))
		w.Header().Set("X-RateLimit-Scope", "user")
		w.Header().Set("Retry-After", strconv.Itoa(int(ra+0.999)))
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": ra, "global": false})
		return
	}
	if f.rateSkip > 0 {
		f.rateSkip--
	}
	w.Header().Set("X-RateLimit-Remaining", "4")
	w.Header().Set("X-RateLimit-Reset-After", "0.001")
	c, ok := f.channels[ch]
	if !ok {
		unknownChannel(w)
		return
	}
	if typ, _ := c["type"].(int); typ == TypeGuildForum || typ == TypeGuildMedia {
		// A forum (or media) channel takes posts (threads), not messages.
		writeJSON(w, 400, map[string]any{"message": "Cannot send messages in a non-text channel", "code": 50008})
		return
	}
	if n := len([]rune(body.Content)); (n == 0 && len(files) == 0) || n > 2000 {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	if !body.Components.valid() {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	if !body.AllowedMentions.valid() {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	nonce, ok := readNonce(body.Nonce)
	if !ok {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035,
			"errors": map[string]any{"nonce": map[string]any{"_errors": []map[string]any{{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 25 or fewer in length."}}}}})
		return
	}
	now := time.Now()
	m := f.sameNonce(nonce, now)
	if m == nil || !body.EnforceNonce {
		m = &Message{ID: f.NewID(), ChannelID: ch, Content: body.Content, Buttons: body.Components.buttons(), Menus: body.Components.menus(), Files: files,
			Nonce: nonce, Created: now}
		m.mention(body.AllowedMentions)
		if body.Ref != nil {
			m.ReplyTo = body.Ref.MessageID
		}
		f.messages[ch] = append(f.messages[ch], m)
	}
	if f.loseAnswer {
		if f.loseSkip == 0 {
			f.loseAnswer = false
			hangUp(w)
			return
		}
		f.loseSkip--
	}
	answer := map[string]any{"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": 0,
		"author": f.user(), "timestamp": m.Created.UTC().Format(time.RFC3339)}
	if m.Nonce != "" {
		answer["nonce"] = m.Nonce
	}
	writeJSON(w, 200, answer)
}

// readNonce reads a create message's nonce, an integer or a string of
// up to 25 characters, as Discord takes it (ok false: Discord refuses
// it); absent or null is "".
func readNonce(raw json.RawMessage) (nonce string, ok bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, len([]rune(s)) <= 25
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if _, err := n.Int64(); err == nil {
			return n.String(), true
		}
	}
	return "", false
}

// sameNonce is the bot's message created with nonce within nonceWindow
// before now, in any channel (Discord checks the nonce per author), or
// nil. Called with f.mu held.
func (f *Fake) sameNonce(nonce string, now time.Time) *Message {
	if nonce == "" {
		return nil
	}
	for _, ms := range f.messages {
		for _, m := range ms {
			if m.Nonce == nonce && now.Sub(m.Created) < nonceWindow {
				return m
			}
		}
	}
	return nil
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = c.Close()
		return
	}
	panic(http.ErrAbortHandler)
}

func (f *Fake) find(ch, id string) *Message {
	for _, m := range f.messages[ch] {
		if m.ID == id && !m.Deleted {
			return m
		}
	}
	return nil
}

func (f *Fake) editMessage(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	var body struct {
		Content         string           `json:"content"`
		Components      *components      `json:"components"`
		AllowedMentions *allowedMentions `json:"allowed_mentions"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if !body.AllowedMentions.valid() || body.Components != nil && !body.Components.valid() {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(r.PathValue("id"), r.PathValue("mid"))
	if m == nil {
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
		return
	}
	m.Content = body.Content
	// The content's mentions are parsed afresh, by the edit's own
	// allowed_mentions or else the defaults (all of them), whatever
	// the message was created with.
	m.mention(body.AllowedMentions)
	if body.Components != nil {
		m.Buttons, m.Menus = body.Components.buttons(), body.Components.menus()
	}
	m.Edits++
	writeJSON(w, 200, map[string]any{"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": 0, "author": f.user()})
}

func (f *Fake) deleteMessage(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(r.PathValue("id"), r.PathValue("mid"))
	if m == nil {
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
		return
	}
	m.Deleted = true
	w.WriteHeader(http.StatusNoContent)
}

func (f *Fake) trigger(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.channels[r.PathValue("id")]; !ok {
		unknownChannel(w)
		return
	}
	f.typing[r.PathValue("id")]++
	w.WriteHeader(http.StatusNoContent)
}

// startThread opens a thread from a message; its id is the message id.
func (f *Fake) startThread(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	ch, mid := r.PathValue("id"), r.PathValue("mid")
	f.mu.Lock()
	parent, ok := f.channels[ch]
	denied := f.noThreads[ch]
	f.mu.Unlock()
	if !ok {
		unknownChannel(w)
		return
	}
	if denied {
		writeJSON(w, 403, map[string]any{"message": "Missing Permissions", "code": 50013})
		return
	}
	f.mu.Lock()
	_, exists := f.channels[mid]
	f.mu.Unlock()
	if exists {
		writeJSON(w, 400, map[string]any{"message": "A thread has already been created for this message", "code": 160004})
		return
	}
	var start struct {
		Name string `json:"name"`
	}
	_ = json.NewDecoder(r.Body).Decode(&start)
	guild, _ := parent["guild_id"].(string)
	f.AddChannel(mid, TypePublicThread, guild, ch)
	f.mu.Lock()
	c := f.channels[mid]
	c["owner_id"] = f.BotID // the thread's creator
	c["name"] = start.Name
	f.mu.Unlock()
	writeJSON(w, 201, c)
}

// Reactions returns the bot's reactions on a message, in the order added.
func (f *Fake) Reactions(channel, message string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reactions[channel+"/"+message]...)
}

// ReactionCalls counts reaction requests (adds and removes, failed ones
// included).
func (f *Fake) ReactionCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reactCalls
}

// FailReactions makes every reaction request answer status (429 with a
// rate-limit bucket and retry_after, or an error such as 500); 0 lets
// them succeed again.
func (f *Fake) FailReactions(status int) {
	f.mu.Lock()
	f.reactFail = status
	f.mu.Unlock()
}

// react adds (PUT) or removes (DELETE) the bot's reaction; adding one
// that is there and removing one that is not both answer 204, as on
// Discord.
func (f *Fake) react(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	ch, mid, emoji := r.PathValue("id"), r.PathValue("mid"), r.PathValue("emoji")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reactCalls++
	w.Header().Set("X-RateLimit-Bucket", "reactions-"+ch)
	w.Header().Set("X-RateLimit-Limit", "1")
	switch f.reactFail {
	case 0:
	case http.StatusTooManyRequests:
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", "0.050")
		w.Header().Set("X-RateLimit-Scope", "user")
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": 0.05, "global": false})
		return
	default:
		writeJSON(w, f.reactFail, map[string]any{"message": http.StatusText(f.reactFail), "code": 0})
		return
	}
	w.Header().Set("X-RateLimit-Remaining", "1")
	w.Header().Set("X-RateLimit-Reset-After", "0.001")
	if _, ok := f.channels[ch]; !ok {
		unknownChannel(w)
		return
	}
	k := ch + "/" + mid
	have := slices.Contains(f.reactions[k], emoji)
	switch {
	case r.Method == http.MethodPut && !have:
		f.reactions[k] = append(f.reactions[k], emoji)
	case r.Method == http.MethodDelete:
		f.reactions[k] = slices.DeleteFunc(f.reactions[k], func(e string) bool { return e == emoji })
	}
	w.WriteHeader(http.StatusNoContent)
}

// gwConn is one gateway websocket.
type gwConn struct {
	c    *websocket.Conn
	wmu  sync.Mutex
	done chan struct{}
	live bool // identified or resumed: dispatches flow
}

func (g *gwConn) send(ctx context.Context, v any) error {
	data, _ := json.Marshal(v)
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.c.Write(ctx, websocket.MessageText, data)
}

func (f *Fake) ws(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	ctx := r.Context()
	g := &gwConn{c: c, done: make(chan struct{})}
	defer close(g.done)
	f.mu.Lock()
	f.conns++
	f.mu.Unlock()
	if g.send(ctx, map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": 41250}}) != nil {
		return
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			f.mu.Lock()
			if f.cur == g {
				f.cur = nil
			}
			f.mu.Unlock()
			return
		}
		var in struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(data, &in) != nil {
			_ = c.Close(4002, "Error while decoding payload.")
			return
		}
		switch in.Op {
		case 1: // heartbeat
			_ = g.send(ctx, map[string]any{"op": 11})
		case 2: // identify
			var id struct {
				Token string `json:"token"`
			}
			_ = json.Unmarshal(in.D, &id)
			if id.Token != f.Token && id.Token != "Bot "+f.Token {
				_ = c.Close(4004, "Authentication failed.")
				return
			}
			f.mu.Lock()
			f.identifies++
			f.sessionID = fmt.Sprintf("session-%d", f.identifies)
			f.log = nil
			ready := map[string]any{"v": 10, "user": f.user(), "session_id": f.sessionID, "resume_gateway_url": f.wsURL(),
				"guilds": []any{}, "application": map[string]any{"id": f.BotID, "flags": 0}}
			err := f.dispatchLocked(ctx, g, "READY", ready)
			f.attach(g)
			f.mu.Unlock()
			if err != nil {
				return
			}
		case 6: // resume
			var rs struct {
				Token     string `json:"token"`
				SessionID string `json:"session_id"`
				Seq       int    `json:"seq"`
			}
			_ = json.Unmarshal(in.D, &rs)
			f.mu.Lock()
			if rs.SessionID != f.sessionID || rs.SessionID == "" {
				f.mu.Unlock()
				_ = g.send(ctx, map[string]any{"op": 9, "d": false})
				continue
			}
			f.resumes++
			from := rs.Seq - f.overlap
			f.overlap = 0
			for _, fr := range f.log {
				if fr.seq > from {
					g.wmu.Lock()
					_ = g.c.Write(ctx, websocket.MessageText, fr.data)
					g.wmu.Unlock()
				}
			}
			err := f.dispatchLocked(ctx, g, "RESUMED", map[string]any{})
			f.attach(g)
			f.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// attach makes g the live connection; f.mu held.
func (f *Fake) attach(g *gwConn) {
	g.live = true
	f.cur = g
	close(f.connected)
	f.connected = make(chan struct{})
}

// dispatchLocked records and sends one dispatch; f.mu held.
func (f *Fake) dispatchLocked(ctx context.Context, g *gwConn, typ string, d any) error {
	seq := len(f.log) + 1
	data, _ := json.Marshal(map[string]any{"op": 0, "t": typ, "s": seq, "d": d})
	f.log = append(f.log, frame{seq: seq, data: data})
	if g == nil {
		return nil
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	return g.c.Write(ctx, websocket.MessageText, data)
}

// Dispatch sends an event (t = MESSAGE_CREATE …) with the next sequence
// number. With no live connection it is only recorded, and a RESUME
// replays it.
func (f *Fake) Dispatch(ctx context.Context, typ string, d any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.cur
	if g != nil && !g.live {
		g = nil
	}
	if err := f.dispatchLocked(ctx, g, typ, d); err != nil {
		f.cur = nil
		return nil // recorded; replayed on resume
	}
	return nil
}

// WaitConnected blocks until a connection identified or resumed.
func (f *Fake) WaitConnected(ctx context.Context) error {
	for {
		f.mu.Lock()
		cur, wait := f.cur, f.connected
		f.mu.Unlock()
		if cur != nil {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// RequestHeartbeat asks the client for an immediate heartbeat (op 1).
func (f *Fake) RequestHeartbeat(ctx context.Context) error {
	f.mu.Lock()
	g := f.cur
	f.mu.Unlock()
	if g == nil {
		return fmt.Errorf("not connected")
	}
	return g.send(ctx, map[string]any{"op": 1, "d": nil})
}

// Drop breaks the current gateway connection without a close frame, as a
// network failure does; the session stays resumable.
func (f *Fake) Drop() {
	f.mu.Lock()
	g := f.cur
	f.cur = nil
	f.mu.Unlock()
	if g != nil {
		_ = g.c.CloseNow()
	}
}

// MessageCreate builds a MESSAGE_CREATE payload.
type MessageCreate struct {
	ID, ChannelID, GuildID, AuthorID, Content string
	AuthorBot                                 bool
	Mentions                                  []string
	MentionedBots                             []string // mentions of bot users (listed with bot: true)
	Roles                                     []string
	ReplyTo                                   string
	Attachments                               []Attachment
	Type                                      int
}

// Attachment is a file on a message (AddAttachment puts one on the CDN).
type Attachment struct {
	ID, Filename, ContentType, URL string
	Size                           int
}

// Payload is the d of the dispatch.
func (m MessageCreate) Payload() map[string]any {
	d := map[string]any{
		"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": m.Type, "tts": false,
		"timestamp": "2026-01-02T03:04:05.678000+00:00", "mention_everyone": false, "pinned": false,
		"author": map[string]any{"id": m.AuthorID, "username": "user" + m.AuthorID, "discriminator": "0", "bot": m.AuthorBot},
	}
	mentions := []map[string]any{}
	for _, id := range m.Mentions {
		mentions = append(mentions, map[string]any{"id": id, "username": "u" + id})
	}
	for _, id := range m.MentionedBots {
		mentions = append(mentions, map[string]any{"id": id, "username": "bot" + id, "bot": true})
	}
	d["mentions"] = mentions
	if m.GuildID != "" {
		d["guild_id"] = m.GuildID
		roles := m.Roles
		if roles == nil {
			roles = []string{}
		}
		d["member"] = map[string]any{"roles": roles}
	}
	atts := []map[string]any{}
	for _, a := range m.Attachments {
		atts = append(atts, map[string]any{"id": a.ID, "filename": a.Filename, "content_type": a.ContentType, "url": a.URL, "proxy_url": a.URL, "size": a.Size})
	}
	d["attachments"] = atts
	if m.ReplyTo != "" {
		d["message_reference"] = map[string]any{"message_id": m.ReplyTo, "channel_id": m.ChannelID, "guild_id": m.GuildID}
	}
	return d
}

// Press is a click on a message's button.
type Press struct {
	ChannelID, GuildID, MessageID, UserID, UserName, CustomID string
	Roles                                                     []string
}

// Press dispatches the INTERACTION_CREATE of a button click (type
// MESSAGE_COMPONENT, a fresh interaction id and token; member.user in a
// guild, user in a DM) and returns its d, for a test to dispatch again
// as a redelivery.
func (f *Fake) Press(ctx context.Context, p Press) (map[string]any, error) {
	return f.component(ctx, p, map[string]any{"custom_id": p.CustomID, "component_type": 2})
}

// component dispatches the INTERACTION_CREATE of a message component's
// use: p says who used which message's component, data is the
// interaction's data.
func (f *Fake) component(ctx context.Context, p Press, data map[string]any) (map[string]any, error) {
	id, token := f.NewID(), "token-"+f.NewID()
	f.mu.Lock()
	f.interactions[id] = &interaction{token: token}
	f.mu.Unlock()
	u := map[string]any{"id": p.UserID, "username": p.UserName, "discriminator": "0"}
	d := map[string]any{
		"id": id, "application_id": f.BotID, "type": 3, "token": token, "version": 1, "channel_id": p.ChannelID,
		"data":    data,
		"message": map[string]any{"id": p.MessageID, "channel_id": p.ChannelID, "author": f.user(), "content": "", "type": 0},
	}
	if p.GuildID != "" {
		roles := p.Roles
		if roles == nil {
			roles = []string{}
		}
		d["guild_id"] = p.GuildID
		d["member"] = map[string]any{"user": u, "roles": roles}
	} else {
		d["user"] = u
	}
	return d, f.Dispatch(ctx, "INTERACTION_CREATE", d)
}

// NewInteraction registers an interaction whose INTERACTION_CREATE the
// test builds and dispatches itself (Dispatch), one that need not parse:
// its id and token, which its callback takes.
func (f *Fake) NewInteraction() (id, token string) {
	id, token = f.NewID(), "token-"+f.NewID()
	f.mu.Lock()
	f.interactions[id] = &interaction{token: token}
	f.mu.Unlock()
	return id, token
}

// Select is a choice in a message's string select menu.
type Select struct {
	ChannelID, GuildID, MessageID, UserID, UserName string
	// CustomID names the menu; Value is the option chosen.
	CustomID, Value string
	Roles           []string
}

// Select dispatches the INTERACTION_CREATE of a choice in a select menu
// of a message the bot posted (type MESSAGE_COMPONENT, data with
// component_type 3 and the chosen option's value in values, as Discord
// sends it), and returns its d. As in Discord's client, only a menu the
// message shows now (not disabled) and one of its options can be
// chosen: anything else is an error, nothing dispatched.
func (f *Fake) Select(ctx context.Context, s Select) (map[string]any, error) {
	f.mu.Lock()
	m := f.find(s.ChannelID, s.MessageID)
	ok := false
	if m != nil {
		for _, menu := range m.Menus {
			if menu.CustomID != s.CustomID || menu.Disabled {
				continue
			}
			for _, o := range menu.Options {
				ok = ok || o.Value == s.Value
			}
		}
	}
	f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("message %s in %s shows no menu %q with option %q", s.MessageID, s.ChannelID, s.CustomID, s.Value)
	}
	return f.component(ctx, Press{ChannelID: s.ChannelID, GuildID: s.GuildID, MessageID: s.MessageID, UserID: s.UserID, UserName: s.UserName,
		CustomID: s.CustomID, Roles: s.Roles}, map[string]any{"custom_id": s.CustomID, "component_type": 3, "values": []string{s.Value}})
}

// Acks returns the response types an interaction's callback accepted
// (Discord takes one) and how many later callbacks it refused as
// already acknowledged.
func (f *Fake) Acks(interactionID string) (accepted []int, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.interactions[interactionID]
	if in == nil {
		return nil, 0
	}
	return append([]int(nil), in.callbacks...), in.refused
}

// callback answers an interaction once (204); a second answer is 400
// "Interaction has already been acknowledged" (40060), an unknown
// interaction or token 404 "Unknown interaction" (10062), as on Discord.
func (f *Fake) callback(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Type int `json:"type"`
		Data *struct {
			Flags   int    `json:"flags"`
			Content string `json:"content"`
		} `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Type == 0 {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.interactions[r.PathValue("id")]
	if in == nil || in.token != r.PathValue("token") {
		writeJSON(w, 404, map[string]any{"message": "Unknown interaction", "code": 10062})
		return
	}
	if len(in.callbacks) > 0 {
		in.refused++
		writeJSON(w, 400, map[string]any{"message": "Interaction has already been acknowledged.", "code": 40060})
		return
	}
	in.callbacks = append(in.callbacks, body.Type)
	if body.Data != nil {
		in.flags, in.content = body.Data.Flags, body.Data.Content
	}
	if body.Type == 5 {
		in.original = "deferred"
	}
	w.WriteHeader(http.StatusNoContent)
}

// Option is a slash command option as the invoker filled it in.
type Option struct {
	Name  string
	Type  int // 3 string, 4 integer, 5 boolean, 10 number; 1 a subcommand
	Value any
	// Options are a subcommand's.
	Options []Option
}

func (o Option) payload() map[string]any {
	m := map[string]any{"name": o.Name, "type": o.Type}
	if o.Type == 1 || o.Type == 2 {
		os := []map[string]any{}
		for _, s := range o.Options {
			os = append(os, s.payload())
		}
		m["options"] = os
	} else {
		m["value"] = o.Value
	}
	return m
}

// Invoke is a use of a slash command.
type Invoke struct {
	ChannelID, GuildID, UserID, UserName, Name string
	Options                                    []Option
	Roles                                      []string
}

// Invoke dispatches the INTERACTION_CREATE of a slash command (type
// APPLICATION_COMMAND with data.name and data.options, a fresh
// interaction id and token; member.user in a guild, user in a DM) and
// returns its d, for a test to dispatch again as a redelivery. As on
// Discord, only a registered command can be invoked.
func (f *Fake) Invoke(ctx context.Context, in Invoke) (map[string]any, error) {
	id, token := f.NewID(), "token-"+f.NewID()
	f.mu.Lock()
	cmdID := ""
	for _, c := range f.commands {
		if c["name"] == in.Name {
			cmdID, _ = c["id"].(string)
		}
	}
	if cmdID == "" {
		f.mu.Unlock()
		return nil, fmt.Errorf("no registered command %q", in.Name)
	}
	f.interactions[id] = &interaction{token: token}
	f.mu.Unlock()
	os := []map[string]any{}
	for _, o := range in.Options {
		os = append(os, o.payload())
	}
	u := map[string]any{"id": in.UserID, "username": in.UserName, "discriminator": "0"}
	d := map[string]any{
		"id": id, "application_id": f.BotID, "type": 2, "token": token, "version": 1, "channel_id": in.ChannelID,
		"data": map[string]any{"id": cmdID, "name": in.Name, "type": 1, "options": os},
	}
	if in.GuildID != "" {
		roles := in.Roles
		if roles == nil {
			roles = []string{}
		}
		d["guild_id"] = in.GuildID
		d["member"] = map[string]any{"user": u, "roles": roles}
	} else {
		d["user"] = u
	}
	return d, f.Dispatch(ctx, "INTERACTION_CREATE", d)
}

// Interaction is what became of an interaction's response.
type Interaction struct {
	// Callbacks are the response types its callback accepted (one at
	// most), Flags that callback's flags (64: ephemeral) and Content its
	// message's text; Refused counts callbacks refused as already
	// acknowledged.
	Callbacks []int
	Flags     int
	Content   string
	Refused   int
	// Original is the response message: "" none, "deferred", "deleted",
	// or its content after an edit (or the first followup of a deferred
	// response, which takes its place); Followups the followup messages
	// posted as messages of their own.
	Original  string
	Followups []Followup
}

// ExpireInteraction ends an interaction's token, as Discord does 15
// minutes after the interaction: its webhook calls (followups, the
// response message) answer 401 Invalid Webhook Token (50027).
func (f *Fake) ExpireInteraction(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if in := f.interactions[id]; in != nil {
		in.expired = true
	}
}

// InteractionState returns what became of an interaction's response.
func (f *Fake) InteractionState(id string) Interaction {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.interactions[id]
	if in == nil {
		return Interaction{}
	}
	return Interaction{Callbacks: slices.Clone(in.callbacks), Flags: in.flags, Content: in.content, Refused: in.refused,
		Original: in.original, Followups: slices.Clone(in.followups)}
}

// Commands returns the application's global commands (name →
// description) and how many bulk overwrites Discord accepted and
// refused.
func (f *Fake) Commands() (cmds map[string]string, overwrites, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cmds = map[string]string{}
	for _, c := range f.commands {
		cmds[c["name"].(string)], _ = c["description"].(string)
	}
	return cmds, f.overwrites, f.refusedPuts
}

// SetCommands replaces the application's global commands, as another
// deployment (or an older release) registering its own would.
func (f *Fake) SetCommands(cmds map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = nil
	for name, desc := range cmds {
		f.commands = append(f.commands, map[string]any{"id": f.NewID(), "application_id": f.BotID, "version": f.NewID(),
			"type": 1, "name": name, "description": desc, "options": []any{}})
	}
}

func (f *Fake) app(w http.ResponseWriter, r *http.Request) bool {
	if !f.authorized(w, r) {
		return false
	}
	if r.PathValue("app") != f.BotID {
		writeJSON(w, 403, map[string]any{"message": "Missing Access", "code": 50001})
		return false
	}
	return true
}

func (f *Fake) listCommands(w http.ResponseWriter, r *http.Request) {
	if !f.app(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.commands
	if out == nil {
		out = []map[string]any{}
	}
	writeJSON(w, 200, out)
}

var commandName = regexp.MustCompile(`^[-_\p{L}\p{N}]{1,32}$`)

// appCommand is a chat-input command as a bulk overwrite carries it.
type appCommand struct {
	Type        int         `json:"type"`
	Name        string      `json:"name"`
	Description string      `json:"description"`
	Options     []appOption `json:"options"`
}

type appOption struct {
	Type        int         `json:"type"`
	Name        string      `json:"name"`
	Description string      `json:"description"`
	Required    bool        `json:"required"`
	Options     []appOption `json:"options,omitempty"`
	Choices     []Choice    `json:"choices,omitempty"`
}

// Choice is one of an option's choices: what the picker shows, and the
// value the interaction carries.
type Choice struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// CommandOption is a registered command's option.
type CommandOption struct {
	Type        int
	Name        string
	Description string
	Required    bool
	Choices     []Choice
}

// checkName and checkDescription are Discord's rules: a lowercase name
// of 1–32 letters, digits, '-' and '_'; a description of 1–100
// characters.
func checkName(name string) string {
	if !commandName.MatchString(name) || strings.ToLower(name) != name {
		return "name " + strconv.Quote(name) + " does not match ^[-_\\p{L}\\p{N}]{1,32}$ in lowercase"
	}
	return ""
}

func checkDescription(d string) string {
	if n := len([]rune(d)); n < 1 || n > 100 {
		return fmt.Sprintf("description must be 1 to 100 characters, not %d", n)
	}
	return ""
}

func checkOptions(os []appOption, depth int) string {
	if len(os) > 25 {
		return "more than 25 options"
	}
	seen, optional := map[string]bool{}, false
	for _, o := range os {
		if why := checkName(o.Name); why != "" {
			return "option " + why
		}
		if why := checkDescription(o.Description); why != "" {
			return "option " + o.Name + ": " + why
		}
		if o.Type < 1 || o.Type > 11 || ((o.Type == 1 || o.Type == 2) && depth > 2) {
			return fmt.Sprintf("option %s: type %d", o.Name, o.Type)
		}
		if seen[o.Name] {
			return "duplicate option " + o.Name
		}
		if why := checkChoices(o); why != "" {
			return "option " + o.Name + ": " + why
		}
		seen[o.Name] = true
		if o.Required && optional {
			return "required options must be placed before non-required options"
		}
		optional = optional || !o.Required
		if why := checkOptions(o.Options, depth+1); why != "" {
			return why
		}
	}
	return ""
}

// checkChoices is Discord's rule for an option's choices: at most 25,
// only on string, integer and number options, each named with 1 to 100
// characters, its value of the option's type (a string of at most 100
// characters, or a number).
func checkChoices(o appOption) string {
	if len(o.Choices) == 0 {
		return ""
	}
	if len(o.Choices) > 25 {
		return "more than 25 choices"
	}
	if o.Type != 3 && o.Type != 4 && o.Type != 10 {
		return fmt.Sprintf("choices on an option of type %d", o.Type)
	}
	for _, c := range o.Choices {
		if n := len([]rune(c.Name)); n < 1 || n > 100 {
			return fmt.Sprintf("choice name of %d characters", n)
		}
		switch v := c.Value.(type) {
		case string:
			if o.Type != 3 || len([]rune(v)) < 1 || len([]rune(v)) > 100 {
				return fmt.Sprintf("choice value %q", v)
			}
		case float64:
			if o.Type == 3 {
				return "a number choice on a string option"
			}
		default:
			return fmt.Sprintf("choice value %v", c.Value)
		}
	}
	return ""
}

// CommandOptions returns the options of the registered command name, as
// Discord keeps them (nil: no such command, or none).
func (f *Fake) CommandOptions(name string) []CommandOption {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.commands {
		if c["name"] != name {
			continue
		}
		raw, _ := json.Marshal(c["options"])
		var os []appOption
		_ = json.Unmarshal(raw, &os)
		var out []CommandOption
		for _, o := range os {
			out = append(out, CommandOption{Type: o.Type, Name: o.Name, Description: o.Description, Required: o.Required, Choices: o.Choices})
		}
		return out
	}
	return nil
}

// overwriteCommands is the bulk overwrite: Discord checks every command
// (at most 100, valid names, descriptions and options, no duplicate)
// and refuses the whole request with 400 Invalid Form Body when one is
// wrong, leaving the commands as they were.
func (f *Fake) overwriteCommands(w http.ResponseWriter, r *http.Request) {
	if !f.app(w, r) {
		return
	}
	var cmds []appCommand
	err := json.NewDecoder(r.Body).Decode(&cmds)
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case len(cmds) > 100:
		why = "more than 100 commands"
	}
	seen := map[string]bool{}
	for _, c := range cmds {
		if why != "" {
			break
		}
		if c.Type != 0 && c.Type != 1 {
			why = fmt.Sprintf("command %s: type %d", c.Name, c.Type)
		} else if why = checkName(c.Name); why == "" {
			if why = checkDescription(c.Description); why == "" {
				if why = checkOptions(c.Options, 1); why == "" && seen[c.Name] {
					why = "duplicate command " + c.Name
				}
			}
		}
		seen[c.Name] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if why != "" {
		f.refusedPuts++
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body: " + why, "code": 50035})
		return
	}
	f.overwrites++
	f.commands = nil
	for _, c := range cmds {
		raw, _ := json.Marshal(c)
		m := map[string]any{}
		_ = json.Unmarshal(raw, &m)
		m["type"] = 1
		m["id"], m["application_id"], m["version"] = f.NewID(), f.BotID, f.NewID()
		f.commands = append(f.commands, m)
	}
	writeJSON(w, 200, f.commands)
}

// byToken is the interaction with this token; f.mu held.
func (f *Fake) byToken(app, token string) *interaction {
	if app != f.BotID {
		return nil
	}
	for _, in := range f.interactions {
		if in.token == token {
			return in
		}
	}
	return nil
}

// original edits (PATCH) or deletes (DELETE) an interaction's response
// message; with none (not yet acknowledged with a message, or deleted)
// it is 404 Unknown Message, and an unknown token 404 Unknown Webhook.
// Webhook calls take no Authorization: the token is the credential.
func (f *Fake) original(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Content *string `json:"content"`
	}
	if r.Method == http.MethodPatch {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
			return
		}
	}
	if r.Method == http.MethodDelete {
		f.mu.Lock()
		d := f.deleteDelay
		f.mu.Unlock()
		time.Sleep(d)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.byToken(r.PathValue("app"), r.PathValue("token"))
	if in == nil {
		writeJSON(w, 404, map[string]any{"message": "Unknown Webhook", "code": 10015})
		return
	}
	if in.expired {
		writeJSON(w, 401, map[string]any{"message": "Invalid Webhook Token", "code": 50027})
		return
	}
	if in.original == "" || in.original == "deleted" {
		writeJSON(w, 404, map[string]any{"message": "Unknown Message", "code": 10008})
		return
	}
	if r.Method == http.MethodDelete {
		in.original = "deleted"
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if body.Content != nil {
		in.original = *body.Content
	}
	writeJSON(w, 200, map[string]any{"id": f.NewID(), "content": in.original, "channel_id": "0", "type": 0})
}

// followup posts a followup message of an acknowledged interaction
// (?wait=true answers the message). As on Discord, the first followup
// of a deferred response that is still deferred takes the response's
// place (it edits the "thinking…" message, keeping the response's
// ephemeral flag, whatever its own flags); later followups, or one
// after the response was deleted or edited, are messages of their own
// with their own flags (only 64, ephemeral, is kept). An expired token
// is 401 Invalid Webhook Token (50027).
func (f *Fake) followup(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Content string `json:"content"`
		Flags   int    `json:"flags"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Content == "" || len([]rune(body.Content)) > 2000 {
		writeJSON(w, 400, map[string]any{"message": "Invalid Form Body", "code": 50035})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.byToken(r.PathValue("app"), r.PathValue("token"))
	if in == nil || len(in.callbacks) == 0 {
		writeJSON(w, 404, map[string]any{"message": "Unknown Webhook", "code": 10015})
		return
	}
	if in.expired {
		writeJSON(w, 401, map[string]any{"message": "Invalid Webhook Token", "code": 50027})
		return
	}
	switch status := f.followupFail; status {
	case 0:
	case http.StatusTooManyRequests:
		f.followupFail = 0
		w.Header().Set("X-RateLimit-Bucket", "followup")
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset-After", "0.050")
		w.Header().Set("X-RateLimit-Scope", "user")
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, map[string]any{"message": "You are being rate limited.", "retry_after": 0.05, "global": false})
		return
	default:
		f.followupFail = 0
		writeJSON(w, status, map[string]any{"message": http.StatusText(status), "code": 0})
		return
	}
	id := f.NewID()
	if in.original == "deferred" {
		in.original = body.Content
	} else {
		in.followups = append(in.followups, Followup{ID: id, Content: body.Content, Flags: body.Flags & 64})
	}
	if r.URL.Query().Get("wait") != "true" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, 200, map[string]any{"id": id, "content": body.Content, "channel_id": "0", "type": 0, "flags": body.Flags & 64})
}
