// Package telegramfake is a fake Telegram Bot API server for tests and
// local development. It speaks the real wire format (POST
// /bot<token>/<method> with JSON, form or multipart parameters; {"ok":…}
// envelopes) so the real client library can be pointed at it, and it keeps
// Telegram's long-poll semantics: getUpdates returns updates with an id at
// or above the offset, an offset confirms every update below it, a request
// waits up to timeout seconds for new updates, and a second getUpdates
// terminates the waiting one with 409 Conflict.
//
// Test controls: Inject updates, read what the bot sent (Messages,
// Actions) and its reactions on users' messages (Reactions), FailNext to answer a method with an error (429 with
// retry_after, 400, 403, 409), Drop to cut open connections, and Push to
// deliver an update to a registered webhook. Files users send are
// registered with AddFile (or InjectPhoto and InjectDocument, which also
// queue the message) and served as Telegram serves them: getFile gives a
// file_path, GET /file/bot<token>/<file_path> the bytes.
package telegramfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// APIError is an error answer: error_code, description and, for 429,
// parameters.retry_after (seconds). Code 0 drops the connection instead.
type APIError struct {
	Code        int
	Description string
	RetryAfter  int
	MigrateTo   int64
}

// Common errors worded as Telegram words them.
var (
	ErrConflict       = APIError{Code: 409, Description: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}
	ErrForbidden      = APIError{Code: 403, Description: "Forbidden: bot was blocked by the user"}
	ErrChatNotFound   = APIError{Code: 400, Description: "Bad Request: chat not found"}
	ErrParseEntities  = APIError{Code: 400, Description: "Bad Request: can't parse entities: Character '.' is reserved and must be escaped with the preceding '\\'"}
	ErrUnauthorized   = APIError{Code: 401, Description: "Unauthorized"}
	ErrDropConnection = APIError{Code: 0}
)

// FloodWait is a 429 with retry_after seconds.
func FloodWait(seconds int) APIError {
	return APIError{Code: 429, Description: fmt.Sprintf("Too Many Requests: retry after %d", seconds), RetryAfter: seconds}
}

// Message is one message the bot sent (or edited) as the fake stores it.
type Message struct {
	ID       int
	ChatID   string
	ThreadID int
	// Kind is text, photo, animation (sendAnimation: a GIF that plays),
	// voice (sendVoice), audio (sendAudio) or document.
	Kind string
	// Text is the text or caption as sent; Shown is what a user sees
	// (MarkdownV2 markers and escapes removed).
	Text      string
	Shown     string
	ParseMode string
	ReplyTo   int
	// File is the photo, animation or document: a URL, a file_id, or
	// "upload:<name>".
	File string
	// Data is an uploaded file's bytes (nil for a URL or a file_id).
	Data    []byte
	Edits   int
	Deleted bool
	// Buttons is the inline keyboard under the message, row by row; an
	// edit without reply_markup takes it off, as on Telegram.
	Buttons [][]Button
}

// Button is an inline keyboard button with callback data.
type Button struct {
	Text string `json:"text"`
	Data string `json:"callback_data"`
}

// CallbackAnswer is one answerCallbackQuery call.
type CallbackAnswer struct {
	QueryID   string
	Text      string
	ShowAlert bool
}

// Action is one sendChatAction call.
type Action struct {
	ChatID   string
	ThreadID int
	Action   string
}

type entry struct {
	id  int64
	raw json.RawMessage
}

// Server is the fake Bot API.
type Server struct {
	// URL is the base URL to give the client (http://127.0.0.1:port).
	URL string

	token    string
	botID    int64
	username string
	srv      *http.Server
	ln       net.Listener

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced whenever state changes
	log       []entry
	nextID    int64
	confirmed int64
	redeliver []entry
	poller    chan struct{} // closed to terminate the waiting getUpdates with 409
	drop      chan struct{} // closed to cut every open request
	// dropNextPoll cuts the next getUpdates (a Drop found none open).
	dropNextPoll bool
	fail         map[string][]APIError
	messages     []*Message
	nextMsgID    int
	actions      []Action
	calls        map[string]int
	webhookURL   string
	secret       string
	maxConns     int // setWebhook's max_connections (0: not given)
	// unfetchable are URLs Telegram cannot fetch a photo or document from.
	unfetchable  map[string]bool
	noVoice      map[string]bool // chats whose user refuses voice messages
	conflicts    int
	polling      int               // getUpdates requests waiting for updates (Polling)
	files        map[string]file   // by file_id
	paths        map[string]string // file_path → file_id
	nextFile     int
	failDownload []APIError
	downloads    int
	reactions    map[string][]string // chat/message id → the bot's reaction
	commands     []BotCommand        // the bot's command menu (setMyCommands)
	// allowed are the update kinds the bot last asked for
	// (allowed_updates of getUpdates or setWebhook; nil: all).
	allowed []string
	queries map[string]bool // callback query id → answered
	// queryAt is when each callback query was made, and queryLife how
	// long after that an answer is taken (SetQueryLife; 0: always).
	queryAt   map[string]time.Time
	queryLife time.Duration
	nextCBQ   int
	answered  []CallbackAnswer
	// deletedTopics are forum topics (chat/thread id) that are gone:
	// sends naming one are refused with "message thread not found".
	deletedTopics map[string]bool
	// Private-chat topics (Bot API 9.3, 9.4): whether the bot has topic
	// mode (BotFather's Threaded Mode: getMe's has_topics_enabled) and
	// lets users create topics (allows_users_to_create_topics), and
	// the topics of each private chat (chat → thread → name). A send
	// into a private chat naming a thread that is not one of its
	// topics is refused, as Telegram refuses it.
	privateTopics, usersCreateTopics bool
	dmTopics                         map[string]map[int]string
	nextTopic                        int
	// migrated are groups upgraded to supergroups (Migrate): old chat
	// id → the supergroup's.
	migrated map[string]int64
}

