package chunk_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
)

func TestLimits(t *testing.T) {
	tests := []struct {
		platform string
		want     chunk.Limit
	}{
		{"telegram", chunk.Limit{Max: 4096, Measure: chunk.UTF16}},
		{"Telegram ", chunk.Limit{Max: 4096, Measure: chunk.UTF16}},
		{"discord", chunk.Limit{Max: 2000, Measure: chunk.Runes}},
		{"slack", chunk.Limit{Max: 39000, Measure: chunk.EscapedRunes}},
		{"matrix", chunk.Limit{Max: 4000, Measure: chunk.Runes}},
		{"mattermost", chunk.Limit{Max: 4000, Measure: chunk.Runes}},
		{"whatsapp", chunk.Limit{Max: 4096, Measure: chunk.Runes}},
		{"signal", chunk.Limit{Max: 8000, Measure: chunk.UTF16}},
		{"sms", chunk.Limit{Max: 1600, Measure: chunk.UTF16}},
		{"line", chunk.Limit{Max: 25000, Measure: chunk.UTF16}},
		{"google_chat", chunk.Limit{Max: 4096, Measure: chunk.Runes}},
		{"teams", chunk.Limit{Max: 28000, Measure: chunk.Runes}},
		{"bluebubbles", chunk.Limit{Max: 4000, Measure: chunk.Runes, NoCounter: true}},
		{"email", chunk.Limit{Max: 50000, Measure: chunk.Runes}},
		{"api", chunk.Unlimited},
		{"irc", chunk.DefaultLimit},
		{"", chunk.DefaultLimit},
	}
	for _, tt := range tests {
		t.Run(tt.platform, func(t *testing.T) {
			if got := chunk.Limits(tt.platform); got != tt.want {
				t.Errorf("Limits(%q) = %+v, want %+v", tt.platform, got, tt.want)
			}
		})
	}
}

func TestMeasure(t *testing.T) {
	tests := []struct {
		s                           string
		runes, utf16, byts, escaped int
	}{
		{"", 0, 0, 0, 0},
		{"abc", 3, 3, 3, 3},
		{"héllo", 5, 5, 6, 5},
		{"😀", 1, 2, 4, 1},
		{"a😀b", 3, 4, 6, 3},
		{"\xff", 1, 1, 1, 1},
		{"a<b>&c", 6, 6, 6, 16},
	}
	for _, tt := range tests {
		t.Run(tt.s, func(t *testing.T) {
			if got := chunk.Runes.Len(tt.s); got != tt.runes {
				t.Errorf("Runes = %d, want %d", got, tt.runes)
			}
			if got := chunk.UTF16.Len(tt.s); got != tt.utf16 {
				t.Errorf("UTF16 = %d, want %d", got, tt.utf16)
			}
			if got := chunk.Bytes.Len(tt.s); got != tt.byts {
				t.Errorf("Bytes = %d, want %d", got, tt.byts)
			}
			if got := chunk.EscapedRunes.Len(tt.s); got != tt.escaped {
				t.Errorf("EscapedRunes = %d, want %d", got, tt.escaped)
			}
		})
	}
}

