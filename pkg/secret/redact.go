package secret

import (
	"regexp"
	"strings"
)

// Redact masks the credentials in text, as Hermes's force-mode
// redaction (agent/redact.py, redact_sensitive_text) does for an export
// with `redact`: API keys and tokens by their vendors' prefixes (OpenAI
// sk-, GitHub ghp_, Slack xox…, AWS AKIA…, Google AIza…, Stripe,
// Hugging Face, GitLab glpat- …), JSON Web Tokens, the values of
// Authorization headers, of secret-named assignments (API_KEY=…,
// "password": "…") and of secret-named URL query parameters, the
// password in a URL's user info, and private key blocks. A value of 18
// characters or more keeps its first 6 and last 4 (Hermes's mask, for
// recognising which key it was); a shorter one becomes "***". Prose is
// left alone: a bare word "password" or "token" is no assignment.
//
// Differs from Hermes: its per-profile vault values and some rarer
// vendor prefixes and config-file forms are not matched.
func Redact(text string) string {
	if text == "" {
		return text
	}
	// Go's regexp is linear, but most of these patterns have no literal
	// prefix for it to skip to, so each steps its automaton over every
	// byte: all eight together ran at about 1 MB/s. So each pattern runs
	// only on the chunks of the text (see replaceChunks) that hold a
	// literal every match of it contains. These prefilters are necessary
	// conditions, never sufficient, and no match spans a cut, so the
	// output is the same as running every pattern over the whole text
	// (TestRedactPinned, FuzzRedactMatchesReference).
	if strings.Contains(text, "PRIVATE KEY-----") {
		text = privateKey.ReplaceAllString(text, "[REDACTED PRIVATE KEY]")
	}
	// One pass finds which patterns' literals the text holds; each
	// prefilter below asks it while the text is unchanged, and looks
	// again in a chunk or a changed text.
	found := &literalsFound{text: text, sets: prefilter.find(text, allSets)}
	text = replaceChunks(text, authHeader, cutAfter(authSeps), func(c string) bool {
		return found.in(c, authSet)
	}, func(s string) string {
		m := authHeader.FindStringSubmatch(s)
		return m[1] + mask(m[2])
	})
	text = replaceChunks(text, urlPassword, cutAfter(spaces), func(c string) bool {
		return strings.Contains(c, "://") && strings.Contains(c, "@")
	}, func(s string) string {
		m := urlPassword.FindStringSubmatch(s)
		return m[1] + "***" + m[3]
	})
	text = replaceChunks(text, queryParam, cutAfter(querySeps), func(c string) bool {
		return found.in(c, querySet) && strings.ContainsAny(c, "?&") && strings.Contains(c, "=")
	}, func(s string) string {
		m := queryParam.FindStringSubmatch(s)
		return m[1] + mask(m[2])
	})
	text = replaceChunks(text, jsonField, cutJSON, func(c string) bool {
		return found.in(c, jsonSet)
	}, func(s string) string {
		m := jsonField.FindStringSubmatch(s)
		return m[1] + mask(m[2]) + `"`
	})
	text = replaceChunks(text, envAssign, cutEnv, func(c string) bool {
		return strings.Contains(c, "=") && found.in(c, envSet)
	}, func(s string) string {
		m := envAssign.FindStringSubmatch(s)
		return m[1] + m[2] + mask(m[3]) + m[4]
	})
	text = replaceChunks(text, jwt, cutAfter(tokenSeps), func(c string) bool {
		return strings.Contains(c, "eyJ")
	}, mask)
	text = replaceChunks(text, prefixed, cutAfter(tokenSeps), func(c string) bool {
		return found.in(c, keySet)
	}, mask)
	return text
}

// The prefilters' literals: every match of a pattern contains one of its
// list's (case-insensitively for the (?i) patterns).
var (
	// queryWords: every name queryParam matches holds one.
	queryWords = []string{"token", "key", "secret", "password", "sig"}
	// jsonWords: every field name jsonField matches holds one.
	jsonWords = []string{"key", "token", "secret", "passw", "credential"}
	// envWords: every variable name envAssign matches holds one
	// (API_KEY holds KEY, PASSWORD and PASSWD hold PASS).
	envWords = []string{"KEY", "TOKEN", "SECRET", "PASS", "PW", "CREDENTIAL", "AUTH"}
	// keyStarts: every match of prefixed starts with one, at the start
	// of the text or after a byte that is not an ASCII word byte: its
	// (?:^|\b) before a letter. (sk_ holds sk_live_ and sk_test_.)
	keyStarts = []string{
		"sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xapp-", "xox",
		"AIza", "pplx-", "fal_", "fc-", "AKIA", "rk_live_", "sk_", "SG.", "hf_", "r8_",
		"npm_", "pypi-", "dop_v1_", "doo_v1_", "tvly-", "exa_", "gsk_", "syt_", "xai-", "ntn_",
		"glpat-", "gloas-", "gldt-", "glrt-", "glrtr-", "glcbt-", "glptt-", "glft-", "glimt-",
		"glagent-", "glsoat-", "glffct-", "glwt-", "pk-lf-",
	}
)

