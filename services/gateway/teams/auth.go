package teams

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-chat/switchboard/pkg/jwks"
)

// ErrUnauthorized is an activity whose bearer token does not prove that
// the Bot Framework sent it to this bot.
var ErrUnauthorized = errors.New("teams: activity not authenticated")

// errKeysUnavailable is a token that could not be checked: the signing
// keys it needs could not be downloaded. Nothing says it is forged.
var errKeysUnavailable = errors.New("the bot framework's signing keys are out of reach")

// How long the signing keys are kept: the Bot Framework asks bots to
// refresh them daily; a token signed with a key not yet known downloads
// them again, at most once every 5 seconds (a flood of forged kids cannot
// make the gateway hammer Microsoft), the activity waiting for that
// download.
const (
	keysMaxAge     = 24 * time.Hour
	keysMinRefresh = 5 * time.Second
	maxDocBytes    = 1 << 20
	// keysFetchTimeout bounds one download of the metadata and the keys.
	keysFetchTimeout = 30 * time.Second
	// staleRefreshWait bounds the wait of an activity signed with a key
	// of an old set for its refresh: the Bot Framework waits 15 s.
	staleRefreshWait = 3 * time.Second
)

// verifier checks the Bot Framework's tokens: RS256 only, the issuer, the
// app id as audience, exp and nbf with the clock skew, the signature with
// a key of the OpenID metadata's jwks_uri (cached, refreshed daily and
// on an unknown kid), and the key's endorsements naming the activity's
// channel.
type verifier struct {
	metadataURL string
	issuer      string
	audience    string
	skew        time.Duration
	hc          *http.Client
	now         func() time.Time
	keys        *jwks.Cache[signingKey]
}

type signingKey struct {
	pub          *rsa.PublicKey
	endorsements []string
}

func newVerifier(metadataURL, issuer, audience string, skew time.Duration, hc *http.Client) *verifier {
	v := &verifier{metadataURL: metadataURL, issuer: issuer, audience: audience, skew: skew, hc: hc, now: time.Now}
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

// claims are the token claims the gateway reads.
type claims struct {
	jwt.RegisteredClaims
	ServiceURL string `json:"serviceurl"`
}

// verified is what a valid token says.
type verified struct {
	serviceURL   string   // its serviceurl claim
	endorsements []string // the channels its signing key may sign for (none: any)
}

// endorses reports whether the signing key may sign for channel (the
// activity's channelId, msteams).
func (v verified) endorses(channel string) bool {
	return len(v.endorsements) == 0 || slices.Contains(v.endorsements, channel)
}

// verify checks the Authorization header's token.
func (v *verifier) verify(ctx context.Context, header string) (verified, error) {
	raw, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return verified{}, fmt.Errorf("%w: no bearer token", ErrUnauthorized)
	}
	var key signingKey
	var c claims
	_, err := jwt.ParseWithClaims(strings.TrimSpace(raw), &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("token has no kid")
		}
		k, err := v.key(ctx, kid)
		if err != nil {
			return nil, err
		}
		key = k
		return k.pub, nil
	},
		jwt.WithValidMethods([]string{"RS256"}),
		jwt.WithIssuer(v.issuer),
		jwt.WithAudience(v.audience),
		jwt.WithLeeway(v.skew),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(v.now),
	)
	if errors.Is(err, errKeysUnavailable) {
		return verified{}, err
	}
	if err != nil {
		return verified{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return verified{serviceURL: c.ServiceURL, endorsements: key.endorsements}, nil
}

// key returns the signing key kid (see jwks.Cache.Key).
func (v *verifier) key(ctx context.Context, kid string) (signingKey, error) {
	k, err := v.keys.Key(ctx, kid)
	if errors.Is(err, jwks.ErrUnavailable) {
		return signingKey{}, fmt.Errorf("%w: %w", errKeysUnavailable, err)
	}
	return k, err
}

// fetch reads the OpenID metadata and the key set its jwks_uri names.
func (v *verifier) fetch(ctx context.Context) (map[string]signingKey, error) {
	var meta struct {
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := v.getJSON(ctx, v.metadataURL, &meta); err != nil {
		return nil, fmt.Errorf("openid metadata: %w", err)
	}
	if !httpURL(meta.JWKSURI) {
		return nil, fmt.Errorf("openid metadata: jwks_uri %q is not an http(s) URL", meta.JWKSURI)
	}
	var set keySet
	if err := v.getJSON(ctx, meta.JWKSURI, &set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	keys, err := set.rsaKeys()
	if err != nil {
		return nil, err
	}
	return keys, nil
}

func (v *verifier) getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := v.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: decode: %w", u, err)
	}
	return nil
}

// keySet is a JSON Web Key Set as the Bot Framework publishes it (RSA keys
// with n and e, and the channels each key endorses).
type keySet struct {
	Keys []struct {
		Kty          string   `json:"kty"`
		Use          string   `json:"use"`
		Kid          string   `json:"kid"`
		N            string   `json:"n"`
		E            string   `json:"e"`
		Endorsements []string `json:"endorsements"`
	} `json:"keys"`
}

// rsaKeys decodes the set's RSA signing keys by kid; others are skipped.
func (s keySet) rsaKeys() (map[string]signingKey, error) {
	out := map[string]signingKey{}
	for _, k := range s.Keys {
		if k.Kty != "RSA" || k.Kid == "" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		pub, err := jwks.RSAKey(k.N, k.E)
		if err != nil {
			return nil, fmt.Errorf("jwks key %q: %w", k.Kid, err)
		}
		out[k.Kid] = signingKey{pub: pub, endorsements: k.Endorsements}
	}
	if len(out) == 0 {
		return nil, errors.New("jwks has no RSA signing key")
	}
	return out, nil
}

// sameServiceURL compares the token's serviceurl claim with the
// activity's serviceUrl: the same URL up to a trailing slash and the
// case of scheme and host.
func sameServiceURL(claim, activity string) bool {
	norm := func(s string) string {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if i := strings.Index(s, "://"); i >= 0 {
			rest := s[i+3:]
			host, path, _ := strings.Cut(rest, "/")
			s = strings.ToLower(s[:i]) + "://" + strings.ToLower(host)
			if path != "" {
				s += "/" + path
			}
		}
		return s
	}
	return claim != "" && activity != "" && norm(claim) == norm(activity)
}