func TestSplitLimit(t *testing.T) {
	l64 := chunk.Limit{Max: 64, Measure: chunk.Runes}
	line := strings.Repeat("x", 40)
	tests := []struct {
		name  string
		text  string
		limit chunk.Limit
		want  []string
	}{
		{"empty", "", l64, []string{""}},
		{"fits unchanged", "hello\n```go\nunclosed", l64, []string{"hello\n```go\nunclosed"}},
		{"exactly the limit", strings.Repeat("a", 64), l64, []string{strings.Repeat("a", 64)}},
		{
			"newline preferred over space",
			line + " a\n" + line,
			l64,
			[]string{line + " a (1/2)", line + " (2/2)"},
		},
		{
			"space when no newline",
			line + " " + line,
			l64,
			[]string{line + " (1/2)", line + " (2/2)"},
		},
		{
			"hard cut",
			strings.Repeat("a", 100),
			l64,
			[]string{strings.Repeat("a", 58) + " (1/2)", strings.Repeat("a", 42) + " (2/2)"},
		},
		{
			"fence closed and reopened with its tag",
			"```go\n" + "a := 1\n" + "b := 2\n" + "c := 3\n" + "d := 4\n" + "e := 5\n" + "f := 6\n" + "g := 7\n" + "h := 8\n" + "```",
			l64,
			[]string{
				"```go\na := 1\nb := 2\nc := 3\nd := 4\ne := 5\nf := 6\n```\n(1/2)",
				"```go\ng := 7\nh := 8\n```\n(2/2)",
			},
		},
		{
			// The close stands in for the fence's own closing line
			// (indented: a fence in a list), which the next part would
			// otherwise start with, after a reopen: an empty block.
			"cut just before the closing fence line reopens no empty block",
			"```\n" + strings.Repeat("x", 48) + "\n  ```\n" + line,
			l64,
			[]string{"```\n" + strings.Repeat("x", 48) + "\n```\n(1/2)", line + " (2/2)"},
		},
		{
			// A cut at the newline after the opening line would show
			// an empty code block, closed at once, and reopen it for
			// the code in the next part.
			"no cut right after the line that opens a fence",
			line + "\n```go\n" + strings.Repeat("y", 60) + "\n```",
			l64,
			[]string{line + " (1/3)", "```go\n" + strings.Repeat("y", 48) + "\n```\n(2/3)", "```go\n" + strings.Repeat("y", 12) + "\n```\n(3/3)"},
		},
		{
			"a fence opening the part is cut in its code, not after its opening line",
			"```go\n" + strings.Repeat("y", 60) + "\n```",
			l64,
			[]string{"```go\n" + strings.Repeat("y", 48) + "\n```\n(1/2)", "```go\n" + strings.Repeat("y", 12) + "\n```\n(2/2)"},
		},
		{
			// A cut at the indent of the code's first line leaves the
			// part ending in the opening line and blanks: an empty
			// code block too.
			"no cut in the blanks right after the line that opens a fence",
			"a\n```go\n    " + strings.Repeat("y", 60) + "\n```",
			l64,
			[]string{"a (1/3)", "```go\n    " + strings.Repeat("y", 44) + "\n```\n(2/3)", "```go\n" + strings.Repeat("y", 16) + "\n```\n(3/3)"},
		},
		{
			"no cut at a blank line right after the line that opens a fence",
			"a\n```go\n\n" + strings.Repeat("y", 60) + "\n```",
			l64,
			[]string{"a (1/3)", "```go\n\n" + strings.Repeat("y", 47) + "\n```\n(2/3)", "```go\n" + strings.Repeat("y", 13) + "\n```\n(3/3)"},
		},
		{
			"cut after a closed fence needs no reopen",
			"```\nabc\n```\n" + line + "\n" + line,
			l64,
			[]string{"```\nabc\n```\n" + line + " (1/2)", line + " (2/2)"},
		},
		{
			// Hermes's rule: a newline in the first half would leave a
			// near-empty message before the paragraph.
			"newline in the first half: the last space",
			"Summary:\n" + line + " " + line,
			l64,
			[]string{"Summary:\n" + line + " (1/2)", line + " (2/2)"},
		},
		{
			// Hermes's rule too: each message renders on its own.
			"not inside an inline code span",
			strings.Repeat("a", 45) + " run `go test ./...` now",
			l64,
			[]string{strings.Repeat("a", 45) + " run (1/2)", "`go test ./...` now (2/2)"},
		},
		{
			"a code span too long to move before is cut",
			"a `" + strings.Repeat("b", 40) + " " + strings.Repeat("b", 40) + "`",
			l64,
			[]string{"a `" + strings.Repeat("b", 40) + " (1/2)", strings.Repeat("b", 40) + "` (2/2)"},
		},
		{
			"backticks in a fence are not spans",
			"```\n" + strings.Repeat("c", 20) + " ` " + strings.Repeat("d", 40) + "\n```",
			l64,
			[]string{"```\n" + strings.Repeat("c", 20) + " `\n```\n(1/2)", "```\n" + strings.Repeat("d", 40) + "\n```\n(2/2)"},
		},
		{
			// CommonMark, and markup.Convert: a backtick after the
			// opening run makes the line code inline, not a fence.
			"a line of inline triple backticks opens no fence",
			"```npm install```\n" + line[:30] + "\n" + line,
			l64,
			[]string{"```npm install```\n" + line[:30] + " (1/2)", line + " (2/2)"},
		},
		{
			"newline in the first half and no space: the newline, not mid-word",
			"Summary:\n" + strings.Repeat("y", 80),
			l64,
			[]string{"Summary: (1/3)", strings.Repeat("y", 58) + " (2/3)", strings.Repeat("y", 22) + " (3/3)"},
		},
		{
			"surrogate pair never split (telegram)",
			strings.Repeat("😀", 40),
			chunk.Limit{Max: 64, Measure: chunk.UTF16},
			[]string{strings.Repeat("😀", 29) + " (1/2)", strings.Repeat("😀", 11) + " (2/2)"},
		},
		{
			"utf-8 never split (bytes)",
			strings.Repeat("é", 40),
			chunk.Limit{Max: 64, Measure: chunk.Bytes},
			[]string{strings.Repeat("é", 29) + " (1/2)", strings.Repeat("é", 11) + " (2/2)"},
		},
		{
			"max below MinMax is raised",
			strings.Repeat("a", 70),
			chunk.Limit{Max: 10, Measure: chunk.Runes},
			[]string{strings.Repeat("a", 58) + " (1/2)", strings.Repeat("a", 12) + " (2/2)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chunk.SplitLimit(tt.text, tt.limit)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("SplitLimit =\n%q\nwant\n%q", got, tt.want)
			}
			checkParts(t, tt.text, tt.limit, chunk.Parts(tt.text, tt.limit))
		})
	}
}

