package streamedit_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	"github.com/switchboard-chat/switchboard/pkg/streamedit"
)

// platform is a fake chat that applies actions and checks they make sense.
type platform struct {
	t       *testing.T
	limit   chunk.Limit
	live    map[int]string
	created int // messages ever created: Send must target the next one
}

func (p *platform) apply(a streamedit.Action) {
	p.t.Helper()
	if a.Kind != streamedit.Delete && !p.limit.Fits(a.Text) {
		p.t.Fatalf("%v %d: %d > %d", a.Kind, a.Message, p.limit.Len(a.Text), p.limit.Max)
	}
	_, live := p.live[a.Message]
	switch a.Kind {
	case streamedit.Send:
		if live || a.Message != p.created {
			p.t.Fatalf("send %d: live=%v created=%d", a.Message, live, p.created)
		}
		if a.Text == "" {
			p.t.Fatalf("send %d: empty", a.Message)
		}
		p.live[a.Message] = a.Text
		p.created++
	case streamedit.Edit:
		if !live {
			p.t.Fatalf("edit %d: not live", a.Message)
		}
		if a.Text == "" {
			p.t.Fatalf("edit %d: empty", a.Message)
		}
		p.live[a.Message] = a.Text
	case streamedit.Delete:
		if !live {
			p.t.Fatalf("delete %d: not live", a.Message)
		}
		delete(p.live, a.Message)
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte{0x40, 0x41, 0x05, 0x90, 0x02, 0x01, 0x41, 0x81, 0x06, 0x44}, false, true)
	f.Add([]byte{0xfc, 0xfc, 0xfc, 0x11, 0x02, 0x02, 0xfc, 0x45, 0x02, 0x01, 0xfc, 0x45}, true, true)
	f.Add([]byte{0x00, 0x04, 0x08, 0x0d, 0x10}, false, false)
	f.Fuzz(func(t *testing.T, ops []byte, differentFinal, canEdit bool) {
		const alphabet = "lorem ipsum\ndolor\n```go\nsit 😀 amet é "
		limit := chunk.Limit{Max: 64, Measure: chunk.UTF16}
		now := t0
		s := streamedit.New(streamedit.Config{Limit: limit, CanEdit: canEdit, Now: func() time.Time { return now }})
		p := &platform{t: t, limit: limit, live: map[int]string{}}
		var fail error
		var streamed strings.Builder
		var last time.Time
		pos := 0
		do := func(acts []streamedit.Action, final bool) {
			if len(acts) > 0 && !final {
				if !canEdit {
					t.Fatal("progress on a platform that cannot edit")
				}
				if !last.IsZero() && now.Sub(last) < streamedit.DefaultInterval {
					t.Fatalf("update %v after the last", now.Sub(last))
				}
				last = now
			}
			for _, a := range acts {
				if a.Final != final {
					t.Fatalf("Final=%v in a %v batch", a.Final, final)
				}
				err := fail
				if final {
					err = nil
				}
				s.OnResult(a, err)
				if err != nil {
					return
				}
				p.apply(a)
			}
		}
		for i := 0; i < len(ops); i++ {
			b := ops[i]
			switch b % 4 {
			case 3:
				// Replace: the text so far loses up to 20 bytes at its end
				// and gains a few: a transformed text that changed what
				// may have been shown.
				cur := streamed.String()
				cut := len(cur) - min(len(cur), int(b/4)%20)
				for cut > 0 && cut < len(cur) && !utf8.RuneStart(cur[cut]) {
					cut--
				}
				next := cur[:cut] + []string{"X", "é"}[int(b/4)%2]
				streamed.Reset()
				streamed.WriteString(next)
				do(s.Replace(next), false)
			case 0:
				n := int(b/4) % 48
				var d strings.Builder
				if n == 0 {
					// A fence line, which opens a code block or closes
					// the one open.
					d.WriteString("\n```go\n")
				}
				for range n {
					r := []rune(alphabet)
					d.WriteRune(r[pos%len(r)])
					pos++
				}
				streamed.WriteString(d.String())
				do(s.Append(d.String()), false)
			case 1:
				now = now.Add(time.Duration(b/4) * 50 * time.Millisecond)
				do(s.Tick(now), false)
			case 2:
				switch (b / 4) % 3 {
				case 0:
					fail = nil
				case 1:
					fail = streamedit.ErrFlood
				case 2:
					fail = errors.New("gone")
				}
			}
		}
		final := streamed.String()
		if differentFinal {
			final = "A different answer: " + final[:len(final)/2]
		}
		do(s.Final(final), true)
		if s.Final("again") != nil {
			t.Fatal("second Final planned actions")
		}
		if strings.Contains(final, "▉") {
			return
		}
		for i, m := range p.live {
			if strings.HasSuffix(m, streamedit.DefaultCursor) {
				t.Fatalf("message %d keeps the cursor: %q", i, m)
			}
		}
		if final != "" && len(p.live) == 0 {
			t.Fatal("final answer not delivered")
		}
		// A message followed by another never ends inside a code block
		// (the next one reopens it), as chunk.Parts cuts.
		top := -1
		for i := range p.live {
			top = max(top, i)
		}
		for i, m := range p.live {
			if i != top && !chunk.Balanced(m) {
				t.Fatalf("message %d of %d ends inside a code block: %q", i, top+1, m)
			}
		}
		// The messages show the answer: no text lost or shown twice at a
		// cut, whatever fences the cuts closed and reopened.
		var shown []string
		for i := range top + 1 {
			shown = append(shown, p.live[i])
		}
		if got, want := words(shown...), words(final); got != want {
			t.Fatalf("the messages show %q, not the answer %q: %q", got, want, shown)
		}
	})
}

// counter is a split answer's part counter, " (1/2)".
var counter = regexp.MustCompile(`\s*\(\d+/\d+\)$`)

// words is what messages show, read as one text: their characters
// without the counters, the fences' backticks and language tags, and
// blanks, which cuts add and drop.
func words(msgs ...string) string {
	var b strings.Builder
	for _, m := range msgs {
		for line := range strings.Lines(counter.ReplaceAllString(m, "")) {
			if t := strings.TrimLeft(line, " "); strings.HasPrefix(t, "```") {
				t = strings.TrimLeft(t, "`")
				if i := strings.IndexAny(t, " \n"); i >= 0 {
					line = t[i:] // the tag dropped
				} else {
					line = ""
				}
			}
			b.WriteString(strings.Join(strings.Fields(line), ""))
		}
	}
	return b.String()
}

func BenchmarkStream(b *testing.B) {
	delta := "some streamed words, and then\nmore "
	b.ReportAllocs()
	for b.Loop() {
		now := t0
		s := streamedit.New(streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true, Now: func() time.Time { return now }})
		var all strings.Builder
		for i := range 2000 {
			all.WriteString(delta)
			for _, a := range s.Append(delta) {
				s.OnResult(a, nil)
			}
			if i%4 == 0 {
				now = now.Add(200 * time.Millisecond)
			}
		}
		for _, a := range s.Final(all.String()) {
			s.OnResult(a, nil)
		}
	}
}
