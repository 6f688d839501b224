// Package hook verifies, filters and renders webhook deliveries (outside
// input): pure functions, fuzzed on their own.
package hook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/config"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/secret"
)

var (
	routeName  = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,64}$`)
	deliveryID = regexp.MustCompile(`^[A-Za-z0-9._:\-]{1,128}$`)
)

// maxPromptBytes bounds a rendered prompt.
const maxPromptBytes = 32 << 10

// Signature schemes.
const (
	SigGitHub = "github" // X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
	SigGitLab = "gitlab" // X-Gitlab-Token: the secret itself
	// SigGeneric: <header>: [sha256=]<hex HMAC-SHA256 of the body>; or,
	// as Hermes's generic V2, X-Webhook-Signature-V2: <hex HMAC-SHA256 of
	// "<X-Webhook-Timestamp>.<body>"> with the timestamp within
	// TimestampTolerance (a delivery with it is checked by it alone).
	SigGeneric = "generic"
	// SigStandard is Standard Webhooks (Svix's scheme, which Hermes reads
	// too): webhook-signature: v1,<base64 HMAC-SHA256 of
	// "<webhook-id>.<webhook-timestamp>.<body>">, keyed by the secret
	// (whsec_<base64> decoded, else its bytes); svix-* headers alike.
	// The only scheme whose signature covers a time and the delivery id:
	// a captured delivery replayed after TimestampTolerance is refused,
	// and within it its signed id makes it a duplicate (generic V2 signs
	// a time, not the id).
	SigStandard = "standard"
	SigNone     = "none" // no check; only with insecure: true
)

// TimestampTolerance is how far a signed timestamp (Standard Webhooks,
// generic V2) may be from the gateway's clock, either way (Standard
// Webhooks' 5 minutes, as Hermes checks both); well inside the seen
// record's days.
const TimestampTolerance = 5 * time.Minute

// MaxBodyDedupe bounds body_dedupe: it is a sender's retry window, not
// a memory of what was sent (a delivery id is that).
const MaxBodyDedupe = 24 * time.Hour

// Route configures one webhook endpoint.
type Route struct {
	// Secret for the signature (HMAC key, or GitLab's token).
	Secret string `koanf:"secret"`
	// Signature scheme: github (default), gitlab, generic or none.
	Signature string `koanf:"signature"`
	// Header carrying a generic signature (default X-Webhook-Signature).
	Header string `koanf:"header"`
	// Events to accept ("push", "issues", "issues.opened"); empty: all.
	Events []string `koanf:"events"`
	// Prompt is a Go text/template over the JSON payload; functions
	// route, event, json and truncate are available.
	Prompt string `koanf:"prompt"`
	// Reply is where the answer goes; an empty platform means nowhere.
	Reply ReplyTarget `koanf:"reply"`
	// DeliverOnly sends the rendered prompt to Reply without the agent.
	DeliverOnly bool `koanf:"deliver_only"`
	// Insecure allows signature: none.
	Insecure bool `koanf:"insecure"`
	// RequireTimestamp (generic routes) refuses a delivery without the
	// timestamped V2 signature: the body-only one can be replayed at any
	// time, and a captured delivery that carries both can be replayed
	// without its V2 header.
	RequireTimestamp bool `koanf:"require_timestamp"`
	// RateLimit is how many signed deliveries the route takes in any 60
	// seconds (per gateway replica); unset, the gateway's rate_limit; 0
	// unlimited.
	RateLimit *int `koanf:"rate_limit"`
	// BodyDedupe is how long a delivery without a delivery id (deduped by
	// its body's hash) counts as a retry of the first with the same body;
	// unset, the gateway's body_dedupe; 0 never (every such delivery is
	// new, as in Hermes).
	BodyDedupe *time.Duration `koanf:"body_dedupe"`
}

// ReplyTarget is a chat on another platform.
type ReplyTarget struct {
	Platform string `koanf:"platform"`
	Account  string `koanf:"account"`
	ChatID   string `koanf:"chat_id"`
	ThreadID string `koanf:"thread_id"`
}

// defaultPrompt renders an event for the agent when a route has no template.
const defaultPrompt = `Webhook {{route}} received event {{event}}:
{{json . | truncate 8000}}`

// CompiledRoute is a validated route with its parsed template.
type CompiledRoute struct {
	Name string
	Route
	tmpl *template.Template
}

// Compile validates a route and parses its template. keyPrefix names the
// route in configuration errors.
func Compile(name string, r Route, keyPrefix string) (*CompiledRoute, error) {
	key := keyPrefix + name
	if !routeName.MatchString(name) {
		return nil, config.Invalid(key, name, "a route name of letters, digits, '-' or '_'")
	}
	if r.Signature == "" {
		r.Signature = SigGitHub
	}
	switch r.Signature {
	case SigGitHub, SigGitLab, SigGeneric, SigStandard:
		if r.Secret == "" {
			return nil, config.Invalid(key+".secret", "", "a secret for "+r.Signature+" signatures")
		}
		if r.Signature == SigStandard {
			if _, err := standardKey(r.Secret); err != nil {
				return nil, config.Invalid(key+".secret", "", "a whsec_ secret of base64 after the prefix, as the sender shows it")
			}
		}
	case SigNone:
		if !r.Insecure {
			return nil, config.Invalid(key+".signature", r.Signature, "a signature scheme, or insecure: true")
		}
	default:
		return nil, config.Invalid(key+".signature", r.Signature, "github, gitlab, generic, standard or none")
	}
	if r.Header == "" {
		r.Header = "X-Webhook-Signature"
	}
	if r.RequireTimestamp && r.Signature != SigGeneric {
		return nil, config.Invalid(key+".require_timestamp", true, "a generic route (standard signatures always carry a timestamp)")
	}
	if r.RateLimit != nil && *r.RateLimit < 0 {
		return nil, config.Invalid(key+".rate_limit", *r.RateLimit, "deliveries a minute, 0 for no limit")
	}
	if r.BodyDedupe != nil && (*r.BodyDedupe < 0 || *r.BodyDedupe > MaxBodyDedupe) {
		return nil, config.Invalid(key+".body_dedupe", *r.BodyDedupe, "a duration from 0 to "+MaxBodyDedupe.String())
	}
	if r.DeliverOnly && r.Reply.Platform == "" {
		return nil, config.Invalid(key+".reply.platform", "", "a reply target for a deliver_only route")
	}
	if r.Reply.Platform != "" && r.Reply.ChatID == "" {
		return nil, config.Invalid(key+".reply.chat_id", "", "the chat to reply to")
	}
	prompt := r.Prompt
	if prompt == "" {
		prompt = defaultPrompt
	}
	tmpl, err := template.New(name).Option("missingkey=zero").Funcs(templateFuncs(name, "")).Parse(prompt)
	if err != nil {
		return nil, config.Invalid(key+".prompt", "(template)", "a valid Go template: "+err.Error())
	}
	return &CompiledRoute{Name: name, Route: r, tmpl: tmpl}, nil
}

// RequestError is a refused delivery with its HTTP status; Code 200
// means valid but filtered out.
type RequestError struct {
	Code   int
	Status string
	Err    error
}

func (e *RequestError) Error() string { return e.Err.Error() }

func refuse(code int, status string, format string, args ...any) *RequestError {
	return &RequestError{Code: code, Status: status, Err: fmt.Errorf(format, args...)}
}

// Prepare verifies (at now), filters and renders one delivery. A
// requestError with code 200 means the delivery is valid but filtered out.
func Prepare(route *CompiledRoute, account string, h http.Header, body []byte, now time.Time) (*eventsv1.MessageReceived, *RequestError) {
	if err := Verify(route, h, body, now); err != nil {
		return nil, &RequestError{Code: http.StatusUnauthorized, Status: "bad_signature", Err: err}
	}
	return Build(route, account, h, body)
}

// Build parses, filters and renders a delivery whose signature Verify
// accepted (the gateway rate-limits between the two, as Hermes does).
// A requestError with code 200 means the delivery is filtered out.
func Build(route *CompiledRoute, account string, h http.Header, body []byte) (*eventsv1.MessageReceived, *RequestError) {
	payload, rerr := decodePayload(h, body)
	if rerr != nil {
		return nil, rerr
	}
	event := eventType(route, h, payload)
	if !matches(route.Events, event) && !(route.Signature == SigGitLab && h.Get("X-Gitlab-Event") != "" && matches(route.Events, h.Get("X-Gitlab-Event"))) {
		// A GitLab route's filter may also name the header's event
		// ("Merge Request Hook"), as Hermes's filters do.
		return nil, refuse(http.StatusOK, "ignored", "event %q is filtered out", event)
	}
	id := HeaderID(route, h)
	if id != "" && !deliveryID.MatchString(id) {
		return nil, refuse(http.StatusBadRequest, "bad_delivery_id", "delivery id is not a plain token")
	}
	if id == "" {
		id = BodyID(body)
	}
	text, err := render(route, event, payload)
	if err != nil {
		return nil, refuse(http.StatusUnprocessableEntity, "template_failed", "render prompt: %v", err)
	}
	ev := &eventsv1.MessageReceived{
		EventId:   route.Name + "/" + id,
		MessageId: id,
		Source: &eventsv1.SessionSource{
			Platform: "webhook", Account: account, ChatId: route.Name, ChatName: route.Name, ChatType: "dm",
			UserId: "webhook:" + route.Name, UserName: route.Name,
		},
		Text:                   text,
		SentAt:                 timestamppb.Now(),
		Internal:               true,
		TransportAuthenticated: true,
		ReplyRoute: &eventsv1.ReplyRoute{
			Platform: route.Reply.Platform, Account: route.Reply.Account, ChatId: route.Reply.ChatID,
			ThreadId: route.Reply.ThreadID, DeliverOnly: route.DeliverOnly,
		},
	}
	return ev, nil
}

// HeaderID is the delivery id the sender's headers give, "" when none
// does: X-GitHub-Delivery, Idempotency-Key, X-Gitlab-Event-UUID,
// X-Webhook-Id or X-Request-Id; on a standard route the signed
// webhook-id, and only it (another header cannot make a replayed
// delivery new). Idempotency-Key comes before the others a sender may
// send beside it, as the one that names the delivery and not the
// request: GitLab (17.4 on) sends it, the same on a resend of the
// delivery, beside an X-Gitlab-Event-UUID that a resend makes anew,
// and a proxy's X-Request-Id is new on every request. An
// Idempotency-Key written as the IETF draft has it, a structured-field
// string ("8e03978e-…" in double quotes), is read without its quotes;
// GitLab's and Stripe's are bare. One that is no plain token gives way
// to the other headers (and alone is refused, as any such id).
func HeaderID(route *CompiledRoute, h http.Header) string {
	if route.Signature == SigStandard {
		id, _, _ := standardHeaders(h)
		return id
	}
	if id := h.Get("X-GitHub-Delivery"); id != "" {
		return id
	}
	key := strings.TrimSpace(h.Get("Idempotency-Key"))
	if len(key) >= 2 && key[0] == '"' && key[len(key)-1] == '"' {
		key = key[1 : len(key)-1]
	}
	if deliveryID.MatchString(key) {
		return key
	}
	// A key that is no plain token (a base64 one) names the delivery
	// only when no other header does: beside one, the delivery went by
	// that one before Idempotency-Key came first, rather than being
	// refused (bad_delivery_id) and lost.
	for _, k := range []string{"X-Gitlab-Event-UUID", "X-Webhook-Id", "X-Request-Id"} {
		if id := h.Get(k); id != "" {
			return id
		}
	}
	return key
}

// BodyID is the id of a delivery without a delivery id: a hash of its
// body, the same for a sender's retry of it (and for the same body sent
// again later, which the gateway tells apart by the time it came).
func BodyID(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256-" + hex.EncodeToString(sum[:16])
}

// decodePayload reads a delivery's body: JSON, or else, when it is sent
// as a form (application/x-www-form-urlencoded), the form. GitHub's form
// content type, the default of a webhook set up there, sends the JSON
// payload as the field "payload", which is read as the JSON it holds;
// another form is its fields (the first value of each), as Hermes reads
// a form body.
func decodePayload(h http.Header, body []byte) (any, *RequestError) {
	payload, jerr := decodeJSON(body)
	if jerr == nil {
		return payload, nil
	}
	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return nil, refuse(http.StatusBadRequest, "malformed_payload", "payload is not JSON: %v", jerr)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, refuse(http.StatusBadRequest, "malformed_payload", "form body: %v", err)
	}
	if vs, ok := form["payload"]; ok {
		payload, err := decodeJSON([]byte(vs[0]))
		if err != nil {
			return nil, refuse(http.StatusBadRequest, "malformed_payload", "the form's payload field is not JSON: %v", err)
		}
		return payload, nil
	}
	fields := make(map[string]any, len(form))
	for k, vs := range form {
		fields[k] = vs[0]
	}
	return fields, nil
}

// decodeJSON reads one JSON value, numbers as json.Number, with nothing
// after it.
func decodeJSON(b []byte) (any, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON payload")
	}
	return v, nil
}

// Verify checks the route's signature scheme in constant time (and a
// Standard Webhooks timestamp against now).
func Verify(route *CompiledRoute, h http.Header, body []byte, now time.Time) error {
	switch route.Signature {
	case SigNone:
		return nil
	case SigGitLab:
		got := h.Get("X-Gitlab-Token")
		if got == "" || !secret.Equal(got, route.Secret) {
			return errors.New("X-Gitlab-Token does not match")
		}
		return nil
	case SigGitHub:
		return CheckHMAC(h.Get("X-Hub-Signature-256"), route.Secret, body, true)
	case SigGeneric:
		if v2 := h.Get(HeaderSignatureV2); v2 != "" {
			// Checked by it alone: a bad timestamp does not fall back to
			// the body-only signature.
			return CheckGenericV2(v2, h.Get(HeaderTimestamp), route.Secret, body, now)
		}
		if route.RequireTimestamp {
			return errors.New(HeaderSignatureV2 + " missing: this route takes only timestamped signatures")
		}
		return CheckHMAC(h.Get(route.Header), route.Secret, body, false)
	case SigStandard:
		id, ts, sig := standardHeaders(h)
		return CheckStandard(id, ts, sig, route.Secret, body, now)
	default:
		return fmt.Errorf("unknown signature scheme %q", route.Signature)
	}
}

func CheckHMAC(header, secret string, body []byte, prefixRequired bool) error {
	if header == "" {
		return errors.New("signature header missing")
	}
	sig, hasPrefix := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	if prefixRequired && !hasPrefix {
		return errors.New("signature is not sha256=<hex>")
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return errors.New("signature is not a hex SHA-256 HMAC")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New("signature does not match")
	}
	return nil
}

// The headers of Hermes's generic V2 signature.
const (
	HeaderSignatureV2 = "X-Webhook-Signature-V2"
	HeaderTimestamp   = "X-Webhook-Timestamp"
)

// CheckGenericV2 verifies Hermes's generic V2 signature: the hex HMAC of
// "<timestamp>.<body>" (constant time), the timestamp (Unix seconds)
// within TimestampTolerance of now.
func CheckGenericV2(signature, timestamp, secret string, body []byte, now time.Time) error {
	if timestamp == "" {
		return errors.New(HeaderSignatureV2 + " without " + HeaderTimestamp)
	}
	got, err := hex.DecodeString(strings.TrimSpace(signature))
	if err != nil || len(got) != sha256.Size {
		return errors.New(HeaderSignatureV2 + " is not a hex SHA-256 HMAC")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "."))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return errors.New(HeaderSignatureV2 + " does not match")
	}
	return checkTimestamp(HeaderTimestamp, timestamp, now)
}

// SignGenericV2 returns the X-Webhook-Signature-V2 value of body sent at
// at.
func SignGenericV2(secret string, at time.Time, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(at.Unix(), 10) + "."))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// checkTimestamp refuses a timestamp (Unix seconds, header name) more
// than TimestampTolerance from now, either way.
func checkTimestamp(name, timestamp string, now time.Time) error {
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return errors.New(name + " is not Unix seconds")
	}
	if off := now.Sub(time.Unix(sec, 0)); off > TimestampTolerance || off < -TimestampTolerance {
		return fmt.Errorf("%s is %s from the gateway's clock, beyond %s: a replay, or a clock that is off", name, off.Round(time.Second), TimestampTolerance)
	}
	return nil
}

// standardHeaders are a Standard Webhooks delivery's id, timestamp and
// signatures: the webhook-* headers, or Svix's svix-* when those are
// absent.
func standardHeaders(h http.Header) (id, timestamp, signature string) {
	id, timestamp, signature = h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" && timestamp == "" && signature == "" {
		id, timestamp, signature = h.Get("Svix-Id"), h.Get("Svix-Timestamp"), h.Get("Svix-Signature")
	}
	return id, timestamp, signature
}

// standardKey is the HMAC key of a Standard Webhooks secret: the bytes
// of a whsec_<base64> secret, else the secret itself (as Hermes takes a
// raw one).
func standardKey(secret string) ([]byte, error) {
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(key) == 0 {
			return nil, errors.New("a whsec_ secret is not base64")
		}
		return key, nil
	}
	return []byte(secret), nil
}

// CheckStandard verifies a Standard Webhooks signature: one of the
// space-separated v1,<base64> signatures is the HMAC of
// "<id>.<timestamp>.<body>" (constant time), and the timestamp (Unix
// seconds) is within TimestampTolerance of now.
func CheckStandard(id, timestamp, signatures, secret string, body []byte, now time.Time) error {
	if id == "" || timestamp == "" || signatures == "" {
		return errors.New("webhook-id, webhook-timestamp or webhook-signature missing")
	}
	key, err := standardKey(secret)
	if err != nil {
		return err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	matched := false
	for _, s := range strings.Fields(signatures) {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return errors.New("no webhook-signature matches")
	}
	return checkTimestamp("webhook-timestamp", timestamp, now)
}

// SignStandard returns the Standard Webhooks signature header value of a
// delivery (v1,<base64>).
func SignStandard(secret, id string, at time.Time, body []byte) string {
	key, _ := standardKey(secret)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(at.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Sign returns the GitHub-style signature header value of body.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// eventType names the delivery's event: the platform's event header,
// with the payload's action (GitLab's object_attributes.action) appended
// as "<event>.<action>" when present.
func eventType(route *CompiledRoute, h http.Header, payload any) string {
	obj, _ := payload.(map[string]any)
	str := func(k string) string { s, _ := obj[k].(string); return s }
	var event string
	switch route.Signature {
	case SigGitHub:
		event = h.Get("X-GitHub-Event")
	case SigGitLab:
		event = str("object_kind")
		if event == "" {
			event = h.Get("X-Gitlab-Event")
		}
	}
	if event == "" {
		event = h.Get("X-Webhook-Event")
	}
	if event == "" {
		event = str("event")
	}
	if event == "" {
		event = str("event_type") // Hermes's name for it
	}
	if event == "" {
		event = str("type")
	}
	a := str("action")
	if attrs, ok := obj["object_attributes"].(map[string]any); ok && route.Signature == SigGitLab && a == "" {
		a, _ = attrs["action"].(string) // GitLab's merge_request.open, issue.close
	}
	if a != "" && event != "" {
		event += "." + a
	}
	if len(event) > 128 || !utf8.ValidString(event) {
		event = "invalid"
	}
	return event
}

// matches: no filter accepts everything; "issues" accepts every
// "issues.<action>"; "issues.opened" only that action.
func matches(filter []string, event string) bool {
	if len(filter) == 0 {
		return true
	}
	base, _, _ := strings.Cut(event, ".")
	return slices.Contains(filter, event) || slices.Contains(filter, base)
}

func templateFuncs(route, event string) template.FuncMap {
	return template.FuncMap{
		"route": func() string { return route },
		"event": func() string { return event },
		"json": func(v any) string {
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return ""
			}
			return string(b)
		},
		"truncate": func(n int, s string) string {
			if n < 0 || len(s) <= n {
				return s
			}
			cut := n
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			return s[:cut] + "…"
		},
	}
}

// limitedWriter stops a template from rendering more than its limit.
type limitedWriter struct {
	b bytes.Buffer
	n int
}

var errTooLong = errors.New("rendered prompt too long")

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.b.Len()+len(p) > l.n {
		return 0, errTooLong
	}
	return l.b.Write(p)
}

func render(route *CompiledRoute, event string, payload any) (string, error) {
	t, err := route.tmpl.Clone()
	if err != nil {
		return "", err
	}
	t.Funcs(templateFuncs(route.Name, event))
	w := &limitedWriter{n: maxPromptBytes}
	if err := t.Execute(w, payload); err != nil {
		return "", err
	}
	out := strings.ToValidUTF8(w.b.String(), "\uFFFD")
	if strings.TrimSpace(out) == "" {
		return "", errors.New("rendered prompt is empty")
	}
	return out, nil
}
