package googlechat

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/googlechat/googlechatfake"
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
		v.keys.Seed(map[string]*rsa.PublicKey{"g1": &key.PublicKey}, now)
		for _, c := range []struct {
			name string
			mod  func(jwt.MapClaims)
			ok   bool
		}{
			{"google chat", func(c jwt.MapClaims) { c["iss"] = iss }, true},
			// Google's ID tokens carry either spelling of its issuer,
			// whichever the operator configured.
			{"google chat, https issuer", func(c jwt.MapClaims) { c["iss"] = "https://accounts.google.com" }, true},
			{"google chat, bare issuer", func(c jwt.MapClaims) { c["iss"] = "accounts.google.com" }, true},
			{"another issuer", func(c jwt.MapClaims) { c["iss"] = "https://accounts.example.com" }, false},
			{"chat's own issuer", func(c jwt.MapClaims) { c["iss"] = DefaultIssuer }, false},
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

// A refresh of the keys that hangs (Google slow to answer) holds up
// neither the events signed with a key the gateway has nor the one that
// started the refresh beyond a few seconds: Google Chat waits 30 s for an
// answer.
func TestKeysRefreshDoesNotBlock(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	now := time.Now()
	v := newVerifier(srv.URL, DefaultIssuer, "123", time.Minute, srv.Client())
	v.keys.Seed(map[string]*rsa.PublicKey{"k1": &key.PublicKey}, now.Add(-keysMaxAge-time.Hour)) // stale: the next check refreshes
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": DefaultIssuer, "aud": "123", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 4)
	for range 4 {
		go func() { done <- v.verify(context.Background(), "Bearer "+s) }()
	}
	deadline := time.After(staleRefreshWait + 2*time.Second)
	for range 4 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("verify: %v", err)
			}
		case <-deadline:
			t.Fatal("verification waits for a refresh of the keys that hangs")
		}
	}
}

// A key Google no longer publishes is refused once the keys are
// refreshed; while Google is out of reach the key at hand still serves.
func TestKeysRefreshDropsRetiredKey(t *testing.T) {
	t.Parallel()
	old, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		n := base64.RawURLEncoding.EncodeToString(cur.N.Bytes())
		_, _ = fmt.Fprintf(w, `{"keys":[{"kty":"RSA","use":"sig","kid":"k2","n":%q,"e":"AQAB"}]}`, n)
	}))
	t.Cleanup(srv.Close)
	now := time.Now()
	sign := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": DefaultIssuer, "aud": "123", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(old)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + s
	}
	v := newVerifier(srv.URL, DefaultIssuer, "123", time.Minute, srv.Client())
	stale := now.Add(-keysMaxAge - time.Hour)
	v.keys.Seed(map[string]*rsa.PublicKey{"k1": &old.PublicKey}, stale)
	down.Store(true)
	if err := v.verify(context.Background(), sign()); err != nil {
		t.Fatalf("google out of reach: %v, want the key at hand to serve", err)
	}
	down.Store(false)
	v.keys.Seed(map[string]*rsa.PublicKey{"k1": &old.PublicKey}, stale) // the next download is due
	if err := v.verify(context.Background(), sign()); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("retired key: %v, want ErrUnauthorized", err)
	}
}

// Google rotates its signing keys and signs the next event with the new
// one seconds after the gateway downloaded the set: the event waits for
// the next download (keysMinRefresh after the last at most) and is
// delivered, not refused 401 as a forgery.
func TestEventSignedWithAJustRotatedKey(t *testing.T) {
	f := googlechatfake.New(t)
	h := start(t, f, testConfig(f))
	for _, text := range []string{"before the rotation", "after the rotation"} {
		if text == "after the rotation" {
			f.RotateKey(t)
		}
		begin := time.Now()
		code, err := f.Post(context.Background(), h.url, f.Message("spaces/D", "DIRECT_MESSAGE", "a@example.com", "A", text))
		if err != nil || code != http.StatusOK {
			t.Fatalf("%s: answered %d %v, want 200", text, code, err)
		}
		if d := time.Since(begin); d > keysMinRefresh+2*time.Second {
			t.Fatalf("%s: answered after %v", text, d)
		}
		if ev := platformtest.NextEvent(t, h.evs); ev.GetText() != text {
			t.Fatalf("published %q, want %q", ev.GetText(), text)
		}
	}
	if n := f.KeyRequests(); n != 2 {
		t.Fatalf("%d key set downloads, want 2", n)
	}
}
