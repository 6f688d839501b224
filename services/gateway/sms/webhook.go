package sms

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// HeaderSignature carries the base64 HMAC-SHA1 of the URL Twilio called
// and the sorted POST parameters, keyed with the auth token.
const HeaderSignature = "X-Twilio-Signature"

// HeaderSignatureSettings is sent when a Twilio Webhooks Rule matches the
// URL: "key=<SharedKey sid>,algorithm=HMAC_SHA256" (or HMAC_SHA1). The
// signature then covers the same string, keyed with the SharedKey's
// secret and hashed with that algorithm.
const HeaderSignatureSettings = "X-Twilio-Webhooks-Signature-Settings"

// emptyTwiML answers a message without a reply of Twilio's own: the
// answer goes out through the Messages API.
const emptyTwiML = `<?xml version="1.0" encoding="UTF-8"?><Response/>`

// serveWebhook serves the webhook until ctx ends.
func (p *Platform) serveWebhook(ctx context.Context, conn platform.Conn) error {
	mux := http.NewServeMux()
	mux.Handle(p.cfg.Path, p.WebhookHandler(conn))
	err := platform.ServeWebhook(ctx, conn, p.log, p.Name(), p.cfg.Addr, mux, p.cfg.AckTimeout, func(addr string) {
		p.addr.Store(addr)
		p.log.Info("sms webhook listening", "addr", addr, "path", p.cfg.Path, "public_url", p.cfg.PublicURL)
	})
	if err != nil {
		return fmt.Errorf("sms webhook: %w", err)
	}
	return nil
}

// WebhookHandler serves Twilio's POSTs. A call is answered 405 unless it
// is a POST, 415 unless it is a form, 413 over MaxBodyBytes, 400 when
// the form cannot be decoded or is not a message, 403 without a valid
// X-Twilio-Signature (nothing is published), 500 when the message could
// not be published (Twilio then calls the number's fallback URL; what was
// published is not published twice), and 200 with an empty TwiML
// <Response/> once the message is on the bus or deliberately skipped.
func (p *Platform) WebhookHandler(conn platform.Deliverer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		p.message(w, r, conn)
	})
}