// file is one file a user sent, as getFile describes it.
type file struct {
	path string
	data []byte
}

// New starts a fake for one bot. The token's prefix before ':' is the
// bot's id, as on Telegram.
func New(token, username string) (*Server, error) {
	id, err := strconv.ParseInt(strings.SplitN(token, ":", 2)[0], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("token %q has no numeric bot id prefix", token)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL: "http://" + ln.Addr().String(), token: token, botID: id, username: username, ln: ln,
		changed: make(chan struct{}), drop: make(chan struct{}), nextID: 100000, nextMsgID: 1,
		fail: map[string][]APIError{}, calls: map[string]int{}, files: map[string]file{}, paths: map[string]string{},
		reactions: map[string][]string{}, queries: map[string]bool{}, queryAt: map[string]time.Time{}, deletedTopics: map[string]bool{},
		dmTopics: map[string]map[int]string{}, nextTopic: 100,
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and cuts open requests.
func (s *Server) Close() {
	s.Drop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// BotID is the bot's user id.
func (s *Server) BotID() int64 { return s.botID }

// Username is the bot's username (without @).
func (s *Server) Username() string { return s.username }

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Inject queues an update. update is a JSON object without update_id, or a
// map; the assigned update_id is returned.
func (s *Server) Inject(update any) int64 {
	raw, err := json.Marshal(update)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := s.nextID
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) == nil {
		obj["update_id"] = json.RawMessage(strconv.FormatInt(id, 10))
		raw, _ = json.Marshal(obj)
	} else {
		raw = []byte(fmt.Sprintf(`{"update_id":%d,"message":%s}`, id, raw))
	}
	s.log = append(s.log, entry{id, raw})
	s.notifyLocked()
	return id
}

// InjectRaw queues raw as the body of an update whose update_id the fake
// assigns: raw is spliced in as `{"update_id":N,<raw>}`, so it may be
// malformed on purpose (`"message":"not an object"`).
func (s *Server) InjectRaw(raw string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := s.nextID
	s.log = append(s.log, entry{id, json.RawMessage(fmt.Sprintf(`{"update_id":%d,%s}`, id, raw))})
	s.notifyLocked()
	return id
}

// Press queues the callback_query update of user (a Telegram User
// object: id, first_name, …) pressing the button with callback data data
// under the bot's message id in chat. It fails when the message shows
// no such button. It returns the update_id and the query id.
func (s *Server) Press(chat string, id int, user map[string]any, data string) (int64, string, error) {
	s.mu.Lock()
	m := s.find(chat, id)
	found := false
	if m != nil {
		for _, row := range m.Buttons {
			for _, b := range row {
				found = found || b.Data == data
			}
		}
	}
	if !found {
		s.mu.Unlock()
		return 0, "", fmt.Errorf("message %d in chat %s shows no button %q", id, chat, data)
	}
	s.nextCBQ++
	qid := fmt.Sprintf("%d%06d", s.botID, s.nextCBQ)
	s.queries[qid] = false
	s.queryAt[qid] = time.Now()
	wire := s.wireMessage(m)
	s.mu.Unlock()
	upd := map[string]any{"callback_query": map[string]any{"id": qid, "from": user, "message": wire,
		"chat_instance": "-" + chat, "data": data}}
	return s.Inject(upd), qid, nil
}

// InjectQuery queues a callback_query update whose body is raw with
// each %[1]s the new query's id, a query the fake takes one answer for,
// however raw reads (a press the gateway may not parse). It returns the
// update_id and the query id.
func (s *Server) InjectQuery(raw string) (int64, string) {
	s.mu.Lock()
	s.nextCBQ++
	qid := fmt.Sprintf("%d%06d", s.botID, s.nextCBQ)
	s.queries[qid] = false
	s.queryAt[qid] = time.Now()
	s.mu.Unlock()
	return s.InjectRaw(fmt.Sprintf(raw, qid)), qid
}

// SetQueryLife makes answerCallbackQuery refuse an answer that comes
// more than d after its query was made, as Telegram refuses one to a
// query too old ("query is too old and response timeout expired or
// query ID is invalid"; the Bot API names no limit, about 15 s is
// reported). 0, the default, takes an answer however late.
func (s *Server) SetQueryLife(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queryLife = d
}

// CallbackAnswers returns the answerCallbackQuery calls so far.
func (s *Server) CallbackAnswers() []CallbackAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]CallbackAnswer(nil), s.answered...)
}

// Message returns a copy of the bot's message id in chat (nil: none).
func (s *Server) Message(chat string, id int) *Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.find(chat, id)
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// MaxDownload is the largest file the Bot API lets a bot download; getFile
// answers "file is too big" for larger ones.
const MaxDownload = 20 << 20

// AddFile registers data as the file with this file_id (replacing one
// registered before) and returns its file_path.
func (s *Server) AddFile(fileID string, data []byte) (filePath string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.files[fileID]; ok {
		delete(s.paths, old.path)
	}
	filePath = fmt.Sprintf("files/file_%d", s.nextFile)
	s.nextFile++
	s.files[fileID] = file{path: filePath, data: bytes.Clone(data)}
	s.paths[filePath] = fileID
	return filePath
}