func TestSplitCounterWidth(t *testing.T) {
	// 15 parts: the counter needs two digits, so every part must leave room
	// for " (15/15)".
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	text := strings.Repeat("b", 56*15)
	got := chunk.SplitLimit(text, l)
	if len(got) < 10 {
		t.Fatalf("got %d parts, want at least 10", len(got))
	}
	for i, s := range got {
		if n := l.Len(s); n > l.Max {
			t.Errorf("part %d has length %d > %d", i, n, l.Max)
		}
	}
	checkParts(t, text, l, chunk.Parts(text, l))
}

func TestSplitPlatform(t *testing.T) {
	text := strings.Repeat("word ", 1000) // 5000 runes
	if got := chunk.Split(text, "discord"); len(got) != 3 {
		t.Errorf("discord: %d parts, want 3", len(got))
	}
	for _, platform := range []string{"slack", "api"} {
		if got := chunk.Split(text, platform); len(got) != 1 || got[0] != text {
			t.Errorf("%s: want the text unchanged, got %d parts", platform, len(got))
		}
	}
	// Slack counts the text after the gateway escapes it: 35,000 runes of
	// code with 7,000 "<" is 56,000 characters there.
	code := strings.Repeat("a<b; ", 7000)
	parts := chunk.Split(code, "slack")
	if len(parts) < 2 {
		t.Errorf("slack: %d parts for text that outgrows the limit once escaped", len(parts))
	}
	for i, p := range parts {
		escaped := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(p)
		if n := len([]rune(escaped)); n > 39000 {
			t.Errorf("slack part %d: %d characters once escaped", i, n)
		}
	}
	long := strings.Repeat("```go\nx := 1\n```\n", 10000) // 170,000 runes
	if got := chunk.Split(long, "api"); len(got) != 1 || got[0] != long {
		t.Errorf("api: want a long answer unchanged, got %d parts", len(got))
	}
}

func TestSplitWithoutCounter(t *testing.T) {
	// iMessage bubbles flow on: Hermes strips the "(i/N)" counters, so a
	// long BlueBubbles answer goes out as parts of plain text, each cut
	// as close to the limit as a counted part would be.
	prose := strings.Repeat("word ", 1700) // 8,500 runes
	code := "Here it is:\n```go\n" + strings.Repeat("x := 1 // a line of code\n", 300) + "```\nDone."
	for _, tt := range []struct {
		name, text string
		parts      int
	}{
		{"prose", prose, 3},
		{"code", code, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := chunk.Limits("bluebubbles")
			parts := chunk.Parts(tt.text, l)
			if len(parts) != tt.parts {
				t.Errorf("%d parts, want %d", len(parts), tt.parts)
			}
			for i, s := range chunk.Split(tt.text, "bluebubbles") {
				if strings.Contains(s, fmt.Sprintf("(%d/%d)", i+1, len(parts))) {
					t.Errorf("part %d carries a counter: …%q", i, s[max(0, len(s)-20):])
				}
			}
			checkParts(t, tt.text, l, parts)
		})
	}
	// The same text on a platform with counters keeps them.
	if got := chunk.Split(prose, "matrix"); !strings.HasSuffix(got[0], " (1/3)") {
		t.Errorf("matrix: first part ends %q, want a counter", got[0][len(got[0])-10:])
	}
}

