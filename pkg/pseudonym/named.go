package pseudonym

import (
	"cmp"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Personal marks a logged value as a personal id whatever the name of its
// attribute: a log handler that pseudonymizes shows its ID, one that does
// not shows it as it is. For ids whose attribute names say nothing of
// them, as a platform's message id that holds its sender's number
// (Signal's "<sender>:<timestamp>", WhatsApp's wamid, an e-mail's
// Message-ID):
//
//	log.Info("sent", "message_id", pseudonym.Personal(id))
type Personal string

// Naming marks err as naming ids (the chat, thread or user ids the caller
// knows it is about): a log handler that pseudonymizes shows its text, and
// the text of any error that wraps it, with each of them replaced by its
// ID (Scrub). For errors whose text the caller does not write, a
// platform's answer or a URL with a channel in its path:
//
//	log.Warn("send failed", "err", pseudonym.Naming(err, chatID, threadID))
//
// errors.Is and errors.As see through it; nil stays nil.
func Naming(err error, ids ...string) error {
	if err == nil {
		return nil
	}
	return &namingError{err: err, ids: ids}
}

type namingError struct {
	err error
	ids []string
	// by is the Scrubber of ids that marked err (Scrubber.Naming),
	// nil for Naming.
	by *Scrubber
}

func (e *namingError) Error() string { return e.err.Error() }
func (e *namingError) Unwrap() error { return e.err }

// NamedIDs are the ids Naming marked err, or any error it wraps, as
// naming; none for an unmarked error, which costs no allocation.
func NamedIDs(err error) []string {
	var ids []string
	for err != nil {
		switch e := err.(type) {
		case *namingError:
			ids = append(ids, e.ids...)
			err = e.err
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				ids = append(ids, NamedIDs(inner)...)
			}
			return ids
		default:
			err = errors.Unwrap(err)
		}
	}
	return ids
}

// minScrubbed is the length below which Scrub leaves an id in the text:
// "7" or "42" would take every such number (a status, an attempt) with
// it, and so short an id names no one.
const minScrubbed = 3

// minScrubbedNumber is the same for a number ("502", "-2026"): under 5
// digits it is as likely an HTTP status, a year in a timestamp, a
// duration or a count as the id (a Telegram topic's thread id, a
// message's), and a number that short names no one.
const minScrubbedNumber = 5

// scrubbable reports whether Scrub takes the form f of an id out of a
// text (minScrubbed, minScrubbedNumber).
func scrubbable(f string) bool {
	if len(f) < minScrubbed {
		return false
	}
	digits := strings.TrimLeft(f, "+-")
	if len(digits) >= minScrubbedNumber || len(f)-len(digits) > 1 {
		return true
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return true
		}
	}
	return false
}

// Scrub replaces each of ids in text by its ID where it stands as a whole
// word: not inside a longer run of letters and digits ("123" is not
// taken from "41234"). It also finds an id as platforms and HTTP
// clients write it: without the leading "+" of a phone number, and
// escaped in a URL's path or query (a Matrix room "!r:example.org" as
// "%21r:example.org"), each replaced by the ID of the id as given.
// An e-mail address is also found in any ASCII case, except where it
// stands as another id given in that case (so two ids in two cases keep
// their own IDs); other ids, a Matrix user's "@bob:server" among them,
// only as given. Ids shorter than 3 bytes are left, and numbers under 5
// digits.
//
// Its cost does not grow with the number of ids past a few: a record
// that names a list of chats has its errors scrubbed of all of them in
// one pass over the text (scrubScan).
func (p *Pseudonymizer) Scrub(text string, ids ...string) string {
	if p == nil || text == "" || len(ids) == 0 {
		return text
	}
	forms := scrubForms(ids)
	if len(forms) > maxEachForms {
		if out, ok := p.scrubScan(text, forms, nil); ok {
			return out
		}
	}
	return p.scrubEach(text, forms)
}

// Scrubber is Scrub of one list of ids for many texts: the ids' forms,
// and past a few the automaton that finds them all in one pass
// (scrubScan), are made the first time a text is scrubbed and kept for
// the next ones. Made for a log record naming thousands of ids, its
// errors cost a pass over each text, not the automaton each; made for
// a logger's With attributes, its records' errors do. It is safe for
// concurrent use.
type Scrubber struct {
	p    *Pseudonymizer
	ids  []string
	once sync.Once
	// Made once: the forms, and the automaton of scrubScan (nil when
	// Scrub takes them each in a pass: few, or one that only
	// scrubEach can take).
	forms []scrubForm
	auto  *automaton
	// The ids as a set, made the first time holds is asked of ids
	// (those of the marks within a Scrubber's, for ScrubNamed) when
	// they are more than a look through them costs.
	setOnce sync.Once
	set     map[string]bool
}

// Scrubber returns the Scrubber of ids, which it keeps (the caller
// does not change them after). Making it costs nothing until a text is
// scrubbed.
func (p *Pseudonymizer) Scrubber(ids ...string) *Scrubber {
	return &Scrubber{p: p, ids: ids}
}