// InjectPhoto queues a user's photo message. message holds the other
// fields of the update's message (from, chat, caption …; message_id and
// date default to 1 and now); its photo sizes are a 90×90 thumbnail and
// fileID at 1280×960, the largest. file_size is the registered file's
// length; a fileID AddFile did not register has none, and getFile
// answers "invalid file_id" for it. It returns the update_id.
func (s *Server) InjectPhoto(message map[string]any, fileID string) int64 {
	big := map[string]any{"file_id": fileID, "file_unique_id": "u-" + fileID, "width": 1280, "height": 960}
	if n := s.fileSize(fileID); n > 0 {
		big["file_size"] = n
	}
	thumb := map[string]any{"file_id": fileID + "-thumb", "file_unique_id": "u-" + fileID + "-thumb", "width": 90, "height": 90, "file_size": 1000}
	m := userMessage(message)
	m["photo"] = []map[string]any{thumb, big}
	return s.Inject(map[string]any{"message": m})
}

// InjectDocument queues a user's message with fileID as a document (a
// file sent without compression), as InjectPhoto does.
func (s *Server) InjectDocument(message map[string]any, fileID, fileName, mimeType string) int64 {
	doc := map[string]any{"file_id": fileID, "file_unique_id": "u-" + fileID, "file_name": fileName, "mime_type": mimeType}
	if n := s.fileSize(fileID); n > 0 {
		doc["file_size"] = n
	}
	m := userMessage(message)
	m["document"] = doc
	return s.Inject(map[string]any{"message": m})
}

func (s *Server) fileSize(fileID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.files[fileID].data)
}

// userMessage copies message, filling in message_id and date.
func userMessage(message map[string]any) map[string]any {
	m := make(map[string]any, len(message)+2)
	for k, v := range message {
		m[k] = v
	}
	if _, ok := m["message_id"]; !ok {
		m["message_id"] = 1
	}
	if _, ok := m["date"]; !ok {
		m["date"] = time.Now().Unix()
	}
	return m
}

// FailNextDownload makes the next file download answer with e (queued in
// order).
func (s *Server) FailNextDownload(e APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failDownload = append(s.failDownload, e)
}

// Downloads counts file download requests so far.
func (s *Server) Downloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downloads
}

// Redeliver hands the update with this id out once more on the next
// getUpdates, whatever the offset: Telegram's at-least-once delivery.
func (s *Server) Redeliver(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.log {
		if e.id == id {
			s.redeliver = append(s.redeliver, e)
		}
	}
	s.notifyLocked()
}

// Confirmed is the highest offset the bot confirmed: every update below it
// is acknowledged and never returned again.
func (s *Server) Confirmed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed
}

// Pending counts updates not yet confirmed.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.log {
		if e.id >= s.confirmed {
			n++
		}
	}
	return n
}

// Migrate upgrades group chat to the supergroup to: from now on any
// method naming chat as chat_id is refused with 400 "Bad Request: group
// chat was upgraded to a supergroup chat" and parameters'
// migrate_to_chat_id, as Telegram refuses it. The group's messages stay
// in it; the supergroup starts with none.
func (s *Server) Migrate(chat string, to int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.migrated == nil {
		s.migrated = map[string]int64{}
	}
	s.migrated[chat] = to
}

// DeleteTopic deletes a forum topic of a chat: from now on a send or
// chat action that names it as message_thread_id is refused with 400
// "Bad Request: message thread not found", as Telegram refuses it.
func (s *Server) DeleteTopic(chatID string, threadID int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deletedTopics[chatID+"/"+strconv.Itoa(threadID)] = true
}

// topicGoneLocked reports whether p names a deleted topic of its chat,
// or, in a private chat, a thread that is not one of its topics.
func (s *Server) topicGoneLocked(p params) bool {
	thread := p.int("message_thread_id")
	if thread == 0 {
		return false
	}
	if s.deletedTopics[p["chat_id"]+"/"+strconv.Itoa(thread)] {
		return true
	}
	if private(p["chat_id"]) {
		_, ok := s.dmTopics[p["chat_id"]][thread]
		return !ok
	}
	return false
}

// private reports whether chat is a private chat's id (a user's:
// positive; groups and channels are negative).
func private(chat string) bool {
	id, err := strconv.ParseInt(chat, 10, 64)
	return err == nil && id > 0
}

// SetPrivateTopics sets the bot's topic mode in private chats, as
// BotFather's Threads Settings do: enabled is getMe's
// has_topics_enabled, usersCreate its allows_users_to_create_topics
// (users may create and delete topics). Without it a private chat has
// no topics.
func (s *Server) SetPrivateTopics(enabled, usersCreate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.privateTopics, s.usersCreateTopics = enabled, usersCreate
}

// OpenTopic is the user of private chat creating a topic named name
// (Telegram's "All Messages" → a new topic): it returns its
// message_thread_id, which the user's messages in it carry with
// is_topic_message. It fails when the bot has no topic mode or does not
// let users create topics.
func (s *Server) OpenTopic(chat, name string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.privateTopics || !s.usersCreateTopics {
		return 0, fmt.Errorf("the bot does not let users create topics in private chats")
	}
	return s.addTopicLocked(chat, name), nil
}

func (s *Server) addTopicLocked(chat, name string) int {
	s.nextTopic++
	if s.dmTopics[chat] == nil {
		s.dmTopics[chat] = map[int]string{}
	}
	s.dmTopics[chat][s.nextTopic] = name
	return s.nextTopic
}

// TopicMessage is a user's text message in thread of private chat, for
// Inject: message_thread_id with is_topic_message, as Telegram sends a
// message in a private chat's topic (thread 0: the main view, none).
func TopicMessage(chat int64, messageID, thread int, text string) map[string]any {
	m := map[string]any{"message_id": messageID, "date": time.Now().Unix(), "text": text,
		"chat": map[string]any{"id": chat, "type": "private", "first_name": "User"},
		"from": map[string]any{"id": chat, "is_bot": false, "first_name": "User"}}
	if thread != 0 {
		m["message_thread_id"], m["is_topic_message"] = thread, true
	}
	return map[string]any{"message": m}
}

