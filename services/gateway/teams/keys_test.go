package teams

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchboard-chat/switchboard/pkg/jwks"
	"github.com/switchboard-chat/switchboard/pkg/platform/platformtest"
	"github.com/switchboard-chat/switchboard/services/gateway/teams/teamsfake"
)

// When the Bot Framework's signing keys cannot be downloaded (Microsoft
// out of reach, the gateway just started), a genuine activity cannot be
// checked: it is answered 503, which the Bot Framework retries, not 401,
// which tells it the activity was forged, and counts no auth failure.
func TestUnreachableSigningKeysAreNotAForgedToken(t *testing.T) {
	f := teamsfake.New(t)
	cfg := testConfig(f)
	cfg.OpenIDMetadataURL = "http://127.0.0.1:1/openid"
	h := start(t, f, cfg)
	before := testutil.ToFloat64(authFailures)
	for range 2 { // the download failed, then is not tried again within keysMinRefresh
		if code := h.post(t, f.Message(dmConv, "personal", userID, userName, "hello")); code != http.StatusServiceUnavailable {
			t.Fatalf("answered %d, want %d", code, http.StatusServiceUnavailable)
		}
	}
	platformtest.NoEvent(t, h.evs, 100*time.Millisecond)
	if n := testutil.ToFloat64(authFailures) - before; n != 0 {
		t.Fatalf("%v auth failures counted for activities that could not be checked", n)
	}
}

// The signing keys are downloaded for the verifier, not for the request
// that found them missing: a caller that hangs up at once (anyone can
// send a token with an unknown key id) does not cancel the download and
// so leave the gateway without keys, refusing genuine activities, until
// the next download a minute later.
func TestKeyDownloadOutlivesItsRequest(t *testing.T) {
	f := teamsfake.New(t)
	v := newVerifier(f.MetadataURL(), teamsfake.Issuer, f.ClientID, 5*time.Minute, http.DefaultClient)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	forged := f.TokenClaims(f.ServiceURL())
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, forged)
	tok.Header["kid"] = "made-up"
	s, _ := tok.SignedString(other)
	if _, err := v.verify(gone, "Bearer "+s); err == nil {
		t.Fatal("a forged token verified")
	}
	if _, err := v.verify(context.Background(), "Bearer "+f.Sign(f.TokenClaims(f.ServiceURL()))); err != nil {
		t.Fatalf("a genuine token after a request that hung up: %v", err)
	}
}

// Microsoft rotates its signing keys and signs the next activity with the
// new one seconds after the gateway downloaded the set: the activity
// waits for the next download (keysMinRefresh after the last at most)
// and is delivered, not refused 401 as a forgery.
func TestActivitySignedWithAJustRotatedKey(t *testing.T) {
	f := teamsfake.New(t)
	h := start(t, f, testConfig(f))
	for _, text := range []string{"before the rotation", "after the rotation"} {
		if text == "after the rotation" {
			f.RotateKey(t)
		}
		begin := time.Now()
		if code := h.post(t, f.Message(dmConv, "personal", userID, userName, text)); code != http.StatusOK {
			t.Fatalf("%s: answered %d, want 200", text, code)
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

// The key set is downloaded again for a token naming a kid it does not
// have, and only then: a rotated key verifies within the minute; a flood
// of tokens with forged kids shares one download and is refused 401; with
// Microsoft out of reach the keys at hand still verify, and a kid they do
// not have is answered as unavailable (503), not as forged.
func TestKeyRotation(t *testing.T) {
	f := teamsfake.New(t)
	v := newVerifier(f.MetadataURL(), teamsfake.Issuer, f.ClientID, 5*time.Minute, http.DefaultClient)
	const minRefresh = 200 * time.Millisecond
	// The cache promises a call naming an unknown kid a download that
	// starts after it arrived (or runs as it arrives), not the download
	// of calls that came before: a forged kid that reaches the cache
	// after the flood's download ended waits for another, MinRefresh
	// later. Under load one does: generating the other key can outlast
	// MinRefresh, so the first forged kid starts the download at once,
	// and a local download ends in a millisecond, before every goroutine
	// has run. So the flood's download is held until all of it waits.
	var holdFor atomic.Int64 // hold the next download until this many calls wait for it
	fetch := func(ctx context.Context) (map[string]signingKey, error) {
		if n := int(holdFor.Swap(0)); n > 0 {
			if err := waitForCalls(ctx, v.keys, n); err != nil {
				return nil, err
			}
		}
		return v.fetch(ctx)
	}
	v.keys = jwks.New(v.keysConfig(minRefresh), fetch)
	var ahead atomic.Int64 // how far v's clock is ahead of the real one
	v.now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	ctx := context.Background()
	svc := f.ServiceURL()
	long := func() string {
		c := f.TokenClaims(svc)
		c["exp"] = time.Now().Add(72 * time.Hour).Unix()
		return "Bearer " + f.Sign(c)
	}
	first := long()
	if _, err := v.verify(ctx, first); err != nil {
		t.Fatal(err)
	}
	f.RotateKey(t)
	rotated := long()
	if _, err := v.verify(ctx, rotated); err != nil {
		t.Fatalf("a key rotated in after the download: %v", err)
	}
	if n := f.KeyRequests(); n != 2 {
		t.Fatalf("%d key set downloads, want 2", n)
	}

	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged := make([]string, 20)
	for i := range forged {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, f.TokenClaims(svc))
		tok.Header["kid"] = fmt.Sprintf("forged-%d", i)
		s, err := tok.SignedString(other)
		if err != nil {
			t.Fatal(err)
		}
		forged[i] = "Bearer " + s
	}
	holdFor.Store(int64(len(forged)))
	errs := make(chan error, len(forged))
	for _, s := range forged {
		go func() {
			_, err := v.verify(ctx, s)
			errs <- err
		}()
	}
	for range forged {
		if err := <-errs; !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("a forged kid: %v, want ErrUnauthorized", err)
		}
	}
	if n := f.KeyRequests(); n != 3 {
		t.Fatalf("%d key set downloads after 20 forged kids, want 3", n)
	}

	// Two days later, Microsoft out of reach.
	ahead.Store(int64(48 * time.Hour))
	v.metadataURL = "http://127.0.0.1:1/openid"
	for _, tok := range []string{first, rotated} {
		if _, err := v.verify(ctx, tok); err != nil {
			t.Fatalf("old keys with the metadata out of reach: %v", err)
		}
	}
	f.RotateKey(t)
	if _, err := v.verify(ctx, long()); !errors.Is(err, errKeysUnavailable) {
		t.Fatalf("a new kid with the metadata out of reach: %v, want errKeysUnavailable", err)
	}
}

// waitForCalls returns when n calls wait for a download of keys to look
// up a key id it does not have, or with ctx's error.
func waitForCalls[K any](ctx context.Context, keys *jwks.Cache[K], n int) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for keys.Waiting() < n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d calls wait for the download: %w", keys.Waiting(), n, ctx.Err())
		}
	}
	return nil
}
