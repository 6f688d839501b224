// Package teamsfake is a local Microsoft side of a Teams bot for tests,
// over the real wire protocol: the Bot Framework's OpenID metadata and
// its key set (an RSA key of the fake's own), the Entra token endpoint
// (client credentials), the Bot Connector REST API a bot sends through
// (activities posted, replied, updated, deleted, typing; the bearer
// token checked on each), attachment downloads behind the bot's token,
// and the Bot Framework's side of the messaging endpoint: activities
// with a signed bearer token, posted to the gateway. Failures can be
// injected (429 with Retry-After, 5xx, 4xx).
package teamsfake

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
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

// Issuer is the iss of the tokens the Bot Framework signs.
const Issuer = "https://api.botframework.com"

// ChannelID is Teams's channel id, endorsed by the fake's key.
const ChannelID = "msteams"

// Fake is one Teams tenant with one bot registered.
type Fake struct {
	ClientID     string
	ClientSecret string
	TenantID     string
	BotName      string

	key *rsa.PrivateKey
	kid string
	old []signingKey // keys rotated out, still published
	srv *httptest.Server
	seq atomic.Int64

	mu        sync.Mutex
	tokens    map[string]time.Time // access tokens issued → expiry
	tokenReqs int
	keyReqs   int
	acts      map[string][]*Activity // conversation id → what the bot sent there
	typing    map[string]int
	failures  []Failure
	files     map[string][]byte // attachment id → bytes
	fileFails []Failure         // answered instead of the next downloads
	downloads int               // attachment downloads asked for
}

// Activity is one activity the bot sent, as the fake keeps it.
type Activity struct {
	ID          string
	Type        string // message, typing
	Text        string
	TextFormat  string
	ReplyTo     string // the activity id of POST …/activities/{id}
	Attachments []map[string]any
	Edits       int
	Deleted     bool
}

// Failure is answered instead of the next message sent.
type Failure struct {
	Status     int
	RetryAfter int // seconds, 0 for none
	Code       string
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
	f := &Fake{
		ClientID: "00000000-0000-4000-8000-00000000b07a", ClientSecret: "fake-secret", TenantID: "11111111-1111-4111-8111-111111111111",
		BotName: "Hermes", key: key, kid: "fake-key-1",
		tokens: map[string]time.Time{}, acts: map[string][]*Activity{}, typing: map[string]int{}, files: map[string][]byte{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openid", f.metadata)
	mux.HandleFunc("GET /keys", f.keys)
	mux.HandleFunc("POST /token", f.token)
	mux.HandleFunc("POST /teams/v3/conversations/{conv}/activities", f.post)
	mux.HandleFunc("POST /teams/v3/conversations/{conv}/activities/{id}", f.post)
	mux.HandleFunc("PUT /teams/v3/conversations/{conv}/activities/{id}", f.update)
	mux.HandleFunc("DELETE /teams/v3/conversations/{conv}/activities/{id}", f.delete)
	mux.HandleFunc("GET /attachments/{id}", f.download)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// BaseURL is the fake's root.
func (f *Fake) BaseURL() string { return f.srv.URL }

// MetadataURL is the OpenID metadata document.
func (f *Fake) MetadataURL() string { return f.srv.URL + "/openid" }

// TokenURL is the token endpoint.
func (f *Fake) TokenURL() string { return f.srv.URL + "/token" }

// ServiceURL is the connector's serviceUrl, as activities carry it.
func (f *Fake) ServiceURL() string { return f.srv.URL + "/teams/" }

// BotID is the bot's channel account id.
func (f *Fake) BotID() string { return "28:" + f.ClientID }

// NewID is a fresh Teams message id (digits, as Teams's).
func (f *Fake) NewID() string {
	return strconv.FormatInt(1_700_000_000_000+f.seq.Add(1), 10)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) metadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": Issuer, "authorization_endpoint": "https://invalid.example/authorize",
		"jwks_uri": f.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
		"token_endpoint_auth_methods_supported": []string{"private_key_jwt"},
	})
}

