package sms

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
	"github.com/switchboard-chat/switchboard/pkg/platform"
)

var (
	testSID = "SM" + strings.Repeat("1", 32)
	testMMS = "MM" + strings.Repeat("2", 32)
	normCfg = func() *Config {
		c := &Config{AccountSID: "AC" + strings.Repeat("a", 32), AuthToken: "tok", PhoneNumber: "+15550006789", PublicURL: "https://sms.example.com/webhooks/twilio"}
		if err := c.validate(); err != nil {
			panic(err)
		}
		return c
	}()
)

func twilioForm(kv ...string) url.Values {
	v := url.Values{"MessageSid": {testSID}, "AccountSid": {normCfg.AccountSID}, "From": {ann}, "To": {normCfg.PhoneNumber}, "SmsStatus": {"received"}, "NumMedia": {"0"}}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			v.Del(kv[i])
		} else {
			v.Set(kv[i], kv[i+1])
		}
	}
	return v
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	src := &eventsv1.SessionSource{Platform: "sms", Account: normCfg.PhoneNumber, ChatId: ann, ChatType: "dm", ChatName: ann, UserId: ann, UserName: ann}
	media := normCfg.APIBaseURL + "/2010-04-01/Accounts/" + normCfg.AccountSID + "/Messages/" + testMMS + "/Media/ME" + strings.Repeat("3", 32)
	for _, c := range []struct {
		name string
		form url.Values
		want *eventsv1.MessageReceived
		skip string
		err  string
	}{
		{name: "text", form: twilioForm("Body", "  hello there \n"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "hello there"}},
		{name: "command", form: twilioForm("Body", "/new"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "/new"}},
		{name: "sms sid only (old api)", form: twilioForm("MessageSid", "", "SmsSid", testSID, "Body", "hi"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "hi"}},
		{name: "mms", form: twilioForm("MessageSid", testMMS, "Body", "look", "NumMedia", "2", "MediaUrl0", media, "MediaContentType0", "image/jpeg",
			"MediaUrl1", media+".json", "MediaContentType1", "audio/amr; rate=8000"),
			want: &eventsv1.MessageReceived{EventId: testMMS, MessageId: testMMS, Source: src, Text: "look", Attachments: []*eventsv1.Attachment{
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE, Location: &eventsv1.Attachment_Url{Url: media}, MimeType: "image/jpeg"},
				{Kind: eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO, Location: &eventsv1.Attachment_Url{Url: media + ".json"}, MimeType: "audio/amr"},
			}}},
		{name: "media from elsewhere dropped", form: twilioForm("Body", "x", "NumMedia", "1", "MediaUrl0", "https://evil.example.com/a.png"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "x"}},
		{name: "num media beyond its urls", form: twilioForm("Body", "x", "NumMedia", "999"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "x"}},
		{name: "empty", form: twilioForm("Body", " "), skip: "empty message"},
		// Twilio answers an opt-out keyword itself and refuses every send
		// to the number afterwards (21610): the agent gets no turn for it.
		{name: "opt-out keyword", form: twilioForm("Body", " Stop "), skip: "opt-out"},
		{name: "opt-out keyword unsubscribe", form: twilioForm("Body", "UNSUBSCRIBE"), skip: "opt-out"},
		{name: "advanced opt-out", form: twilioForm("Body", "halt", "OptOutType", "STOP"), skip: "opt-out"},
		{name: "stop in a sentence", form: twilioForm("Body", "stop talking about cats"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "stop talking about cats"}},
		{name: "help is a message", form: twilioForm("Body", "help", "OptOutType", "HELP"),
			want: &eventsv1.MessageReceived{EventId: testSID, MessageId: testSID, Source: src, Text: "help"}},
		{name: "own number", form: twilioForm("From", normCfg.PhoneNumber, "Body", "x"), skip: "own number"},
		{name: "other number", form: twilioForm("To", "+15550000000", "Body", "x"), skip: "other phone number"},
		{name: "other account", form: twilioForm("AccountSid", "AC"+strings.Repeat("b", 32), "Body", "x"), skip: "other account"},
		{name: "status callback", form: twilioForm("MessageStatus", "delivered", "SmsStatus", "delivered"), skip: "status callback"},
		{name: "no sid", form: twilioForm("MessageSid", "", "Body", "x"), err: "no MessageSid"},
		{name: "bad sid", form: twilioForm("MessageSid", "SM../../x", "Body", "x"), err: "not a message sid"},
		{name: "no sender", form: twilioForm("From", "", "Body", "x"), err: "without From"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := normalize(c.form, normCfg)
			switch {
			case c.err != "":
				if in.err == nil || !strings.Contains(in.err.Error(), c.err) {
					t.Fatalf("err %v, want %q", in.err, c.err)
				}
			case c.skip != "":
				if in.skip != c.skip || in.ev != nil {
					t.Fatalf("skip %q ev %v, want skip %q", in.skip, in.ev, c.skip)
				}
			default:
				if in.err != nil || !proto.Equal(in.ev, c.want) {
					t.Fatalf("got %s (err %v)\nwant %s", prototext.Format(in.ev), in.err, prototext.Format(c.want))
				}
			}
		})
	}
}

