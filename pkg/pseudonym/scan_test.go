package pseudonym_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pseudonym"
)

// TestScrubScanAsEach: Scrub's one pass over a text (ScrubScan, which
// it takes past a few ids) makes of every text what its pass per id
// (ScrubEach) does, on TestScrub's cases and on those where the passes
// per id see the pseudonyms that the ones before put in the text.
func TestScrubScanAsEach(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	for _, tt := range scrubCases(p) {
		if got := p.ScrubEach(tt.text, tt.ids...); got != tt.want {
			t.Errorf("%s: ScrubEach(%q, %q) = %q, want %q", tt.name, tt.text, tt.ids, got, tt.want)
		}
		if got, _ := p.ScrubScan(tt.text, tt.ids...); got != tt.want {
			t.Errorf("%s: ScrubScan(%q, %q) = %q, want %q", tt.name, tt.text, tt.ids, got, tt.want)
		}
	}
	long := "x-000000000000099001"
	for _, tt := range []struct {
		name, text string
		ids        []string
		// each: the scan leaves the ids to a pass per id.
		each bool
	}{
		// The pass per id sees an id right after a pseudonym as
		// touching its last hex digit (and leaves it).
		{"an id right after one ending in a sign", "abc-def and def", []string{"abc-", "def"}, false},
		{"an id right before another", "abc-def", []string{"abc", "-def"}, false},
		{"overlapping ids, the longer first", "a-b-c a-b", []string{"a-b", "b-c", "a-b-c"}, false},
		{"overlapping ids of one length, in their order", "a-b-c", []string{"b-c", "a-b"}, false},
		{"an address in two cases beside another", "Bob@x.io,bob@x.io;BOB@x.io", []string{"bob@x.io", "Bob@x.io"}, false},
		// An id that the pseudonym put before it would stand across.
		{"an id of a pseudonym's digits", long, []string{long, p.ID(long)[1:]}, true},
		{"an id ending in #", "x at -100123456789", []string{"-100123456789", "at #"}, true},
	} {
		each := p.ScrubEach(tt.text, tt.ids...)
		scan, fellBack := p.ScrubScan(tt.text, tt.ids...)
		if scan != each || fellBack != tt.each {
			t.Errorf("%s: ScrubScan(%q, %q) = %q (by each: %v), ScrubEach = %q (want by each: %v)",
				tt.name, tt.text, tt.ids, scan, fellBack, each, tt.each)
		}
	}
}

// TestScrubManyIDs: a text is scrubbed of the ids it names among a
// thousand, and of nothing else.
func TestScrubManyIDs(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = fmt.Sprintf("C0CHAT%04d", i)
	}
	ids = append(ids, "+15551234567", "bob@example.com")
	text := "move C0CHAT0007 to C0CHAT0999 (not C0CHAT00071, C0CHAT1000 or x-C0CHAT0999y) for 15551234567, <BOB@example.com>: forbidden"
	want := "move " + p.ID("C0CHAT0007") + " to " + p.ID("C0CHAT0999") + " (not C0CHAT00071, C0CHAT1000 or x-C0CHAT0999y) for " +
		p.ID("+15551234567") + ", <" + p.ID("bob@example.com") + ">: forbidden"
	if got := p.Scrub(text, ids...); got != want {
		t.Errorf("Scrub of %d ids = %q, want %q", len(ids), got, want)
	}
	if got := p.ScrubEach(text, ids...); got != want {
		t.Errorf("ScrubEach of %d ids = %q, want %q", len(ids), got, want)
	}
	if got := p.Scrub("forbidden", ids...); got != "forbidden" {
		t.Errorf("Scrub of a text naming none of %d ids = %q", len(ids), got)
	}
}

// FuzzScrubScan: the one pass over a text makes of it what the pass per
// id does, with the ids given and with the text's own words as ids (many
// of them, each standing in the text).
func FuzzScrubScan(f *testing.F) {
	p := addScrubSeeds(f)
	f.Add("aaaa aaa", "aa", "aaa", "aaaa")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, text, a, b, c string) {
		for _, ids := range [][]string{
			{a, b, c},
			append([]string{a, b, c}, strings.Fields(text)...),
			append(strings.FieldsFunc(text, func(r rune) bool { return r == '/' || r == ' ' || r == ',' }), c),
		} {
			each := p.ScrubEach(text, ids...)
			if scan, _ := p.ScrubScan(text, ids...); scan != each {
				t.Fatalf("ScrubScan(%q, %q) = %q, ScrubEach = %q", text, ids, scan, each)
			}
		}
	})
}

// BenchmarkScrub: an error's text scrubbed of a record's ids, the first
// of which it names, by a pass per id (each) and by one pass (scan): a
// short text, and a long one (a platform's answer of 4 KB quoted in
// the error).
func BenchmarkScrub(b *testing.B) {
	p := pseudonym.New("k")
	short := `Post "https://slack.com/api/chat.postMessage?channel=C0CHAT0000": channel_not_found (HTTP 404) after 3 attempts`
	long := short + ": " + strings.Repeat(`{"ok":false,"error":"channel_not_found","channel":"C0CHAT0000"} `, 64)
	for _, text := range []struct{ name, s string }{{"short", short}, {"long", long}} {
		for _, n := range []int{1, 4, 20, 1000} {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("C0CHAT%04d", i)
			}
			b.Run(fmt.Sprintf("%s/ids=%d/each", text.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.ScrubEach(text.s, ids...)
				}
			})
			b.Run(fmt.Sprintf("%s/ids=%d/scan", text.name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.ScrubScan(text.s, ids...)
				}
			})
		}
	}
}

