package googlechat

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/jwks"
)

// ErrUnauthorized is an event whose bearer token does not prove that
// Google Chat sent it to this app.
var ErrUnauthorized = errors.New("googlechat: event not authenticated")

// errKeysUnavailable is a token that could not be checked: the signing
// keys could not be downloaded. Nothing says it is forged.
var errKeysUnavailable = errors.New("google chat's signing keys are out of reach")

// Google rotates the keys daily and publishes the next ones ahead: they
// are kept 6 hours, and a token signed with an unknown kid downloads them
// again, at most once every 5 seconds (a flood of forged kids cannot
// make the gateway hammer Google), the event waiting for that download.
const (
	keysMaxAge       = 6 * time.Hour
	keysMinRefresh   = 5 * time.Second
	keysFetchTimeout = 30 * time.Second
	// staleRefreshWait bounds the wait of the event that refreshes keys
	// it has one of: Google Chat gives an answer 30 s.
	staleRefreshWait = 3 * time.Second
	maxDocBytes      = 1 << 20
)

// verifier checks Google Chat's tokens: RS256, the issuer, the audience,
// exp (required) and iat/nbf with the skew, a signature by a key of the
// JWKS (cached, refreshed on an unknown kid), and for Google ID tokens
// (issuer accounts.google.com) Google Chat's verified email.
type verifier struct {
	keysURL  string
	issuer   string
	audience string
	skew     time.Duration
	hc       *http.Client
	now      func() time.Time
	keys     *jwks.Cache[*rsa.PublicKey]
}

func newVerifier(keysURL, issuer, audience string, skew time.Duration, hc *http.Client) *verifier {
	v := &verifier{keysURL: keysURL, issuer: issuer, audience: audience, skew: skew, hc: hc, now: time.Now}
	if hc == nil {
		v.hc = http.DefaultClient
	}
	v.keys = jwks.New(v.keysConfig(keysMinRefresh), v.fetch)
	return v
}

// keysConfig is the key cache's configuration, on v's clock.
func (v *verifier) keysConfig(minRefresh time.Duration) jwks.Config {
	return jwks.Config{MaxAge: keysMaxAge, MinRefresh: minRefresh, FetchTimeout: keysFetchTimeout,
		StaleWait: staleRefreshWait, Now: func() time.Time { return v.now() }}
}

// verify checks the Authorization header's token.
func (v *verifier) verify(ctx context.Context, header string) error {
	raw, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return fmt.Errorf("%w: no bearer token", ErrUnauthorized)
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{"RS256"}),
		jwt.WithAudience(v.audience),
		jwt.WithLeeway(v.skew),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(v.now),
	}
	idToken := googleIDToken(v.issuer)
	if !idToken {
		opts = append(opts, jwt.WithIssuer(v.issuer))
	}
	tok, err := jwt.Parse(strings.TrimSpace(raw), func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("token has no kid")
		}
		return v.key(ctx, kid)
	}, opts...)
	if errors.Is(err, errKeysUnavailable) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	if idToken {
		// A Google ID token's iss is either spelling of Google's
		// issuer, whichever the operator configured. Google signs an
		// ID token for any audience for any Google account: only
		// Google Chat's verified email makes it Google Chat's.
		c, _ := tok.Claims.(jwt.MapClaims)
		if iss, _ := c["iss"].(string); !googleIDToken(iss) {
			return fmt.Errorf("%w: an ID token issued by %q", ErrUnauthorized, iss)
		}
		if email, _ := c["email"].(string); email != DefaultIssuer || c["email_verified"] != true {
			return fmt.Errorf("%w: an ID token of %q, not of %s", ErrUnauthorized, email, DefaultIssuer)
		}
	}
	return nil
}

// googleIDToken reports whether tokens of issuer are Google ID tokens
// (the app's authentication audience set to its HTTP endpoint URL), whose
// iss Google documents as either of these two.
func googleIDToken(issuer string) bool {
	return issuer == "https://accounts.google.com" || issuer == "accounts.google.com"
}

// key returns the signing key kid (see jwks.Cache.Key).
func (v *verifier) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	k, err := v.keys.Key(ctx, kid)
	if errors.Is(err, jwks.ErrUnavailable) {
		return nil, fmt.Errorf("%w: %w", errKeysUnavailable, err)
	}
	return k, err
}

// fetch downloads the JWKS.
func (v *verifier) fetch(ctx context.Context) (map[string]*rsa.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.keysURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := v.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks: GET %s: HTTP %d", v.keysURL, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes))
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	return parseJWKS(body)
}

// parseJWKS decodes a JSON Web Key Set's RSA signing keys by kid.
func parseJWKS(body []byte) (map[string]*rsa.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty, Use, Kid, N, E string
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("jwks: decode: %w", err)
	}
	out := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Kid == "" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		pub, err := jwks.RSAKey(k.N, k.E)
		if err != nil {
			return nil, fmt.Errorf("jwks key %q: %w", k.Kid, err)
		}
		out[k.Kid] = pub
	}
	if len(out) == 0 {
		return nil, errors.New("jwks has no RSA signing key")
	}
	return out, nil
}
