package secret

import (
	"strings"
	"testing"
)

// redactReference is Redact as it was before its prefilters: every
// pattern over the whole text. Redact must give the same output on every
// input; the prefilters only skip work that cannot match.
func redactReference(text string) string {
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

// pinned is Redact's exact output on a broad table (recorded from
// redactReference before the prefilters): every pattern, its edges (word boundaries,
// lengths, line breaks inside a match, Unicode case folds such as the
// Kelvin sign for k), and inputs where several patterns meet.
var pinned = []struct{ in, want string }{
	{"",
		""},
	{"plain prose: the password is a word; tokens are counted; sketch-it",
		"plain prose: the password is a word; tokens are counted; sketch-it"},
	{"my key is sk-proj-abcdefghijklmnopqrstuvwxyz1234 ok",
		"my key is sk-pro...1234 ok"},
	{"ghp_abcdefghij and gho_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
		"*** and gho_AB...0123"},
	{"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
		"github...wxyz"},
	{"xapp-1-A0123456789-abcdefghijklmnop xoxb-1234567890-abcdefghijk",
		"xapp-1...mnop xoxb-1...hijk"},
	{"AIzaSyA1234567890abcdefghijklmnopqrstuv AKIAABCDEFGHIJKLMNOP",
		"AIzaSy...stuv AKIAAB...MNOP"},
	{"sk_live_abcdefghij0123 rk_live_abcdefghij0123 sk_test_abcdefghij SG.abcdefghij.klmnop",
		"sk_liv...0123 rk_liv...0123 sk_tes...ghij ***.klmnop"},
	{"hf_abcdefghijklmnop r8_abcdefghijklm npm_abcdefghijklm pypi-AgEIcHlwaS5vcmcCJGFiY2Rl",
		"hf_abc...mnop *** *** pypi-A...Y2Rl"},
	{"dop_v1_abcdefghijklmnop doo_v1_abcdefghijklmnop tvly-abcdefghijklm exa_abcdefghijkl gsk_abcdefghijklm",
		"dop_v1...mnop doo_v1...mnop tvly-a...jklm *** ***"},
	{"syt_abcdefghijklmn xai-abcdefghijklmnopqrstuvwxyz0123456 ntn_abcdefghijkl pplx-abcdefghijkl fal_abc_defghijkl fc-abcdefghijkl",
		"syt_ab...klmn xai-ab...3456 *** *** *** ***"},
	{"glpat-abcdefghij_klmn gloas-abcdefghijkl glrtr-abcdefghijk glagent-abcdefghij pk-lf-abcdefgh",
		"glpat-...klmn gloas-...ijkl *** glagen...ghij ***"},
	{"xsk-abcdefghijklmn 1sk-abcdefghijklmn _sk-abcdefghijklmn -sk-abcdefghijklmn (sk-abcdefghijklmn)",
		"xsk-abcdefghijklmn 1sk-abcdefghijklmn _sk-abcdefghijklmn -*** (***)"},
	{"sk-a.b.c.d.e.f.g.h.i.j.k sk-..abcdefghijklmn sk-abc",
		"sk-a.b....j.k sk-..abcdefghijklmn sk-abc"},
	{"line one\nsk-abcdefghijklmnop\n\nsk-qrstuvwxyzabcdef end",
		"line one\nsk-abc...mnop\n\nsk-qrs...cdef end"},
	{"export OPENAI_API_KEY=\"supersecretvalue123456\"",
		"export OPENAI_API_KEY=\"supers...3456\""},
	{"DB_PASSWORD = 'hunter2hunter2' and GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz",
		"DB_PASSWORD = '***' and GITHUB_TOKEN=ghp_ab...wxyz"},
	{"MY_KEY\n=\nvaluevalue PW=abcd AUTH=xyz SECRET_THING='a b c d' CREDENTIALS=\"abcdefg\"",
		"MY_KEY\n=\n*** PW=*** AUTH=xyz SECRET_THING='a b c d' CREDENTIALS=\"***\""},
	{"api_key=short x_KEY_y=abcdef lowercase_api_key=abcdefghij KEYBOARD=qwertyuiop",
		"api_key=short x_KEY_y=abcdef lowercase_api_key=abcdefghij KEYBOARD=***"},
	{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAKEY=abcdefghij BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBTOKEN=abcdefghij",
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAKEY=abcdefghij BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBTOKEN=abcdefghij"},
	{"Authorization: Bearer abc.def.ghijklmnopqrstuvwxyz",
		"Authorization: Bearer abc.de...wxyz"},
	{"authorization=basic dXNlcjpwYXNzd29yZA== AUTHORIZATION :  'token abcd' Authorization:\n bot xy",
		"authorization=basic dXNlcj...ZA== AUTHORIZATION :  'token ***' Authorization:\n bot xy"},
	{"postgres://app:hunter2@db:5432/x and https://user:p%40ss@example.test/ and mailto:a@b",
		"postgres://app:***@db:5432/x and https://user:***@example.test/ and mailto:a@b"},
	{"https://x.test/cb?code=1&access_token=abcdef123456&y=2&KEY=abc&sig=abcdefghijklmnopqrstuvwxyz",
		"https://x.test/cb?code=1&access_token=***&y=2&KEY=abc&sig=abcdef...wxyz"},
	{"?password=hunter2#frag &X-Amz-Signature=0123456789abcdef0123456789 ?token=ab",
		"?password=***#frag &X-Amz-Signature=012345...6789 ?token=ab"},
	{"{\"api_key\": \"0123456789abcdef0123\", \"name\": \"bob\", \"Password\":\"hunter22\", \"x.private_key\" : \"abc\\\"def\"}",
		"{\"api_key\": \"012345...0123\", \"name\": \"bob\", \"Password\":\"***\", \"x.private_key\" : \"abc\\\"def\"}"},
	{"{\"client_secret\":\n  \"multi\nline value here\", \"apikey\": \"\"}",
		"{\"client_secret\":\n  \"multi\n...here\", \"apikey\": \"\"}"},
	{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"eyJhbG...sR8U"},
	{"xeyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0 eyJshort.x.y",
		"xeyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0 eyJshort.x.y"},
	{"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
		"[REDACTED PRIVATE KEY]"},
	{"a -----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY----- b -----BEGIN OPENSSH PRIVATE KEY----- unterminated",
		"a [REDACTED PRIVATE KEY] b -----BEGIN OPENSSH PRIVATE KEY----- unterminated"},
	{"[REDACTED PRIVATE KEY]=abcdefgh sk-pro...1234 ***",
		"[REDACTED PRIVATE KEY]=abcdefgh sk-pro...1234 ***"},
	{"toKen=abcdefgh ?toKen=abcdefgh {\"ſecret\": \"abcdefgh\"} KEY=abcdefgh",
		"toKen=abcdefgh ?toKen=*** {\"ſecret\": \"***\"} KEY=abcdefgh"},
	{"AUTHORIZATION: BEARER ééééabcd passé café sk-éabcdefghijklm",
		"AUTHORIZATION: *** ééééabcd passé café sk-éabcdefghijklm"},
	{"\x00\xff\xfe sk-abcdefghijklmn \xc3",
		"\x00\xff\xfe *** \xc3"},
	{"password: hunter2 token: abc secret = 'x'",
		"password: hunter2 token: abc secret = 'x'"},
	{"Set PASS=abcd then pw=abcdef and Pass=abcdef PWD=abcdefgh",
		"Set PASS=*** then pw=abcdef and Pass=abcdef PWD=***"},
	{"?key=abcd&key=efgh&key=ijkl",
		"?key=***&key=***&key=***"},
	{"https://u:ghp_abcdefghijklmnopqrst@github.com/x?access_token=sk-abcdefghijklmnopqrst",
		"https://u:***@github.com/x?access_token=sk-abc...qrst"},
	{"{\"password\": \",abc\", \"secret\": \", abcd\", \"token\": \",\", \"x\": \"y\"}",
		"{\"password\": \"***\", \"secret\": \"***\", \"token\": \",\", \"x\": \"y\"}"},
	{"{\"pw_token\": \",\n  \\\"a\"}",
		"{\"pw_token\": \",\n  \\\"a\"}"},
	{"Authorization:\n  Bearer abcdefghijklmnopqrstuvwxyz",
		"Authorization:\n  Bearer abcdef...wxyz"},
	{"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
		"Authorization: Bearer eyJhbG...0w5N"},
	{"API_KEY=sk-abcdefghijklmnopqrstuvwxyz \"token\": \"sk-abcdefghijklmnopqrstuvwxyz\"",
		"API_KEY=sk-abc...wxyz \"token\": \"sk-abc...wxyz\""},
}

// TestRedactPinned checks Redact and the reference against pinned.
func TestRedactPinned(t *testing.T) {
	t.Parallel()
	for _, tt := range pinned {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if ref := redactReference(tt.in); ref != tt.want {
			t.Errorf("redactReference(%q) = %q, want %q", tt.in, ref, tt.want)
		}
	}
}

// FuzzRedactMatchesReference checks that the prefilters change nothing:
// Redact and redactReference agree on any text.
func FuzzRedactMatchesReference(f *testing.F) {
	for _, s := range []string{
		"my key is sk-proj-abcdefghijklmnopqrstuvwxyz1234 ok",
		"export OPENAI_API_KEY=\"supersecretvalue123456\"\nx sk-abcdefghijklmnop",
		"Authorization: Bearer abc.def.ghijklmnopqrstuvwxyz",
		"postgres://app:hunter2@db:5432/x?password=abcdef&sig=x",
		`{"api_key": "0123456789abcdef0123", "Password":"hunter22"}`,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
		"to\u212aen=abcdefgh \u017fecret ghp_abcdefghij\nglpat-abcdefghijk",
	} {
		f.Add(s, uint16(0))
		f.Add(s, uint16(minChunk-3))
	}
	for _, s := range hardInputs {
		f.Add(s, uint16(0))
		f.Add(s, uint16(minChunk-len(s)/2)) // the first cut inside s
	}
	f.Fuzz(func(t *testing.T, in string, pad uint16) {
		// The padding moves the chunk cuts (minChunk bytes on, at the
		// next separator) across in, which alone is rarely that long.
		for _, s := range []string{in, padded(in, int(pad))} {
			if got, want := Redact(s), redactReference(s); got != want {
				t.Errorf("Redact(%q) = %q, reference %q", s, got, want)
			}
		}
	})
}

// TestRedactLargeMatchesReference compares the two on the benchmark's
// large inputs, which the passes cut into many chunks.
func TestRedactLargeMatchesReference(t *testing.T) {
	t.Parallel()
	for _, in := range largeInputs() {
		if got, want := Redact(in.text), redactReference(in.text); got != want {
			t.Errorf("%s: Redact differs from the reference", in.name)
		}
	}
}

// padded puts n bytes of filler before in, words and separators of every
// kind, so that Redact cuts its chunks at many places inside in.
func padded(in string, n int) string {
	const filler = "ab cd,ef;g=h:i/j\nk'l\"m?n&o#p\tq(r)s"
	n %= 2 * minChunk
	return strings.Repeat(filler, n/len(filler)+1)[:n] + in
}

// TestRedactChunkedMatchesReference puts a chunk cut at each separator
// inside each pinned input: with padding of n bytes holding no separator,
// the first cut is at the first separator minChunk bytes on, so n from
// minChunk-len(in) to minChunk moves it over all of in. The cuts must
// change nothing.
func TestRedactChunkedMatchesReference(t *testing.T) {
	t.Parallel()
	ins := hardInputs
	for _, tt := range pinned {
		ins = append(ins, tt.in)
	}
	for _, in := range ins {
		for n := max(1, minChunk-len(in)); n <= minChunk; n++ {
			// "\x00" keeps the padding's letters off in's first word.
			s := strings.Repeat("x", n-1) + "\x00" + in
			if got, want := Redact(s), redactReference(s); got != want {
				t.Fatalf("Redact(%q) = %q, reference %q", s, got, want)
			}
		}
	}
}

// hardInputs are texts at the edges of the cut rules and prefilters:
// separators right next to a match, values that hold a cut's bytes,
// Unicode case folds of keywords, multi-byte and invalid UTF-8 around
// separators, one pattern's replacement next to another's keyword, and
// several chunks' worth of matches.
var hardInputs = []string{
	"",
	"a",
	"=",
	"?KEY=abcd",
	`{"token": ",", "password": "abcdefgh", "secret": ", abcd", "api_key":"a","b"}`,
	`{"secret": "ab\",\"cdef", "x":"y","Credential" :"abcd\"", "apikey": "abc,"d"}`,
	"PASS=abcd\u00e9 KEY=abcdefgh\tTOKEN = 'abcdefgh' x\nAUTH=\"abcd\" PW= \"ab cd\" x_KEY=abcd",
	"DB_PASSWORD=\"abcd\"\nAPI_KEY =\n  abcdefgh\r\nSECRET='abcd'x SECRET=abcd's",
	"Authorization:\n  Bearer abc;def Authorization=basic a,bcdefgh authorization: 'ab=cd'%x",
	"AUTHORIZATION : \"Token  ab+/=~-._cd\"\tauthorization=bot\nabcd",
	"?\u017fig=abcd&to\u212aen=abcdefgh#x &KEY=abcd\"y ?secret=ab'cd &X-AMZ-SIGNATURE=abcdefgh\tz",
	"{\"\u017fecret\": \"abcdefgh\", \"pass\u212aey\": \"abcd\", \"to\u212aen\":\"abcdefgh\"}",
	"https://u:p\xc3\xa9ss@h/ x://a:b@c\tpostgres://u:ghp_abcdefghij@h redis://:abcd@h:6379",
	"[REDACTED PRIVATE KEY]=abcdefgh\n-----BEGIN PRIVATE KEY-----\nKEY=abc\n-----END PRIVATE KEY-----KEY=abcdefgh",
	"x(eyJabcdefghij.abcdefghij.abcdefghij)sk-abcdefghijklmn:AKIAABCDEFGHIJKLMNOP|ghp_abcdefghij",
	"\xe2\x84 \xc5 sk-abcdefghijk\xe2\x84\xaa sk-abcdefghijk\u00e9 \u212aEY=abcdefgh",
	"TOKEN=sk-abcdefghijklmnopqrstuvwxyz&token=sk-abcdefghijklmn \"token\": \"eyJabcdefgh.abcdefgh.abcdefgh\"",
	// Every vendor prefix, after every kind of byte a word may follow or
	// not (ASCII word bytes, other ASCII, UTF-8 and invalid bytes), where
	// prefixes overlap or hold others, in the wrong case, and cut short
	// at the text's end.
	"ghu_abcdefghij ghs_abcdefghij,ghr_abcdefghij;xoxa-abcdefghij(xoxp-abcdefghij)xoxr-abcdefghij|xoxs-abcdefghij sk_test_abcdefghij",
	"gldt-abcdefghij glrt-abcdefghij glcbt-abcdefghij\tglptt-abcdefghij\nglft-abcdefghij glimt-abcdefghij glsoat-abcdefghij glffct-abcdefghij glwt-abcdefghij",
	"\u00e9sk-abcdefghijklmn \xffghp_abcdefghij _sk-abcdefghijklmn 9AKIAABCDEFGHIJKLMNOP -AKIAABCDEFGHIJKLMNOP\u212asyt_abcdefghij dop_v1_abcdefghijk",
	"gsk_abcdefghijk xgsk_abcdefghijkl sk-gsk_abcdefghijklmn SG.SG.abcdefghijkl glrtr-glrt-abcdefghij xoxb-xapp-1-abcdefghijk AKIAAIzaAKIAABCDEFGHIJKLMNOPQRSTUVWXYZabcd",
	"SK-ABCDEFGHIJKLMN GHP_ABCDEFGHIJ sg.abcdefghijkl aiza0123456789012345678901234567890 akiaabcdefghijklmnop Sk_live_abcdefghij XOXB-abcdefghijk",
	"x sk", "gl", "AKI", "see glrt", "pk-lf", "s",
	// Pretty-printed JSON: a `",` ends most values there, and a value
	// may start with one (after ":" and \s) and go on past the newline.
	"{\n  \"token\": \",\n    \",\n  \"name\": \"x\",\n  \"password\":\n    \",\n    abcd\",\n  \"secret\" :\t\",\t\t\"\n}",
	"{\n\t\"api_key\": \"abcdefghijkl\",\n\t\"b\": \"\",\n\t\"token\":\r\n\f\",\r\n  \"x\",\n\t\"z\": \"a\\\",\n  \"}",
	"[\n  {\n    \"id\": 1,\n    \"client_secret\": \"abcdefgh\",\n    \"tags\": [\n      \"a\",\n      \"b\"\n    ],\n    \"token\": \"\",\n    \"x\": \"abcd\"\n  }\n]",
	// The (?i) patterns' keywords in every mix of cases, the first two
	// letters' above all, and beside the case-sensitive ones'.
	"aUTHORIZATION=basic abcdefgh AuThOrIzAtIoN: Bearer abcd ?tOKEN=abcd&SiG=abcdefgh&sIG=abcd {\"cREDENTIAL\": \"abcd\", \"PASSW\": \"abcd\", \"kEY\":\"abcd\"}",
	"Key=abcdefgh KEY=abcdefgh kEY=abcd tOKEN=abcd pW=abcd PW=abcd ?sECRET=abcd&pASSWORD=abcd \"sEcReT\": \"abcd\" aUTH=abcd",
	strings.Repeat("API_KEY=abcdefgh ?token=abcd \"secret\": \"abcd\", Authorization: Bearer abcd sk-abcdefghijklmn\n", 12),
}
