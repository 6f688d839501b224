package teams

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
	for range 2 { // the download failed, then is not tried again within the minute
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