// The signature as Twilio documents it: URL, then each parameter's name
// and value sorted by name, HMAC-SHA1 keyed with the auth token.
func TestSignatureKnownAnswer(t *testing.T) {
	t.Parallel()
	// Twilio's documented example (twilio.com/docs/usage/security).
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"}, "From": {"+12349013030"}, "To": {"+18005551212"}}
	const u = "https://mycompany.com/myapp.php?foo=1&bar=2"
	const want = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
	if got := base64.StdEncoding.EncodeToString(signature(sha1.New, "12345", u, params)); got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
	if !validSignature(sha1.New, "12345", want, signedURLs(u, ""), params) {
		t.Fatal("documented signature refused")
	}
	if validSignature(sha1.New, "", want, signedURLs(u, ""), params) {
		t.Fatal("an empty token accepted a signature")
	}
	// A name repeated with one value counts once, and a repeated name's
	// values in order, as twilio-python (sorted(set(values))) and
	// twilio-node (new Set, sorted) compute it.
	dup := url.Values{"Sid": {"CA123"}, "SidAccount": {"AC123"}, "Digits": {"5678", "1234", "1234"}}
	const wantDup = "IK+Dwps556ElfBT0I3Rgjkr1wJU="
	if got := base64.StdEncoding.EncodeToString(signature(sha1.New, "12345", u, dup)); got != wantDup {
		t.Fatalf("signature with a repeated value %s, want %s", got, wantDup)
	}
	// A Webhooks Rule's SharedKey signs the same string with HMAC-SHA256
	// (X-Twilio-Webhooks-Signature-Settings: …,algorithm=HMAC_SHA256);
	// the answer is Python's hmac over twilio-python's string, which
	// gives the documented SHA-1 answer above with sha1.
	const wantSHA256 = "8SN8hdML70uZUwc2JSbC8GyArzkPS3D6VPVjfK/H87Q="
	if got := base64.StdEncoding.EncodeToString(signature(sha256.New, "shared-key-secret", u, params)); got != wantSHA256 {
		t.Fatalf("HMAC-SHA256 signature %s, want %s", got, wantSHA256)
	}
	if !validSignature(sha256.New, "shared-key-secret", wantSHA256, signedURLs(u, ""), params) || validSignature(sha1.New, "shared-key-secret", wantSHA256, signedURLs(u, ""), params) {
		t.Fatal("HMAC-SHA256 signature checked with the wrong hash")
	}
}

