// Package pseudonym replaces the personal parts of identifiers (platform
// user and chat ids, and the parts of session keys that hold them) with
// stable pseudonyms, so logs and traces can follow one conversation
// without naming the person in it.
//
// A pseudonym is "#" and the first 12 hex digits of HMAC-SHA256(key, id).
// The same id gives the same pseudonym in every process that has the same
// key, across replicas and restarts. Without a key the hash uses a fixed
// one: the pseudonyms are as stable, and an id cannot be read back from
// one, but an id from a small space (a phone number, a numeric user id)
// can be found by hashing every candidate; an operator-set key stops that.
package pseudonym

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"regexp"
	"strings"
	"sync"
)

// Prefix starts every pseudonym.
const Prefix = "#"

// hexDigits is how many hex digits of the hash a pseudonym keeps (48
// bits: a collision is unlikely below millions of ids).
const hexDigits = 12

// defaultKey keys the hash when the operator sets none.
const defaultKey = "switchboard log pseudonym v1"

// Pseudonymizer computes pseudonyms under one key. A nil Pseudonymizer
// returns every value as it is (pseudonyms off). It is safe for
// concurrent use.
type Pseudonymizer struct {
	key []byte
	// hashers are keyed HMACs with their buffers, reused: a log record
	// with a session key computes a pseudonym or two, and a new HMAC
	// (its key schedule, two SHA-256 states) for each cost several times
	// what the record's encoding does.
	hashers sync.Pool
}

// hasher is one HMAC under the Pseudonymizer's key and the buffers of a
// pseudonym's computation.
type hasher struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
	out [len(Prefix) + hexDigits]byte
}

// New returns a Pseudonymizer keyed with secret; an empty secret uses a
// fixed built-in key.
func New(secret string) *Pseudonymizer {
	if secret == "" {
		secret = defaultKey
	}
	p := &Pseudonymizer{key: []byte(secret)}
	p.hashers.New = func() any { return &hasher{mac: hmac.New(sha256.New, p.key)} }
	return p
}

// ID is the pseudonym of one platform id (a user, chat or thread id). The
// empty id stays empty.
func (p *Pseudonymizer) ID(id string) string {
	if p == nil || id == "" {
		return id
	}
	h := p.hashers.Get().(*hasher)
	defer p.hashers.Put(h)
	h.mac.Reset()
	h.in = append(h.in[:0], id...)
	h.mac.Write(h.in)
	sum := h.mac.Sum(h.sum[:0])
	copy(h.out[:], Prefix)
	hex.Encode(h.out[len(Prefix):], sum[:hexDigits/2])
	if cap(h.in) > 1<<10 {
		h.in = nil // not kept for an id of a rare length
	}
	return string(h.out[:])
}

// Key is a session key with its personal parts replaced, each by its ID,
// and the rest kept readable: the namespace, the platform and the chat
// type of "agent:<profile>:<platform>:<chat type>:…" (and the
// "background" marker of a background task's key), the platform of a
// proactive send's "send:<platform>:<chat id>":
//
//	agent:main:telegram:dm:99 → agent:main:telegram:dm:#…
//
// The number of colon-separated parts does not change, and a part that
// is a pseudonym already is kept. A value of any other shape is one ID.
func (p *Pseudonymizer) Key(key string) string {
	if p == nil || key == "" {
		return key
	}
	parts := strings.Split(key, ":")
	keep := readableParts(parts)
	if keep == 0 {
		return p.ID(key)
	}
	for i := keep; i < len(parts); i++ {
		if !isPseudonym(parts[i]) {
			parts[i] = p.ID(parts[i])
		}
	}
	return strings.Join(parts, ":")
}

// isPseudonym reports whether s is shaped as an ID ("#" and 12 lower-case
// hex digits), which no platform's id is: Key and Text keep it, so a
// text pseudonymized once (a span's error, which the exporter sees
// again) is not pseudonymized twice.
func isPseudonym(s string) bool {
	if len(s) != len(Prefix)+hexDigits || !strings.HasPrefix(s, Prefix) {
		return false
	}
	for i := len(Prefix); i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// readableParts is how many leading parts of a session key split on ":"
// are not personal; 0 when the value is not a session key.
func readableParts(parts []string) int {
	switch {
	case len(parts) >= 2 && parts[0] == "agent":
		keep := 4 // agent:<profile>:<platform>:<chat type>
		if len(parts) > 2 && parts[2] == "background" {
			keep = 5
		}
		return min(keep, len(parts))
	case len(parts) >= 2 && parts[0] == "send":
		return 2
	}
	return 0
}

// UserKey pseudonymizes a user key, "<platform>:<user id>" (the id
// replaced, "telegram:#…"), and the other "<kind>:<id>" values that name
// who did something or whom something is for: "session:<session key>"
// and "user:<user key>" keep their kind and pseudonymize what follows; a
// session key is a Key. Values without a colon ("global", "admin", a
// platform's name) and operators ("admin:<name>", "token:<name>") are
// kept: they name no chat user.
func (p *Pseudonymizer) UserKey(s string) string {
	if p == nil {
		return s
	}
	if strings.HasPrefix(s, "agent:") {
		return p.Key(s)
	}
	kind, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	switch kind {
	case "admin", "token":
		return s
	case "session", "user":
		return kind + ":" + p.UserKey(rest)
	}
	return kind + ":" + p.ID(rest)
}

// embeddedKey matches a session key inside free text (an error message):
// "agent:" at the start of a word, the profile, the platform, the chat
// type and the parts after them, each up to a colon, a space or a quote. Text such as
// "lock agent:main:telegram:dm:99: timeout" matches up to "99".
var embeddedKey = regexp.MustCompile("\\bagent:[^\\s:\"'`]+:[^\\s:\"'`]+:[^\\s:\"'`]+(?::[^\\s:\"'`]+)*")

// Text replaces every session key inside free text with its Key. A key
// whose last part ends in '.', ',', ';' or ')' is taken to end before
// it (the end of a sentence or of a parenthesis).
func (p *Pseudonymizer) Text(s string) string {
	if p == nil || !strings.Contains(s, "agent:") {
		return s
	}
	return embeddedKey.ReplaceAllStringFunc(s, func(k string) string {
		trimmed := strings.TrimRight(k, ".,;)")
		return p.Key(trimmed) + k[len(trimmed):]
	})
}