// createForumTopic: in a private chat (Bot API 9.4) only when the bot has
// topic mode; in a group, always (the fake does not model forum rights).
func (s *Server) createForumTopic(w http.ResponseWriter, p params) {
	chat, name := p["chat_id"], p["name"]
	if chat == "" {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: chat_id is empty"})
		return
	}
	if n := utf8.RuneCountInString(name); n < 1 || n > 128 {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: TOPIC_TITLE_EMPTY"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if private(chat) && !s.privateTopics {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: the chat is not a forum"})
		return
	}
	id := s.addTopicLocked(chat, name)
	writeOK(w, map[string]any{"message_thread_id": id, "name": name, "icon_color": 7322096})
}

// ErrThreadNotFound is Telegram's answer to a send into a deleted topic.
var ErrThreadNotFound = APIError{Code: 400, Description: "Bad Request: message thread not found"}

// FailNext makes the next call of method answer with e (queued in order).
func (s *Server) FailNext(method string, e APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[strings.ToLower(method)] = append(s.fail[strings.ToLower(method)], e)
	s.notifyLocked()
}

// Drop cuts every open request (the waiting long poll included) without an
// answer, as a network failure does. When no long poll is open at that
// moment (the client is between two), the next getUpdates is cut instead:
// the failure is not lost to timing.
func (s *Server) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.drop)
	s.drop = make(chan struct{})
	if s.poller == nil {
		s.dropNextPoll = true
	}
}

// Calls counts calls of method so far.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[strings.ToLower(method)]
}

// Polling reports whether a getUpdates is waiting for updates: a long
// poll held open, nothing there for it yet.
func (s *Server) Polling() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polling > 0
}

// Conflicts counts getUpdates requests answered with 409.
func (s *Server) Conflicts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conflicts
}

// Messages returns copies of the messages in chat (all chats if chatID is
// empty), in the order they were sent.
func (s *Server) Messages(chatID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if chatID == "" || m.ChatID == chatID {
			out = append(out, *m)
		}
	}
	return out
}

// Actions returns the chat actions sent so far.
func (s *Server) Actions() []Action {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Action(nil), s.actions...)
}

// Reactions returns the bot's reactions on message messageID of chatID
// (setMessageReaction; a bot has at most one per message).
func (s *Server) Reactions(chatID string, messageID int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reactions[chatID+"/"+strconv.Itoa(messageID)]...)
}

// Webhook returns the registered webhook URL and secret token.
func (s *Server) Webhook() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.webhookURL, s.secret
}

// Unfetchable makes a photo or document given by this URL fail as
// Telegram fails a URL it cannot fetch (400 "failed to get HTTP URL
// content").
// ForbidVoice makes the chat's user refuse voice messages, as Telegram
// users may in their privacy settings: sendVoice to it fails with
// Telegram's VOICE_MESSAGES_FORBIDDEN.
func (s *Server) ForbidVoice(chatID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noVoice == nil {
		s.noVoice = map[string]bool{}
	}
	s.noVoice[chatID] = true
}

func (s *Server) Unfetchable(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unfetchable == nil {
		s.unfetchable = map[string]bool{}
	}
	s.unfetchable[url] = true
}

// WebhookMaxConnections is the number of connections Telegram would
// deliver the webhook's updates over at once: setWebhook's
// max_connections, 40 (Telegram's default) when it was not given.
func (s *Server) WebhookMaxConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxConns == 0 {
		return 40
	}
	return s.maxConns
}

