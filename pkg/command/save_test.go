package command

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseSave(t *testing.T) {
	tests := []struct {
		args    string
		want    Save
		usage   bool   // ErrSaveUsage
		unknown string // an unknown format's error text
	}{
		{args: "", usage: true},
		{args: "   ", usage: true},
		{args: "redact", want: Save{Redact: true}, usage: true},
		{args: "json", want: Save{Format: "json"}},
		{args: "MD", want: Save{Format: "md"}},
		{args: "markdown notes.md", want: Save{Format: "md", FileName: "notes.md"}},
		{args: "snapshot", want: Save{Format: "json"}},
		{args: "html session.html redact", want: Save{Format: "html", FileName: "session.html", Redact: true}},
		{args: "html --REDACT", want: Save{Format: "html", Redact: true}},
		{args: "md a.md b.md", want: Save{Format: "md", FileName: "a.md"}},
		{args: "md redact x", want: Save{Format: "md", FileName: "redact"}},
		{args: "pdf", unknown: "Unknown format 'pdf' — expected one of: json, md, html"},
		{args: "PDF out.pdf redact", want: Save{Redact: true}, unknown: "Unknown format 'pdf' — expected one of: json, md, html"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			got, err := ParseSave(tt.args)
			switch {
			case tt.usage:
				if !errors.Is(err, ErrSaveUsage) {
					t.Fatalf("ParseSave(%q) error %v, want the usage", tt.args, err)
				}
			case tt.unknown != "":
				if err == nil || err.Error() != tt.unknown {
					t.Fatalf("ParseSave(%q) error %v, want %q", tt.args, err, tt.unknown)
				}
			case err != nil:
				t.Fatalf("ParseSave(%q): %v", tt.args, err)
			}
			if got != tt.want {
				t.Errorf("ParseSave(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}

func TestSaveFileName(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		name, id, format, want string
	}{
		{"", "20261203_abc", "md", "hermes_session_20261203_abc.md"},
		{"", "../../x y", "json", "hermes_session_x_y.json"},
		{"", "", "html", "hermes_session_session.html"},
		{"notes.md", "s", "md", "notes.md"},
		{"notes", "s", "md", "notes.md"},
		{"Notes.MARKDOWN", "s", "md", "Notes.MARKDOWN"},
		{"page.htm", "s", "html", "page.htm"},
		{"notes.txt", "s", "md", "notes.txt.md"},
		{"../../etc/passwd", "s", "json", "passwd.json"},
		{`C:\Users\me\out.json`, "s", "json", "out.json"},
		{"dir/", "s1", "md", "hermes_session_s1.md"},
		{"..", "s1", "md", "hermes_session_s1.md"},
		{".hidden.md", "s", "md", "hidden.md"},
		{"my file<script>.html", "s", "html", "my_file_script_.html"},
		{"résumé 日本.md", "s", "md", "résumé_日本.md"},
		{"a\x00b\nc.md", "s", "md", "a_b_c.md"},
		{long + ".md", "s", "md", strings.Repeat("a", SaveMaxFileName-3) + ".md"},
		{long, "s", "json", strings.Repeat("a", SaveMaxFileName-5) + ".json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SaveFileName(tt.name, tt.id, tt.format); got != tt.want {
				t.Errorf("SaveFileName(%q, %q, %q) = %q, want %q", tt.name, tt.id, tt.format, got, tt.want)
			}
		})
	}
}

// FuzzParseSave: whatever the argument, ParseSave gives a known format
// or an error, and the name SaveFileName makes of its file name is safe
// to send: no separator, no control character, no leading dot, within
// the length bound, with the format's extension.
func FuzzParseSave(f *testing.F) {
	for _, s := range []string{"", "json", "md notes.md redact", "html ../../x.html", "pdf", "md " + strings.Repeat("é", 200), "md .\x00/", "REDACT", "md \\\\srv\\share\\f.md"} {
		f.Add(s, "20261203_120000_abcdef")
	}
	f.Fuzz(func(t *testing.T, args, sessionID string) {
		s, err := ParseSave(args)
		if err != nil {
			if s.Format != "" {
				t.Fatalf("ParseSave(%q): format %q with error %v", args, s.Format, err)
			}
			return
		}
		if _, ok := saveExts[s.Format]; !ok {
			t.Fatalf("ParseSave(%q): format %q", args, s.Format)
		}
		name := SaveFileName(s.FileName, sessionID, s.Format)
		if !utf8.ValidString(name) || name == "" || strings.ContainsAny(name, "/\\\x00\n\r") || strings.HasPrefix(name, ".") {
			t.Fatalf("SaveFileName(%q, %q) = %q is not safe", s.FileName, sessionID, name)
		}
		if n := utf8.RuneCountInString(name); n > SaveMaxFileName {
			t.Fatalf("SaveFileName(%q) = %q: %d runes", s.FileName, name, n)
		}
		ok := false
		for _, e := range saveExts[s.Format] {
			ok = ok || strings.HasSuffix(strings.ToLower(name), e)
		}
		if !ok {
			t.Fatalf("SaveFileName(%q, %s) = %q lacks the extension", s.FileName, s.Format, name)
		}
		if again := SaveFileName(name, sessionID, s.Format); again != name {
			t.Fatalf("SaveFileName is not stable: %q then %q", name, again)
		}
	})
}