// The cuts' separators: bytes no match of the pattern contains.
const (
	// spaces are \s, which urlPassword's matches lack.
	spaces = " \t\n\f\r"
	// querySeps: a query value stops at these, and a name holds none.
	querySeps = spaces + `"'#`
	// tokenSeps are bytes outside jwt's and prefixed's [A-Za-z0-9_.-],
	// none a word byte, so \b holds before a letter after one, as ^
	// does at a chunk's start: both patterns' matches start with a letter.
	tokenSeps = spaces + "\"'`,;:=&?!|/\\()[]{}<>"
	// authSeps are bytes authHeader's matches lack (not \s, which may
	// sit around the separator and before the credentials).
	authSeps = ",;()[]{}<>&?!|#@%$^*`\\"
)

// minChunk is the least length of a chunk before replaceChunks cuts it:
// long enough that the prefilters' cost per chunk stays small.
const minChunk = 512

// replaceChunks is re.ReplaceAllStringFunc(text, repl) run only on the
// chunks of text for which maybe holds; cut(text, start) gives where the
// chunk starting at start ends. That is the same result when no match
// spans a cut and each match's leading assertions (^, \b) hold at a
// chunk's start exactly when they do there in the whole text. A text
// with no chunk that changes is returned as is, unallocated.
func replaceChunks(text string, re *regexp.Regexp, cut func(text string, start int) int,
	maybe func(chunk string) bool, repl func(string) string) string {
	if !maybe(text) {
		return text // the common case: one cheap pass over the whole text
	}
	var b strings.Builder
	done := 0 // text[:done] is in b; 0 while no chunk has changed
	for start := 0; start < len(text); {
		end := cut(text, start)
		// An empty chunk never changes: none of the patterns matches "".
		if c := text[start:end]; maybe(c) {
			if r := re.ReplaceAllStringFunc(c, repl); r != c {
				if done == 0 {
					b.Grow(len(text) + len(r) - len(c))
				}
				b.WriteString(text[done:start])
				b.WriteString(r)
				done = end
			}
		}
		start = end
	}
	if done == 0 {
		return text
	}
	b.WriteString(text[done:])
	return b.String()
}

// cutAfter cuts just after the first of seps at least minChunk bytes on.
func cutAfter(seps string) func(text string, start int) int {
	return func(text string, start int) int {
		from := start + minChunk
		if from >= len(text) {
			return len(text)
		}
		if i := strings.IndexAny(text[from:], seps); i >= 0 {
			return from + i + 1
		}
		return len(text)
	}
}

// cutEnv cuts envAssign's chunks, at least minChunk bytes on, before a
// \s that follows a byte a match could not go on from: not a name byte
// [A-Z0-9_], a quote, "=" or \s. Such a byte ends a value, if it is in
// a match at all, and a value is followed by at most a quote. Matches
// start with a name byte, never at the \s a chunk starts with, so each
// one's \b sees the same byte before it as in the whole text.
func cutEnv(text string, start int) int {
	for i := start + minChunk; i < len(text); i++ {
		if strings.IndexByte(spaces, text[i]) >= 0 && !envCont(text[i-1]) {
			return i
		}
	}
	return len(text)
}

// cutJSON cuts jsonField's chunks, at least minChunk bytes on, just
// after the comma of a `",` that no match holds. A match holds a comma
// only in its value, and one after a quote only as the value's first
// byte, that quote being the value's opening one, after a ":" and \s.
// So no match holds the comma when the quote follows no such ":" (the
// `",` ending a value: `"a": "b",` compact or pretty-printed), nor when
// `"` or ` "` follows it, which would end the value after one or two
// bytes, short of the four a match needs.
func cutJSON(text string, start int) int {
	for from := start + minChunk; from < len(text); from++ {
		i := strings.Index(text[from:], `",`)
		if i < 0 {
			break
		}
		from += i
		rest := text[from+2:]
		if !afterColon(text[:from]) || strings.HasPrefix(rest, `"`) || strings.HasPrefix(rest, ` "`) {
			return from + 2
		}
	}
	return len(text)
}

// afterColon reports whether s ends in a ":" and any \s.
func afterColon(s string) bool {
	s = strings.TrimRight(s, spaces)
	return strings.HasSuffix(s, ":")
}

// envCont reports whether an envAssign match may go on after c.
func envCont(c byte) bool {
	return 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' ||
		c == '\'' || c == '"' || c == '=' || strings.IndexByte(spaces, c) >= 0
}

