package secret

import "strings"

// The sets of literals Redact's prefilters look for, one per pattern.
const (
	authSet  = 1 << iota // "authorization", any case: authHeader
	querySet             // queryWords, any case: queryParam
	jsonSet              // jsonWords, any case: jsonField
	envSet               // envWords: envAssign
	keySet               // keyStarts where a word may start: prefixed
	allSets  = authSet | querySet | jsonSet | envSet | keySet
)

// prefilter holds every set's literals, to find them all in one pass:
// a Contains per literal was some 60 passes over the text, and most of
// Redact's time on text with no secrets.
var prefilter = func() *literalSet {
	l := new(literalSet)
	l.add(authSet, true, false, "authorization")
	l.add(querySet, true, false, queryWords...)
	l.add(jsonSet, true, false, jsonWords...)
	l.add(envSet, false, false, envWords...)
	l.add(keySet, false, true, keyStarts...)
	return l
}()

// literalSet finds which sets of literals (two bytes or more) a text
// holds, in one pass: at each byte a table says whether any literal
// starts with it and the byte after it, and only then are the literals
// starting with that byte compared.
type literalSet struct {
	pairs  [256][4]uint64 // pairs[c] has bit d when a literal may start with c, d
	lits   [256][]literal // the literals each byte may start
	kelvin uint8          // the sets with a fold literal holding a k or an s
}

// A literal is a word of a set.
type literal struct {
	word string
	set  uint8
	// fold: ASCII letters match in either case (word is lower case),
	// as a (?i) pattern sees them.
	fold bool
	// wordStart: only at the text's start or after a byte that is not
	// a word byte, as \b before a letter sees it.
	wordStart bool
}

func (l *literalSet) add(set uint8, fold, wordStart bool, words ...string) {
	for _, w := range words {
		for _, c := range cases(w[0], fold) {
			for _, d := range cases(w[1], fold) {
				l.pairs[c][d>>6] |= 1 << (d & 63)
			}
			l.addLit(c, literal{word: w, set: set, fold: fold, wordStart: wordStart})
		}
		if fold && strings.ContainsAny(w, "ks") {
			l.kelvin |= set
		}
	}
}

// addLit adds lit to the literals c may start, as one with the literal
// of another set that is the same (such as "token", in queryWords and
// jsonWords), so that a text is compared with it once.
func (l *literalSet) addLit(c byte, lit literal) {
	for i, o := range l.lits[c] {
		if o.word == lit.word && o.fold == lit.fold && o.wordStart == lit.wordStart {
			l.lits[c][i].set |= lit.set
			return
		}
	}
	l.lits[c] = append(l.lits[c], lit)
}

// cases is c, and its other case when fold and c is a letter.
func cases(c byte, fold bool) []byte {
	switch {
	case fold && 'a' <= c && c <= 'z':
		return []byte{c, c - 'a' + 'A'}
	case fold && 'A' <= c && c <= 'Z':
		return []byte{c, c - 'A' + 'a'}
	}
	return []byte{c}
}

// find reports which of the sets in want s may hold a literal of. The
// only other runes Unicode folds to ASCII letters are the Kelvin sign
// (to k) and the long s (to s): a text holding one may hold every set
// with a fold literal that has a k or an s.
func (l *literalSet) find(s string, want uint8) (found uint8) {
	if l.kelvin&want != 0 && (strings.Contains(s, "\u212a") || strings.Contains(s, "\u017f")) {
		found = l.kelvin & want
	}
	word := false // whether s[i-1] is a word byte
	for i := 0; i+1 < len(s) && found != want; i++ {
		c, d := s[i], s[i+1]
		if l.pairs[c][d>>6]&(1<<(d&63)) != 0 {
			for _, lit := range l.lits[c] {
				if lit.set&want&^found != 0 && (!lit.wordStart || !word) && lit.at(s[i:]) {
					found |= lit.set
				}
			}
		}
		word = wordByte[c]
	}
	return found
}

// at reports whether s starts with the literal.
func (lit *literal) at(s string) bool {
	if !lit.fold {
		return strings.HasPrefix(s, lit.word)
	}
	return len(s) >= len(lit.word) && strings.EqualFold(s[:len(lit.word)], lit.word)
}

// literalsFound is what prefilter found in a text, for the prefilters
// to ask while Redact's passes leave the text as it is.
type literalsFound struct {
	text string
	sets uint8
}

// in reports whether s may hold a literal of set: as found when s is
// the text (unchanged: the same string, which compares in constant
// time), else from a pass over s.
func (f *literalsFound) in(s string, set uint8) bool {
	if s == f.text {
		return f.sets&set != 0
	}
	return prefilter.find(s, set) != 0
}

// wordByte marks the bytes of \w, [0-9A-Za-z_], the only ones Go's \b
// counts as word characters: a byte of a multi-byte or invalid UTF-8
// sequence is none.
var wordByte = func() (w [256]bool) {
	for c := range 256 {
		w[c] = '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || c == '_'
	}
	return w
}()