func TestSignatureAlgorithm(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		settings string
		size     int // 0: refused
	}{
		{"key=KS0123456789abcdef0123456789abcdef,algorithm=HMAC_SHA256", sha256.Size},
		{"algorithm=HMAC_SHA1, key=KS01", sha1.Size},
		{" key=KS01 , Algorithm=hmac_sha256 ", sha256.Size},
		{"key=KS01,algorithm=HMAC_SHA512", 0},
		{"key=KS01", 0},
		{"", 0},
	} {
		alg := signatureAlgorithm(c.settings)
		if (alg == nil) != (c.size == 0) || (alg != nil && alg().Size() != c.size) {
			t.Errorf("%q: algorithm found %v, want hash size %d", c.settings, alg != nil, c.size)
		}
	}
}

func TestSignedURLs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ public, query, want string }{
		{"https://h.example/p", "", "https://h.example/p https://h.example:443/p"},
		{"https://h.example:443/p", "", "https://h.example:443/p https://h.example/p"},
		{"http://h.example:8080/p", "a=1", "http://h.example:8080/p?a=1"},
		{"https://h.example/p?x=1", "a=1", "https://h.example/p?x=1 https://h.example:443/p?x=1"},
	} {
		if got := strings.Join(signedURLs(c.public, c.query), " "); got != c.want {
			t.Errorf("%s ?%s: %s, want %s", c.public, c.query, got, c.want)
		}
	}
}

// FuzzParseWebhook: any body parses or is refused without a panic, and
// what normalizes to an event is one the kit accepts.
func FuzzParseWebhook(f *testing.F) {
	f.Add(twilioForm("Body", "hello").Encode())
	f.Add(twilioForm("MessageSid", testMMS, "NumMedia", "1", "MediaUrl0", normCfg.APIBaseURL+"/2010-04-01/Accounts/"+normCfg.AccountSID+"/Messages/"+testMMS+"/Media/ME"+strings.Repeat("3", 32), "MediaContentType0", "image/png").Encode())
	f.Add("Body=%zz&From=")
	f.Add("MessageSid=SM;From=+1")
	f.Add("NumMedia=-1&MediaUrl0=x")
	f.Add("From=%FF%FE&Body=%C0")
	f.Fuzz(func(t *testing.T, body string) {
		form, err := parseForm([]byte(body))
		if err != nil {
			return
		}
		in := normalize(form, normCfg)
		if in.ev == nil {
			if in.err == nil && in.skip == "" {
				t.Fatal("neither an event, a skip nor an error")
			}
			return
		}
		if err := platform.CheckEvent(in.ev, "sms", normCfg.PhoneNumber, 256<<10); err != nil {
			t.Fatalf("normalized event refused by the kit: %v", err)
		}
		for _, a := range in.ev.GetAttachments() {
			if !mediaURL(a.GetUrl(), normCfg) {
				t.Fatalf("attachment url %q is not the account's media", a.GetUrl())
			}
		}
	})
}

// FuzzSignature: no header or parameters make the check panic, and only
// the signature of the exact parameters passes.
func FuzzSignature(f *testing.F) {
	f.Add("tok", "", "Body=hi&From=%2B1")
	f.Add("tok", "0/KCTR6DLpKmkAf8muzZqo1nDgQ=", "a=1&a=2&b=")
	f.Add("", "====", "")
	f.Add("tok", "not base64!", "x=%00")
	f.Fuzz(func(t *testing.T, token, header, body string) {
		params, err := url.ParseQuery(body)
		if err != nil {
			return
		}
		urls := signedURLs(normCfg.PublicURL, "")
		_ = validSignature(sha1.New, token, header, urls, params)
		if token == "" {
			return
		}
		good := base64.StdEncoding.EncodeToString(signature(sha1.New, token, normCfg.PublicURL, params))
		if !validSignature(sha1.New, token, good, urls, params) {
			t.Fatal("own signature refused")
		}
		params.Add("Extra", "1")
		if validSignature(sha1.New, token, good, urls, params) {
			t.Fatal("signature accepted for other parameters")
		}
	})
}
