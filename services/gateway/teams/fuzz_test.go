package teams

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzParseActivity: no body panics the parser or the normalizer, and
// what is published is well formed: ids set, the conversation as the
// chat, no mention tags left in the text, a press's text a command it
// stands for (or unknownChoice's).
func FuzzParseActivity(f *testing.F) {
	f.Add([]byte(`{"type":"message","id":"1700000000001","serviceUrl":"https://smba.trafficmanager.net/teams/","channelId":"msteams","from":{"id":"29:1","aadObjectId":"u1","name":"Ann"},"conversation":{"id":"a:1","conversationType":"personal","tenantId":"t"},"recipient":{"id":"28:app"},"text":"hi"}`))
	f.Add([]byte(`{"type":"message","id":"2","serviceUrl":"https://x/","from":{"id":"29:1"},"conversation":{"id":"19:c@thread.tacv2;messageid=2","conversationType":"channel"},"recipient":{"id":"28:app"},"text":"<at>Bot</at> hello <at>Ann</at>","entities":[{"type":"mention","mentioned":{"id":"28:app"}}],"attachments":[{"contentType":"image/png","contentUrl":"https://smba.trafficmanager.net/a"},{"contentType":"application/vnd.microsoft.teams.file.download.info","name":"a.pdf","content":{"downloadUrl":"https://x/y","fileType":"pdf"}}]}`))
	f.Add([]byte(`{"type":"conversationUpdate","serviceUrl":"https://x/","conversation":{"id":"19:g@thread.v2"}}`))
	f.Add([]byte(`{"type":"message"`))
	f.Add([]byte(`{"type":"invoke","name":"adaptiveCard/action","id":"f:1","serviceUrl":"https://x/","from":{"id":"29:2","aadObjectId":"u2"},"conversation":{"id":"19:c@thread.tacv2","conversationType":"channel"},"recipient":{"id":"28:app"},"replyToId":"1700000000009","value":{"action":{"type":"Action.Execute","verb":"hermes_approve","data":{"hermes_action":"approve_once","tool_call_id":"call_1"}}}}`))
	f.Add([]byte(`{"type":"message","id":"3","serviceUrl":"https://x/","from":{"id":"29:1"},"conversation":{"id":"a:1"},"recipient":{"id":"28:app"},"replyToId":"x y","value":{"hermes_action":"deny","tool_call_id":"café"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := parseActivity(body)
		if err != nil {
			return
		}
		for _, req := range []bool{false, true} {
			n := normalize(a, "app", req)
			if n.ev == nil {
				if n.skip == "" {
					t.Fatal("no event and no reason")
				}
				continue
			}
			ev := n.ev
			if n.press != (ev.GetButtonPress() != nil) || (n.press && !strings.HasPrefix(ev.GetText(), "/approve") && ev.GetText() != "/deny" && ev.GetText() != unknownChoice) {
				t.Fatalf("press %v of %v", n.press, ev)
			}
			if p := ev.GetButtonPress(); p != nil && ((p.GetMessageId() != "" && !validID(p.GetMessageId())) || (p.GetToolCallId() != "" && !validCall(p.GetToolCallId()))) {
				t.Fatalf("press %v", p)
			}
			if ev.GetMessageId() == "" || ev.GetEventId() == "" || ev.GetSource().GetChatId() != a.Conversation.ID || ev.GetSource().GetUserId() == "" {
				t.Fatalf("incomplete event %v", ev)
			}
			if atTags.MatchString(ev.GetText()) {
				t.Fatalf("mention left in %q", ev.GetText())
			}
			if ev.GetText() == "" && len(ev.GetAttachments()) == 0 {
				t.Fatal("empty event published")
			}
		}
	})
}

// fuzzKey is the key the token fuzz test signs with (testdata, so that
// the committed corpus holds valid tokens).
func fuzzKey(f *testing.F) *rsa.PrivateKey {
	data, err := os.ReadFile("testdata/fuzzkey.pem")
	if err != nil {
		f.Fatal(err)
	}
	b, _ := pem.Decode(data)
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		f.Fatal(err)
	}
	return k.(*rsa.PrivateKey)
}

// FuzzVerifyToken: no Authorization header panics the token check, and
// what it accepts was signed with the key for this bot.
func FuzzVerifyToken(f *testing.F) {
	key := fuzzKey(f)
	const svc = "https://smba.trafficmanager.net/teams/"
	sign := func(c jwt.MapClaims, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			f.Fatal(err)
		}
		return "Bearer " + s
	}
	good := jwt.MapClaims{"iss": DefaultIssuer, "aud": "app", "serviceurl": svc, "exp": int64(4102444800), "nbf": int64(1700000000)}
	f.Add(sign(good, "k1"))
	f.Add(sign(good, "k2"))
	f.Add(sign(jwt.MapClaims{"iss": DefaultIssuer, "aud": "other", "exp": int64(4102444800)}, "k1"))
	f.Add("Bearer eyJhbGciOiJub25lIiwia2lkIjoiazEifQ.eyJpc3MiOiJodHRwczovL2FwaS5ib3RmcmFtZXdvcmsuY29tIiwiYXVkIjoiYXBwIn0.")
	f.Add("Bearer ")
	f.Add("")
	v := newVerifier("http://127.0.0.1:1/openid", DefaultIssuer, "app", 5*time.Minute, nil)
	// Downloaded an hour ago: a token naming another kid does not wait
	// for the next download (it fails at once, the keys out of reach).
	v.keys.Seed(map[string]signingKey{"k1": {pub: &key.PublicKey, endorsements: []string{"msteams"}}}, time.Now().Add(-time.Hour))
	f.Fuzz(func(t *testing.T, header string) {
		got, err := v.verify(context.Background(), header)
		if err != nil {
			return
		}
		if got.serviceURL != svc || !got.endorses("msteams") || !strings.HasPrefix(header, "Bearer ") {
			t.Fatalf("accepted %q: %+v", header, got)
		}
	})
}
