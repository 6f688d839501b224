package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/secret"
)

// What a tool call's steps carry of its arguments and its result, for
// the gateways that show them (the API gateway's function_call and
// function_call_output items, /verbose progress lines).

// argumentsMax bounds the arguments a started step carries.
const argumentsMax = 2000

// boundedArguments is a call's arguments (a JSON object) compacted, and
// when that is longer than max bytes, shortened so that it is still a
// JSON object a client can parse, with every key while the keys fit:
// the longest values are cut first, each to a fair share of the room (a
// string keeps its head and ends with "…", another value becomes a
// string saying its size). Cutting the text instead (the first max bytes)
// would leave JSON no client can read.
func boundedArguments(args string, max int) string {
	c := compact(args)
	if !isObject(c) {
		return "{}" // not run, and no JSON to show
	}
	if len(c) <= max {
		return c
	}
	members, ok := objectMembers(c)
	if !ok {
		return "{}"
	}
	// Fewer members when even the keys do not fit, or (rarely) a value
	// that is not a string needs more room for its size than its share.
	for ; len(members) > 0; members = members[:len(members)-1] {
		if out, ok := shortened(members, max); ok && len(out) <= max {
			return out
		}
	}
	return "{}"
}

// member is a member of a JSON object: its key and value as JSON.
type member struct {
	key, value []byte
}

// objectMembers reads a JSON object's members in the order written.
func objectMembers(obj string) ([]member, bool) {
	dec := json.NewDecoder(bytes.NewReader([]byte(obj)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []member
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		key, _ := marshalPlain(fmt.Sprint(k))
		out = append(out, member{key: key, value: v})
	}
	return out, true
}

// shortened writes members as an object in at most max bytes if it can:
// the room left by the keys is shared among the values, the shortest
// taking what they need, and each value longer than its share is cut to
// it.
func shortened(members []member, max int) (string, bool) {
	room := max - 2 - (len(members) - 1) // braces, commas
	for _, m := range members {
		room -= len(m.key) + 1 // the key and its colon
	}
	if room < 0 {
		return "", false
	}
	order := make([]int, len(members))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(members[a].value) - len(members[b].value) })
	share := make([]int, len(members))
	for n, i := range order {
		share[i] = min(len(members[i].value), room/(len(members)-n))
		room -= share[i]
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(m.key)
		b.WriteByte(':')
		b.Write(cutValue(m.value, share[i]))
	}
	b.WriteByte('}')
	return b.String(), true
}

// cutValue is a JSON value in at most n bytes where it can be: whole if
// it fits, a string's head ending with "…", another value's size as a
// string.
func cutValue(v []byte, n int) []byte {
	if len(v) <= n {
		return v
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		out, _ := marshalPlain(fmt.Sprintf("[%d bytes]", len(v)))
		return out
	}
	// The head grows rune by rune while it fits, with "…" and quotes.
	const ellipsis = "…"
	used := 2 + len(ellipsis)
	end := 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		enc, _ := marshalPlain(string(r))
		if used+len(enc)-2 > n {
			break
		}
		used += len(enc) - 2
		end += size
	}
	out, _ := marshalPlain(s[:end] + ellipsis)
	return out
}

// marshalPlain is v as JSON without HTML escapes (as json.Compact keeps
// the model's text).
func marshalPlain(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// resultPreview is what a finished step carries of the call's result:
// its credentials masked (secret.Redact, before anything is cut, so that
// no cut leaves half a key unmasked), and past 1000 characters the first
// 500 and how many more, as Hermes's API server bounds a
// function_call_output in response.completed.
func resultPreview(result string) string {
	masked := secret.Redact(result)
	if utf8.RuneCountInString(masked) <= resultPreviewMax {
		return masked
	}
	r := []rune(masked)
	return string(r[:resultPreviewHead]) + fmt.Sprintf("...[%d more chars]", len(r)-resultPreviewHead)
}

// resultPreviewMax and resultPreviewHead are Hermes's bounds of a tool's
// result in response.completed (api_server.py, _write_sse_responses).
const (
	resultPreviewMax  = 1000
	resultPreviewHead = 500
)

// agentStep is an external agent's tool step as the gateways get it,
// bounded and masked as the built-in loop's are: the API gateway lists
// a result's preview in responses and keeps it, and a step past NATS's
// max payload would fail the turn's publish. The agent is asked for
// such steps (ToolProgress); the worker does not rely on it.
func agentStep(tp *repliesv1.ToolProgress) *repliesv1.ToolProgress {
	out := proto.CloneOf(tp)
	switch tp.GetPhase() {
	case repliesv1.ToolPhase_TOOL_PHASE_FINISHED, repliesv1.ToolPhase_TOOL_PHASE_FAILED:
		out.Detail = resultPreview(tp.GetDetail())
	default: // the call's line or what the user is asked to approve
		out.Detail = truncate(tp.GetDetail(), stepLineMax)
	}
	out.Preview = truncate(tp.GetPreview(), stepLineMax)
	if tp.GetArguments() != "" {
		out.Arguments = boundedArguments(tp.GetArguments(), argumentsMax)
	}
	return out
}

// stepLineMax bounds a step's one-line preview, as the built-in loop's.
const stepLineMax = 500
