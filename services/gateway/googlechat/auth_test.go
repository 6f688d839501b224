package googlechat

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// With the app's authentication audience set to its HTTP endpoint URL,
// Google Chat sends a Google ID token (iss accounts.google.com) whose
// email is Google Chat's. Any Google account can have Google sign an ID
// token for any audience, so only one with Google Chat's verified email
// is Google Chat's.
func TestVerifyIDTokenEmail(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const aud = "https://chat.example.com/googlechat/events"
	now := time.Now()
	sign := func(mod func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": "https://accounts.google.com", "aud": aud, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
			"email": DefaultIssuer, "email_verified": true}
		mod(c)
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
		tok.Header["kid"] = "g1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	for _, iss := range []string{"https://accounts.google.com", "accounts.google.com"} {
		v := newVerifier("http://127.0.0.1:1/jwks", iss, aud, time.Minute, nil)
		v.keys = map[string]*rsa.PublicKey{"g1": &key.PublicKey}
		v.fetched, v.tried = now, now
		for _, c := range []struct {
			name string
			mod  func(jwt.MapClaims)
			ok   bool
		}{
			{"google chat", func(c jwt.MapClaims) { c["iss"] = iss }, true},
			{"another account", func(c jwt.MapClaims) { c["iss"], c["email"] = iss, "attacker@evil-project.iam.gserviceaccount.com" }, false},
			{"no email", func(c jwt.MapClaims) { c["iss"] = iss; delete(c, "email") }, false},
			{"email not verified", func(c jwt.MapClaims) { c["iss"], c["email_verified"] = iss, false }, false},
		} {
			err := v.verify(context.Background(), sign(c.mod))
			if c.ok && err != nil {
				t.Errorf("%s, %s: %v", iss, c.name, err)
			}
			if !c.ok && !errors.Is(err, ErrUnauthorized) {
				t.Errorf("%s, %s: %v, want ErrUnauthorized", iss, c.name, err)
			}
		}
	}
}