func (p *Platform) message(w http.ResponseWriter, r *http.Request, conn platform.Deliverer) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		http.Error(w, "content type must be application/x-www-form-urlencoded", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			conn.Reject(r.Context(), "twilio webhook too large", err)
			http.Error(w, "request too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	form, err := parseForm(body)
	if err != nil {
		conn.Reject(r.Context(), "malformed twilio webhook", err)
		http.Error(w, "malformed form", http.StatusBadRequest)
		return
	}
	keys, alg, why := p.signingKeys(r.Header.Get(HeaderSignatureSettings))
	if why == "" && !signedByAny(alg, keys, r.Header.Get(HeaderSignature), signedURLs(p.cfg.PublicURL, r.URL.RawQuery), form) {
		why = "bad signature"
	}
	if why != "" {
		signatureFailures.Inc()
		p.log.Warn("twilio webhook refused", "reason", why, "remote", r.RemoteAddr, "has_signature", r.Header.Get(HeaderSignature) != "")
		http.Error(w, "invalid signature", http.StatusForbidden)
		return
	}
	in := normalize(form, &p.cfg)
	switch {
	case in.err != nil:
		conn.Reject(r.Context(), "malformed twilio message", in.err)
		http.Error(w, "not a message", http.StatusBadRequest)
		return
	case in.ev == nil:
		skipped.WithLabelValues(in.skip).Inc()
		p.log.Debug("twilio webhook skipped", "reason", in.skip)
	default:
		ctx, cancel := context.WithTimeout(r.Context(), p.cfg.AckTimeout)
		defer cancel()
		if _, err := conn.Deliver(ctx, in.ev); err != nil && !errors.Is(err, platform.ErrRejected) {
			p.log.Warn("sms message not stored; twilio calls the fallback url if one is set", "message_sid", in.ev.GetEventId(), "err", err)
			http.Error(w, "not stored", http.StatusInternalServerError)
			return
		}
	}
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	_, _ = io.WriteString(w, emptyTwiML)
}

// signedURLs are the URLs Twilio may have signed a call to publicURL
// with: the configured one with the call's query string, and the same
// with the scheme's default port written out or left off (Twilio's own
// libraries accept both).
func signedURLs(publicURL, rawQuery string) []string {
	u, err := url.Parse(publicURL)
	if err != nil {
		return nil
	}
	if u.RawQuery == "" && rawQuery != "" {
		u.RawQuery = rawQuery
	}
	out := []string{u.String()}
	def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	switch u.Port() {
	case "":
		u.Host = net.JoinHostPort(u.Hostname(), def)
		out = append(out, u.String())
	case def:
		u.Host = u.Hostname()
		if strings.Contains(u.Host, ":") { // an IPv6 literal
			u.Host = "[" + u.Host + "]"
		}
		out = append(out, u.String())
	}
	return out
}

// signingKeys are the keys and hash a call's signature is checked with:
// the auth token and HMAC-SHA1 without signature settings, else the
// shared keys (any one of them, for a rotation) and the settings'
// algorithm, as Twilio's libraries choose; why says why the call cannot
// be checked.
func (p *Platform) signingKeys(settings string) (keys []string, alg func() hash.Hash, why string) {
	if strings.TrimSpace(settings) == "" {
		return []string{p.cfg.AuthToken}, sha1.New, ""
	}
	alg = signatureAlgorithm(settings)
	switch {
	case alg == nil:
		return nil, nil, "unsupported signature algorithm"
	case len(p.cfg.WebhookSharedKeys) == 0:
		return nil, nil, "signed with a webhooks rule's shared key, and webhook_shared_key is not set"
	}
	return p.cfg.WebhookSharedKeys, alg, ""
}

// signatureAlgorithm reads the algorithm of X-Twilio-Webhooks-Signature-Settings
// ("key=KS…,algorithm=HMAC_SHA256"): nil when it is missing or unknown.
func signatureAlgorithm(settings string) func() hash.Hash {
	for part := range strings.SplitSeq(settings, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(part), "=")
		if !strings.EqualFold(strings.TrimSpace(name), "algorithm") {
			continue
		}
		switch strings.ToUpper(strings.TrimSpace(value)) {
		case "HMAC_SHA1":
			return sha1.New
		case "HMAC_SHA256":
			return sha256.New
		}
		return nil
	}
	return nil
}

// signature is Twilio's signature of a call to fullURL with params: the
// URL followed by every parameter's name and value, sorted by name (a
// repeated name's distinct values sorted, each once, as Twilio's
// libraries check it: twilio-python's sorted(set(values)), twilio-node's
// Set), the HMAC of alg keyed with key (the auth token and SHA-1, or a
// webhooks rule's shared key and its algorithm).
func signature(alg func() hash.Hash, key, fullURL string, params url.Values) []byte {
	mac := hmac.New(alg, []byte(key))
	mac.Write([]byte(fullURL))
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		vs := slices.Clone(params[k])
		slices.Sort(vs)
		for _, v := range slices.Compact(vs) {
			mac.Write([]byte(k))
			mac.Write([]byte(v))
		}
	}
	return mac.Sum(nil)
}

// validSignature reports whether header is the base64 signature of
// params for one of urls (constant time). An empty key accepts nothing.
func validSignature(alg func() hash.Hash, key, header string, urls []string, params url.Values) bool {
	got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header))
	if err != nil || key == "" || len(got) != alg().Size() {
		return false
	}
	ok := false
	for _, u := range urls {
		if hmac.Equal(got, signature(alg, key, u, params)) {
			ok = true
		}
	}
	return ok
}

// signedByAny reports whether header is a valid signature under one of
// keys (each checked in full, in constant time).
func signedByAny(alg func() hash.Hash, keys []string, header string, urls []string, params url.Values) bool {
	ok := false
	for _, key := range keys {
		if validSignature(alg, key, header, urls, params) {
			ok = true
		}
	}
	return ok
}