// MaxMatch bounds, in practice, the text one secret's mask replaces, for
// a caller that masks only the head of a large text: a secret starting
// more than MaxMatch bytes before the head's end ends inside it. Private
// key blocks are the longest (an 8192-bit RSA key's is about 6.3 KB); the
// patterns of keys and tokens have no bound of their own, but vendors'
// keys and tokens are far shorter.
const MaxMatch = 8 << 10

// mask hides a secret: its first 6 and last 4 characters stay when it
// has 18 or more (Hermes's _mask), else nothing of it.
func mask(s string) string {
	if strings.Contains(s, "...") || strings.HasPrefix(s, "***") {
		return s // masked already: a second pass changes nothing
	}
	r := []rune(s)
	if len(r) < 18 {
		return "***"
	}
	return string(r[:6]) + "..." + string(r[len(r)-4:])
}

var (
	// prefixed are the vendors' key formats (Hermes's _PREFIX_PATTERNS,
	// the common ones), each a literal prefix and a run of token
	// characters, not preceded by one.
	prefixed = regexp.MustCompile(`(?:^|\b)(?:` + strings.Join([]string{
		`sk-[A-Za-z0-9_-](?:\.?[A-Za-z0-9_-]){9,}`,
		`gh[pousr]_[A-Za-z0-9]{10,}`,
		`github_pat_[A-Za-z0-9_]{10,}`,
		`xapp-\d+-[A-Za-z0-9-]{10,}`,
		`xox[baprs]-[A-Za-z0-9-]{10,}`,
		`AIza[A-Za-z0-9_-]{30,}`,
		`pplx-[A-Za-z0-9]{10,}`,
		`fal_[A-Za-z0-9_-]{10,}`,
		`fc-[A-Za-z0-9]{10,}`,
		`AKIA[A-Z0-9]{16}`,
		`[sr]k_live_[A-Za-z0-9]{10,}`,
		`sk_test_[A-Za-z0-9]{10,}`,
		`sk_[A-Za-z0-9_]{10,}`,
		`SG\.[A-Za-z0-9_-]{10,}`,
		`hf_[A-Za-z0-9]{10,}`,
		`r8_[A-Za-z0-9]{10,}`,
		`npm_[A-Za-z0-9]{10,}`,
		`pypi-[A-Za-z0-9_-]{10,}`,
		`do[po]_v1_[A-Za-z0-9]{10,}`,
		`tvly-[A-Za-z0-9]{10,}`,
		`exa_[A-Za-z0-9]{10,}`,
		`gsk_[A-Za-z0-9]{10,}`,
		`syt_[A-Za-z0-9]{10,}`,
		`xai-[A-Za-z0-9]{30,}`,
		`ntn_[A-Za-z0-9]{10,}`,
		`gl(?:pat|oas|dt|rt|rtr|cbt|ptt|ft|imt|agent|soat|ffct|wt)-[A-Za-z0-9_.\-]{10,}`,
		`pk-lf-[A-Za-z0-9\-]{8,}`,
	}, "|") + `)`)
	// jwt is a JSON Web Token: three base64url parts, the first a JSON
	// object's ("eyJ").
	jwt = regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)
	// authHeader is an Authorization header's credentials (any scheme).
	authHeader = regexp.MustCompile(`(?i)(authorization\s*[:=]\s*["']?(?:bearer|basic|token|bot)?\s*)([A-Za-z0-9._~+/=-]{4,})`)
	// urlPassword is the password of a URL's user info.
	urlPassword = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]+:)([^\s@/]+)(@)`)
	// queryParam is a secret-named URL query parameter's value.
	queryParam = regexp.MustCompile(`(?i)([?&](?:access_token|refresh_token|id_token|token|api_key|apikey|client_secret|password|secret|key|signature|x-amz-signature|sig)=)([^&\s#"']{4,})`)
	// jsonField is a secret-named JSON string field's value.
	jsonField = regexp.MustCompile(`(?i)("[A-Za-z0-9_.-]*(?:api_?key|token|secret|password|passwd|credential|private_key)"\s*:\s*")([^"\\]{4,})"`)
	// envAssign is an assignment to a secret-named upper-case variable
	// (Hermes's _ENV_ASSIGN_RE): OPENAI_API_KEY=…, DB_PASSWORD = "…".
	envAssign = regexp.MustCompile(`\b([A-Z0-9_]{0,50}(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PW|CREDENTIAL|AUTH)[A-Z0-9_]{0,50}\s*=\s*)(['"]?)([^\s'"]{4,})(['"]?)`)
	// privateKey is a PEM private key block.
	privateKey = regexp.MustCompile(`-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE KEY-----`)
)
