// Package googlechatfake is a local Google side of a Google Chat app for
// tests, over the real wire protocol: Google Chat's signing keys (a JWKS
// of the fake's own RSA key), Google's OAuth token endpoint (the JWT
// bearer grant, the assertion checked against the service account key
// the fake issued), the Chat REST API an app sends through
// (spaces.messages create with requestId, messageId and threads, get,
// patch, delete, by system or client-assigned name;
// media download; the bearer token checked on each), and Google Chat's
// side of the app's HTTP endpoint: interaction events with a signed
// bearer token, posted to the gateway. Failures can be injected (429 with
// Retry-After, 5xx, 4xx) into creates and, by method, into the other
// calls of the messages API, which are counted.
package googlechatfake

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
)

// The markup syntaxes a message's text can be read in (markupSyntax):
// Chat's own (*bold*, _italic_, ~strike~) and CommonMark Markdown
// (**bold**, *italic*), the default of the Chat apps created now.
const (
	MarkupChat     = "MARKUP_SYNTAX_CHAT"
	MarkupMarkdown = "MARKUP_SYNTAX_MARKDOWN"
)

// markup is the syntax a create or patch naming syntax reads its text in.
func (f *Fake) markup(syntax string) (string, bool) {
	switch syntax {
	case "", "MARKUP_SYNTAX_UNSPECIFIED":
		return f.AppMarkup, true
	case MarkupChat, MarkupMarkdown:
		return syntax, true
	}
	return "", false
}

// Issuer is the iss of the tokens Google Chat signs.
const Issuer = "chat@system.gserviceaccount.com"

// Fake is one Google Cloud project with one Chat app.
type Fake struct {
	// ProjectNumber is the audience of the events' tokens.
	ProjectNumber string
	// ClientEmail is the app's service account.
	ClientEmail string
	// AppMarkup is the app's default markup syntax, which reads the text
	// of a create or patch that names none (markupSyntax):
	// MARKUP_SYNTAX_MARKDOWN, as for a Chat app created now.
	AppMarkup string

	saKey *rsa.PrivateKey // the service account's key
	srv   *httptest.Server
	seq   atomic.Int64

	mu        sync.Mutex
	chatKey   chatKey   // signs events
	retired   []chatKey // keys rotated out, still published
	keyReqs   int
	tokens    map[string]bool
	tokenReqs int
	msgs      map[string][]*Message // space → messages the app sent
	requests  map[string]*Message   // requestId → message
	failures  []Failure
	// failOn are the failures answered instead of the next gets,
	// patches or deletes of a message, by method.
	failOn map[string][]Failure
	calls  map[string]int // message API calls by method
	files  map[string]file
	// fileFails are answered instead of the next media downloads;
	// downloads counts those asked for.
	fileFails []Failure
	downloads int
}

type file struct {
	data []byte
	mime string
}

// Message is one message the app sent, as the fake keeps it.
type Message struct {
	Name  string
	Space string
	Text  string
	// Markup is the syntax its text was read in (Chat's or Markdown's).
	Markup    string
	Thread    string // the thread it was posted in
	RequestID string
	// ClientID is the client-assigned id it was created with (messageId,
	// "client-…"), which names it too: spaces/…/messages/client-….
	ClientID string
	Edits    int
	Deleted  bool
}

// Failure is answered instead of the next create (Fail), or call of a
// method (FailOn).
type Failure struct {
	Status     int
	RetryAfter int // seconds, 0 for none
	// Done, on a create's failure, makes the message all the same: the
	// app's request went through, but its answer was lost.
	Done bool
	// Cut, on a download's failure, sends the first half of the file,
	// then drops the connection (Status is not used).
	Cut bool
}

