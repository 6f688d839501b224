package email

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // the charsets mail is written in
	gomail "github.com/emersion/go-message/mail"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/switchboard-chat/switchboard/pkg/attachment"
	eventsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/events/v1"
)

// inbound is one inbound mail as the gateway reads it.
type inbound struct {
	From      string // the sender's address, lowercase
	Name      string // the sender's display name
	Subject   string
	MessageID string // "<id@host>", as the header has it; "" when absent
	InReplyTo string
	// References of the message, oldest first, then its own Message-ID:
	// what an answer's References header carries.
	References []string
	Date       time.Time
	Text       string // the body as text, quotes and signature trimmed
	Parts      []part
	// Automated names why the mail is from a machine (a noreply
	// address, an Auto-Submitted header …); "" for a person.
	Automated string
	// AuthResults are the values of its Authentication-Results
	// headers, top (the last server's) first.
	AuthResults []string
}

// part is one attachment.
type part struct {
	Name string
	MIME string
	Data []byte // nil when over the size bound
	Size int64
}

// errMalformed marks mail that cannot be read as a message.
var errMalformed = errors.New("malformed message")

// maxInboundText bounds the text of one inbound message (bytes); the
// rest is cut with a note.
const maxInboundText = 64 << 10

// maxSubjectBytes and maxNameBytes bound a sender's subject and display
// name: a header may be folded to any length, and the subject goes into
// the event (whose size the bus bounds) and back out on the answer
// ("Re: …"). 998 is RFC 5322's longest line.
const (
	maxSubjectBytes = 998
	maxNameBytes    = 256
)

// noSubject is the subject of a mail without a Subject header, as
// Hermes reads it.
const noSubject = "(no subject)"

// maxParts bounds the MIME parts read of one message.
const maxParts = 100

