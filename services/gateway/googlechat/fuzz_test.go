package googlechat

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

	"github.com/switchboard-chat/switchboard/pkg/platform"
)

// FuzzParseEvent: no body panics the parser or the normalizer, and what
// is published is well formed: the message name as its id, in the
// space that is its chat, a sender, text or a file.
func FuzzParseEvent(f *testing.F) {
	f.Add([]byte(`{"type":"MESSAGE","space":{"name":"spaces/D1","spaceType":"DIRECT_MESSAGE"},"message":{"name":"spaces/D1/messages/m1","sender":{"name":"users/1","email":"a@b.c","type":"HUMAN"},"text":"hi","thread":{"name":"spaces/D1/threads/t"}}}`))
	f.Add([]byte(`{"type":"MESSAGE","space":{"name":"spaces/S","type":"ROOM"},"message":{"name":"spaces/S/messages/2","sender":{"name":"users/2"},"argumentText":" go","threadReply":true,"thread":{"name":"spaces/S/threads/x"},"annotations":[{"type":"USER_MENTION","userMention":{"user":{"type":"BOT"}}}],"attachment":[{"contentType":"image/png","attachmentDataRef":{"resourceName":"r"}}],"slashCommand":{"commandId":"7"}}}`))
	f.Add([]byte(`{"type":"ADDED_TO_SPACE","space":{"name":"spaces/S"}}`))
	f.Add([]byte(`{"type":"MESSAGE"`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := parseEvent(body)
		if err != nil {
			return
		}
		n := normalize(e, "123", platform.BotsMentions, (&selfNames{}).is)
		if n.ev == nil {
			if n.skip == "" {
				t.Fatal("no event and no reason")
			}
			return
		}
		ev, src := n.ev, n.ev.GetSource()
		if ev.GetEventId() == "" || !strings.HasPrefix(ev.GetEventId(), src.GetChatId()+"/messages/") || src.GetUserId() == "" || !strings.HasPrefix(src.GetUserIdAlt(), "users/") {
			t.Fatalf("incomplete event %v", ev)
		}
		if src.GetThreadId() != "" && !strings.HasPrefix(src.GetThreadId(), src.GetChatId()+"/threads/") {
			t.Fatalf("thread %q outside space %q", src.GetThreadId(), src.GetChatId())
		}
		if strings.TrimSpace(ev.GetText()) == "" && len(ev.GetAttachments()) == 0 {
			t.Fatal("empty event published")
		}
	})
}

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
// what it accepts was signed with Google Chat's key for this app.
func FuzzVerifyToken(f *testing.F) {
	key := fuzzKey(f)
	sign := func(c jwt.MapClaims, kid string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			f.Fatal(err)
		}
		return "Bearer " + s
	}
	good := jwt.MapClaims{"iss": DefaultIssuer, "aud": "123", "exp": int64(4102444800), "iat": int64(1700000000)}
	f.Add(sign(good, "k1"))
	f.Add(sign(good, "k2"))
	f.Add(sign(jwt.MapClaims{"iss": DefaultIssuer, "aud": "456", "exp": int64(4102444800)}, "k1"))
	f.Add("Bearer eyJhbGciOiJub25lIiwia2lkIjoiazEifQ.eyJpc3MiOiJjaGF0QHN5c3RlbS5nc2VydmljZWFjY291bnQuY29tIiwiYXVkIjoiMTIzIn0.")
	f.Add("Bearer ")
	f.Add("")
	v := newVerifier("http://127.0.0.1:1/jwks", DefaultIssuer, "123", 5*time.Minute, nil)
	// Downloaded an hour ago: a token naming another kid does not wait
	// for the next download (it fails at once, the keys out of reach).
	v.keys.Seed(map[string]*rsa.PublicKey{"k1": &key.PublicKey}, time.Now().Add(-time.Hour))
	f.Fuzz(func(t *testing.T, header string) {
		if err := v.verify(context.Background(), header); err != nil {
			return
		}
		raw := strings.TrimSpace(strings.TrimPrefix(header, "Bearer "))
		var c jwt.MapClaims
		if _, _, err := jwt.NewParser().ParseUnverified(raw, &c); err != nil || c["iss"] != DefaultIssuer || !strings.HasPrefix(header, "Bearer ") {
			t.Fatalf("accepted %q", header)
		}
	})
}