// PushAll posts the updates with these ids, in this order, as Telegram
// does: over up to WebhookMaxConnections connections at once, a
// connection taking the next update once the bot answered its last. It
// returns the first failure (an error or a status other than 200).
func (s *Server) PushAll(ctx context.Context, ids []int64) error {
	n := s.WebhookMaxConnections()
	slots := make(chan struct{}, n)
	errc := make(chan error, len(ids))
	var wg sync.WaitGroup
	for _, id := range ids {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			code, err := s.Push(ctx, id)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("update %d answered %d", id, code)
			}
			if err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

// Push posts the update with this id to the registered webhook, as
// Telegram does, and returns the HTTP status the bot answered.
func (s *Server) Push(ctx context.Context, id int64) (int, error) {
	s.mu.Lock()
	url, secret := s.webhookURL, s.secret
	var raw json.RawMessage
	for _, e := range s.log {
		if e.id == id {
			raw = e.raw
		}
	}
	s.mu.Unlock()
	if url == "" {
		return 0, errors.New("no webhook set")
	}
	if raw == nil {
		return 0, fmt.Errorf("no update %d", id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// --- HTTP side ---

type params map[string]string

func (p params) int(k string) int {
	n, _ := strconv.Atoi(p[k])
	return n
}

func readParams(r *http.Request) (params, error) {
	p := params{}
	for k, v := range r.URL.Query() {
		p[k] = v[0]
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]json.RawMessage
		body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return p, nil
		}
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, err
		}
		for k, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				p[k] = s
			} else {
				p[k] = string(v)
			}
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(10 << 20); err != nil {
			// Clients send an empty multipart body for methods without
			// parameters (getMe); Telegram accepts that.
			if strings.Contains(err.Error(), "EOF") {
				return p, nil
			}
			return nil, err
		}
		for k, v := range r.MultipartForm.Value {
			p[k] = v[0]
		}
		for k, fs := range r.MultipartForm.File {
			p[k] = "upload:" + fs[0].Filename
			if f, err := fs[0].Open(); err == nil {
				data, _ := io.ReadAll(f)
				_ = f.Close()
				p[uploadData+k] = string(data)
			}
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		for k, v := range r.PostForm {
			p[k] = v[0]
		}
	}
	return p, nil
}

func writeOK(w http.ResponseWriter, result any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": result})
}

func writeErr(w http.ResponseWriter, e APIError) {
	if e.Code == 0 {
		dropConn(w)
		return
	}
	body := map[string]any{"ok": false, "error_code": e.Code, "description": e.Description}
	ps := map[string]any{}
	if e.RetryAfter > 0 {
		ps["retry_after"] = e.RetryAfter
	}
	if e.MigrateTo != 0 {
		ps["migrate_to_chat_id"] = e.MigrateTo
	}
	if len(ps) > 0 {
		body["parameters"] = ps
	}
	w.Header().Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		// As the Bot API server (HttpConnection::send_response): the
		// wait in a header too, which a file download, whose answer is
		// not read as JSON, goes by.
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(body)
}

// dropConn closes the connection without an answer.
func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// /bot<token>/<method>
	path := strings.TrimPrefix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(path, "file/bot"); ok {
		s.download(w, r, rest)
		return
	}
	if !strings.HasPrefix(path, "bot") {
		writeErr(w, APIError{Code: 404, Description: "Not Found"})
		return
	}
	token, method, ok := strings.Cut(strings.TrimPrefix(path, "bot"), "/")
	if !ok || method == "" {
		writeErr(w, APIError{Code: 404, Description: "Not Found"})
		return
	}
	if token != s.token {
		writeErr(w, ErrUnauthorized)
		return
	}
	method = strings.ToLower(method)
	p, err := readParams(r)
	if err != nil {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: " + err.Error()})
		return
	}
	s.mu.Lock()
	s.calls[method]++
	if q := s.fail[method]; len(q) > 0 {
		e := q[0]
		s.fail[method] = q[1:]
		if method == "getupdates" && e.Code == 409 {
			s.conflicts++
		}
		s.mu.Unlock()
		writeErr(w, e)
		return
	}
	if to, ok := s.migrated[p["chat_id"]]; ok {
		s.mu.Unlock()
		writeErr(w, APIError{Code: 400, Description: "Bad Request: group chat was upgraded to a supergroup chat", MigrateTo: to})
		return
	}
	drop := s.drop
	if method == "getupdates" && s.dropNextPoll {
		s.dropNextPoll = false
		s.mu.Unlock()
		dropConn(w)
		return
	}
	s.mu.Unlock()

	switch method {
	case "getme":
		me := map[string]any{"id": s.botID, "is_bot": true, "first_name": s.username, "username": s.username,
			"can_join_groups": true, "can_read_all_group_messages": false, "supports_inline_queries": false}
		s.mu.Lock()
		if s.privateTopics {
			me["has_topics_enabled"] = true
		}
		if s.privateTopics && s.usersCreateTopics {
			me["allows_users_to_create_topics"] = true
		}
		s.mu.Unlock()
		writeOK(w, me)
	case "createforumtopic":
		s.createForumTopic(w, p)
	case "getupdates":
		s.getUpdates(w, r, p, drop)
	case "setwebhook":
		s.mu.Lock()
		s.webhookURL, s.secret, s.maxConns = p["url"], p["secret_token"], p.int("max_connections")
		s.setAllowedLocked(p)
		s.mu.Unlock()
		writeOK(w, true)
	case "deletewebhook":
		s.mu.Lock()
		s.webhookURL, s.secret = "", ""
		if p["drop_pending_updates"] == "true" {
			s.confirmed = s.nextID + 1
		}
		s.mu.Unlock()
		writeOK(w, true)
	case "getwebhookinfo":
		s.mu.Lock()
		writeOK(w, map[string]any{"url": s.webhookURL, "has_custom_certificate": false, "pending_update_count": 0})
		s.mu.Unlock()
	case "getfile":
		s.getFile(w, p)
	case "setmycommands":
		s.setMyCommands(w, p)
	case "getmycommands":
		s.mu.Lock()
		writeOK(w, append([]BotCommand{}, s.commands...))
		s.mu.Unlock()
	case "sendmessage", "sendphoto", "sendanimation", "senddocument", "sendvoice", "sendaudio":
		s.send(w, method, p)
	case "answercallbackquery":
		s.answerCallback(w, p)
	case "editmessagetext":
		s.edit(w, p)
	case "deletemessage":
		s.delete(w, p)
	case "setmessagereaction":
		s.setReaction(w, p)
	case "sendchataction":
		if p["chat_id"] == "" {
			writeErr(w, APIError{Code: 400, Description: "Bad Request: chat_id is empty"})
			return
		}
		s.mu.Lock()
		if s.topicGoneLocked(p) {
			s.mu.Unlock()
			writeErr(w, ErrThreadNotFound)
			return
		}
		s.actions = append(s.actions, Action{ChatID: p["chat_id"], ThreadID: p.int("message_thread_id"), Action: p["action"]})
		s.notifyLocked()
		s.mu.Unlock()
		writeOK(w, true)
	default:
		writeErr(w, APIError{Code: 404, Description: "Not Found: method not found"})
	}
}