func (f *Fake) keys(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.keyReqs++
	all := append([]signingKey{{f.kid, f.key}}, f.old...)
	f.mu.Unlock()
	var keys []map[string]any
	for _, k := range all {
		keys = append(keys, map[string]any{
			"kty": "RSA", "use": "sig", "kid": k.kid,
			"n":            base64.RawURLEncoding.EncodeToString(k.key.N.Bytes()),
			"e":            base64.RawURLEncoding.EncodeToString(big.NewInt(int64(k.key.E)).Bytes()),
			"endorsements": []string{ChannelID, "webchat"},
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
}

// RotateKey signs from now on with a new key under a new kid, as
// Microsoft rotates its keys; the key set publishes it at once.
func (f *Fake) RotateKey(t testing.TB) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.old = append(f.old, signingKey{f.kid, f.key})
	f.key, f.kid = key, fmt.Sprintf("fake-key-rotated-%d", len(f.old))
}

type signingKey struct {
	kid string
	key *rsa.PrivateKey
}

// KeyRequests counts key set downloads.
func (f *Fake) KeyRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keyReqs
}

// token is the client credentials grant of the Entra token endpoint.
func (f *Fake) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "error_description": err.Error()})
		return
	}
	switch {
	case r.PostForm.Get("grant_type") != "client_credentials":
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "unsupported_grant_type"})
		return
	case r.PostForm.Get("client_id") != f.ClientID || r.PostForm.Get("client_secret") != f.ClientSecret:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."})
		return
	case r.PostForm.Get("scope") != "https://api.botframework.com/.default":
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_scope"})
		return
	}
	tok := fmt.Sprintf("fake-access-%d", f.seq.Add(1))
	f.mu.Lock()
	f.tokens[tok] = time.Now().Add(time.Hour)
	f.tokenReqs++
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": 3600, "ext_expires_in": 3600, "access_token": tok})
}

// TokenRequests counts tokens issued.
func (f *Fake) TokenRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokenReqs
}

// RevokeTokens makes every token issued so far invalid (the connector
// answers 401 to them).
func (f *Fake) RevokeTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.tokens)
}

func (f *Fake) authorized(w http.ResponseWriter, r *http.Request) bool {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.mu.Lock()
	exp, ok := f.tokens[tok]
	f.mu.Unlock()
	if !ok || time.Now().After(exp) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Authorization has been denied for this request."})
		return false
	}
	return true
}

// Fail makes the next message sends fail, in order.
func (f *Fake) Fail(fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, fs...)
}

