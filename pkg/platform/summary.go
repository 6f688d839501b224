package platform

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// summaryBytes bounds the shape a summary shows.
const summaryBytes = 400

// summaryDepth bounds how deep a summary describes nested values.
const summaryDepth = 8

// Summary describes an inbound payload for a log line by its shape, not
// its content, so that a payload a gateway could not take can be found
// and understood without putting a user's words, name, phone number or
// address into the logs: its size and the start of its sha256 (to match
// it against a copy), then, for JSON, its keys in order with each value's
// type and size (str(14) a string of 14 bytes, num, bool, null, [3] an
// array of three followed by its first element's shape), at most
// summaryBytes of it. Only the values an operator needs to find the event
// on the platform and to see what kind it was are shown: the event's own
// ids (update_id, event_id, message_id, envelope_id, ts, the id of the
// event's object) and its type fields (type, subtype, msgtype; a Discord
// frame's op, s and t), and only when they look like ids (short, no spaces, no @).
// Keys that do not look like field names (a map keyed by user ids or
// phone numbers) show as <key>. Anything that is not JSON shows only
// its size and digest.
func Summary(raw []byte) string {
	sum := sha256.Sum256(raw)
	head := fmt.Sprintf("%d bytes sha256:%s", len(raw), hex.EncodeToString(sum[:6]))
	if len(raw) == 0 {
		return head
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	s := &shaper{dec: dec}
	s.value("", "", 0)
	if s.err == nil {
		// One JSON value and nothing after it.
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			s.err = errors.New("trailing data")
		}
	}
	if s.err != nil && !s.full {
		return head + " not JSON"
	}
	out := s.b.String()
	if s.full {
		out += "…"
	}
	return head + " " + out
}

// shaper writes the shape of the JSON value dec reads.
type shaper struct {
	dec  *json.Decoder
	b    strings.Builder
	full bool // summaryBytes reached: the rest is read, not written
	err  error
}

func (s *shaper) write(parts ...string) {
	if s.full {
		return
	}
	for _, p := range parts {
		if s.b.Len()+len(p) > summaryBytes {
			s.full = true
			return
		}
		s.b.WriteString(p)
	}
}

// value reads one value, the field key of the object under parent (both
// empty at the top and in arrays), at depth.
func (s *shaper) value(parent, key string, depth int) {
	if s.err != nil {
		return
	}
	tok, err := s.dec.Token()
	if err != nil {
		s.err = err
		return
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			s.object(key, depth)
		case '[':
			s.array(parent, key, depth)
		default:
			s.err = fmt.Errorf("unexpected %v", t)
		}
	case string:
		if shown(parent, key) && idLike(t) {
			s.write(strconv.Quote(t))
			return
		}
		s.write("str(", strconv.Itoa(len(t)), ")")
	case json.Number:
		if shown(parent, key) && idLike(t.String()) {
			s.write(t.String())
			return
		}
		s.write("num")
	case bool:
		s.write("bool")
	case nil:
		s.write("null")
	}
}

// object reads the rest of an object that was opened as key's value.
func (s *shaper) object(key string, depth int) {
	if depth >= summaryDepth {
		s.write("{…}")
		s.skip(1)
		return
	}
	s.write("{")
	for first := true; s.err == nil && s.dec.More(); first = false {
		tok, err := s.dec.Token()
		if err != nil {
			s.err = err
			return
		}
		k, _ := tok.(string)
		if !first {
			s.write(" ")
		}
		if fieldName(k) {
			s.write(k, ":")
		} else {
			s.write("<key>:")
		}
		s.value(key, k, depth+1)
	}
	s.end('}')
	s.write("}")
}

// array reads the rest of an array that was opened as key's value: its
// length, then its first element's shape.
func (s *shaper) array(parent, key string, depth int) {
	if depth >= summaryDepth {
		s.write("[…]")
		s.skip(1)
		return
	}
	// The length comes first but is known last: shape the first
	// element into a scratch shaper sharing the decoder.
	first := &shaper{dec: s.dec}
	n := 0
	for ; s.err == nil && s.dec.More(); n++ {
		if n == 0 {
			first.value(parent, key, depth+1)
			s.err = first.err
			continue
		}
		s.skip(0)
	}
	s.end(']')
	s.write("[", strconv.Itoa(n), "]")
	if n > 0 {
		s.write(first.b.String())
		if first.full {
			s.write("…")
			s.full = true
		}
	}
}

// end reads the closing delimiter d.
func (s *shaper) end(d json.Delim) {
	if s.err != nil {
		return
	}
	tok, err := s.dec.Token()
	if err != nil {
		s.err = err
		return
	}
	if tok != d {
		s.err = fmt.Errorf("want %v, got %v", d, tok)
	}
}

// skip reads past one value (open 0), or to the end of the object or
// array already opened (open 1).
func (s *shaper) skip(open int) {
	for s.err == nil {
		tok, err := s.dec.Token()
		if err != nil {
			s.err = err
			return
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				open++
			} else {
				open--
			}
		}
		if open <= 0 {
			return
		}
	}
}

// eventIDs are the fields whose value identifies an event on its
// platform (Telegram's update and message ids, Slack's event and envelope
// ids and timestamps, Matrix's event id, Discord's sequence number).
var eventIDs = map[string]bool{
	"update_id": true, "message_id": true, "event_id": true, "eventId": true, "envelope_id": true,
	"ts": true, "event_ts": true, "client_msg_id": true, "seq": true,
}

// typeFields are the fields that name an event's or a message's kind.
var typeFields = map[string]bool{
	"type": true, "subtype": true, "msgtype": true, "event_type": true, "eventType": true,
}

// gatewayFields are the fields of a Discord gateway frame (op, sequence
// number, event name), shown at the top only.
var gatewayFields = map[string]bool{"op": true, "s": true, "t": true}

// eventObjects are the fields that hold the event itself, whose "id" is
// the event's (a Telegram message, Discord's d, Slack's event); the id of
// anything else (a sender, a chat, a file) is not shown.
var eventObjects = map[string]bool{
	"": true, "message": true, "edited_message": true, "channel_post": true, "edited_channel_post": true,
	"callback_query": true, "d": true, "event": true, "envelope": true,
}

// shown reports whether the value of key, a field of the object under
// parent, is shown.
func shown(parent, key string) bool {
	return eventIDs[key] || typeFields[key] || (key == "id" && eventObjects[parent]) || (parent == "" && gatewayFields[key])
}

// idLike reports whether v can be shown as an id: short, of the
// characters ids are made of (no spaces, no @ of an address, no leading
// + of a phone number).
func idLike(v string) bool {
	if v == "" || len(v) > 64 || v[0] == '+' {
		return false
	}
	for _, c := range []byte(v) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._:-$!/=", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// fieldName reports whether k looks like a field name of a schema rather
// than data used as a key: a letter or _ first, then letters, digits,
// _ . and -, at most 40 bytes.
func fieldName(k string) bool {
	if k == "" || len(k) > 40 {
		return false
	}
	for i, c := range []byte(k) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
