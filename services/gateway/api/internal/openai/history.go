package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Hermes's conversation_history (api_server.py, _handle_responses and
// _handle_runs): the earlier messages of a client that keeps its
// conversation itself, read as Hermes reads them.

// historyText reads the content of a conversation_history entry.
type historyText func(raw json.RawMessage, param string) (string, error)

// eachHistoryEntry calls f with each entry of the conversation_history
// of a run or a Responses request (Hermes takes it on both), in order,
// and returns their number. As Hermes's API server: an empty or false
// value (null, [], "", 0, false, {}) is none; anything else must be an
// array of objects with a "role" and a "content" (so spelled), whatever
// their values. Each entry is given with its role, which the context
// reads as Hermes's agent does (contextRole): a role other than system,
// developer, user or assistant — a tool's or a function's result, a
// role the agent does not know, a role that is not a string ("") — is
// dropped, not refused.
func eachHistoryEntry(raw json.RawMessage, f func(message) error) (int, error) {
	if falsy(raw) {
		return 0, nil
	}
	n, err := eachElement(raw, func(i int, e json.RawMessage) error {
		m, err := historyEntry(i, e)
		if err != nil {
			return err
		}
		return f(m)
	})
	if errors.Is(err, errNotArray) {
		return 0, invalid("conversation_history", "conversation_history must be an array of message objects")
	}
	return n, err
}

// historyEntry reads entry i of a conversation_history.
func historyEntry(i int, e json.RawMessage) (message, error) {
	param := fmt.Sprintf("conversation_history[%d]", i)
	// The fields as spelled, as Hermes looks them up in the entry's
	// dict: a struct would take "Role" or "CONTENT" for them too. A
	// null value is a key that is there (Hermes: "role" in entry); a
	// repeated key's last value counts, as in Python.
	e = bytes.TrimSpace(e)
	if len(e) == 0 || e[0] != '{' {
		return message{}, invalid(param, "%s must have 'role' and 'content' fields", param)
	}
	h, err := exactMembers(e, "role", "content")
	if err != nil {
		return message{}, invalid(param, "%s must have 'role' and 'content' fields", param)
	}
	roleOf, hasRole := h["role"]
	content, hasContent := h["content"]
	if !hasRole || !hasContent {
		return message{}, invalid(param, "%s must have 'role' and 'content' fields", param)
	}
	var role string
	if roleOf = bytes.TrimSpace(roleOf); len(roleOf) > 0 && roleOf[0] == '"' {
		_ = json.Unmarshal(roleOf, &role)
	}
	return message{role: role, content: content, param: param}, nil
}

// falsy reports whether raw, JSON, is a value Python holds false: null,
// false, 0, "", [] or {} (or nothing).
func falsy(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return true
	}
	switch raw[0] {
	case 'n', 'f':
		return bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("false"))
	case '"':
		var s string
		return json.Unmarshal(raw, &s) == nil && s == ""
	case '[', '{':
		// Empty or not, read no further than its first token: decoded
		// whole, an array of many small items takes many times its size.
		dec := json.NewDecoder(bytes.NewReader(raw))
		if _, err := dec.Token(); err != nil {
			return false
		}
		return !dec.More()
	case 't':
		return false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return err == nil && f == 0
}

// responsesHistoryText reads a Responses request's history entry's
// content as Hermes's _normalize_multimodal_content, as the input's
// (responseContent): null is empty, a string itself, an array its text
// and image parts (a part Hermes refuses is refused alike), any other
// value its Python text. The pictures are checked but not carried:
// context is text.
func responsesHistoryText(raw json.RawMessage, param string) (string, error) {
	text, _, err := responseContent(raw, param)
	return text, err
}

// runText reads a run's history entry's content as Hermes's run does,
// with Python's str(): a string is itself, null "None", a number, a
// boolean or an object its Python text (pythonRepr); nothing is
// refused. An array, of which Hermes gives the model its Python text,
// is its text (nestedText): its strings and text parts, its pictures
// skipped unchecked.
func runText(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", invalid(param, "content must be a string or an array of parts")
		}
		return s, nil
	case '[':
		return nestedText(raw, 1), nil
	case '{':
		return pythonRepr(raw), nil
	case 'n':
		return "None", nil
	}
	return pythonScalar(raw), nil
}

// pythonText is the text Python's str() gives a JSON value as its json
// module reads it: a string itself, null None, an object or an array its
// repr (pythonRepr), a number or a boolean pythonScalar.
func pythonText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	case 'n':
		return "None"
	case '{', '[':
		return pythonRepr(raw)
	}
	return pythonScalar(raw)
}

// pythonRepr is Python's repr of a JSON value as its json module reads
// it: an object a dict ({'k': v, ...}, its keys in the order they first
// come, a repeated key's last value), an array a list, a string in
// Python's quotes and escapes, null None, numbers and booleans as
// pythonScalar. "" for what is not JSON.
func pythonRepr(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if writePythonRepr(&b, dec) != nil {
		return ""
	}
	return b.String()
}

// writePythonRepr writes the repr of the next value of dec to b.
func writePythonRepr(b *strings.Builder, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				if err := writePythonRepr(b, dec); err != nil {
					return err
				}
			}
			b.WriteByte(']')
			_, err = dec.Token()
			return err
		}
		// A dict: a repeated key keeps its place and takes the last value.
		var keys []string
		values := map[string]string{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			var vb strings.Builder
			if err := writePythonRepr(&vb, dec); err != nil {
				return err
			}
			if _, seen := values[k]; !seen {
				keys = append(keys, k)
			}
			values[k] = vb.String()
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pythonStringRepr(k))
			b.WriteString(": ")
			b.WriteString(values[k])
		}
		b.WriteByte('}')
		_, err = dec.Token()
		return err
	case string:
		b.WriteString(pythonStringRepr(v))
	case json.Number:
		b.WriteString(pythonScalar(json.RawMessage(v)))
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case nil:
		b.WriteString("None")
	}
	return nil
}

// pythonStringRepr is Python's repr of a string: in single quotes, or
// in double quotes when it holds a single quote and no double one;
// backslashes, its quote, tabs, newlines and carriage returns escaped,
// other characters that are not printable as \xNN, \uNNNN or
// \UNNNNNNNN.
func pythonStringRepr(s string) string {
	quote := '\''
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteRune(quote)
	for _, r := range s {
		switch {
		case r == quote || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x7f || unicode.IsPrint(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteRune(quote)
	return b.String()
}

// pythonScalar is the text Python's str() gives a JSON number or
// boolean as its json module reads it: True or False; an integer in
// its digits; any other number a float, in Python's shortest repr
// (1.0, 1e+16, 1e-05, inf; nan for nanNumber).
func pythonScalar(raw json.RawMessage) string {
	s := string(raw)
	switch s {
	case "true":
		return "True"
	case "false":
		return "False"
	case nanNumber:
		return "nan"
	}
	if !strings.ContainsAny(s, ".eE") {
		// An integer, exact: only "-0" is spelled otherwise.
		if strings.TrimLeft(s, "-0") == "" {
			return "0"
		}
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return s
	}
	return pythonFloat(f)
}

// pythonFloat is Python's repr of a float: the shortest digits that
// read back as f, in positional notation with at least one decimal
// when its exponent is from -4 to 15, else in scientific notation with
// a signed exponent of at least two digits.
func pythonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