func (s *Server) getUpdates(w http.ResponseWriter, r *http.Request, p params, drop chan struct{}) {
	offset, _ := strconv.ParseInt(p["offset"], 10, 64)
	limit := p.int("limit")
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	timeout := time.Duration(p.int("timeout")) * time.Second

	s.mu.Lock()
	if s.webhookURL != "" {
		s.mu.Unlock()
		writeErr(w, APIError{Code: 409, Description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"})
		return
	}
	// A new request terminates the one still waiting.
	if s.poller != nil {
		close(s.poller)
	}
	mine := make(chan struct{})
	s.poller = mine
	s.setAllowedLocked(p)
	if offset > s.confirmed {
		s.confirmed = offset
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.poller == mine {
			s.poller = nil
		}
		s.mu.Unlock()
	}()

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		out := append([]entry(nil), s.redeliver...)
		s.redeliver = nil
		for _, e := range s.log {
			if len(out) >= limit {
				break
			}
			if e.id >= s.confirmed && s.allowedLocked(e.raw) {
				out = append(out, e)
			}
		}
		changed := s.changed
		if len(out) > 0 || timeout <= 0 {
			s.mu.Unlock()
			sort.SliceStable(out, func(i, j int) bool { return out[i].id < out[j].id })
			raws := make([]json.RawMessage, len(out))
			for i, e := range out {
				raws[i] = e.raw
			}
			writeOK(w, raws)
			return
		}
		s.polling++
		s.mu.Unlock()
		var conflict, dropped, gone bool
		select {
		case <-changed:
		case <-mine:
			conflict = true
		case <-drop:
			dropped = true
		case <-deadline.C:
			timeout = 0
		case <-r.Context().Done():
			gone = true
		}
		s.mu.Lock()
		s.polling--
		if conflict {
			s.conflicts++
		}
		s.mu.Unlock()
		switch {
		case conflict:
			writeErr(w, ErrConflict)
			return
		case dropped:
			dropConn(w)
			return
		case gone:
			return
		}
	}
}

func (s *Server) getFile(w http.ResponseWriter, p params) {
	if p["file_id"] == "" {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: file_id is empty"})
		return
	}
	s.mu.Lock()
	f, ok := s.files[p["file_id"]]
	s.mu.Unlock()
	switch {
	case !ok:
		writeErr(w, APIError{Code: 400, Description: "Bad Request: invalid file_id"})
	case len(f.data) > MaxDownload:
		writeErr(w, APIError{Code: 400, Description: "Bad Request: file is too big"})
	default:
		writeOK(w, map[string]any{"file_id": p["file_id"], "file_unique_id": "u-" + p["file_id"], "file_size": len(f.data), "file_path": f.path})
	}
}

// download serves GET /file/bot<token>/<file_path>; rest is what follows
// "/file/bot". Telegram answers a wrong token with 401 and an unknown
// path with 404, and serves every file as application/octet-stream.
func (s *Server) download(w http.ResponseWriter, r *http.Request, rest string) {
	token, filePath, _ := strings.Cut(rest, "/")
	s.mu.Lock()
	s.downloads++
	var fail *APIError
	if len(s.failDownload) > 0 {
		fail = &s.failDownload[0]
		s.failDownload = s.failDownload[1:]
	}
	f, ok := s.files[s.paths[filePath]]
	s.mu.Unlock()
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		writeErr(w, APIError{Code: 405, Description: "Method Not Allowed"})
	case token != s.token:
		writeErr(w, ErrUnauthorized)
	case fail != nil:
		writeErr(w, *fail)
	case !ok || filePath == "":
		writeErr(w, APIError{Code: 404, Description: "Not Found"})
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(f.data)
		}
	}
}

// uploadData prefixes the parameter that holds a multipart upload's
// bytes (params are strings; a method's real names have no NUL).
const uploadData = "\x00data:"

func (s *Server) send(w http.ResponseWriter, method string, p params) {
	chat := p["chat_id"]
	if chat == "" {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: chat_id is empty"})
		return
	}
	s.mu.Lock()
	gone := s.topicGoneLocked(p)
	s.mu.Unlock()
	if gone {
		writeErr(w, ErrThreadNotFound)
		return
	}
	m := &Message{ChatID: chat, ThreadID: p.int("message_thread_id"), ParseMode: p["parse_mode"]}
	switch method {
	case "sendmessage":
		m.Kind, m.Text = "text", p["text"]
		if strings.TrimSpace(m.Text) == "" {
			writeErr(w, APIError{Code: 400, Description: "Bad Request: message text is empty"})
			return
		}
	case "sendphoto":
		m.Kind, m.Text, m.File = "photo", p["caption"], p["photo"]
	case "sendanimation":
		m.Kind, m.Text, m.File = "animation", p["caption"], p["animation"]
	case "senddocument":
		m.Kind, m.Text, m.File = "document", p["caption"], p["document"]
	case "sendvoice":
		m.Kind, m.Text, m.File = "voice", p["caption"], p["voice"]
	case "sendaudio":
		m.Kind, m.Text, m.File = "audio", p["caption"], p["audio"]
	}
	if d, ok := p[uploadData+m.Kind]; ok {
		m.Data = []byte(d)
	}
	s.mu.Lock()
	noVoice := s.noVoice[chat]
	s.mu.Unlock()
	if m.Kind == "voice" && noVoice {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: VOICE_MESSAGES_FORBIDDEN"})
		return
	}
	if m.Kind != "text" && m.File == "" {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: there is no " + m.Kind + " in the request"})
		return
	}
	s.mu.Lock()
	unfetchable := s.unfetchable[m.File]
	s.mu.Unlock()
	if unfetchable {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: failed to get HTTP URL content"})
		return
	}
	if strings.Contains(m.File, ":") && !strings.HasPrefix(m.File, "upload:") && !strings.HasPrefix(m.File, "http://") && !strings.HasPrefix(m.File, "https://") {
		// A string that is neither a file id nor an HTTP URL (a data: URL).
		writeErr(w, APIError{Code: 400, Description: "Bad Request: wrong file identifier/HTTP URL specified"})
		return
	}
	shown, err := render(m.Text, m.ParseMode)
	if err != nil {
		writeErr(w, APIError{Code: 400, Description: err.Error()})
		return
	}
	if n := utf16Len(shown); (m.Kind == "text" && n > 4096) || (m.Kind != "text" && n > 1024) {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: message is too long"})
		return
	}
	m.Shown = shown
	var bad *APIError
	if m.Buttons, bad = keyboard(p["reply_markup"]); bad != nil {
		writeErr(w, *bad)
		return
	}
	if rp := p["reply_parameters"]; rp != "" {
		var r struct {
			MessageID int `json:"message_id"`
		}
		_ = json.Unmarshal([]byte(rp), &r)
		m.ReplyTo = r.MessageID
	} else if id := p.int("reply_to_message_id"); id != 0 {
		m.ReplyTo = id
	}
	s.mu.Lock()
	m.ID = s.nextMsgID
	s.nextMsgID++
	s.messages = append(s.messages, m)
	s.notifyLocked()
	s.mu.Unlock()
	writeOK(w, s.wireMessage(m))
}

