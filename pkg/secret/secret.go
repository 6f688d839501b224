// Package secret compares secrets a caller presents (API keys, bearer
// tokens, webhook passwords) with the configured ones.
package secret

import (
	"crypto/sha256"
	"crypto/subtle"
)

// Equal reports whether got is want, in time that depends on neither's
// content nor length: it compares their SHA-256 sums, so a caller timing
// refusals learns neither a prefix nor the length of want. An empty want
// matches nothing.
func Equal(got, want string) bool {
	if want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