// checkParts asserts every property Parts promises.
func checkParts(t *testing.T, text string, l chunk.Limit, parts []chunk.Part) {
	t.Helper()
	if l.Max < chunk.MinMax {
		l.Max = chunk.MinMax
	}
	if len(parts) == 0 {
		t.Fatal("no parts")
	}
	if l.Fits(text) {
		if len(parts) != 1 || parts[0] != (chunk.Part{Body: text}) {
			t.Fatalf("text fits but parts = %q", parts)
		}
		return
	}
	var joined strings.Builder
	var prev chunk.Part
	prevLang := ""
	for i, p := range parts {
		msg := p.String()
		if n := l.Len(msg); n > l.Max {
			t.Errorf("part %d: length %d > %d: %q", i, n, l.Max, msg)
		}
		if p.Body == "" {
			t.Errorf("part %d: empty body", i)
		}
		if utf8.ValidString(text) && !utf8.ValidString(msg) {
			t.Errorf("part %d: invalid UTF-8 from valid input", i)
		}
		if open, _ := fenceAfter(msg); open {
			t.Errorf("part %d: unbalanced fences: %q", i, msg)
		}
		// Reopen exactly when the previous part was closed, unless it
		// was cut just before the fence's closing line, which its
		// separator dropped (its close stands in for it).
		if (prev.Close != "" && !closedBySep(prev.Sep)) != (p.Reopen != "") {
			t.Errorf("part %d: reopen %q after close %q", i, p.Reopen, prev.Close)
		}
		if p.Reopen != "" && p.Reopen != "```"+prevLang+"\n" && p.Reopen != "```\n" {
			t.Errorf("part %d: reopen %q, want tag %q", i, p.Reopen, prevLang)
		}
		open, lang := fenceAfter(p.Reopen + p.Body)
		if open != (p.Close == "\n```") || (!open && p.Close != "") {
			t.Errorf("part %d: close %q but open=%v", i, p.Close, open)
		}
		// The body's last line but blanks (an indent, blank lines)
		// opens its fence: the part shows an empty code block. Only a
		// hard cut may (an opening line longer than the part).
		body := strings.TrimRight(p.Body, " \t\r\n")
		if last := body[strings.LastIndexByte(body, '\n')+1:]; p.Close != "" && p.Sep != "" && opensFence(last) {
			if before, _ := fenceAfter(p.Reopen + strings.TrimSuffix(body, last)); !before {
				t.Errorf("part %d: cut right after the line that opens its fence, an empty code block: %q", i, p.String())
			}
		}
		prevLang = lang
		want := fmt.Sprintf("(%d/%d)", i+1, len(parts))
		switch {
		case l.NoCounter && p.Suffix != "":
			t.Errorf("part %d: suffix %q, want none", i, p.Suffix)
		case !l.NoCounter && p.Suffix != " "+want && p.Suffix != "\n"+want:
			t.Errorf("part %d: suffix %q, want %q", i, p.Suffix, want)
		}
		switch {
		case closedBySep(p.Sep):
			if p.Close == "" {
				t.Errorf("part %d: separator %q drops a closing fence line, but the part closes none", i, p.Sep)
			}
		case p.Sep == "":
			if i < len(parts)-1 && cuttable(p.Body, text[min(joined.Len(), len(text)):], p.Reopen == "") {
				t.Errorf("part %d: hard cut but body has a separator: %q", i, p.Body)
			}
		case p.Sep == " " || p.Sep == "\n":
			// Which of the two: the table tests (the window a cut was
			// made in is not known here).
		default:
			t.Errorf("part %d: separator %q", i, p.Sep)
		}
		if i == len(parts)-1 && p.Sep != "" && !closedBySep(p.Sep) {
			t.Errorf("last part has separator %q", p.Sep)
		}
		joined.WriteString(p.Body + p.Sep)
		prev = p
	}
	if joined.String() != text {
		t.Errorf("bodies and separators do not rejoin to the text:\n%q\n%q", joined.String(), text)
	}
}

// opensFence reports whether line, read outside a fence, opens one:
// backticks after spaces, and no backtick after them.
func opensFence(line string) bool {
	t := strings.TrimLeft(line, " ")
	return strings.HasPrefix(t, "```") && !strings.Contains(strings.TrimLeft(t, "`"), "`")
}

// closedBySep reports whether sep is a newline and a fence's closing
// line: backticks (after spaces), blanks, and the line's newline unless
// the text ends there.
func closedBySep(sep string) bool {
	line, ok := strings.CutPrefix(sep, "\n")
	if !ok || strings.Count(line, "\n") > 1 || strings.Contains(strings.TrimSuffix(line, "\n"), "\n") {
		return false
	}
	t := strings.TrimLeft(line, " ")
	return strings.HasPrefix(t, "```") && strings.TrimRight(strings.TrimLeft(t, "`"), " \t\r\n") == ""
}