// New starts a fake; it stops when the test ends.
func New(t testing.TB) *Fake {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fake{
		ProjectNumber: "123456789012", ClientEmail: "hermes-chat-bot@fake-project.iam.gserviceaccount.com", AppMarkup: MarkupMarkdown,
		chatKey: chatKey{"chat-key-1", key}, saKey: saKey,
		tokens: map[string]bool{}, msgs: map[string][]*Message{}, requests: map[string]*Message{}, files: map[string]file{},
		failOn: map[string][]Failure{}, calls: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks", f.jwks)
	mux.HandleFunc("POST /token", f.token)
	mux.HandleFunc("POST /v1/spaces/{space}/messages", f.create)
	mux.HandleFunc("GET /v1/spaces/{space}/messages/{msg}", f.get)
	mux.HandleFunc("PATCH /v1/spaces/{space}/messages/{msg}", f.patch)
	mux.HandleFunc("DELETE /v1/spaces/{space}/messages/{msg}", f.delete)
	mux.HandleFunc("GET /v1/media/", f.media)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// KeysURL is Google Chat's JWKS.
func (f *Fake) KeysURL() string { return f.srv.URL + "/jwks" }

// TokenURL is the token endpoint (the key's token_uri).
func (f *Fake) TokenURL() string { return f.srv.URL + "/token" }

// APIBaseURL is the Chat API's root.
func (f *Fake) APIBaseURL() string { return f.srv.URL }

// ServiceAccountJSON is the app's service account key, as Google's
// console downloads it.
func (f *Fake) ServiceAccountJSON() string {
	der, _ := x509.MarshalPKCS8PrivateKey(f.saKey)
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "fake-project", "private_key_id": "sa-key-1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": f.ClientEmail, "client_id": "1000", "token_uri": f.TokenURL(),
	})
	return string(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": status, "message": msg, "status": code}})
}

func (f *Fake) jwks(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.keyReqs++
	all := append([]chatKey{f.chatKey}, f.retired...)
	f.mu.Unlock()
	keys := make([]map[string]any, 0, len(all))
	for _, k := range all {
		keys = append(keys, map[string]any{
			"kty": "RSA", "alg": "RS256", "use": "sig", "kid": k.kid,
			"n": base64.RawURLEncoding.EncodeToString(k.key.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.key.E)).Bytes()),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

type chatKey struct {
	kid string
	key *rsa.PrivateKey
}

// RotateKey signs events from now on with a new key under a new kid, as
// Google rotates its keys; the JWKS publishes it at once, with the old.
func (f *Fake) RotateKey(t testing.TB) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retired = append(f.retired, f.chatKey)
	f.chatKey = chatKey{fmt.Sprintf("chat-key-%d", len(f.retired)+1), key}
}

// KeyRequests counts JWKS downloads.
func (f *Fake) KeyRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyReqs
}

// token is the JWT bearer grant of Google's token endpoint.
func (f *Fake) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request"})
		return
	}
	if r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "unsupported_grant_type"})
		return
	}
	var c jwt.MapClaims
	_, err := jwt.ParseWithClaims(r.PostForm.Get("assertion"), &c, func(*jwt.Token) (any, error) { return &f.saKey.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(f.ClientEmail), jwt.WithAudience(f.TokenURL()), jwt.WithExpirationRequired())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": err.Error()})
		return
	}
	if scope, _ := c["scope"].(string); !strings.Contains(scope, "https://www.googleapis.com/auth/chat.bot") {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_scope"})
		return
	}
	tok := fmt.Sprintf("ya29.fake-%d", f.seq.Add(1))
	f.mu.Lock()
	f.tokens[tok] = true
	f.tokenReqs++
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "expires_in": 3599, "token_type": "Bearer"})
}

// TokenRequests counts tokens issued.
func (f *Fake) TokenRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenReqs
}

func (f *Fake) authorized(w http.ResponseWriter, r *http.Request) bool {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	ok := f.tokens[tok]
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
	}
	return ok
}

// Fail makes the next creates fail, in order; a zero Failure lets its
// create through.
func (f *Fake) Fail(fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fs...)
}

// FailOn makes the next gets, patches or deletes (method GET, PATCH or
// DELETE) of a message fail, in order; a zero Failure lets its call
// through.
func (f *Fake) FailOn(method string, fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failOn[method] = append(f.failOn[method], fs...)
}

