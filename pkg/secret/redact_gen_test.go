package secret

import (
	"flag"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// For a long run: go test -run TestRedactGenerated -redact.gen=100000 -redact.seed=N.
var (
	genN    = flag.Int("redact.gen", 1000, "texts TestRedactGeneratedMatchesReference builds")
	genSeed = flag.Uint64("redact.seed", 1, "seed of TestRedactGeneratedMatchesReference's texts")
)

// genParts are the pieces the generated texts are built of: every
// pattern's keywords and vendor prefixes, the bytes the cut rules and
// word boundaries look at, JSON punctuation and escapes, line breaks,
// multi-byte, invalid and case-folding (Kelvin sign, long s) runes,
// and the bytes masks are made of.
var genParts = []string{
	"authorization", "Authorization", "AUTHORIZATION", "bearer ", "Basic ", "token ", "bot ",
	"access_token", "refresh_token", "id_token", "token", "api_key", "apikey", "client_secret",
	"password", "passwd", "secret", "key", "signature", "x-amz-signature", "sig", "credential",
	"private_key", "KEY", "API_KEY", "TOKEN", "SECRET", "PASS", "PW", "CREDENTIAL", "AUTH", "PASSWORD",
	"sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xapp-1-", "xoxb-", "xoxp-", "AIza",
	"pplx-", "fal_", "fc-", "AKIA", "rk_live_", "sk_live_", "sk_test_", "sk_", "SG.", "hf_", "r8_",
	"npm_", "pypi-", "dop_v1_", "doo_v1_", "tvly-", "exa_", "gsk_", "syt_", "xai-", "ntn_",
	"glpat-", "gloas-", "gldt-", "glrt-", "glrtr-", "glrt", "glcbt-", "glptt-", "glft-", "glimt-",
	"glagent-", "glsoat-", "glffct-", "glwt-", "pk-lf-", "eyJ", "eyJhbGciOi.", "_v1_", "k_live_",
	"://", "https://u:", "@", "?", "&", "=", " = ", "#", ":", ": ", "\":", "\": \"", "\" : \"",
	"\"", "\",", "\", \"", "\",\n  \"", "\\\"", "\\", "{", "}", "[", "]", ",", ";", "'", "`",
	" ", "  ", "\t", "\n", "\r\n", "\f", "\v", "\x00", "(", ")", "|", "!", "/", "<", ">", "%", "$",
	"\u212a", "\u017f", "\u0131", "\u0130", "\u00e9", "\xe2\x84", "\xc5", "\xff", "\xe2\x84\xaa",
	"...", "***", "[REDACTED PRIVATE KEY]", "_", "-", ".", "x", "X", "9",
	"abcd", "abcdefghij", "ABCDEFGHIJKLMNOP", "0123456789", "abcdefghijklmnopqrstuvwxyz0123",
}

// genFold puts a word's letters in random cases, and a k or an s
// sometimes as the Kelvin sign or the long s.
func genFold(r *rand.Rand, w string) string {
	var b strings.Builder
	for _, c := range w {
		switch {
		case (c == 'k' || c == 'K') && r.IntN(8) == 0:
			b.WriteRune('\u212a')
		case (c == 's' || c == 'S') && r.IntN(8) == 0:
			b.WriteRune('\u017f')
		case 'a' <= c && c <= 'z' && r.IntN(3) == 0:
			b.WriteRune(c - 'a' + 'A')
		case 'A' <= c && c <= 'Z' && r.IntN(3) == 0:
			b.WriteRune(c - 'A' + 'a')
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// genText is a text of about n bytes of genParts, some case-folded,
// and of whole or nearly whole matches of the patterns (genMatch).
func genText(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		var p string
		if r.IntN(3) == 0 {
			p = genMatch(r)
		} else {
			p = genParts[r.IntN(len(genParts))]
		}
		if r.IntN(4) == 0 {
			p = genFold(r, p)
		}
		b.WriteString(p)
	}
	return b.String()
}

// genPick is one of words.
func genPick(r *rand.Rand, words ...string) string { return words[r.IntN(len(words))] }

// genRun is up to n bytes of pool's, for a value or a name.
func genRun(r *rand.Rand, pool string, n int) string {
	b := make([]byte, r.IntN(n+1))
	for i := range b {
		b[i] = pool[r.IntN(len(pool))]
	}
	return string(b)
}

const (
	genAlnum  = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	genValue  = genAlnum + genAlnum + `,,""\  .-_=&?'#:;/@` + "\n\t\r\xc3\xa9"
	genSpaces = " \t\n\r\f\v"
)

// genMatch is a match of one of the patterns, or a near one: a JSON
// field, a query parameter, an assignment, an Authorization header, a
// URL's user info, a JWT or a vendor key, with values that may hold
// quotes, escapes, commas and line breaks.
func genMatch(r *rand.Rand) string {
	ws := func() string { return genRun(r, genSpaces, 2) }
	switch r.IntN(7) {
	case 0:
		return genPick(r, "", "{", ", ", ",\n  ", "\\") + `"` + genRun(r, genAlnum+"_.-", 3) +
			genPick(r, "api_key", "apikey", "token", "secret", "password", "passwd", "credential", "private_key", "passw", "key") +
			genRun(r, genAlnum+"_", 2) + `"` + ws() + genPick(r, ":", ":", "=") + ws() + `"` + genRun(r, genValue, 24) + genPick(r, `"`, `",`, `", "`, `\"`, "")
	case 1:
		return genPick(r, "?", "&", "") + genPick(r, "access_token", "token", "api_key", "apikey", "client_secret", "password", "secret", "key", "signature", "x-amz-signature", "sig") +
			"=" + genRun(r, genValue, 24)
	case 2:
		return genRun(r, "ABCXYZ_019", 4) + genPick(r, "API_KEY", "APIKEY", "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "PW", "CREDENTIAL", "AUTH") +
			genRun(r, "ABC_019", 3) + ws() + "=" + ws() + genPick(r, "", "'", `"`) + genRun(r, genValue, 24) + genPick(r, "", "'", `"`)
	case 3:
		return "authorization" + ws() + genPick(r, ":", "=") + ws() + genPick(r, "", "'", `"`) + genPick(r, "", "bearer", "basic", "token", "bot") + ws() + genRun(r, genAlnum+"._~+/=-", 24)
	case 4:
		return genPick(r, "https", "postgres", "x", "") + "://" + genRun(r, genAlnum+":", 6) + ":" + genRun(r, genValue, 12) + "@" + genRun(r, genAlnum, 4)
	case 5:
		return "eyJ" + genRun(r, genAlnum+"_-", 12) + "." + genRun(r, genAlnum+"_-", 12) + "." + genRun(r, genAlnum+"_-.", 12)
	default:
		return genPick(r, keyStarts...) + genPick(r, "", "1-", "live_", "test_", "v1_") + genRun(r, genAlnum+"_-.", 40)
	}
}

// TestRedactGeneratedMatchesReference compares Redact with the
// reference on texts built of the patterns' keywords, prefixes,
// separators and escapes, long enough to be cut into several chunks,
// each also after padding that moves the cuts across it.
func TestRedactGeneratedMatchesReference(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(41, *genSeed))
	for i := range *genN {
		s := genText(r, 1+r.IntN(4*minChunk))
		for _, in := range []string{s, padded(s, r.IntN(2*minChunk))} {
			if got, want := Redact(in), redactReference(in); got != want {
				t.Fatalf("text %d (valid UTF-8 %v): Redact(%q)\n= %q\nreference %q", i, utf8.ValidString(in), in, got, want)
			}
		}
	}
}
