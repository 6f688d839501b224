package hook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// stdSecret is a Standard Webhooks secret as senders show it.
const stdSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// fuzzNow is the clock of the fuzzed deliveries.
var fuzzNow = time.Unix(1767225600, 0)

func FuzzPrepare(f *testing.F) {
	const secret = "s3cret"
	routes := map[string]*CompiledRoute{}
	for name, r := range map[string]Route{
		"gh":      {Secret: secret, Events: []string{"push", "issues.opened"}, Prompt: `{{event}} on {{.repository.full_name}} by {{.sender.login}}`, Reply: ReplyTarget{Platform: "telegram", ChatID: "-100"}},
		"gl":      {Secret: secret, Signature: SigGitLab, Prompt: `gitlab {{event}} {{.project.name}}`},
		"generic": {Secret: secret, Signature: SigGeneric, Header: "X-Signature", Prompt: `alert {{.alert}}`},
		"notify":  {Secret: secret, Signature: SigGeneric, DeliverOnly: true, Reply: ReplyTarget{Platform: "slack", ChatID: "C1"}},
		"std":     {Secret: stdSecret, Signature: SigStandard, Prompt: `{{event}} {{.data.id}}`},
	} {
		c, err := Compile(name, r, "")
		if err != nil {
			f.Fatal(err)
		}
		routes[name] = c
	}
	gh := `{"repository":{"full_name":"o/r"},"sender":{"login":"ann"},"action":"opened"}`
	f.Add("gh", gh, "issues", "d-1", Sign(secret, []byte(gh)))
	f.Add("gh", gh, "push", "", "sha256=00")
	f.Add("gl", `{"object_kind":"push","project":{"name":"p"}}`, "", "u-1", secret)
	f.Add("generic", `{"alert":"x"}`, "", "", strings.TrimPrefix(Sign(secret, []byte(`{"alert":"x"}`)), "sha256="))
	f.Add("notify", `{"version":"1"}`, "", "id:1", Sign(secret, []byte(`{"version":"1"}`)))
	f.Add("generic", `[1,2`, "", "", "zz")
	bad := "{\"alert\":\"bad \xff\xfe bytes\"}"
	f.Add("generic", bad, "", "", Sign(secret, []byte(bad)))
	f.Add("gh", gh, "issues\xff", "d\r\n1", Sign(secret, []byte(gh)))
	big := `{"repository":{"full_name":"` + strings.Repeat("é", 20000) + `"},"sender":{"login":"x"}}`
	f.Add("gh", big, "push", "", Sign(secret, []byte(big)))
	std := `{"type":"invoice.paid","data":{"id":"in_1"}}`
	f.Add("std", std, "", "msg_1", SignStandard(stdSecret, "msg_1", fuzzNow, []byte(std)))
	f.Add("std", std, "", "msg_1", "v1,AAAA v2,"+strings.TrimPrefix(SignStandard(stdSecret, "msg_1", fuzzNow, []byte(std)), "v1,"))
	f.Fuzz(func(t *testing.T, route, body, event, id, sig string) {
		r, ok := routes[route]
		if !ok {
			r = routes["gh"]
		}
		h := http.Header{}
		h.Set("X-GitHub-Event", event)
		h.Set("X-GitHub-Delivery", id)
		for _, k := range []string{"X-Hub-Signature-256", "X-Gitlab-Token", "X-Signature", "X-Webhook-Signature", "Webhook-Signature"} {
			h.Set(k, sig)
		}
		h.Set("Webhook-Id", id)
		h.Set("Webhook-Timestamp", strconv.FormatInt(fuzzNow.Unix(), 10))
		ev, rerr := Prepare(r, "default", h, []byte(body), fuzzNow)
		if rerr != nil {
			if ev != nil {
				t.Fatal("event with an error")
			}
			return
		}
		// Anything accepted carried a valid signature.
		if Verify(r, h, []byte(body), fuzzNow) != nil {
			t.Fatal("accepted a delivery with a bad signature")
		}
		if ev.GetEventId() == "" || ev.GetSource().GetChatId() == "" || !ev.GetInternal() || !ev.GetTransportAuthenticated() {
			t.Fatalf("incomplete event %v", ev)
		}
		if len(ev.GetText()) > maxPromptBytes || !utf8.ValidString(ev.GetText()) {
			t.Fatalf("prompt of %d bytes (valid UTF-8: %v)", len(ev.GetText()), utf8.ValidString(ev.GetText()))
		}
		if !deliveryID.MatchString(ev.GetMessageId()) && !strings.HasPrefix(ev.GetMessageId(), "sha256-") {
			t.Fatalf("delivery id %q", ev.GetMessageId())
		}
		if err := platform.CheckEvent(ev, "webhook", "default", 1<<20); err != nil {
			t.Fatalf("prepared event refused by the inbound check: %v", err)
		}
	})
}

