package fakellm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	fastjson "github.com/segmentio/encoding/json"
)

// maxBody bounds request bodies the fake reads.
const maxBody = 32 << 20

var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 64<<10 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// readJSON decodes the request body into v.
func readJSON(r *http.Request, v any) error {
	bb := bodyPool.Get().(*bytes.Buffer)
	bb.Reset()
	defer bodyPool.Put(bb)
	if _, err := bb.ReadFrom(io.LimitReader(r.Body, maxBody)); err != nil {
		return err
	}
	// segmentio's decoder: it decodes a conversation's request about seven
	// times faster than the stdlib's, and the fake stands for a model at zero
	// cost.
	return fastjson.Unmarshal(bb.Bytes(), v)
}

// appendString appends s as a JSON string literal. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// content is a string-or-array content field, flattened to its text as
// it is decoded. Most contents are strings without escapes: those are
// taken as they are, instead of being parsed a second time.
// content is a message's content field: its text, and the images of a
// content array.
type content struct {
	text   string
	images []Image
}

func (c *content) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' && bytes.IndexByte(b[1:len(b)-1], '\\') < 0 && utf8.Valid(b) {
		// Already validated by the decoder: a quoted string without escapes
		// (and valid UTF-8, which the decoder would have replaced).
		c.text, c.images = string(b[1:len(b)-1]), nil
		return nil
	}
	c.text, c.images = contentParts(b)
	return nil
}

// contentText flattens a string-or-array content field to its text.
func contentText(raw json.RawMessage) string {
	text, _ := contentParts(raw)
	return text
}