// reactionEmoji are the emoji a bot may react with (the Bot API's
// ReactionTypeEmoji); any other is REACTION_INVALID.
var reactionEmoji = strings.Fields("👍 👎 ❤ 🔥 🥰 👏 😁 🤔 🤯 😱 🤬 😢 🎉 🤩 🤮 💩 🙏 👌 🕊 🤡 🥱 🥴 😍 🐳 ❤‍🔥 🌚 🌭 💯 🤣 ⚡ 🍌 🏆 💔 🤨 😐 🍓 🍾 💋 🖕 😈 😴 😭 🤓 👻 👨‍💻 👀 🎃 🙈 😇 😨 🤝 ✍ 🤗 🫡 🎅 🎄 ☃ 💅 🤪 🗿 🆒 💘 🙉 🦄 😘 💊 🙊 😎 👾 🤷‍♂ 🤷 🤷‍♀ 😡")

// setReaction replaces the bot's reactions on a message; an empty or
// missing reaction list removes them. Bots without Premium set one.
func (s *Server) setReaction(w http.ResponseWriter, p params) {
	chat, id := p["chat_id"], p.int("message_id")
	if chat == "" {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: chat_id is empty"})
		return
	}
	if id <= 0 {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: MESSAGE_ID_INVALID"})
		return
	}
	var list []struct {
		Type  string `json:"type"`
		Emoji string `json:"emoji"`
	}
	if raw := p["reaction"]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &list); err != nil {
			writeErr(w, APIError{Code: 400, Description: "Bad Request: can't parse reaction types JSON object"})
			return
		}
	}
	if len(list) > 1 {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: REACTIONS_TOO_MANY"})
		return
	}
	var set []string
	for _, r := range list {
		if r.Type != "emoji" || !slices.Contains(reactionEmoji, r.Emoji) {
			writeErr(w, APIError{Code: 400, Description: "Bad Request: REACTION_INVALID"})
			return
		}
		set = append(set, r.Emoji)
	}
	s.mu.Lock()
	s.reactions[chat+"/"+strconv.Itoa(id)] = set
	s.notifyLocked()
	s.mu.Unlock()
	writeOK(w, true)
}

func (s *Server) find(chat string, id int) *Message {
	for _, m := range s.messages {
		if m.ChatID == chat && m.ID == id && !m.Deleted {
			return m
		}
	}
	return nil
}

func (s *Server) edit(w http.ResponseWriter, p params) {
	shown, err := render(p["text"], p["parse_mode"])
	if err != nil {
		writeErr(w, APIError{Code: 400, Description: err.Error()})
		return
	}
	if utf16Len(shown) > 4096 {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: MESSAGE_TOO_LONG"})
		return
	}
	s.mu.Lock()
	m := s.find(p["chat_id"], p.int("message_id"))
	if m == nil {
		s.mu.Unlock()
		writeErr(w, APIError{Code: 400, Description: "Bad Request: message to edit not found"})
		return
	}
	buttons, bad := keyboard(p["reply_markup"])
	if bad != nil {
		s.mu.Unlock()
		writeErr(w, *bad)
		return
	}
	if m.Text == p["text"] && m.ParseMode == p["parse_mode"] && slices.EqualFunc(m.Buttons, buttons, slices.Equal) {
		s.mu.Unlock()
		writeErr(w, APIError{Code: 400, Description: "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"})
		return
	}
	m.Text, m.Shown, m.ParseMode, m.Buttons = p["text"], shown, p["parse_mode"], buttons
	m.Edits++
	s.notifyLocked()
	wire := s.wireMessage(m)
	s.mu.Unlock()
	writeOK(w, wire)
}

func (s *Server) delete(w http.ResponseWriter, p params) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.find(p["chat_id"], p.int("message_id"))
	if m == nil {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: message to delete not found"})
		return
	}
	m.Deleted = true
	s.notifyLocked()
	writeOK(w, true)
}

