package fakellm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Kind is the type of a magic-text directive.
type Kind int

// Directive kinds.
const (
	KindTool    Kind = iota + 1 // [[tool:NAME {json}]]
	KindFail                    // [[fail:STATUS retry=S type=CODE]]
	KindDrop                    // [[drop:N]]
	KindSlow                    // [[slow:DURATION]]
	KindLatency                 // [[latency:DURATION]]
	KindRecall                  // [[recall:user]] answers with the earlier user messages
	KindVerdict                 // [[verdict:done]] answers a goal judge's request (judge.go)
	KindRisk                    // [[risk:approve]] answers a smart-approval judge's request (judge.go)
)

// maxDelay caps delays that outside text can ask for.
const maxDelay = time.Minute

// Directive is one parsed [[...]] instruction from a user message.
type Directive struct {
	Kind    Kind
	Raw     string // the text between the brackets
	Name    string // tool name
	Args    string // tool arguments, JSON object
	Failure Failure
	Delay   time.Duration
	Times   int // 0: every request; N: the first N requests with this text
}

// ParseDirectives finds the directives in text and returns them with the
// text stripped of them. Malformed or unknown [[...]] stay in the text.
func ParseDirectives(text string) ([]Directive, string) {
	if !strings.Contains(text, "[[") {
		return nil, strings.TrimSpace(text)
	}
	var dirs []Directive
	var clean strings.Builder
	rest := text
	for {
		i := strings.Index(rest, "[[")
		if i < 0 {
			clean.WriteString(rest)
			break
		}
		body, n, ok := directiveBody(rest[i+2:])
		if !ok {
			clean.WriteString(rest[:i+2])
			rest = rest[i+2:]
			continue
		}
		d, ok := parseDirective(body)
		if !ok {
			clean.WriteString(rest[:i+2+n])
			rest = rest[i+2+n:]
			continue
		}
		dirs = append(dirs, d)
		clean.WriteString(rest[:i])
		rest = rest[i+2+n:]
	}
	return dirs, strings.Join(strings.Fields(clean.String()), " ")
}

// directiveBody returns the text before the closing "]]" and the number of
// bytes consumed including it. Brackets and braces inside JSON nest.
func directiveBody(s string) (string, int, bool) {
	depth := 0
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}':
			if depth > 0 {
				depth--
			}
		case c == ']':
			if depth == 0 && i+1 < len(s) && s[i+1] == ']' {
				return s[:i], i + 2, true
			}
			if depth > 0 {
				depth--
			}
		case c == '\n':
			return "", 0, false
		}
	}
	return "", 0, false
}

func parseDirective(body string) (Directive, bool) {
	kind, arg, ok := strings.Cut(strings.TrimSpace(body), ":")
	if !ok {
		return Directive{}, false
	}
	d := Directive{Raw: body}
	arg = strings.TrimSpace(arg)
	var opts string
	switch kind {
	case "tool":
		d.Kind = KindTool
		name, rest, _ := strings.Cut(arg, " ")
		if !validName(name) {
			return Directive{}, false
		}
		d.Name = name
		rest = strings.TrimSpace(rest)
		d.Args = "{}"
		if strings.HasPrefix(rest, "{") {
			end := jsonObjectEnd(rest)
			if end < 0 || !json.Valid([]byte(rest[:end])) {
				return Directive{}, false
			}
			d.Args = rest[:end]
			rest = rest[end:]
		}
		opts = rest
	case "fail":
		d.Kind = KindFail
		status, rest, _ := strings.Cut(arg, " ")
		f, ok := failureFor(status)
		if !ok {
			return Directive{}, false
		}
		d.Failure = f
		opts = rest
	case "drop":
		d.Kind = KindDrop
		n, rest, _ := strings.Cut(arg, " ")
		after, err := strconv.Atoi(n)
		if err != nil || after < 1 || after > 1000 {
			return Directive{}, false
		}
		d.Failure = Failure{DropAfter: after}
		opts = rest
	case "slow", "latency":
		d.Kind = KindSlow
		if kind == "latency" {
			d.Kind = KindLatency
		}
		v, rest, _ := strings.Cut(arg, " ")
		dur, ok := parseDelay(v)
		if !ok {
			return Directive{}, false
		}
		d.Delay = dur
		opts = rest
	case "recall":
		if arg != "user" {
			return Directive{}, false
		}
		d.Kind = KindRecall
	case "verdict":
		d.Kind = KindVerdict
		v, rest, _ := strings.Cut(arg, " ")
		if !verdicts[v] {
			return Directive{}, false
		}
		d.Name = v
		opts = rest
	case "risk":
		d.Kind = KindRisk
		v, rest, _ := strings.Cut(arg, " ")
		if !risks[v] {
			return Directive{}, false
		}
		d.Name = v
		opts = rest
	default:
		return Directive{}, false
	}
	for _, opt := range strings.Fields(opts) {
		k, v, ok := strings.Cut(opt, "=")
		if !ok {
			return Directive{}, false
		}
		switch k {
		case "times":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1_000_000 {
				return Directive{}, false
			}
			d.Times = n
		case "retry":
			if d.Kind != KindFail {
				return Directive{}, false
			}
			dur, ok := parseDelay(v)
			if !ok {
				return Directive{}, false
			}
			d.Failure.RetryAfter = dur
		case "type":
			if d.Kind != KindFail || !validName(v) {
				return Directive{}, false
			}
			d.Failure.Type = v
		default:
			return Directive{}, false
		}
	}
	return d, true
}

// failureFor maps a status word or number to a Failure.
func failureFor(s string) (Failure, bool) {
	switch s {
	case "overflow":
		return Failure{Status: http.StatusBadRequest, Type: "context_length_exceeded"}, true
	case "quota":
		return Failure{Status: http.StatusTooManyRequests, Type: "insufficient_quota"}, true
	case "ratelimit":
		return Failure{Status: http.StatusTooManyRequests}, true
	case "server":
		return Failure{Status: http.StatusInternalServerError}, true
	case "auth":
		return Failure{Status: http.StatusUnauthorized}, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 400 || n > 599 {
		return Failure{}, false
	}
	return Failure{Status: n}, true
}

// parseDelay accepts seconds ("2", "0.5") or a Go duration ("50ms").
func parseDelay(s string) (time.Duration, bool) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > maxDelay.Seconds() {
			return 0, false
		}
		return time.Duration(f * float64(time.Second)), true
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > maxDelay {
		return 0, false
	}
	return d, true
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// jsonObjectEnd returns the index just past the object starting s, or -1.
func jsonObjectEnd(s string) int {
	depth := 0
	inStr, esc := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}