func (f *Fake) post(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	conv, replyTo := r.PathValue("conv"), r.PathValue("id")
	var in struct {
		Type        string           `json:"type"`
		Text        string           `json:"text"`
		TextFormat  string           `json:"textFormat"`
		ReplyToID   string           `json:"replyToId"`
		Attachments []map[string]any `json:"attachments"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.Type == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "BadArgument", "message": "bad activity"}})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if in.Type == "typing" {
		f.typing[conv]++
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	if len(f.failures) > 0 {
		fl := f.failures[0]
		f.failures = f.failures[1:]
		if fl.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
		}
		code := fl.Code
		if code == "" {
			code = http.StatusText(fl.Status)
		}
		writeJSON(w, fl.Status, map[string]any{"error": map[string]any{"code": code, "message": "injected failure"}})
		return
	}
	if in.Text == "" && len(in.Attachments) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "BadArgument", "message": "Activity text cannot be empty"}})
		return
	}
	for _, a := range in.Attachments {
		if ct, _ := a["contentType"].(string); !attachmentTaken(ct) {
			// Teams shows cards and pictures; a file goes through a
			// file consent card or Graph, never by its URL.
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "BadArgument", "message": "Unknown attachment type"}})
			return
		}
	}
	if replyTo != "" && strings.Contains(conv, "@thread.v2") {
		// Group chats have no reply threads.
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "BadArgument", "message": "Replies are not supported in group chats"}})
		return
	}
	id := f.NewID()
	f.acts[conv] = append(f.acts[conv], &Activity{ID: id, Type: in.Type, Text: in.Text, TextFormat: in.TextFormat, ReplyTo: replyTo, Attachments: in.Attachments})
	writeJSON(w, http.StatusCreated, map[string]any{"id": id})
}

// attachmentTaken reports whether Teams takes an attachment of content
// type ct in a bot's message: a card, or a picture by its URL.
func attachmentTaken(ct string) bool {
	return strings.HasPrefix(ct, "application/vnd.microsoft.card.") || strings.HasPrefix(ct, "application/vnd.microsoft.teams.card.") ||
		strings.HasPrefix(ct, "image/")
}

func (f *Fake) find(conv, id string) *Activity {
	for _, a := range f.acts[conv] {
		if a.ID == id {
			return a
		}
	}
	return nil
}

func (f *Fake) update(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	var in struct {
		Type        string           `json:"type"`
		Text        string           `json:"text"`
		Attachments []map[string]any `json:"attachments"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.Type != "message" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "BadArgument", "message": "bad activity"}})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.find(r.PathValue("conv"), r.PathValue("id"))
	if a == nil || a.Deleted {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": "ActivityNotFoundInConversation", "message": "not found"}})
		return
	}
	// An update replaces the activity: a card sent with it is gone
	// unless the update sends it again.
	a.Text, a.Attachments = in.Text, in.Attachments
	a.Edits++
	writeJSON(w, http.StatusOK, map[string]any{"id": a.ID})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.find(r.PathValue("conv"), r.PathValue("id"))
	if a == nil {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": "ActivityNotFoundInConversation", "message": "not found"}})
		return
	}
	a.Deleted = true
	w.WriteHeader(http.StatusOK)
}

// Activities returns copies of the message activities the bot sent to
// conversation, deleted ones included.
func (f *Fake) Activities(conversation string) []Activity {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Activity
	for _, a := range f.acts[conversation] {
		out = append(out, *a)
	}
	return out
}

// Texts are the texts of the messages the bot shows in conversation.
func (f *Fake) Texts(conversation string) []string {
	var out []string
	for _, a := range f.Activities(conversation) {
		if !a.Deleted {
			out = append(out, a.Text)
		}
	}
	return out
}

// Typing counts the typing activities sent to conversation.
func (f *Fake) Typing(conversation string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typing[conversation]
}

// AddFile puts bytes behind the connector's attachment URL it returns
// (downloaded with the bot's token).
func (f *Fake) AddFile(data []byte) string {
	id := f.NewID()
	f.mu.Lock()
	f.files[id] = data
	f.mu.Unlock()
	return f.srv.URL + "/attachments/" + id
}

// FailDownloads makes the next attachment downloads fail, in order
// (the connector's 429 with its Retry-After, a 5xx, a 404).
func (f *Fake) FailDownloads(fs ...Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fileFails = append(f.fileFails, fs...)
}

// Downloads counts the attachment downloads asked for, failed ones
// included.
func (f *Fake) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloads
}

func (f *Fake) download(w http.ResponseWriter, r *http.Request) {
	if !f.authorized(w, r) {
		return
	}
	f.mu.Lock()
	f.downloads++
	var cut bool
	if len(f.fileFails) > 0 {
		fl := f.fileFails[0]
		f.fileFails = f.fileFails[1:]
		if cut = fl.Cut; !cut {
			f.mu.Unlock()
			if fl.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(fl.RetryAfter))
			}
			writeJSON(w, fl.Status, map[string]any{"error": map[string]any{"code": cmp.Or(fl.Code, http.StatusText(fl.Status)), "message": "injected failure"}})
			return
		}
	}
	data, ok := f.files[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if cut {
		platformtest.CutFile(w, "image/png", data)
	}
	w.Header().Set("Content-Type", "image/png")
	_, _ = w.Write(data)
}

