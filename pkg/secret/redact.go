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
	text = privateKey.ReplaceAllString(text, "[REDACTED PRIVATE KEY]")
	text = authHeader.ReplaceAllStringFunc(text, func(s string) string {
		m := authHeader.FindStringSubmatch(s)
		return m[1] + mask(m[2])
	})
	text = urlPassword.ReplaceAllStringFunc(text, func(s string) string {
		m := urlPassword.FindStringSubmatch(s)
		return m[1] + "***" + m[3]
	})
	text = queryParam.ReplaceAllStringFunc(text, func(s string) string {
		m := queryParam.FindStringSubmatch(s)
		return m[1] + mask(m[2])
	})
	text = jsonField.ReplaceAllStringFunc(text, func(s string) string {
		m := jsonField.FindStringSubmatch(s)
		return m[1] + mask(m[2]) + `"`
	})
	text = envAssign.ReplaceAllStringFunc(text, func(s string) string {
		m := envAssign.FindStringSubmatch(s)
		return m[1] + m[2] + mask(m[3]) + m[4]
	})
	text = jwt.ReplaceAllStringFunc(text, mask)
	text = prefixed.ReplaceAllStringFunc(text, mask)
	return text
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