// FuzzCheckHMAC: a signature is accepted only when it is the HMAC of the
// exact body with the secret, so it never also accepts another body.
func FuzzCheckHMAC(f *testing.F) {
	f.Add("sha256=abcd", "k", "body", "body", true)
	f.Add(Sign("k", []byte("body")), "k", "body", "body ", true)
	f.Add(strings.ToUpper(strings.TrimPrefix(Sign("k", []byte("b")), "sha256=")), "k", "b", "b", false)
	f.Add(" "+Sign("", nil)+" ", "", "", "x", true)
	f.Add("", "", "", "", false)
	f.Fuzz(func(t *testing.T, header, secret, body, other string, prefix bool) {
		if CheckHMAC(header, secret, []byte(body), prefix) != nil {
			return
		}
		sig, has := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
		if prefix && !has {
			t.Fatalf("accepted %q without the sha256= prefix", header)
		}
		got, err := hex.DecodeString(sig)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(body))
		if err != nil || !hmac.Equal(got, mac.Sum(nil)) {
			t.Fatalf("accepted %q, which is not the HMAC of %q", header, body)
		}
		if other != body && CheckHMAC(header, secret, []byte(other), prefix) == nil {
			t.Fatalf("the signature of %q also accepted %q", body, other)
		}
	})
}

// FuzzCheckTimestamped: a Standard Webhooks or generic V2 signature is
// accepted only for the exact id, timestamp and body it was made of,
// and only with a timestamp within the tolerance.
func FuzzCheckTimestamped(f *testing.F) {
	at := strconv.FormatInt(fuzzNow.Unix(), 10)
	f.Add("msg_1", at, SignStandard(stdSecret, "msg_1", fuzzNow, []byte("{}")), SignGenericV2(secretV2, fuzzNow, []byte("{}")), "{}", "{ }")
	f.Add("msg_1", at+"0", "v1,"+strings.Repeat("A", 44), "00", "", "x")
	f.Add("", " "+at, "v1, v1,,", "zz", "{}", "{}")
	f.Fuzz(func(t *testing.T, id, ts, sig, v2, body, other string) {
		if CheckStandard(id, ts, sig, stdSecret, []byte(body), fuzzNow) == nil {
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || fuzzNow.Sub(time.Unix(sec, 0)).Abs() > TimestampTolerance {
				t.Fatalf("standard signature accepted with timestamp %q", ts)
			}
			if other != body && CheckStandard(id, ts, sig, stdSecret, []byte(other), fuzzNow) == nil {
				t.Fatalf("the standard signature of %q also accepted %q", body, other)
			}
			if CheckStandard(id+"x", ts, sig, stdSecret, []byte(body), fuzzNow) == nil {
				t.Fatalf("the standard signature of id %q also accepted another id", id)
			}
		}
		if CheckGenericV2(v2, ts, secretV2, []byte(body), fuzzNow) == nil {
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil || fuzzNow.Sub(time.Unix(sec, 0)).Abs() > TimestampTolerance {
				t.Fatalf("V2 signature accepted with timestamp %q", ts)
			}
			if other != body && CheckGenericV2(v2, ts, secretV2, []byte(other), fuzzNow) == nil {
				t.Fatalf("the V2 signature of %q also accepted %q", body, other)
			}
		}
	})
}

// secretV2 is the secret of the fuzzed generic V2 signatures.
const secretV2 = "s3cret"
