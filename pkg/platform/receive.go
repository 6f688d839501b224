package platform

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/panics"
)

// ReceiveComponent is the switchboard_panics_total component of a panic
// recovered in the work on one inbound payload (Receive).
const ReceiveComponent = "gateway_receive"

// Receive runs handle, a receive loop's work on one inbound payload
// (decode, normalize, publish), so that one payload the platform's code
// cannot take costs only itself: a panic in handle is recovered, logged
// at error level with the stack, the platform, the payload's id and a
// summary of raw (Summary: its size, digest and first bytes with secret
// fields blanked), counted in switchboard_panics_total{component=
// "gateway_receive"} and as a rejected inbound payload
// (switchboard_gateway_inbound_total{result="rejected"}), and Receive
// returns false. The caller then treats the payload as rejected: it
// acknowledges it to the platform (or moves its offset past it) and goes
// on with the next one, the connection kept. Without it the panic ends
// the connection (the runner's gateway_connection recovery), the
// platform hands the same payload over again, and the gateway reconnects
// with backoff for ever; a panic on a goroutine of a platform library
// (Discord's reader) ends the process.
func Receive(ctx context.Context, conn Rejecter, log *slog.Logger, platform, id string, raw []byte, handle func()) bool {
	err := panics.Recover(log, ReceiveComponent, func() error { handle(); return nil },
		"platform", platform, "payload_id", id, "payload", Summary(raw))
	if err == nil {
		return true
	}
	if conn != nil {
		conn.Reject(ctx, "payload the gateway could not handle (panicked)", err)
	}
	return false
}

// Rejecter is the part of Conn that Receive needs (an HTTP handler has
// the Runner).
type Rejecter interface {
	Reject(ctx context.Context, reason string, err error)
}

// summaryBytes bounds the payload text a log line shows.
const summaryBytes = 200

// Summary describes an inbound payload for a log line without its
// secrets: its size and the start of its sha256, then, for JSON, its
// first summaryBytes bytes re-encoded with the value of every field whose
// name mentions a secret (token, secret, password, key, auth, signature,
// cookie, session, credential) replaced by "…", and for anything else
// its first bytes as a quoted string.
func Summary(raw []byte) string {
	sum := sha256.Sum256(raw)
	head := fmt.Sprintf("%d bytes sha256:%s", len(raw), hex.EncodeToString(sum[:6]))
	if len(raw) == 0 {
		return head
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var text string
	if dec.Decode(&v) == nil {
		b, err := json.Marshal(blank(v))
		if err != nil {
			return head
		}
		text = string(b)
	} else {
		text = fmt.Sprintf("%q", clip(string(raw), summaryBytes/2))
	}
	return head + " " + clip(text, summaryBytes)
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

var secretWords = []string{"token", "secret", "password", "passwd", "key", "auth", "signature", "cookie", "session", "credential"}

func secretName(k string) bool {
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// blank replaces the values of secret-named fields, at any depth.
func blank(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if secretName(k) {
				t[k] = "…"
				continue
			}
			t[k] = blank(x)
		}
	case []any:
		for i, x := range t {
			t[i] = blank(x)
		}
	}
	return v
}