// cuttable reports whether body, the start of text, has a separator a
// cut could take: a newline, or a space not followed by backticks that
// would start a fence line after the cut (spaces, then ```); neither in
// a line that opens a fence nor at its end or in the blanks after it,
// which would leave an empty code block (outside: the part does not
// start in a fence).
func cuttable(body, text string, outside bool) bool {
	open := !outside
	start := 0
	blanks := false // after a line that opens a fence, before its code
	for _, line := range strings.SplitAfter(body, "\n") {
		opener := !open && opensFence(strings.TrimSuffix(line, "\n"))
		// A line of text that starts like a fence ("```npm i```"):
		// cut before the backtick after its run, its head opens one.
		head := -1
		if t := strings.TrimLeft(line, " "); !open && !opener && strings.HasPrefix(t, "```") {
			info := strings.TrimLeft(t, "`")
			head = start + len(line) - len(info) + strings.IndexByte(info, '`')
		}
		open, _ = fenceAfter(boolFence(open) + line)
		for j := start; j < start+len(line); j++ {
			if opener {
				blanks = true
			} else if blanks && !strings.ContainsRune(" \t\r\n", rune(body[j])) {
				blanks = false
			}
			if j == 0 || opener || blanks || j < head {
				continue
			}
			switch body[j] {
			case '\n':
				return true
			case ' ':
				if j+1 > len(text) || !strings.HasPrefix(strings.TrimLeft(text[j+1:], " "), "```") {
					return true
				}
			}
		}
		start += len(line)
	}
	return false
}

// boolFence is a line that leaves a fence open when open, for fenceAfter.
func boolFence(open bool) string {
	if open {
		return "```\n"
	}
	return ""
}

// fenceAfter is an independent reading of the fence rule: a line whose
// first characters after spaces are ``` toggles, unless it would open a fence
// and has a backtick after its opening run, or would close one and has
// more than blanks after its backticks ("```go" in a fence is code, as
// TestFenceLineWithTextIsNoClose has it); an opening line's first word
// after the backticks is the tag.
func fenceAfter(s string) (open bool, lang string) {
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimLeft(line, " ")
		if !strings.HasPrefix(t, "```") {
			continue
		}
		if open {
			if strings.TrimRight(strings.TrimLeft(t, "`"), " \t\r") == "" {
				open, lang = false, ""
			}
			continue
		}
		if strings.Contains(strings.TrimLeft(t, "`"), "`") {
			continue // code inline: "```x```"
		}
		open = true
		lang = ""
		if f := strings.Fields(strings.TrimLeft(t, "`")); len(f) > 0 {
			lang = f[0]
		}
	}
	return open, lang
}

func FuzzParts(f *testing.F) {
	f.Add("hello world", uint16(64), uint8(0))
	f.Add("```go\nfunc main() {\n\tprintln(\"hi\")\n}\n```\nand then some prose that goes on and on and on", uint16(64), uint8(1))
	f.Add(strings.Repeat("😀 ", 50), uint16(70), uint8(1))
	f.Add("a ```py\nx\n``` b\n```\n"+strings.Repeat("y", 200), uint16(80), uint8(2))
	f.Add(strings.Repeat("run `go test` and \\` then ", 12), uint16(70), uint8(0))
	f.Add(strings.Repeat("word ", 40), uint16(64), uint8(4))
	f.Add("```\n"+strings.Repeat("x", 48)+"\n  ```\n"+strings.Repeat("y", 40), uint16(64), uint8(0))
	f.Add("```\r\n"+strings.Repeat("x", 47)+"\r\n```\r\n"+strings.Repeat("y", 40), uint16(64), uint8(0))
	f.Fuzz(func(t *testing.T, text string, max uint16, measure uint8) {
		// Bit 2 of measure asks for parts without counters.
		l := chunk.Limit{Max: int(max % 512), Measure: chunk.Measure(measure % 4), NoCounter: measure&4 != 0}
		checkParts(t, text, l, chunk.Parts(text, l))
	})
}

func BenchmarkSplitTelegram(b *testing.B) {
	var sb strings.Builder
	for i := 0; sb.Len() < 64<<10; i++ {
		if i%10 == 0 {
			sb.WriteString("```go\n")
		}
		fmt.Fprintf(&sb, "line %d with some words and an emoji 😀 in it\n", i)
		if i%10 == 9 {
			sb.WriteString("```\n")
		}
	}
	text := sb.String()
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		chunk.Split(text, "telegram")
	}
}