// parse reads a raw RFC 5322 message. Attachments larger than maxPart
// are kept as a name and a size; skipAttachments drops them all.
func parse(raw []byte, maxPart int64, skipAttachments bool) (*inbound, error) {
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
		return nil, fmt.Errorf("%w: %v", errMalformed, err)
	}
	if e == nil {
		return nil, errMalformed
	}
	h := gomail.Header{Header: e.Header}
	m := &inbound{}
	from, err := h.AddressList("From")
	if err != nil || len(from) == 0 {
		// A From a strict parser refuses: take what is between <> or
		// the whole value, as Hermes does.
		addr, name := looseAddress(h.Get("From"))
		if addr == "" {
			return nil, fmt.Errorf("%w: no sender address", errMalformed)
		}
		m.From, m.Name = addr, name
	} else {
		m.From, m.Name = strings.ToLower(strings.TrimSpace(from[0].Address)), from[0].Name
	}
	m.Name = clipLine(cleanLine(m.Name), maxNameBytes)
	if !utf8.ValidString(m.From) || !strings.Contains(m.From, "@") || strings.ContainsAny(m.From, " \t\r\n<>") {
		return nil, fmt.Errorf("%w: the sender is not an address", errMalformed)
	}
	// A mail without a Subject is Hermes's "(no subject)" (msg.get's
	// default): the agent's text starts "[Subject: (no subject)]" and the
	// answer is "Re: (no subject)". One whose Subject is there but empty
	// stays empty, as Python's email API reads it: no subject in the
	// text, and the answer's is "Re: " (Send).
	m.Subject = noSubject
	if e.Header.Has("Subject") {
		m.Subject = clipLine(cleanLine(decodeWords(h.Get("Subject"))), maxSubjectBytes)
	}
	m.MessageID = msgID(h.Get("Message-Id"))
	m.InReplyTo = msgID(h.Get("In-Reply-To"))
	m.References = msgIDs(h.Get("References"))
	if m.MessageID != "" {
		m.References = append(m.References, m.MessageID)
	}
	if d, err := h.Date(); err == nil {
		m.Date = d
	}
	m.Automated = automated(m.From, e.Header)
	m.AuthResults = e.Header.Values("Authentication-Results")

	var plain, html string
	var haveHTML bool
	nparts := 0
	// alternatives: the paths of the multipart/alternative parts, whose
	// text parts are renderings of the body, named or not.
	alternatives := map[string]bool{}
	walkErr := walk(nil, e, nil, func(path []int, p *message.Entity, err error) error {
		// A part in a charset or transfer encoding the decoder does not
		// know (unknown-8bit, RFC 1428) is read as it stands, as the
		// message's own body is when it is not multipart: its text, with
		// invalid bytes replaced, is what the sender wrote. An attachment
		// whose encoding is unknown cannot be decoded: it is skipped.
		undecoded := false
		if err != nil {
			if p == nil || (!message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err)) {
				return nil // a part that cannot be read: skip it, keep the rest
			}
			undecoded = message.IsUnknownEncoding(err)
		}
		nparts++
		if nparts > maxParts {
			return errStopWalk
		}
		mt, _, _ := p.Header.ContentType()
		if strings.HasPrefix(mt, "multipart/") {
			if mt == "multipart/alternative" {
				alternatives[fmt.Sprint(path)] = true
			}
			return nil
		}
		alternative := len(path) > 0 && alternatives[fmt.Sprint(path[:len(path)-1])]
		if mt == "" {
			mt = "text/plain"
		}
		disp, dparams, _ := mediaValue(p.Header.Get("Content-Disposition"))
		name := decodeWords(dparams["filename"])
		if name == "" {
			// The Content-Type's name, read as the file name is (one
			// in RFC 2231 form and a charset other than UTF-8 too).
			_, tparams, _ := mediaValue(p.Header.Get("Content-Type"))
			name = decodeWords(tparams["name"])
		}
		isAttachment := disp == "attachment" || (disp == "inline" && mt != "text/plain" && mt != "text/html") ||
			(disp == "" && name != "" && !strings.HasPrefix(mt, "text/")) || mt == "message/rfc822" ||
			// A named text part once the body is read is a file: Apple
			// Mail sends attached files inline, a .txt or .log as an
			// inline text/plain part after the body. A rendering of the
			// body in a multipart/alternative is not, named or not.
			(name != "" && (plain != "" || haveHTML) && !alternative)
		switch {
		case !isAttachment && mt == "text/plain":
			if plain == "" {
				plain = readText(p.Body)
			}
		case !isAttachment && mt == "text/html":
			if !haveHTML {
				html, haveHTML = readText(p.Body), true
			}
		case isAttachment || !strings.HasPrefix(mt, "text/"):
			if skipAttachments || undecoded {
				return nil
			}
			if !printable(mt) {
				mt = "application/octet-stream"
			}
			pt := part{Name: fileName(name, mt), MIME: mt}
			data, err := io.ReadAll(io.LimitReader(p.Body, maxPart+1))
			if err != nil {
				return nil // undecodable body: the part is dropped
			}
			pt.Size = int64(len(data))
			if pt.Size <= maxPart {
				pt.Data = data
			} else {
				n, _ := io.Copy(io.Discard, p.Body)
				pt.Size += n
			}
			if pt.Size == 0 {
				return nil // Hermes skips an empty part
			}
			m.Parts = append(m.Parts, pt)
		}
		return nil
	})
	if walkErr != nil && !errors.Is(walkErr, errStopWalk) && plain == "" && !haveHTML && len(m.Parts) == 0 {
		// A multipart body without a boundary, or one that breaks off
		// before its first part: its sender is still a person waiting
		// for an answer, and what they wrote is the body as it stands.
		// (One that breaks off later keeps the parts read, as mail
		// clients and Python's parser, Hermes's, show them.)
		plain = rawBody(raw)
	}
	body := plain
	if strings.TrimSpace(body) == "" && haveHTML {
		body = htmlText(html)
	}
	m.Text = trimReply(body)
	return m, nil
}

var errStopWalk = errors.New("too many parts")

// walk calls f for e and every part under it, depth first, as
// (*message.Entity).Walk does, each part read through lenient first.
func walk(path []int, e *message.Entity, err error, f message.WalkFunc) error {
	e = lenient(e)
	if err := f(path, e, err); err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	mr := e.MultipartReader()
	if mr == nil {
		return nil
	}
	for i := 0; ; i++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil && !message.IsUnknownEncoding(err) && !message.IsUnknownCharset(err) {
			return err
		}
		if err := walk(append(slices.Clip(path), i), p, err, f); err != nil {
			return err
		}
	}
}

