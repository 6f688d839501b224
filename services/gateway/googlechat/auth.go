package googlechat

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrUnauthorized is an event whose bearer token does not prove that
// Google Chat sent it to this app.
var ErrUnauthorized = errors.New("googlechat: event not authenticated")

// errKeysUnavailable is a token that could not be checked: the signing
// keys could not be downloaded. Nothing says it is forged.
var errKeysUnavailable = errors.New("google chat's signing keys are out of reach")

// Google rotates the keys daily and publishes the next ones ahead: they
// are kept 6 hours, and a token signed with an unknown kid refreshes
// them at once, at most once a minute.
const (
	keysMaxAge       = 6 * time.Hour
	keysMinRefresh   = time.Minute
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

	mu      sync.Mutex
	keys    map[string]*rsa.PublicKey
	fetched time.Time
	tried   time.Time
}

func newVerifier(keysURL, issuer, audience string, skew time.Duration, hc *http.Client) *verifier {
	return &verifier{keysURL: keysURL, issuer: issuer, audience: audience, skew: skew, hc: hc, now: time.Now}
}

// verify checks the Authorization header's token.
func (v *verifier) verify(ctx context.Context, header string) error {
	raw, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return fmt.Errorf("%w: no bearer token", ErrUnauthorized)
	}
	tok, err := jwt.Parse(strings.TrimSpace(raw), func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("token has no kid")
		}
		return v.key(ctx, kid)
	},
		jwt.WithValidMethods([]string{"RS256"}),
		jwt.WithIssuer(v.issuer),
		jwt.WithAudience(v.audience),
		jwt.WithLeeway(v.skew),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(v.now),
	)
	if errors.Is(err, errKeysUnavailable) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	if googleIDToken(v.issuer) {
		// Google signs an ID token for any audience for any Google
		// account: only Google Chat's verified email makes it Google
		// Chat's.
		c, _ := tok.Claims.(jwt.MapClaims)
		if email, _ := c["email"].(string); email != DefaultIssuer || c["email_verified"] != true {
			return fmt.Errorf("%w: an ID token of %q, not of %s", ErrUnauthorized, email, DefaultIssuer)
		}
	}
	return nil
}

// googleIDToken reports whether tokens of issuer are Google ID tokens
// (the app's authentication audience set to its HTTP endpoint URL).
func googleIDToken(issuer string) bool {
	return issuer == "https://accounts.google.com" || issuer == "accounts.google.com"
}

// key returns the signing key kid, fetching the set when it is missing,
// old, or does not have kid (at most once a minute). The download runs
// without the lock, so events signed with a key at hand never wait for
// it; the event that starts the refresh of old keys waits at most
// staleRefreshWait, then is checked with the key it has.
func (v *verifier) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	v.mu.Lock()
	now := v.now()
	k, ok := v.keys[kid]
	due := v.tried.IsZero() || now.Sub(v.tried) >= keysMinRefresh
	switch {
	case ok && (now.Sub(v.fetched) <= keysMaxAge || !due):
		v.mu.Unlock()
		return k, nil
	case !due:
		defer v.mu.Unlock()
		return nil, v.missing(kid)
	}
	v.tried = now
	v.mu.Unlock()

	wait := keysFetchTimeout
	if ok {
		wait = staleRefreshWait
	}
	// Not the request's context: a caller hanging up must not leave the
	// gateway without keys for a minute.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	keys, err := v.fetch(fctx)
	cancel()

	v.mu.Lock()
	defer v.mu.Unlock()
	if err == nil {
		v.keys, v.fetched = keys, v.now()
	}
	if k, ok := v.keys[kid]; ok {
		return k, nil
	}
	if ok && err != nil {
		return k, nil // Google out of reach: keep the key we have
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errKeysUnavailable, err)
	}
	return nil, v.missing(kid)
}

// missing is the error for a kid the keys at hand do not have; v.mu held.
func (v *verifier) missing(kid string) error {
	if v.keys == nil {
		return fmt.Errorf("%w: not downloaded yet", errKeysUnavailable)
	}
	return fmt.Errorf("unknown signing key %q", kid)
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
		pub, err := rsaKey(k.N, k.E)
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

// rsaKey builds a public key from a JWK's base64url modulus and exponent.
func rsaKey(n64, e64 string) (*rsa.PublicKey, error) {
	nb, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(n64, "="))
	if err != nil {
		return nil, fmt.Errorf("modulus: %w", err)
	}
	eb, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(e64, "="))
	if err != nil {
		return nil, fmt.Errorf("exponent: %w", err)
	}
	n, e := new(big.Int).SetBytes(nb), new(big.Int).SetBytes(eb)
	if n.BitLen() < 2048 {
		return nil, fmt.Errorf("modulus of %d bits is too short", n.BitLen())
	}
	if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Int64()%2 == 0 {
		return nil, errors.New("bad exponent")
	}
	return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
}
