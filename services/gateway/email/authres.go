package email

import (
	"fmt"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Methods of Authentication-Results a sender may be authenticated by
// (Config.AuthenticatedBy).
const (
	// AuthDMARC: dmarc=pass for the From domain.
	AuthDMARC = "dmarc"
	// AuthSPF: spf=pass for an envelope sender (smtp.mailfrom) whose
	// domain is aligned with the From domain.
	AuthSPF = "spf"
	// AuthDKIM: dkim=pass for a signing domain (header.d, else the
	// domain of header.i) aligned with the From domain.
	AuthDKIM = "dkim"
)

// authResult is one result of an Authentication-Results header (RFC
// 8601): "method=result", its reason and properties ("header.from",
// "smtp.mailfrom", …), names in lower case.
type authResult struct {
	Method string
	Result string
	Props  map[string]string
}

// Bounds on what is read of one header: a result list longer than this
// is not a receiving server's.
const (
	maxAuthResults = 64
	maxAuthProps   = 16
)

// parseAuthResults reads an Authentication-Results header value:
// "authserv-id [version] ; method=result [reason=…] [ptype.property=value …] ; …"
// or "authserv-id; none". Comments are dropped, quoted strings
// unquoted. An error means the value has no authserv-id.
func parseAuthResults(v string) (id string, results []authResult, err error) {
	segs := splitSemicolons(stripComments(v))
	head := strings.Fields(segs[0])
	if len(head) == 0 {
		return "", nil, fmt.Errorf("authentication-results without an authserv-id")
	}
	id = strings.ToLower(unquote(head[0]))
	if id == "" {
		return "", nil, fmt.Errorf("authentication-results without an authserv-id")
	}
	for _, seg := range segs[1:] {
		pairs := keyValues(seg)
		if len(pairs) == 0 {
			continue // "none", or nothing
		}
		method, _, _ := strings.Cut(pairs[0][0], "/") // "dkim/1": a method version
		r := authResult{Method: strings.ToLower(method), Result: strings.ToLower(pairs[0][1]), Props: map[string]string{}}
		if r.Method == "" || r.Result == "" {
			continue
		}
		for _, kv := range pairs[1:] {
			k := strings.ToLower(kv[0])
			if k == "reason" || !strings.Contains(k, ".") || len(r.Props) >= maxAuthProps {
				continue
			}
			if _, dup := r.Props[k]; !dup {
				r.Props[k] = kv[1]
			}
		}
		results = append(results, r)
		if len(results) >= maxAuthResults {
			break
		}
	}
	return id, results, nil
}

// stripComments replaces RFC 5322 comments (nested parentheses, "\"
// escapes) outside quoted strings with a space.
func stripComments(v string) string {
	var b strings.Builder
	depth, quoted := 0, false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\' && (quoted || depth > 0):
			if quoted {
				b.WriteByte(c)
				if i+1 < len(v) {
					b.WriteByte(v[i+1])
				}
			}
			i++
		case quoted:
			b.WriteByte(c)
			if c == '"' {
				quoted = false
			}
		case c == '(':
			if depth == 0 {
				b.WriteByte(' ')
			}
			depth++
		case depth > 0:
			if c == ')' {
				depth--
			}
		case c == '"':
			quoted = true
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// splitSemicolons splits v at the semicolons outside quoted strings: a
// header's resinfo (the first part the authserv-id's) or a media type's
// parameter list.
func splitSemicolons(v string) []string {
	var segs []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == ';' && !quoted:
			segs = append(segs, v[start:i])
			start = i + 1
		}
	}
	return append(segs, v[start:])
}