// Scrub is p.Scrub(text, ids...) for the Scrubber's p and ids. A nil
// Scrubber scrubs nothing.
func (s *Scrubber) Scrub(text string) string {
	if s == nil || s.p == nil || text == "" || len(s.ids) == 0 {
		return text
	}
	s.once.Do(s.make)
	if s.auto != nil {
		if out, ok := s.p.scrubScan(text, s.forms, s.auto); ok {
			return out
		}
	}
	return s.p.scrubEach(text, s.forms)
}

// maxLookIDs is the number of ids up to which holds looks through them
// rather than make a set.
const maxLookIDs = 16

// make makes the forms, and the automaton.
func (s *Scrubber) make() {
	s.forms = scrubForms(s.ids)
	if len(s.forms) > maxEachForms && scannable(s.forms) {
		s.auto = newAutomaton(s.forms)
	}
}

// holds reports whether ids are all among the Scrubber's.
func (s *Scrubber) holds(ids []string) bool {
	if len(ids) == 0 {
		return true
	}
	s.setOnce.Do(func() {
		if len(s.ids) > maxLookIDs {
			s.set = make(map[string]bool, len(s.ids))
			for _, id := range s.ids {
				s.set[id] = true
			}
		}
	})
	for _, id := range ids {
		if s.set != nil && !s.set[id] || s.set == nil && !slices.Contains(s.ids, id) {
			return false
		}
	}
	return true
}

// Naming is pseudonym.Naming(err, ids...) for the Scrubber's ids, which
// ScrubNamed then scrubs a text of with the Scrubber's forms; for a nil
// Scrubber, Naming(err), with no ids.
func (s *Scrubber) Naming(err error) error {
	if err == nil {
		return nil
	}
	if s == nil {
		return Naming(err)
	}
	return &namingError{err: err, ids: s.ids, by: s}
}

// ScrubNamed is Scrub(text, NamedIDs(err)...): text (err's, or a text
// about it) scrubbed of the ids err is marked as naming. When err was
// marked last by a Scrubber of p's (Scrubber.Naming) and the marks
// within name no id that one does not, that Scrubber scrubs it, with
// the forms it made once, and the result is the same.
func (p *Pseudonymizer) ScrubNamed(text string, err error) string {
	if ne, ok := err.(*namingError); ok && ne.by != nil && ne.by.p == p {
		if within := NamedIDs(ne.err); ne.by.holds(within) {
			// The forms of the ids within are among the
			// Scrubber's: scrubForms(ids) takes an id's forms
			// once, the first time it meets them.
			return ne.by.Scrub(text)
		}
	}
	ids := NamedIDs(err)
	if len(ids) == 0 {
		return text
	}
	return p.Scrub(text, ids...)
}

// maxEachForms is the number of forms up to which Scrub looks for each
// in a pass of its own (scrubEach): a pass is a strings.Index, faster
// over an error's text than building scrubScan's automaton for as few
// forms as a record's chat, thread and user give.
const maxEachForms = 16

// scrubForm is one form of an id that Scrub looks for (find), the id it
// stands for, and whether it is found in any ASCII case (an address).
type scrubForm struct {
	find, id string
	fold     bool
}

// scrubForms are the forms of ids that Scrub looks for, distinct, the
// longest first: "+15551234567" before "15551234567", an id before one
// it contains, an address in another case too (in
// "Jim.bob@example.com", "jim.bob@example.com" before
// "bob@example.com", which would leave "Jim." in the text). Forms of
// the same length keep the order of their ids.
func scrubForms(ids []string) []scrubForm {
	var forms []scrubForm
	// Past a few forms a set finds one given before faster than a look
	// through them all; a list of thousands of chats would cost
	// millions.
	var seen map[string]bool
	for _, id := range ids {
		// An e-mail address is found in any case too: mail servers and
		// clients echo it as the sender wrote it (Bob@Example.COM).
		fold := isAddress(id)
		for _, f := range [...]string{id, strings.TrimPrefix(id, "+"), url.PathEscape(id), url.QueryEscape(id)} {
			if !scrubbable(f) {
				continue
			}
			if seen == nil && len(forms) >= maxEachForms {
				seen = make(map[string]bool, 4*len(ids))
				for _, o := range forms {
					seen[o.find] = true
				}
			}
			if seen != nil {
				if seen[f] {
					continue
				}
				seen[f] = true
			} else if slices.ContainsFunc(forms, func(o scrubForm) bool { return o.find == f }) {
				continue
			}
			forms = append(forms, scrubForm{f, id, fold})
		}
	}
	slices.SortStableFunc(forms, func(a, b scrubForm) int { return cmp.Compare(len(b.find), len(a.find)) })
	return forms
}