// Message builds a message activity from user (id and name) in
// conversation (its type personal, groupChat or channel).
func (f *Fake) Message(conversation, convType, userID, userName, text string) map[string]any {
	return map[string]any{
		"type": "message", "id": f.NewID(), "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"serviceUrl": f.ServiceURL(), "channelId": ChannelID,
		"from":         map[string]any{"id": "29:" + userID, "name": userName, "aadObjectId": userID},
		"conversation": map[string]any{"id": conversation, "conversationType": convType, "tenantId": f.TenantID, "isGroup": convType != "personal"},
		"recipient":    map[string]any{"id": f.BotID(), "name": f.BotName},
		"textFormat":   "plain", "text": text, "locale": "en-US",
		"channelData": map[string]any{"tenant": map[string]any{"id": f.TenantID}},
	}
}

// Press builds the invoke activity Teams posts when user presses an
// Action.Execute button of verb on the card (the bot's activity cardID)
// in conversation: adaptiveCard/action with the action's data.
func (f *Fake) Press(conversation, convType, userID, userName, cardID, verb string, data map[string]any) map[string]any {
	a := f.Message(conversation, convType, userID, userName, "")
	delete(a, "text")
	delete(a, "textFormat")
	a["type"], a["name"], a["replyToId"] = "invoke", "adaptiveCard/action", cardID
	a["value"] = map[string]any{"action": map[string]any{"type": "Action.Execute", "verb": verb, "data": data}, "trigger": "manual"}
	return a
}

// Submit builds the message activity Teams posts for an Action.Submit
// press: no text, the action's data as its value.
func (f *Fake) Submit(conversation, convType, userID, userName, cardID string, data map[string]any) map[string]any {
	a := f.Message(conversation, convType, userID, userName, "")
	delete(a, "text")
	a["replyToId"], a["value"] = cardID, data
	return a
}

// Mention makes activity @mention the bot: the <at> tag before its text
// and the mention entity.
func (f *Fake) Mention(activity map[string]any) map[string]any {
	tag := "<at>" + f.BotName + "</at>"
	activity["text"] = tag + " " + activity["text"].(string)
	activity["entities"] = []map[string]any{{"type": "mention", "text": tag, "mentioned": map[string]any{"id": f.BotID(), "name": f.BotName}}}
	return activity
}

// Claims are a token's claims, for tests that forge bad ones.
type Claims = jwt.MapClaims

// TokenClaims are the claims of a valid token for an activity with
// serviceURL.
func (f *Fake) TokenClaims(serviceURL string) Claims {
	now := time.Now()
	return Claims{
		"iss": Issuer, "aud": f.ClientID, "serviceurl": serviceURL,
		"nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(),
	}
}

// Sign signs claims with the fake's key (RS256, its kid).
func (f *Fake) Sign(c Claims) string {
	f.mu.Lock()
	key, kid := f.key, f.kid
	f.mu.Unlock()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	t.Header["kid"] = kid
	s, err := t.SignedString(key)
	if err != nil {
		panic(err)
	}
	return s
}

// Post posts an activity to url as the Bot Framework does, with a valid
// token for its serviceUrl, and returns the status code.
func (f *Fake) Post(ctx context.Context, url string, activity map[string]any) (int, error) {
	body, err := json.Marshal(activity)
	if err != nil {
		return 0, err
	}
	svc, _ := activity["serviceUrl"].(string)
	return f.PostRaw(ctx, url, body, "Bearer "+f.Sign(f.TokenClaims(svc)))
}

// PostAnswer posts an activity as Post does and returns the answer's
// status and body (an invoke's answer).
func (f *Fake) PostAnswer(ctx context.Context, url string, activity map[string]any) (int, string, error) {
	body, err := json.Marshal(activity)
	if err != nil {
		return 0, "", err
	}
	svc, _ := activity["serviceUrl"].(string)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+f.Sign(f.TokenClaims(svc)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}

// PostRaw posts body with the Authorization header given.
func (f *Fake) PostRaw(ctx context.Context, url string, body []byte, authorization string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