// lenient is e, or, when mime.ParseMediaType refuses its Content-Type,
// e read again under the type and parameters mediaValue reads: go-message
// takes the whole refused header for the type then, with no charset and
// no boundary, so the text of such a part was dropped, an attachment
// lost its name and type, and a multipart was read as one text.
func lenient(e *message.Entity) *message.Entity {
	if e == nil {
		return nil
	}
	v := e.Header.Get("Content-Type")
	if _, _, err := mime.ParseMediaType(v); err == nil || v == "" {
		return e
	}
	mt, params, ok := mediaValue(v)
	if !ok || !strings.Contains(mt, "/") {
		return e
	}
	// RFC 2231's pieces (name*, name*0* …) are left out: what is read
	// of them, a file name, is in params under its name already, which
	// FormatMediaType writes again, and a piece beside it, in another
	// charset, would be a second value of the same name, for which
	// mime.ParseMediaType refuses the type again.
	for k := range params {
		if !token(k) || strings.Contains(k, "*") {
			delete(params, k)
		}
	}
	ct := mime.FormatMediaType(mt, params)
	if ct == "" {
		return e
	}
	h := e.Header.Copy()
	h.Set("Content-Type", ct)
	// The body read is decoded from its transfer encoding already (a
	// multipart's never is): only its charset is left to decode.
	h.Del("Content-Transfer-Encoding")
	re, _ := message.New(h, e.Body)
	return re
}