// scrubEach replaces forms in text one after the other, each in a pass
// over the text as the forms before it left it.
func (p *Pseudonymizer) scrubEach(text string, forms []scrubForm) string {
	given := func(s string) bool { return slices.ContainsFunc(forms, func(o scrubForm) bool { return o.find == s }) }
	for _, f := range forms {
		text = p.replaceWord(text, f.find, f.id, f.fold, given)
	}
	return text
}

// isAddress reports whether id is shaped as an e-mail address, the one
// kind of id a platform may echo in another case: an "@" after a local
// part, and no ":" (a Matrix user, "@bob:server", and a WhatsApp
// device's JID, "<number>:<device>@s.whatsapp.net", are case-sensitive
// or never echoed in another case).
func isAddress(id string) bool {
	at := strings.IndexByte(id, '@')
	return at > 0 && at < len(id)-1 && !strings.ContainsRune(id, ':')
}

// replaceWord replaces find by the ID of id wherever it stands as a
// whole word in text; with fold, in any ASCII case, but where it stands
// in another case as one that given reports (another id's form, as it
// was given, which keeps its own ID).
func (p *Pseudonymizer) replaceWord(text, find, id string, fold bool, given func(string) bool) string {
	index := strings.Index
	if fold {
		index = indexFold
	}
	var b strings.Builder
	done := 0 // text[:done] is in b
	for from := 0; ; {
		i := index(text[from:], find)
		if i < 0 {
			break
		}
		start, end := from+i, from+i+len(find)
		if !wordBoundary(text, start, end) || fold && text[start:end] != find && given(text[start:end]) {
			from = start + 1
			continue
		}
		b.WriteString(text[done:start])
		b.WriteString(p.ID(id))
		done, from = end, end
	}
	if done == 0 {
		return text // not found
	}
	b.WriteString(text[done:])
	return b.String()
}

// indexFold is the index of the first instance of find in text, ASCII
// letters matched in any case (other bytes as they are: the length of
// what matches is always len(find)), or -1.
func indexFold(text, find string) int {
	for i := 0; i+len(find) <= len(text); i++ {
		if equalFoldASCII(text[i:i+len(find)], find) {
			return i
		}
	}
	return -1
}

func equalFoldASCII(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// wordBoundary reports whether text[start:end] is not part of a longer
// run of ASCII letters and digits: an end that is itself a letter or a
// digit must not touch another.
func wordBoundary(text string, start, end int) bool {
	if start > 0 && isAlnum(text[start]) && isAlnum(text[start-1]) {
		return false
	}
	if end < len(text) && isAlnum(text[end-1]) && isAlnum(text[end]) {
		return false
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// ChatKey pseudonymizes a chat key, "<platform>:<account>:<chat id>"
// (sessionkey.ChatKey, the outbox's chat_key): the platform and the bot's
// account stay, the chat id, colons and all, becomes its ID. A value of
// another shape is one ID.
func (p *Pseudonymizer) ChatKey(key string) string {
	if p == nil || key == "" {
		return key
	}
	platform, rest, ok1 := strings.Cut(key, ":")
	account, chat, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || platform == "" || chat == "" {
		return p.ID(key)
	}
	return platform + ":" + account + ":" + p.ID(chat)
}

// personalEventIDs are the platforms whose event ids name a person or a
// chat: Signal's is "<sender's number or uuid>:<timestamp>", a WhatsApp
// wamid is base64 that holds the sender's number, an e-mail's Message-ID
// often holds an address or a host, Slack's starts with the channel id,
// Teams's with the conversation id, Google Chat's message name with the
// space (its platform is "google_chat"). The others' (Telegram update ids, Discord and Mattermost
// snowflakes, Matrix event ids, BlueBubbles guids, LINE webhook event
// ids, Twilio SIDs) are opaque numbers or random strings that name no
// one and find the message on the platform.
var personalEventIDs = map[string]bool{
	"signal": true, "whatsapp": true, "email": true, "slack": true, "teams": true, "google_chat": true,
}

// MsgID pseudonymizes a bus message id, "<platform>:<account>:<event id>"
// (the inbound Nats-Msg-Id, the router's dedupe id), and the ids made of
// one after "notice:" or "press:" (a router notice's turn id and bus
// message id, "notice:<dedupe id>:<n>", a delivery idempotency key made
// of them, a button press's key): on the platforms whose event ids name a
// person or a chat (personalEventIDs) the event id, and what follows it,
// becomes its ID; any other value is kept as it is.
func (p *Pseudonymizer) MsgID(id string) string {
	if p == nil {
		return id
	}
	for _, prefix := range []string{"notice:", "press:"} {
		if rest, ok := strings.CutPrefix(id, prefix); ok {
			if ps := p.MsgID(rest); ps != rest {
				return prefix + ps
			}
			return id
		}
	}
	platform, rest, ok := strings.Cut(id, ":")
	if !ok || !personalEventIDs[platform] {
		return id
	}
	account, event, ok := strings.Cut(rest, ":")
	if !ok || event == "" {
		return id
	}
	return platform + ":" + account + ":" + p.ID(event)
}