// A line indented with a tab before its backticks is no fence line for
// markup.Convert or Signal's formatter (nor, outside a list, for
// CommonMark: an indented code line), so Parts closes and reopens no
// fence around it: a close the renderers read as an opening fence would
// show the rest of the message, and the next one, as code.
func TestTabIndentedBackticksAreNoFence(t *testing.T) {
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	text := "Run it:\n\t```sh\n" + strings.Repeat("\techo one two three four five\n", 4) + "\t```\nDone."
	for i, p := range chunk.Parts(text, l) {
		if p.Reopen != "" || p.Close != "" {
			t.Errorf("part %d: reopen %q, close %q: %q", i, p.Reopen, p.Close, p.String())
		}
	}
	if !chunk.Balanced("Run it:\n\t```sh\n\techo one") {
		t.Error("a tab-indented ``` line opens a fence")
	}
}

// A cut at a space never starts a message with backticks that were in
// the middle of a line ("wrap it in ``` fences"): at the start of its
// line they would be a fence line, and the message after the cut would
// show as code what the answer wrote as text.
func TestCutBeforeMidLineBackticks(t *testing.T) {
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	for _, text := range []string{
		"Wrap each block of the code you paste in the ``` fences, " + strings.Repeat("and more words ", 5),
		strings.Repeat("x", 30) + " " + strings.Repeat("y", 19) + " ```" + strings.Repeat("z", 20) + " and some more words after it",
		strings.Repeat("x", 30) + " " + strings.Repeat("y", 19) + "   ```" + strings.Repeat("z", 20) + " and some more words after it",
	} {
		for i, p := range chunk.Parts(text, l) {
			if p.Reopen != "" || p.Close != "" || strings.HasPrefix(strings.TrimLeft(p.Body, " "), "```") {
				t.Errorf("%q: part %d opens a fence: %q", text[:20], i, p.String())
			}
		}
	}
}

// A line in a fence that starts with ``` and has text after the
// backticks is a line of the code, not its close (CommonMark, and
// markup.Convert since it keeps that line): Parts reads the fence as
// the renderers do. Read as a close, the real close after it opened a
// fence, so the text after the code was closed and reopened across the
// cuts and each message after showed it as code.
func TestFenceLineWithTextIsNoClose(t *testing.T) {
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	for _, c := range []struct {
		name, code string
	}{
		{"info after the backticks", "```md\nan example:\n```go\nx := 1\n```\n"},
		{"text after blanks", "```\ncode\n```  not a close\nmore code\n```\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := c.code + strings.Repeat("plain words after the code ", 8)
			if chunk.Balanced(strings.TrimSuffix(c.code, "```\n")) {
				t.Errorf("Balanced(%q): the fence reads as closed", strings.TrimSuffix(c.code, "```\n"))
			}
			if !chunk.Balanced(c.code) {
				t.Errorf("Balanced(%q): the fence reads as open", c.code)
			}
			after := false // a part that starts after the code's close
			pos := 0
			for i, p := range chunk.Parts(text, l) {
				if after && (p.Reopen != "" || p.Close != "") {
					t.Errorf("part %d, after the code, reopen %q, close %q: %q", i, p.Reopen, p.Close, p.String())
				}
				pos += len(p.Body) + len(p.Sep)
				after = pos >= len(c.code)
			}
		})
	}
}

// Cut keeps the longest start within the measure's count and never
// splits a rune (a UTF-16 pair, a UTF-8 sequence).
func TestCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		m    chunk.Measure
		s    string
		n    int
		want string
	}{
		{chunk.UTF16, "hello", 3, "hel"},
		{chunk.UTF16, "hi", 5, "hi"},
		{chunk.UTF16, "a🔒b", 2, "a"},
		{chunk.UTF16, "a🔒b", 3, "a🔒"},
		{chunk.UTF16, "🔒", 1, ""},
		{chunk.UTF16, "a\xffb", 2, "a\xff"},
		{chunk.Runes, "a🔒b", 2, "a🔒"},
		{chunk.Bytes, "é!", 1, ""},
		{chunk.Bytes, "é!", 2, "é"},
		{chunk.EscapedRunes, "a<b", 4, "a"},
	} {
		if got := tc.m.Cut(tc.s, tc.n); got != tc.want {
			t.Errorf("%s.Cut(%q, %d) = %q, want %q", tc.m, tc.s, tc.n, got, tc.want)
		}
	}
}