// mediaValue reads a Content-Type or Content-Disposition value and its
// parameters as mime.ParseMediaType does or, when that refuses them for
// a parameter written outside RFC 2045's rules (a file name with spaces
// or other letters left unquoted, a boundary with "=" left unquoted, a
// parameter written twice), as Python's email parser (Hermes's) and mail
// clients read them: the value before the first ";", then each
// "name=value" between the semicolons outside quotes, cut at its first
// "=", unquoted; of a repeated name the first. ok is false when there is
// no value.
func mediaValue(v string) (value string, params map[string]string, ok bool) {
	value, params, err := mime.ParseMediaType(v)
	if err == nil {
		charsetParams(v, params)
		return value, params, true
	}
	base, rest, _ := strings.Cut(v, ";")
	value = strings.ToLower(strings.TrimSpace(base))
	if t, sub, _ := strings.Cut(value, "/"); !token(t) || (sub != "" && !token(sub)) {
		return "", nil, false
	}
	params = map[string]string{}
	for _, seg := range splitSemicolons(rest) {
		k, val, found := strings.Cut(seg, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !found || k == "" {
			continue
		}
		if _, dup := params[k]; !dup {
			params[k] = unquote(strings.TrimSpace(val))
		}
	}
	charsetParams(v, params)
	return value, params, true
}

// charsetParams sets in params the RFC 2231 file names (filename, name)
// of v that mime.ParseMediaType does not read as Python's parser
// (Hermes's) reads them: one written in a charset other than UTF-8 and
// US-ASCII (filename*=iso-8859-1'fr'r%E9sum%E9.pdf, as mail programs set
// to Latin-1 write it), which it drops, unless params has the name
// already; one continued over several parameters in such a charset
// (filename*0*=iso-8859-1'fr'r%E9sum%E9; filename*1*=.pdf, as long names
// are written), of which it kept the pieces after the first, undecoded;
// and a continued one in a value it refused, whose pieces are joined.
// Other parameters are left (none is read; a header naming thousands
// would each cost a decoder).
func charsetParams(v string, params map[string]string) {
	if !strings.Contains(v, "*") {
		return
	}
	_, rest, _ := strings.Cut(v, ";")
	pieces := map[string]string{}
	for _, seg := range splitSemicolons(rest) {
		k, val, ok := strings.Cut(seg, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || !(strings.HasPrefix(k, "filename*") || strings.HasPrefix(k, "name*")) {
			continue
		}
		if _, dup := pieces[k]; !dup {
			pieces[k] = strings.TrimSpace(val)
		}
	}
	for _, name := range []string{"filename", "name"} {
		if val, ok := pieces[name+"*"]; ok {
			// name*=charset'language'value
			if params[name] == "" {
				if s, ok := decodeExt(val); ok {
					params[name] = s
				}
			}
			continue
		}
		// name*0*=charset'language'value; name*1*=value; name*2="value" …
		var b strings.Builder
		charset := ""
		for n := 0; b.Len() <= maxParamBytes; n++ {
			key := name + "*" + strconv.Itoa(n)
			if s, ok := pieces[key]; ok {
				b.WriteString(unquote(s))
				continue
			}
			s, ok := pieces[key+"*"]
			if !ok {
				break
			}
			s = unquote(s)
			if n == 0 {
				if charset, s, ok = extValue(s); !ok {
					break
				}
			}
			raw, err := url.PathUnescape(s)
			if err != nil {
				break
			}
			b.WriteString(raw)
		}
		if b.Len() == 0 {
			continue
		}
		if utf := charset == "" || strings.EqualFold(charset, "utf-8") || strings.EqualFold(charset, "us-ascii"); utf {
			if params[name] == "" {
				params[name] = strings.ToValidUTF8(b.String(), "\uFFFD")
			}
			continue // else read by mime.ParseMediaType
		}
		if s, ok := decodeCharset(charset, b.String()); ok {
			params[name] = s
		}
	}
}

// maxParamBytes bounds a parameter value charsetParams reads.
const maxParamBytes = 4 << 10

// extValue splits an RFC 2231 extended value, charset'language'text.
func extValue(v string) (charset, text string, ok bool) {
	charset, rest, ok := strings.Cut(v, "'")
	if !ok {
		return "", "", false
	}
	_, text, ok = strings.Cut(rest, "'")
	return charset, text, ok
}

// decodeExt decodes an RFC 2231 extended value, charset'language'text.
func decodeExt(v string) (string, bool) {
	charset, text, ok := extValue(unquote(v))
	if !ok {
		return "", false
	}
	raw, err := url.PathUnescape(text)
	if err != nil {
		return "", false
	}
	return decodeCharset(charset, raw)
}

// decodeCharset decodes raw from charset to UTF-8 (invalid bytes
// replaced), within maxParamBytes.
func decodeCharset(charset, raw string) (string, bool) {
	r, err := message.CharsetReader(charset, strings.NewReader(raw))
	if err != nil {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(r, maxParamBytes))
	if err != nil {
		return "", false
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), true
}

// token reports whether s is an RFC 2045 token.
func token(s string) bool {
	return s != "" && printable(s) && !strings.ContainsAny(s, `()<>@,;:\"/[]?=`)
}

// rawBody is what follows the header of a raw message, as text.
func rawBody(raw []byte) string {
	start := -1
	for _, sep := range []string{"\r\n\r\n", "\n\n"} {
		if i := bytes.Index(raw, []byte(sep)); i >= 0 && (start < 0 || i+len(sep) < start) {
			start = i + len(sep)
		}
	}
	if start < 0 {
		return ""
	}
	return readText(bytes.NewReader(raw[start:]))
}

// readText reads a text part, decoded to UTF-8 (invalid bytes replaced),
// line ends made "\n".
func readText(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4*maxInboundText))
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

var wordDecoder = &mime.WordDecoder{CharsetReader: message.CharsetReader}

// decodeWords decodes RFC 2047 encoded words; what cannot be decoded is
// kept as written.
func decodeWords(s string) string {
	if d, err := wordDecoder.DecodeHeader(s); err == nil {
		s = d
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// cleanLine makes a header value one line without control characters.
func cleanLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	return strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
}

// clipLine cuts s to at most n bytes, at a character's boundary, ending
// it with "…" when it was cut.
func clipLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// looseAddress takes an address out of a From header the strict parser
// refused: between the last <>, else the whole value.
func looseAddress(v string) (addr, name string) {
	v = decodeWords(v)
	if i := strings.LastIndexByte(v, '<'); i >= 0 {
		if j := strings.IndexByte(v[i:], '>'); j > 0 {
			return strings.ToLower(strings.TrimSpace(v[i+1 : i+j])), strings.Trim(strings.TrimSpace(v[:i]), `"`)
		}
	}
	return strings.ToLower(strings.TrimSpace(v)), ""
}

// maxMsgIDBytes bounds a Message-ID the gateway keeps.
const maxMsgIDBytes = 300

// msgID is the first message id of a header value, "<id>", or "".
func msgID(v string) string {
	ids := msgIDs(v)
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// maxReferences bounds the References an answer carries (the oldest
// and the newest are kept).
const maxReferences = 20

// msgIDs are the message ids of a header value, each "<id>": what is
// between each "<" and the next ">" (RFC 5322 needs no space between two
// ids, "<a@x><b@x>" as Exchange writes them, and older mail puts words
// or a comment beside one: "<a@x> (Ann's message of …)"), and the first
// word after a last "<" with no ">"; or, in a value without "<", each
// word (an id written without its brackets).
func msgIDs(v string) []string {
	var fields []string
	if strings.Contains(v, "<") {
		for rest := v; ; {
			i := strings.IndexByte(rest, '<')
			if i < 0 {
				break
			}
			j := strings.IndexByte(rest[i:], '>')
			if j < 0 {
				// An id cut before its ">" (a header cut short), its
				// first word, as it was read before.
				if f := strings.Fields(rest[i:]); len(f) > 0 {
					fields = append(fields, f[0])
				}
				break
			}
			fields = append(fields, rest[i:i+j+1])
			rest = rest[i+j+1:]
		}
	} else {
		fields = strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == '\t' || r == '\r' || r == '\n' || r == ',' })
	}
	var ids []string
	for _, f := range fields {
		f = strings.TrimSpace(f)
		if !strings.HasPrefix(f, "<") {
			f = "<" + f
		}
		if !strings.HasSuffix(f, ">") {
			f += ">"
		}
		if len(f) < 3 || len(f) > maxMsgIDBytes || strings.Count(f, "<") != 1 || strings.Count(f, ">") != 1 || !printable(f) {
			continue
		}
		ids = append(ids, f)
	}
	if len(ids) > maxReferences {
		ids = append(ids[:1], ids[len(ids)-maxReferences+1:]...)
	}
	return ids
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// fileName is an attachment's name, or Hermes's "attachment.<subtype>".
func fileName(name, mt string) string {
	name = cleanLine(path.Base(strings.ReplaceAll(name, `\`, "/")))
	if name == "" || name == "." || name == "/" {
		_, sub, _ := strings.Cut(mt, "/")
		if sub == "" {
			sub = "bin"
		}
		return "attachment." + sub
	}
	return name
}

// noreplyPatterns are Hermes's automated sender addresses.
var noreplyPatterns = []string{
	"noreply", "no-reply", "no_reply", "donotreply", "do-not-reply",
	"mailer-daemon", "postmaster", "bounce", "notifications@",
	"automated@", "auto-confirm", "auto-reply", "automailer",
}

// automated says why a mail is from a machine, as Hermes tells: the
// sender's address, or an Auto-Submitted (other than "no"), Precedence
// bulk, list or junk, X-Auto-Response-Suppress or List-Unsubscribe
// header. Beyond Hermes, Precedence auto_reply (older responders), and
// what RFC 3834 says never to answer: a null
// Return-Path (bounces and read receipts are sent with an empty
// envelope sender), a multipart/report (a delivery status notification,
// whoever it claims to be from, or a person's read receipt), and the
// X-Autoreply and X-Autorespond headers of older responders. "" for a
// person.
func automated(from string, h message.Header) string {
	if strings.TrimSpace(h.Get("Return-Path")) == "<>" {
		return "null-return-path"
	}
	if mt, _, _ := mediaValue(h.Get("Content-Type")); mt == "multipart/report" {
		return "report"
	}
	if strings.TrimSpace(h.Get("X-Autoreply")) != "" || strings.TrimSpace(h.Get("X-Autorespond")) != "" {
		return "auto-reply"
	}
	for _, p := range noreplyPatterns {
		if strings.Contains(from, p) {
			return "address"
		}
	}
	if v := autoSubmitted(h.Get("Auto-Submitted")); v != "" && v != "no" {
		return "auto-submitted"
	}
	switch strings.ToLower(strings.TrimSpace(h.Get("Precedence"))) {
	case "bulk", "list", "junk", "auto_reply":
		return "precedence"
	}
	if strings.TrimSpace(h.Get("X-Auto-Response-Suppress")) != "" {
		return "auto-response-suppress"
	}
	if strings.TrimSpace(h.Get("List-Unsubscribe")) != "" {
		return "list"
	}
	return ""
}

// eventID names a message for dedupe: its Message-ID without the angle
// brackets, or a hash of it when that cannot be a bus header; a message
// without one is named by a hash of its bytes, which a re-read repeats.
func eventID(m *inbound, raw []byte) string {
	if m.MessageID != "" {
		id := strings.TrimSuffix(strings.TrimPrefix(m.MessageID, "<"), ">")
		if id != "" && len(id) <= 256 && printable(id) {
			return id
		}
		sum := sha256.Sum256([]byte(m.MessageID))
		return "sha256:" + hex.EncodeToString(sum[:16])
	}
	sum := sha256.Sum256(raw)
	return "raw:" + hex.EncodeToString(sum[:16])
}

// isReply reports whether a subject is an answer's ("Re: …"; Hermes
// reads "Re:", mail clients also write "RE:" and "re:").
func isReply(subject string) bool {
	return len(subject) >= 3 && strings.EqualFold(subject[:3], "re:")
}

// event builds the inbound event of m for the agent's account. Parts
// whose bytes are kept become data: URLs the kit moves into the
// attachment store (within attachments.max_bytes) before publishing.
func event(m *inbound, id, account string, keep bool) *eventsv1.MessageReceived {
	name := m.Name
	if name == "" {
		name = m.From
	}
	text := m.Text
	if m.Subject != "" && !isReply(m.Subject) {
		text = "[Subject: " + m.Subject + "]\n\n" + text
	}
	text = strings.TrimSpace(text)
	if text == "" {
		text = "(empty email)"
	}
	if len(text) > maxInboundText {
		cut := maxInboundText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "\n\n[… the rest of this email was cut]"
	}
	ev := &eventsv1.MessageReceived{
		EventId:   id,
		MessageId: m.MessageID,
		Text:      text,
		Source: &eventsv1.SessionSource{
			Platform: "email", Account: account, ChatId: m.From, ChatName: name, ChatType: "dm",
			UserId: m.From, UserName: name, ChatTopic: m.Subject,
		},
	}
	if m.InReplyTo != "" {
		ev.ReplyTo = &eventsv1.ReplyTo{MessageId: m.InReplyTo}
	}
	if !m.Date.IsZero() {
		ev.SentAt = timestamppb.New(m.Date)
	}
	for _, p := range m.Parts {
		a := &eventsv1.Attachment{Kind: kindOf(p.MIME), MimeType: p.MIME, FileName: p.Name, SizeBytes: p.Size}
		if keep && p.Data != nil && attachment.Wanted(a) {
			a.Location = &eventsv1.Attachment_Url{Url: "data:" + p.MIME + ";base64," + base64.StdEncoding.EncodeToString(p.Data)}
		}
		ev.Attachments = append(ev.Attachments, a)
	}
	return ev
}

// kindOf is an attachment's kind by its media type.
func kindOf(mt string) eventsv1.AttachmentKind {
	switch {
	case strings.HasPrefix(mt, "image/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_IMAGE
	case strings.HasPrefix(mt, "audio/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_AUDIO
	case strings.HasPrefix(mt, "video/"):
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_VIDEO
	default:
		return eventsv1.AttachmentKind_ATTACHMENT_KIND_DOCUMENT
	}
}

// autoSubmitted is the keyword of an Auto-Submitted header, lowercased:
// RFC 3834 lets comments and parameters follow it ("no (a person)",
// "auto-replied; owner-email=…").
func autoSubmitted(v string) string {
	if i := strings.IndexAny(v, ";("); i >= 0 {
		v = v[:i]
	}
	return strings.ToLower(strings.TrimSpace(v))
}