// Calls counts the calls of the messages API (create, get, patch,
// delete) by HTTP method: POST, GET, PATCH, DELETE.
func (f *Fake) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// called counts r and answers the failure injected for its method, if
// any; it reports whether it answered.
func (f *Fake) called(w http.ResponseWriter, r *http.Request) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[r.Method]++
	fs := f.failOn[r.Method]
	if len(fs) == 0 {
		return false
	}
	fl := fs[0]
	f.failOn[r.Method] = fs[1:]
	if fl == (Failure{}) {
		return false
	}
	if fl.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
	}
	apiError(w, fl.Status, "INJECTED", "injected failure")
	return true
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) || f.called(w, r) {
		return
	}
	space := "spaces/" + r.PathValue("space")
	var body struct {
		Text   string `json:"text"`
		Thread *struct {
			Name string `json:"name"`
		} `json:"thread"`
		MarkupSyntax string `json:"markupSyntax"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || strings.TrimSpace(body.Text) == "" {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Message cannot be empty.")
		return
	}
	markup, ok := f.markup(body.MarkupSyntax)
	if !ok {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid value at 'message.markup_syntax'")
		return
	}
	if len([]rune(body.Text)) > 4096 {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Message text is too long.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var lost *Failure // the failure answered after the message is made
	if len(f.failures) > 0 {
		fl := f.failures[0]
		f.failures = f.failures[1:]
		if fl.Done {
			lost = &fl
		} else if fl != (Failure{}) {
			if fl.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
			}
			apiError(w, fl.Status, "INJECTED", "injected failure")
			return
		}
	}
	reqID := r.URL.Query().Get("requestId")
	if m, ok := f.requests[reqID]; ok && reqID != "" {
		writeJSON(w, http.StatusOK, f.wire(m))
		return
	}
	clientID := r.URL.Query().Get("messageId")
	if clientID != "" {
		if !validClientID(clientID) {
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid message ID.")
			return
		}
		// Unique in the space; taken as kept by a deleted message too.
		for _, m := range f.msgs[space] {
			if m.ClientID == clientID {
				apiError(w, http.StatusConflict, "ALREADY_EXISTS", "Message ID already exists in the space.")
				return
			}
		}
	}
	thread := ""
	if body.Thread != nil && body.Thread.Name != "" {
		if !strings.HasPrefix(body.Thread.Name, space+"/threads/") {
			apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Thread is not in the space.")
			return
		}
		if r.URL.Query().Get("messageReplyOption") == "" {
			// Without a reply option Chat starts a new thread.
			body.Thread = nil
		} else {
			thread = body.Thread.Name
		}
	}
	id := strconv.FormatInt(f.seq.Add(1), 10)
	if thread == "" {
		thread = space + "/threads/t" + id
	}
	m := &Message{Name: space + "/messages/m" + id, Space: space, Text: body.Text, Markup: markup, Thread: thread, RequestID: reqID, ClientID: clientID}
	f.msgs[space] = append(f.msgs[space], m)
	if reqID != "" {
		f.requests[reqID] = m
	}
	if lost != nil {
		apiError(w, lost.Status, "INJECTED", "injected failure after the message was made")
		return
	}
	writeJSON(w, http.StatusOK, f.wire(m))
}

// validClientID reports whether id is a client-assigned message id:
// "client-", then lowercase letters, digits and hyphens, 63 at most.
func validClientID(id string) bool {
	if !strings.HasPrefix(id, "client-") || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func (f *Fake) wire(m *Message) map[string]any {
	w := map[string]any{"name": m.Name, "text": m.Text, "thread": map[string]any{"name": m.Thread},
		"sender": map[string]any{"name": "users/app", "type": "BOT"}, "createTime": time.Now().UTC().Format(time.RFC3339Nano)}
	if m.ClientID != "" {
		w["clientAssignedMessageId"] = m.ClientID
	}
	return w
}

// find is the message the request's path names, by its system name or
// its client-assigned one; nil when there is none or it was deleted.
func (f *Fake) find(r *http.Request) *Message {
	msg := r.PathValue("msg")
	name := "spaces/" + r.PathValue("space") + "/messages/" + msg
	for _, m := range f.msgs["spaces/"+r.PathValue("space")] {
		if (m.Name == name || m.ClientID != "" && m.ClientID == msg) && !m.Deleted {
			return m
		}
	}
	return nil
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) || f.called(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(r)
	if m == nil {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "Message not found.")
		return
	}
	writeJSON(w, http.StatusOK, f.wire(m))
}

func (f *Fake) patch(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) || f.called(w, r) {
		return
	}
	var body struct {
		Text         string `json:"text"`
		MarkupSyntax string `json:"markupSyntax"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.URL.Query().Get("updateMask") != "text" {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "bad patch")
		return
	}
	markup, ok := f.markup(body.MarkupSyntax)
	if !ok {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid value at 'message.markup_syntax'")
		return
	}
	if len([]rune(body.Text)) > 4096 {
		apiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Message text is too long.")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(r)
	if m == nil {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "Message not found.")
		return
	}
	m.Text, m.Markup = body.Text, markup
	m.Edits++
	writeJSON(w, http.StatusOK, f.wire(m))
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) || f.called(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.find(r)
	if m == nil {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "Message not found.")
		return
	}
	m.Deleted = true
	writeJSON(w, http.StatusOK, map[string]any{})
}

