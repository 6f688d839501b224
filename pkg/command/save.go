package command

import (
	"errors"
	"strings"
	"unicode"
)

// SaveUsage is Hermes's answer to a bare /save (hermes_cli/session_export.py,
// SAVE_USAGE), its filename line made true of a chat: the file comes
// here, there is no directory to name.
const SaveUsage = "/save — export the current session to a file\n" +
	"Usage: /save <format> [filename] [redact]\n\n" +
	"Formats:\n" +
	"  json    full session snapshot (canonical export shape)\n" +
	"  md      readable Markdown transcript\n" +
	"  html    standalone single-file HTML page (shareable, no dependencies)\n\n" +
	"Options:\n" +
	"  filename   optional file name (default: auto-named; sent here as a file)\n" +
	"  redact     scrub API keys, tokens, and credentials before writing\n\n" +
	"Examples:\n" +
	"  /save json\n" +
	"  /save html\n" +
	"  /save md notes.md\n" +
	"  /save html session.html redact"

// Save is /save's argument, read as Hermes reads it.
type Save struct {
	// Format is json, md or html.
	Format string
	// FileName is the name the user asked for, as typed ("" for the
	// default); SaveFileName makes it safe.
	FileName string
	// Redact: the last word was "redact" (or "--redact").
	Redact bool
}

// ErrSaveUsage is ParseSave's error for a bare /save (or a bare
// "/save redact"): the answer is SaveUsage alone.
var ErrSaveUsage = errors.New("save: no format")

// saveFormats maps what a user types to the format (Hermes's
// _SAVE_FORMAT_ALIASES).
var saveFormats = map[string]string{"json": "json", "snapshot": "json", "md": "md", "markdown": "md", "html": "html"}

// ParseSave reads "/save <json|md|html> [filename] [redact]" as Hermes's
// _handle_save_command: the last word "redact" (any case, or
// "--redact") asks for redaction and comes off; the first word left is
// the format, a second the file name, any more are ignored. No format:
// ErrSaveUsage; an unknown one: Hermes's "Unknown format 'x' — expected
// one of: json, md, html", to go before the usage.
func ParseSave(args string) (Save, error) {
	var s Save
	parts := strings.Fields(args)
	if n := len(parts); n > 0 {
		if last := strings.ToLower(parts[n-1]); last == "redact" || last == "--redact" {
			s.Redact, parts = true, parts[:n-1]
		}
	}
	if len(parts) == 0 {
		return s, ErrSaveUsage
	}
	token := strings.ToLower(parts[0])
	f, ok := saveFormats[token]
	if !ok {
		return s, UnknownSaveFormatError{Format: truncateRunes(token, 40)}
	}
	s.Format = f
	if len(parts) > 1 {
		s.FileName = parts[1]
	}
	return s, nil
}

// UnknownSaveFormatError is a /save format that is none of json, md and
// html; its text is Hermes's answer, shown to the user as it is.
type UnknownSaveFormatError struct {
	Format string
}

func (e UnknownSaveFormatError) Error() string {
	return "Unknown format '" + e.Format + "' — expected one of: json, md, html"
}

// truncateRunes cuts s to at most n runes.
func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// SaveMaxFileName bounds a file name /save sends, in runes, its
// extension included: every platform takes it (Telegram and Discord
// accept far longer; a file system 255 bytes).
const SaveMaxFileName = 100

// saveExts are the extensions a file name of each format may already
// end with.
var saveExts = map[string][]string{"json": {".json"}, "md": {".md", ".markdown"}, "html": {".html", ".htm"}}

// SaveFileName is the name a /save export is sent under: name (as
// typed) made safe, or, when it is empty or nothing of it is left,
// Hermes's default "hermes_session_<session id>.<format>". Made safe:
// only its last path element (as Hermes's os.path.basename; "\" counts
// as a separator too), every character but letters, digits, ".", "-"
// and "_" replaced by "_", leading dots dropped (no hidden file, no
// ".."), cut to SaveMaxFileName runes; the format's extension is added
// when the name does not end with one of it (Hermes keeps any name as
// typed).
func SaveFileName(name, sessionID, format string) string {
	ext := "." + format
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.TrimLeft(safeName(name), ".")
	if strings.Trim(name, "_.") == "" {
		id := strings.Trim(safeName(sessionID), "._")
		if id == "" {
			id = "session"
		}
		name = "hermes_session_" + id
	}
	has := false
	for _, e := range saveExts[format] {
		if len(name) > len(e) && strings.EqualFold(name[len(name)-len(e):], e) {
			has = true
		}
	}
	if !has {
		name += ext
	}
	if r := []rune(name); len(r) > SaveMaxFileName {
		// Keep the extension: cut the stem.
		stemExt := ext
		if has {
			stemExt = name[strings.LastIndex(name, "."):]
		}
		stem := []rune(strings.TrimSuffix(name, stemExt))
		name = string(stem[:SaveMaxFileName-len([]rune(stemExt))]) + stemExt
	}
	return name
}

// safeName keeps letters, digits, ".", "-" and "_" of s, each other
// character "_".
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '.' || r == '-' || r == '_',
			r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r > 127 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