// keyValues reads "key = value key2=value2 …": white space around "="
// and inside a key ("header . d") is dropped, a value is a quoted string
// or runs to the next white space. A word without "=" is skipped.
func keyValues(seg string) [][2]string {
	var out [][2]string
	i := 0
	space := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	for i < len(seg) {
		for i < len(seg) && space(seg[i]) {
			i++
		}
		var key strings.Builder
		for i < len(seg) && seg[i] != '=' {
			if seg[i] == '"' { // a quoted word where a key goes: skip it
				_, n := quoted(seg[i:])
				i += n
				key.Reset()
				continue
			}
			if !space(seg[i]) {
				key.WriteByte(seg[i])
			} else if j := nextNonSpace(seg, i); j < len(seg) && seg[j] != '=' && seg[j] != '.' && !strings.HasSuffix(key.String(), ".") {
				key.Reset() // a word without "=": the next one starts
				i = j
				continue
			}
			i++
		}
		if i >= len(seg) {
			break
		}
		i++ // "="
		for i < len(seg) && space(seg[i]) {
			i++
		}
		var val string
		if i < len(seg) && seg[i] == '"' {
			var n int
			val, n = quoted(seg[i:])
			i += n
		} else {
			j := i
			for j < len(seg) && !space(seg[j]) {
				j++
			}
			val = seg[i:j]
			i = j
		}
		if k := key.String(); k != "" {
			out = append(out, [2]string{k, val})
		}
	}
	return out
}

func nextNonSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// quoted reads the quoted string s starts with: its content and the
// bytes it took (to the end of s when unterminated).
func quoted(s string) (string, int) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				b.WriteByte(s[i+1])
			}
			i++
		case '"':
			return b.String(), i + 1
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), len(s)
}

func unquote(s string) string {
	if strings.HasPrefix(s, `"`) {
		v, _ := quoted(s)
		return v
	}
	return s
}

// senderAuth is the verdict on an inbound mail's sender.
type senderAuth struct {
	OK bool
	// Reason is why not: "missing" (no Authentication-Results of the
	// trusted server), "failed" (none of the accepted methods passed
	// for the From domain).
	Reason string
	// Verdict sums up the trusted header's results ("dmarc=fail
	// spf=pass"), for the log.
	Verdict string
}

// authenticate judges the From domain of a mail by its
// Authentication-Results headers (top first): only the topmost one
// whose authserv-id is trusted counts (any other may be the sender's
// own; a receiving server removes or outranks its namesakes, RFC 8601
// section 5), and the mail passes when one of the accepted methods
// passed for an aligned domain.
func authenticate(headers []string, trusted string, methods []string, fromDomain string) senderAuth {
	trusted = strings.ToLower(strings.TrimSpace(trusted))
	fromDomain = strings.ToLower(strings.TrimSuffix(fromDomain, "."))
	for _, h := range headers {
		id, results, err := parseAuthResults(h)
		if err != nil || id != trusted {
			continue
		}
		var verdict []string
		ok := false
		for _, r := range results {
			verdict = append(verdict, r.Method+"="+r.Result)
			if r.Result == "pass" && accepts(methods, r.Method) && aligned(r, fromDomain) {
				ok = true
			}
		}
		v := strings.Join(verdict, " ")
		if ok {
			return senderAuth{OK: true, Verdict: v}
		}
		return senderAuth{Reason: "failed", Verdict: v}
	}
	return senderAuth{Reason: "missing"}
}

func accepts(methods []string, m string) bool {
	for _, x := range methods {
		if strings.EqualFold(x, m) {
			return true
		}
	}
	return false
}

// aligned reports whether a passing result is about fromDomain: DMARC's
// header.from is the From domain itself (a result without one is the
// receiving server's verdict on this mail's From); SPF's envelope
// sender and DKIM's signing domain must share its organizational domain
// (RFC 7489 relaxed alignment).
func aligned(r authResult, fromDomain string) bool {
	if fromDomain == "" {
		return false
	}
	switch r.Method {
	case AuthDMARC:
		d, ok := r.Props["header.from"]
		return !ok || domainOf(d) == fromDomain
	case AuthSPF:
		return relaxed(domainOf(r.Props["smtp.mailfrom"]), fromDomain)
	case AuthDKIM:
		d := r.Props["header.d"]
		if d == "" {
			d = r.Props["header.i"]
		}
		return relaxed(domainOf(d), fromDomain)
	}
	return false
}

// domainOf is the domain of an address ("a@b.com", "@b.com") or a
// domain, lower case, without a trailing dot.
func domainOf(v string) string {
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		v = v[i+1:]
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(v), "."))
}

// relaxed reports whether two domains share their organizational domain
// (one label under the public suffix).
func relaxed(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	oa, err := publicsuffix.EffectiveTLDPlusOne(a)
	if err != nil {
		return false
	}
	ob, err := publicsuffix.EffectiveTLDPlusOne(b)
	return err == nil && oa == ob
}