func (s *Server) wireMessage(m *Message) map[string]any {
	chatID, _ := strconv.ParseInt(m.ChatID, 10, 64)
	chatType := "private"
	if chatID < 0 {
		chatType = "supergroup"
	}
	out := map[string]any{
		"message_id": m.ID, "date": time.Now().Unix(),
		"from": map[string]any{"id": s.botID, "is_bot": true, "first_name": s.username, "username": s.username},
		"chat": map[string]any{"id": chatID, "type": chatType},
	}
	if m.ThreadID != 0 {
		out["message_thread_id"] = m.ThreadID
		if chatType == "private" {
			// A message in a private chat's topic (Bot API 9.3).
			out["is_topic_message"] = true
		}
	}
	if len(m.Buttons) > 0 {
		out["reply_markup"] = map[string]any{"inline_keyboard": m.Buttons}
	}
	switch m.Kind {
	case "photo":
		out["photo"] = []map[string]any{{"file_id": "sent-photo", "file_unique_id": "u1", "width": 1, "height": 1}}
		out["caption"] = m.Shown
	case "document":
		out["document"] = map[string]any{"file_id": "sent-doc", "file_unique_id": "u2"}
		out["caption"] = m.Shown
	case "voice":
		out["voice"] = map[string]any{"file_id": "sent-voice", "file_unique_id": "u4", "duration": 1, "mime_type": "audio/ogg"}
		out["caption"] = m.Shown
	case "audio":
		out["audio"] = map[string]any{"file_id": "sent-audio", "file_unique_id": "u5", "duration": 1}
		out["caption"] = m.Shown
	case "animation":
		// Telegram gives an animation's message its document too.
		out["animation"] = map[string]any{"file_id": "sent-anim", "file_unique_id": "u3", "width": 1, "height": 1, "duration": 1}
		out["document"] = map[string]any{"file_id": "sent-anim", "file_unique_id": "u3", "mime_type": "video/mp4"}
		out["caption"] = m.Shown
	default:
		out["text"] = m.Shown
	}
	return out
}

func render(text, parseMode string) (string, error) {
	switch strings.ToLower(parseMode) {
	case "markdownv2":
		return ParseMarkdownV2(text)
	case "":
		return text, nil
	default:
		// HTML and legacy Markdown are not modelled: shown as sent.
		return text, nil
	}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// keyboard reads a reply_markup parameter's inline keyboard, with
// Telegram's checks of callback data (1 to 64 bytes); nil without one.
// A refused keyboard is the Bad Request's description.
func keyboard(raw string) ([][]Button, *APIError) {
	bad := func(d string) *APIError { return &APIError{Code: 400, Description: "Bad Request: " + d} }
	if raw == "" {
		return nil, nil
	}
	var rm struct {
		InlineKeyboard [][]Button `json:"inline_keyboard"`
	}
	if err := json.Unmarshal([]byte(raw), &rm); err != nil {
		return nil, bad("can't parse reply keyboard markup JSON object")
	}
	for _, row := range rm.InlineKeyboard {
		for _, b := range row {
			if b.Text == "" {
				return nil, bad("text buttons are unallowed in the inline keyboard")
			}
			if len(b.Data) < 1 || len(b.Data) > 64 {
				return nil, bad("BUTTON_DATA_INVALID")
			}
		}
	}
	return rm.InlineKeyboard, nil
}

// answerCallback takes answerCallbackQuery: once per query, as Telegram.
func (s *Server) answerCallback(w http.ResponseWriter, p params) {
	id := p["callback_query_id"]
	s.mu.Lock()
	defer s.mu.Unlock()
	done, ok := s.queries[id]
	if !ok || done || s.queryLife > 0 && time.Since(s.queryAt[id]) > s.queryLife {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: query is too old and response timeout expired or query ID is invalid"})
		return
	}
	if utf16Len(p["text"]) > 200 {
		// The Bot API's "0-200 characters", counted as Telegram counts
		// its other texts' lengths, in UTF-16 units: an emoji outside
		// the BMP counts two.
		writeErr(w, APIError{Code: 400, Description: "Bad Request: MESSAGE_TOO_LONG"})
		return
	}
	s.queries[id] = true
	s.answered = append(s.answered, CallbackAnswer{QueryID: id, Text: p["text"], ShowAlert: p["show_alert"] == "true"})
	s.notifyLocked()
	writeOK(w, true)
}

// setAllowedLocked keeps the allowed_updates of a getUpdates or
// setWebhook call; as on Telegram, a call without them keeps the last.
func (s *Server) setAllowedLocked(p params) {
	raw := p["allowed_updates"]
	if raw == "" {
		return
	}
	var kinds []string
	if json.Unmarshal([]byte(raw), &kinds) == nil {
		s.allowed = kinds
	}
}

// allowedLocked reports whether the bot asked for updates of raw's kind.
func (s *Server) allowedLocked(raw json.RawMessage) bool {
	if len(s.allowed) == 0 {
		return true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return true // malformed on purpose: the bot sees it
	}
	for k := range obj {
		if k != "update_id" && !slices.Contains(s.allowed, k) {
			return false
		}
	}
	return true
}

// BotCommand is an entry of the bot's command menu.
type BotCommand struct {
	Command     string `json:"command"`
	Description string `json:"description"`
}

// botCommandName is Telegram's rule for a menu command's name.
var botCommandName = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// setMyCommands replaces the bot's command menu, refusing as Telegram
// does a list of more than 100, a name not of 1-32 lowercase letters,
// digits and underscores, or a description not of 1-256 characters.
func (s *Server) setMyCommands(w http.ResponseWriter, p params) {
	var cmds []BotCommand
	if err := json.Unmarshal([]byte(p["commands"]), &cmds); err != nil {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: can't parse commands JSON object"})
		return
	}
	if len(cmds) > 100 {
		writeErr(w, APIError{Code: 400, Description: "Bad Request: too many commands specified"})
		return
	}
	for _, c := range cmds {
		if !botCommandName.MatchString(c.Command) {
			writeErr(w, APIError{Code: 400, Description: "Bad Request: BOT_COMMAND_INVALID"})
			return
		}
		if n := utf8.RuneCountInString(c.Description); n < 1 || n > 256 {
			writeErr(w, APIError{Code: 400, Description: "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID"})
			return
		}
	}
	s.mu.Lock()
	s.commands = cmds
	s.notifyLocked()
	s.mu.Unlock()
	writeOK(w, true)
}

// Commands is the bot's command menu, as setMyCommands last set it.
func (s *Server) Commands() []BotCommand {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]BotCommand{}, s.commands...)
}