// contentParts splits a string-or-array content field into its text and
// its images (OpenAI image_url parts).
func contentParts(raw json.RawMessage) (string, []Image) {
	if len(raw) == 0 || raw[0] == 'n' {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Content  json.RawMessage `json:"content"`
		ImageURL *struct {
			URL    string `json:"url"`
			Detail string `json:"detail"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", nil
	}
	var images []Image
	for _, p := range parts {
		if p.Type == "image_url" && p.ImageURL != nil {
			img := imageFromURL(p.ImageURL.URL)
			img.Detail = p.ImageURL.Detail
			images = append(images, img)
		}
	}
	if len(parts) == 1 {
		return parts[0].Text, images
	}
	var out []byte
	for _, p := range parts {
		out = append(out, p.Text...)
	}
	return string(out), images
}

// stream writes SSE events, flushing each and pacing them.
type stream struct {
	ctx     context.Context
	w       http.ResponseWriter
	fl      http.Flusher
	delay   time.Duration
	dropAt  int // drop the connection after this many content chunks (0: never)
	stallAt int // go silent after this many content chunks (0: never)
	ping    time.Duration
	pingMsg []byte // the API's keep-alive, sent every ping while stalled
	content int    // content chunks sent
	sent    int
}

func newStream(ctx context.Context, w http.ResponseWriter, p *plan) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	st := &stream{ctx: ctx, w: w, fl: fl, delay: p.chunkDelay}
	if f := p.reply.Failure; f != nil {
		st.dropAt = f.DropAfter
		st.stallAt, st.ping = f.StallAfter, f.StallPing
	}
	return st
}

// send writes one event; content marks a text or argument delta, which
// counts towards a planned drop. It reports false once the client is gone.
func (st *stream) send(b []byte, content bool) bool {
	if st.sent > 0 && !wait(st.ctx, st.delay) {
		return false
	}
	st.sent++
	if _, err := st.w.Write(b); err != nil {
		return false
	}
	if st.fl != nil {
		st.fl.Flush()
	}
	if content {
		st.content++
		if st.dropAt > 0 && st.content >= st.dropAt {
			st.drop()
		}
		if st.stallAt > 0 && st.content >= st.stallAt {
			st.stall()
			return false
		}
	}
	return true
}

// stall sends nothing but keep-alives until the client is gone, as a
// provider stuck mid-answer does.
func (st *stream) stall() {
	st.stallAt = 0
	for {
		if st.ping <= 0 {
			<-st.ctx.Done()
			return
		}
		if !wait(st.ctx, st.ping) {
			return
		}
		if _, err := st.w.Write(st.pingMsg); err != nil {
			return
		}
		if st.fl != nil {
			st.fl.Flush()
		}
	}
}

// drop aborts the connection mid-stream, as a crashed upstream would.
func (st *stream) drop() {
	if st.fl != nil {
		st.fl.Flush()
	}
	panic(http.ErrAbortHandler)
}

// finish is called before the terminal events: a drop or stall planned
// for more chunks than the answer has still happens mid-stream.
func (st *stream) finish() {
	if st.dropAt > 0 {
		st.drop()
	}
	if st.stallAt > 0 {
		st.stall()
	}
}

// writeFailure answers with f's status and an error body in the API's shape.
func writeFailure(w http.ResponseWriter, api string, f *Failure) {
	typ, code, msg := errorText(api, f)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if f.RetryAfter > 0 {
		secs := int64((f.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		h.Set("retry-after-ms", strconv.FormatInt(f.RetryAfter.Milliseconds(), 10))
	}
	if api == "anthropic" {
		h.Set("request-id", "req_fake")
	}
	w.WriteHeader(f.Status)
	buf := getBuf()
	defer putBuf(buf)
	b := *buf
	if api == "anthropic" {
		b = append(b, `{"type":"error","error":{"type":`...)
		b = appendString(b, typ)
		b = append(b, `,"message":`...)
		b = appendString(b, msg)
		b = append(b, `}}`...)
	} else {
		b = append(b, `{"error":{"message":`...)
		b = appendString(b, msg)
		b = append(b, `,"type":`...)
		b = appendString(b, typ)
		b = append(b, `,"param":null,"code":`...)
		if code == "" {
			b = append(b, "null"...)
		} else {
			b = appendString(b, code)
		}
		b = append(b, `}}`...)
	}
	_, _ = w.Write(b)
	*buf = b
}

// errorText returns the error type, code and message real APIs send for f.
func errorText(api string, f *Failure) (typ, code, msg string) {
	anth := api == "anthropic"
	code = f.Type
	switch {
	case f.Type == "context_length_exceeded":
		typ, msg = "invalid_request_error", "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens."
		if anth {
			msg = "prompt is too long: 210000 tokens > 200000 maximum"
		}
	case f.Type == "insufficient_quota":
		typ, msg = "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."
		if anth {
			typ, msg = "billing_error", "Your credit balance is too low to access the Anthropic API."
		}
	case f.Status == http.StatusTooManyRequests:
		typ, msg = "rate_limit_error", "Rate limit reached for requests"
		if !anth {
			typ, code = "requests", "rate_limit_exceeded"
		}
	case f.Status == http.StatusPaymentRequired:
		typ, msg = "billing_error", "Insufficient credits. Add more using https://example.invalid/credits"
	case f.Status == http.StatusUnauthorized:
		typ, msg = "authentication_error", "invalid x-api-key"
		if !anth {
			typ, code, msg = "invalid_request_error", "invalid_api_key", "Incorrect API key provided."
		}
	case f.Status == http.StatusForbidden:
		typ, msg = "permission_error", "Your API key does not have permission to use the specified resource."
	case f.Status == 529:
		typ, msg = "overloaded_error", "Overloaded"
	case f.Status >= 500:
		typ, msg = "api_error", "Internal server error"
		if !anth {
			typ = "server_error"
		}
	default:
		typ, msg = "invalid_request_error", "Bad request"
	}
	if f.Type != "" && f.Type != "context_length_exceeded" && f.Type != "insufficient_quota" {
		typ = f.Type
	}
	if f.Message != "" {
		msg = f.Message
	}
	return typ, code, msg
}