// TestScrubberAsScrub: a Scrubber makes of each text, again and again,
// what Scrub does with its ids, with a few ids and with a thousand
// (its automaton made once); ScrubNamed makes of a text what Scrub
// does with the ids an error is marked as naming, the Scrubber's and
// those of marks within, among its ids or not.
func TestScrubberAsScrub(t *testing.T) {
	t.Parallel()
	p := pseudonym.New("k")
	many := make([]string, 1000)
	for i := range many {
		many[i] = fmt.Sprintf("C0CHAT%04d", i)
	}
	many = append(many, "+15551234567", "bob@example.com")
	cases := scrubCases(p)
	for _, text := range []string{
		"move C0CHAT0007 to C0CHAT0999 (not C0CHAT00071) for 15551234567, <BOB@example.com>: forbidden",
		"forbidden", "",
	} {
		cases = append(cases, scrubCase{"a thousand ids", text, many, p.Scrub(text, many...)})
	}
	// Forms only the pass per id takes (one ends in "#").
	cases = append(cases, scrubCase{"an id ending in #", "x at -100123456789", append([]string{"at #"}, many...),
		p.Scrub("x at -100123456789", append([]string{"at #"}, many...)...)})
	for _, tt := range cases {
		s := p.Scrubber(tt.ids...)
		for range 2 {
			if got := s.Scrub(tt.text); got != tt.want {
				t.Errorf("%s: Scrubber(%q).Scrub(%q) = %q, want %q", tt.name, tt.ids, tt.text, got, tt.want)
			}
		}
		err := errors.New(tt.text)
		for _, within := range [][]string{nil, tt.ids[:len(tt.ids)/2], {"C0CHAT0999", "bob@example.com"}, {"zzz-other"}} {
			marked := s.Naming(pseudonym.Naming(err, within...))
			if got, want := p.ScrubNamed(tt.text, marked), p.Scrub(tt.text, pseudonym.NamedIDs(marked)...); got != want {
				t.Errorf("%s: ScrubNamed(%q) marked by %q within %q = %q, want %q", tt.name, tt.text, tt.ids, within, got, want)
			}
		}
		// Another Pseudonymizer's Scrubber: p's pseudonyms all the same.
		if got := p.ScrubNamed(tt.text, pseudonym.New("other").Scrubber(tt.ids...).Naming(err)); got != tt.want {
			t.Errorf("%s: ScrubNamed(%q) marked by another's Scrubber = %q, want %q", tt.name, tt.text, got, tt.want)
		}
	}
	var none *pseudonym.Scrubber
	if got := none.Scrub("chat C0CHAT0007"); got != "chat C0CHAT0007" {
		t.Errorf("a nil Scrubber's Scrub = %q", got)
	}
	if err := none.Naming(errors.New("x")); len(pseudonym.NamedIDs(err)) != 0 || err.Error() != "x" {
		t.Errorf("a nil Scrubber's Naming = %v naming %q", err, pseudonym.NamedIDs(err))
	}
}

// FuzzScrubberAsScrub: a Scrubber, used again and again and by
// goroutines at once, makes of a text what Scrub does with its ids,
// with a few ids and past the automaton's bound (the text's words and
// many others), and ScrubNamed makes of it what Scrub does with the
// ids an error is marked as naming, marks within among the Scrubber's
// ids or not.
func FuzzScrubberAsScrub(f *testing.F) {
	p := addScrubSeeds(f)
	f.Add("move C0CHAT0007 to C0CHAT0999", "C0CHAT0007", "c0chat0999", "C0CHAT00071")
	f.Add("", "", "", "")
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("C0CHAT%04d", i)
	}
	f.Fuzz(func(t *testing.T, text, a, b, c string) {
		words := strings.FieldsFunc(text, func(r rune) bool { return r == '/' || r == ' ' || r == ',' })
		for _, ids := range [][]string{
			{a, b, c},
			append([]string{a, b, c}, strings.Fields(text)...),
			append(append([]string{c}, words...), many...),
			append(append([]string{}, many...), a, b),
		} {
			want := p.Scrub(text, ids...)
			s := p.Scrubber(slices.Clone(ids)...)
			var wg sync.WaitGroup
			got := make([]string, 4)
			for i := range got {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i] = s.Scrub(text)
				}()
			}
			wg.Wait()
			for _, g := range got {
				if g != want {
					t.Fatalf("Scrubber(%q).Scrub(%q) = %q, Scrub = %q", ids, text, g, want)
				}
			}
			err := errors.New(text)
			for _, within := range [][]string{nil, ids[:len(ids)/2], {a}, {"zzz-other", c}} {
				marked := s.Naming(pseudonym.Naming(err, within...))
				if got, want := p.ScrubNamed(text, marked), p.Scrub(text, pseudonym.NamedIDs(marked)...); got != want {
					t.Fatalf("ScrubNamed(%q) marked by %q within %q = %q, Scrub = %q", text, ids, within, got, want)
				}
			}
		}
	})
}

// addScrubSeeds adds the scrubbing fuzz tests' common seeds (text and
// three ids) and returns the pseudonymizer they are made with.
func addScrubSeeds(f *testing.F) *pseudonym.Pseudonymizer {
	p := pseudonym.New("fuzz")
	long := "x-000000000000099001"
	f.Add("abc-def and def", "abc-", "def", "")
	f.Add("a-b-c a-b", "a-b", "b-c", "a-b-c")
	f.Add("Bob@x.io,bob@x.io;BOB@x.io", "bob@x.io", "Bob@x.io", "")
	f.Add(long, long, p.ID(long)[1:], "")
	f.Add("x at -100123456789", "-100123456789", "at #", "")
	f.Add("GET /users/BOB%40example.com: 404 for +15551234567", "bob@example.com", "+15551234567", "15551234567")
	f.Add("PUT /rooms/%21r:example.org/send", "!r:example.org", "r", "room")
	return p
}