// AddFile stores an uploaded attachment and returns its
// attachmentDataRef.resourceName.
func (f *Fake) AddFile(data []byte, mime string) string {
	ref := fmt.Sprintf("ref-%d", f.seq.Add(1))
	f.mu.Lock()
	f.files[ref] = file{data, mime}
	f.mu.Unlock()
	return ref
}

// FailDownloads makes the next media downloads fail, in order (429
// with its Retry-After, a 5xx, a 404).
func (f *Fake) FailDownloads(fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fileFails = append(f.fileFails, fs...)
}

// Downloads counts the media downloads asked for, failed ones included.
func (f *Fake) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads
}

func (f *Fake) media(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	ref := strings.TrimPrefix(r.URL.Path, "/v1/media/")
	f.mu.Lock()
	f.downloads++
	var cut bool
	if len(f.fileFails) > 0 {
		fail := f.fileFails[0]
		f.fileFails = f.fileFails[1:]
		if cut = fail.Cut; !cut {
			f.mu.Unlock()
			if fail.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(fail.RetryAfter))
			}
			apiError(w, fail.Status, "INJECTED", "injected failure")
			return
		}
	}
	fl, ok := f.files[ref]
	f.mu.Unlock()
	if !ok || r.URL.Query().Get("alt") != "media" {
		apiError(w, http.StatusNotFound, "NOT_FOUND", "no such attachment")
		return
	}
	if cut {
		platformtest.CutFile(w, fl.mime, fl.data)
	}
	w.Header().Set("Content-Type", fl.mime)
	_, _ = w.Write(fl.data)
}

// Messages returns what the app sent to space, deleted ones included.
func (f *Fake) Messages(space string) []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Message
	for _, m := range f.msgs[space] {
		out = append(out, *m)
	}
	return out
}

// Texts returns the texts space shows from the app.
func (f *Fake) Texts(space string) []string {
	var out []string
	for _, m := range f.Messages(space) {
		if !m.Deleted {
			out = append(out, m.Text)
		}
	}
	return out
}

// Message builds a MESSAGE event from user (an email; its resource name
// is derived) in space; spaceType is DIRECT_MESSAGE, SPACE or
// GROUP_CHAT. A space message mentions the app, as Google Chat sends
// only those to it.
func (f *Fake) Message(space, spaceType, email, name, text string) map[string]any {
	id := f.seq.Add(1)
	user := map[string]any{"name": UserName(email), "displayName": name, "email": email, "type": "HUMAN"}
	msg := map[string]any{
		"name": fmt.Sprintf("%s/messages/msg%d", space, id), "sender": user, "createTime": "2026-01-02T03:04:05.123456Z",
		"text": text, "argumentText": text, "thread": map[string]any{"name": fmt.Sprintf("%s/threads/th%d", space, id)},
	}
	if spaceType != "DIRECT_MESSAGE" {
		msg["text"] = "@Hermes " + text
		msg["argumentText"] = " " + text
		msg["annotations"] = []map[string]any{{"type": "USER_MENTION", "startIndex": 0, "length": 7,
			"userMention": map[string]any{"user": map[string]any{"name": "users/app", "displayName": "Hermes", "type": "BOT"}, "type": "MENTION"}}}
	}
	return map[string]any{
		"type": "MESSAGE", "eventTime": "2026-01-02T03:04:05.123456Z",
		"space":   map[string]any{"name": space, "spaceType": spaceType, "displayName": "Team room"},
		"message": msg, "user": user,
	}
}

// UserName is the resource name Message gives email.
func UserName(email string) string {
	return "users/" + strconv.FormatInt(int64(len(email))*1000+int64(email[0]), 10)
}

// Claims are a valid token's claims for the app.
func (f *Fake) Claims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": Issuer, "aud": f.ProjectNumber, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// Sign signs claims with Google Chat's key.
func (f *Fake) Sign(c jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	f.mu.Lock()
	k := f.chatKey
	f.mu.Unlock()
	tok.Header["kid"] = k.kid
	s, err := tok.SignedString(k.key)
	if err != nil {
		panic(err)
	}
	return s
}

// Post posts event to the app's endpoint u with a valid token, as Google
// Chat does, and returns the answer's status.
func (f *Fake) Post(ctx context.Context, u string, event map[string]any) (int, error) {
	body, err := json.Marshal(event)
	if err != nil {
		return 0, err
	}
	return f.PostRaw(ctx, u, body, "Bearer "+f.Sign(f.Claims()))
}

// PostRaw posts body with the Authorization header auth.
func (f *Fake) PostRaw(ctx context.Context, u string, body []byte, auth string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Google-Dynamite")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
