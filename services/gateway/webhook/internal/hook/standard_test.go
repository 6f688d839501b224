package hook

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A Standard Webhooks delivery is taken when one of its v1 signatures is
// the HMAC of its id, timestamp and body and the timestamp is within the
// tolerance: a captured delivery replayed later, or with another id, is
// refused.
func TestStandardSignature(t *testing.T) {
	t.Parallel()
	route, err := Compile("std", Route{Secret: stdSecret, Signature: SigStandard}, "")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := Compile("raw", Route{Secret: "plain-secret", Signature: SigStandard}, "")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"invoice.paid","data":{"id":"in_1"}}`)
	now := time.Unix(1767225600, 0)
	sent := now.Add(-time.Minute)
	ts := strconv.FormatInt(sent.Unix(), 10)
	sig := SignStandard(stdSecret, "msg_1", sent, body)
	headers := func(prefix, id, ts, sig string) http.Header {
		h := http.Header{}
		h.Set(prefix+"-Id", id)
		h.Set(prefix+"-Timestamp", ts)
		h.Set(prefix+"-Signature", sig)
		return h
	}
	tests := []struct {
		name  string
		route *CompiledRoute
		h     http.Header
		body  []byte
		at    time.Time
		err   string
	}{
		{"signed a minute ago", route, headers("Webhook", "msg_1", ts, sig), body, now, ""},
		{"svix headers", route, headers("Svix", "msg_1", ts, sig), body, now, ""},
		{"one of several signatures (a rotated secret)", route, headers("Webhook", "msg_1", ts, "v1,b2xk v1a,xyz "+sig), body, now, ""},
		{"a raw secret", raw, headers("Webhook", "msg_1", ts, SignStandard("plain-secret", "msg_1", sent, body)), body, now, ""},
		{"replayed after the tolerance", route, headers("Webhook", "msg_1", ts, sig), body, sent.Add(TimestampTolerance + time.Second), "beyond"},
		{"from the future", route, headers("Webhook", "msg_1", ts, sig), body, sent.Add(-TimestampTolerance - time.Second), "beyond"},
		{"replayed with another id", route, headers("Webhook", "msg_2", ts, sig), body, now, "no webhook-signature matches"},
		{"replayed with a fresh timestamp", route, headers("Webhook", "msg_1", strconv.FormatInt(now.Unix(), 10), sig), body, now, "no webhook-signature matches"},
		{"another body", route, headers("Webhook", "msg_1", ts, sig), []byte(`{"type":"invoice.paid","data":{"id":"in_2"}}`), now, "no webhook-signature matches"},
		{"another version's signature", route, headers("Webhook", "msg_1", ts, "v2,"+strings.TrimPrefix(sig, "v1,")), body, now, "no webhook-signature matches"},
		{"the raw secret's signature on a whsec route", route, headers("Webhook", "msg_1", ts, SignStandard("plain-secret", "msg_1", sent, body)), body, now, "no webhook-signature matches"},
		{"no timestamp", route, headers("Webhook", "msg_1", "", sig), body, now, "missing"},
		{"no headers", route, http.Header{}, body, now, "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.route, tt.h, tt.body, tt.at)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one saying %q", err, tt.err)
			}
		})
	}
	// The delivery id is the signed one, whatever other id headers say.
	h := headers("Webhook", "msg_1", ts, sig)
	h.Set("X-Webhook-Id", "other-1")
	h.Set("X-Request-Id", "other-2")
	ev, rerr := Prepare(route, "default", h, body, now)
	if rerr != nil || ev.GetMessageId() != "msg_1" || ev.GetEventId() != "std/msg_1" {
		t.Fatalf("event %v, %v: want the signed id msg_1", ev, rerr)
	}
	if _, err := Compile("bad", Route{Secret: "whsec_not base64!", Signature: SigStandard}, ""); err == nil {
		t.Fatal("a whsec_ secret that is not base64 was taken")
	}
}

// Hermes's generic V2 signature carries a timestamp: a delivery with it
// is checked by it alone (a stale or bad one does not fall back to the
// body-only signature beside it), and a route with require_timestamp
// takes no delivery without it.
func TestGenericV2Signature(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	plain, err := Compile("g", Route{Secret: secret, Signature: SigGeneric}, "")
	if err != nil {
		t.Fatal(err)
	}
	strict, err := Compile("s", Route{Secret: secret, Signature: SigGeneric, RequireTimestamp: true}, "")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"alert":"disk full"}`)
	now := time.Unix(1767225600, 0)
	sent := now.Add(-time.Minute)
	v1 := strings.TrimPrefix(Sign(secret, body), "sha256=")
	v2 := SignGenericV2(secret, sent, body)
	ts := strconv.FormatInt(sent.Unix(), 10)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	tests := []struct {
		name  string
		route *CompiledRoute
		h     http.Header
		at    time.Time
		err   string
	}{
		{"v2", plain, h(HeaderSignatureV2, v2, HeaderTimestamp, ts), now, ""},
		{"v2 on a strict route", strict, h(HeaderSignatureV2, v2, HeaderTimestamp, ts), now, ""},
		{"v1 alone", plain, h("X-Webhook-Signature", v1), now, ""},
		{"v1 alone on a strict route", strict, h("X-Webhook-Signature", v1), now, "only timestamped"},
		{"v2 replayed after the tolerance, beside a good v1", plain, h(HeaderSignatureV2, v2, HeaderTimestamp, ts, "X-Webhook-Signature", v1), sent.Add(TimestampTolerance + time.Second), "beyond"},
		{"v2 with a fresh timestamp it was not made for", plain, h(HeaderSignatureV2, v2, HeaderTimestamp, strconv.FormatInt(now.Unix(), 10), "X-Webhook-Signature", v1), now, "does not match"},
		{"v2 without its timestamp", plain, h(HeaderSignatureV2, v2, "X-Webhook-Signature", v1), now, "without"},
		{"v2 that is not hex", plain, h(HeaderSignatureV2, "zz", HeaderTimestamp, ts), now, "not a hex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.route, tt.h, body, tt.at)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one saying %q", err, tt.err)
			}
		})
	}
	if _, err := Compile("gh", Route{Secret: secret, RequireTimestamp: true}, ""); err == nil {
		t.Fatal("require_timestamp was taken on a github route")
	}
}
