package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var (
	routeName  = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,64}$`)
	deliveryID = regexp.MustCompile(`^[A-Za-z0-9._:\-]{1,128}$`)
)

// maxPromptBytes bounds a rendered prompt.
const maxPromptBytes = 32 << 10

// Handler serves POST /webhooks/<route>.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/{route}", s.serveWebhook)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if err := s.rn().Ready(r.Context()); err != nil {
			respond(w, http.StatusServiceUnavailable, "unavailable", "")
			return
		}
		respond(w, http.StatusOK, "ok", "")
	})
	return mux
}

func respond(w http.ResponseWriter, code int, status, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	body := map[string]string{"status": status}
	if detail != "" {
		body["detail"] = detail
	}
	_ = json.NewEncoder(w).Encode(body)
}

// requestError is a refused delivery with its HTTP status.
type requestError struct {
	code   int
	status string
	err    error
}

func (e *requestError) Error() string { return e.err.Error() }

func refuse(code int, status string, format string, args ...any) *requestError {
	return &requestError{code: code, status: status, err: fmt.Errorf(format, args...)}
}

func (s *Service) serveWebhook(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("route")
	route, ok := s.routes[name]
	if !ok {
		respond(w, http.StatusNotFound, "unknown_route", "")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.rn().Reject(r.Context(), "webhook body too large", err)
			respond(w, http.StatusRequestEntityTooLarge, "too_large", "")
			return
		}
		respond(w, http.StatusBadRequest, "unreadable", "")
		return
	}
	ev, rerr := prepare(route, s.cfg.Account, r.Header, body)
	if rerr != nil {
		if rerr.code != http.StatusOK {
			s.rn().Reject(r.Context(), rerr.status, rerr.err)
		} else {
			s.log.Debug("webhook delivery ignored", "route", name, "reason", rerr.err.Error())
		}
		respond(w, rerr.code, rerr.status, "")
		return
	}
	acc, err := s.rn().Deliver(r.Context(), ev)
	switch {
	case errors.Is(err, platform.ErrRejected):
		respond(w, http.StatusBadRequest, "rejected", "")
	case err != nil:
		s.log.Warn("publish webhook event failed", "route", name, "err", err)
		respond(w, http.StatusServiceUnavailable, "unavailable", "")
	case acc.Duplicate:
		respond(w, http.StatusOK, "duplicate", "")
	default:
		respond(w, http.StatusAccepted, "accepted", "")
	}
}

// prepare verifies, filters and renders one delivery. A requestError with
// code 200 means the delivery is valid but filtered out.
func prepare(route *compiledRoute, account string, h http.Header, body []byte) (*eventsv1.MessageReceived, *requestError) {
	if err := verify(route, h, body); err != nil {
		return nil, &requestError{code: http.StatusUnauthorized, status: "bad_signature", err: err}
	}
	var payload any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&payload); err != nil {
		return nil, refuse(http.StatusBadRequest, "malformed_payload", "payload is not JSON: %v", err)
	}
	if dec.More() {
		return nil, refuse(http.StatusBadRequest, "malformed_payload", "data after the JSON payload")
	}
	event := eventType(route, h, payload)
	if !matches(route.Events, event) {
		return nil, refuse(http.StatusOK, "ignored", "event %q is filtered out", event)
	}
	id := h.Get("X-GitHub-Delivery")
	for _, k := range []string{"X-Gitlab-Event-UUID", "X-Webhook-Id", "X-Request-Id", "Idempotency-Key"} {
		if id == "" {
			id = h.Get(k)
		}
	}
	if id != "" && !deliveryID.MatchString(id) {
		return nil, refuse(http.StatusBadRequest, "bad_delivery_id", "delivery id is not a plain token")
	}
	if id == "" {
		sum := sha256.Sum256(body)
		id = "sha256-" + hex.EncodeToString(sum[:16])
	}
	text, err := render(route, event, payload)
	if err != nil {
		return nil, refuse(http.StatusUnprocessableEntity, "template_failed", "render prompt: %v", err)
	}
	ev := &eventsv1.MessageReceived{
		EventId:   route.name + "/" + id,
		MessageId: id,
		Source: &eventsv1.SessionSource{
			Platform: PlatformName, Account: account, ChatId: route.name, ChatName: route.name, ChatType: "dm",
			UserId: "webhook:" + route.name, UserName: route.name,
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

// verify checks the route's signature scheme in constant time.
func verify(route *compiledRoute, h http.Header, body []byte) error {
	switch route.Signature {
	case SigNone:
		return nil
	case SigGitLab:
		got := h.Get("X-Gitlab-Token")
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(route.Secret)) != 1 {
			return errors.New("X-Gitlab-Token does not match")
		}
		return nil
	case SigGitHub:
		return checkHMAC(h.Get("X-Hub-Signature-256"), route.Secret, body, true)
	case SigGeneric:
		return checkHMAC(h.Get(route.Header), route.Secret, body, false)
	default:
		return fmt.Errorf("unknown signature scheme %q", route.Signature)
	}
}

func checkHMAC(header, secret string, body []byte, prefixRequired bool) error {
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

// Sign returns the GitHub-style signature header value of body (tests,
// senders).
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// eventType names the delivery's event: the platform's event header,
// with the payload's action appended as "<event>.<action>" when present.
func eventType(route *compiledRoute, h http.Header, payload any) string {
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
		event = str("type")
	}
	if a := str("action"); a != "" && event != "" {
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

func render(route *compiledRoute, event string, payload any) (string, error) {
	t, err := route.tmpl.Clone()
	if err != nil {
		return "", err
	}
	t.Funcs(templateFuncs(route.name, event))
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
