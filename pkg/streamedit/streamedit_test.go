package streamedit_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	"github.com/switchboard-chat/switchboard/pkg/streamedit"
)

// clock is a fake clock the tests move by hand.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time               { return c.t }
func (c *clock) at(d time.Duration) time.Time { c.t = t0.Add(d); return c.t }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const ms = time.Millisecond

var errFlood = fmt.Errorf("telegram: retry after 3: %w", streamedit.ErrFlood)

// step is one event of a scripted stream and the actions it must give.
type step struct {
	at     time.Duration
	append string // Append(append) when set
	tick   bool   // Tick(now)
	flush  bool   // Flush(now)
	final  *string
	err    error // result reported for every action of this step
	want   []want
}

type want struct {
	kind streamedit.Kind
	msg  int
	text string
}

func (w want) String() string { return fmt.Sprintf("%v %d %q", w.kind, w.msg, w.text) }

func fin(s string) *string { return &s }

func run(t *testing.T, cfg streamedit.Config, steps []step) *streamedit.Stream {
	t.Helper()
	c := &clock{t: t0}
	cfg.Now = c.Now
	s := streamedit.New(cfg)
	for i, st := range steps {
		now := c.at(st.at)
		var acts []streamedit.Action
		switch {
		case st.final != nil:
			acts = s.Final(*st.final)
		case st.tick:
			acts = s.Tick(now)
		case st.flush:
			acts = s.Flush(now)
		default:
			acts = s.Append(st.append)
		}
		var got []want
		for _, a := range acts {
			got = append(got, want{a.Kind, a.Message, a.Text})
			if st.final != nil && !a.Final {
				t.Errorf("step %d: final action without Final", i)
			}
		}
		if !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%v): actions\n%v\nwant\n%v", i, st.at, got, st.want)
		}
		for _, a := range acts {
			s.OnResult(a, st.err)
			if st.err != nil {
				break // the driver stops at the first failure
			}
		}
	}
	return s
}

func TestSchedule(t *testing.T) {
	a24 := strings.Repeat("a", 24)
	b30 := strings.Repeat("b", 30)
	cfg := streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true}
	run(t, cfg, []step{
		{at: 0, append: "Hello "},                      // 6 < 24
		{at: 10 * ms, append: strings.Repeat("a", 17)}, // 23 < 24
		{at: 20 * ms, append: "!", want: []want{{streamedit.Send, 0, "Hello " + a24[:17] + "! ▉"}}}, // first send at once
		{at: 100 * ms, append: b30}, // interval not over
		{at: 819 * ms, tick: true},  // 799ms since the send
		{at: 820 * ms, tick: true, want: []want{{streamedit.Edit, 0, "Hello " + a24[:17] + "!" + b30 + " ▉"}}},
		{at: 2000 * ms, tick: true},      // nothing new
		{at: 2100 * ms, append: "short"}, // 5 new < 24
		{at: 2200 * ms, append: a24[:19], want: []want{{streamedit.Edit, 0, "Hello " + a24[:17] + "!" + b30 + "short" + a24[:19] + " ▉"}}}, // 24 new, interval over
		{at: 2200 * ms, tick: true},  // nothing new
		{at: 2300 * ms, append: a24}, // 24 new but only 100ms
		{at: 2999 * ms, tick: true},  // 799ms
		{at: 3000 * ms, tick: true, want: []want{{streamedit.Edit, 0, "Hello " + a24[:17] + "!" + b30 + "short" + a24[:19] + a24 + " ▉"}}},
		{at: 3100 * ms, final: fin("Hello world."), want: []want{{streamedit.Edit, 0, "Hello world."}}},
		{at: 4000 * ms, append: b30}, // after Final nothing more
	})
}

func TestScheduleEditDueAfterInterval(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("discord"), CanEdit: true}
	x := strings.Repeat("x", 24)
	run(t, cfg, []step{
		{at: 0, append: x, want: []want{{streamedit.Send, 0, x + " ▉"}}},
		{at: 800 * ms, append: x, want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 1599 * ms, append: x},
		{at: 1600 * ms, tick: true, want: []want{{streamedit.Edit, 0, x + x + x + " ▉"}}},
		{at: 1700 * ms, final: fin(x + x + x + "."), want: []want{{streamedit.Edit, 0, x + x + x + "."}}},
	})
}

// Flush shows the text buffered so far at once, however little and
// however soon after the last update, and nothing when nothing is new;
// the interval then counts from it.
func TestFlush(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true}
	x := strings.Repeat("x", 24)
	run(t, cfg, []step{
		{at: 0, flush: true}, // nothing to show
		{at: 10 * ms, append: "Checking."},
		{at: 20 * ms, flush: true, want: []want{{streamedit.Send, 0, "Checking. ▉"}}},
		{at: 30 * ms, flush: true},
		{at: 40 * ms, append: " On it."},
		{at: 50 * ms, flush: true, want: []want{{streamedit.Edit, 0, "Checking. On it. ▉"}}},
		{at: 60 * ms, append: x},   // 24 new, but only 10ms since the flush
		{at: 849 * ms, tick: true}, // 799ms
		{at: 850 * ms, tick: true, want: []want{{streamedit.Edit, 0, "Checking. On it." + x + " ▉"}}},
		{at: 900 * ms, final: fin("Checking."), want: []want{{streamedit.Edit, 0, "Checking."}}},
		{at: 950 * ms, append: "more"},
		{at: 960 * ms, flush: true}, // after Final nothing more
	})
}

func TestFloodBackoffAndStop(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true}
	x := strings.Repeat("x", 24)
	s := run(t, cfg, []step{
		{at: 0, append: x, want: []want{{streamedit.Send, 0, x + " ▉"}}},
		// strike 1: interval 0.8s → 1.6s
		{at: 800 * ms, append: x, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 2399 * ms, tick: true},
		// strike 2: retried with the same text; interval → 3.2s
		{at: 2400 * ms, tick: true, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 5599 * ms, append: x},
		// strike 3: editing stops
		{at: 5600 * ms, tick: true, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + x + " ▉"}}},
		{at: 20000 * ms, append: x},
		{at: 30000 * ms, tick: true},
		// the cursor is removed and only the unseen rest is sent
		{at: 31000 * ms, final: fin(x + x + x + x + " done"), want: []want{
			{streamedit.Edit, 0, x},
			{streamedit.Send, 1, x + x + x + " done"},
		}},
	})
	if !s.Stopped() || s.Interval() != 6400*ms {
		t.Errorf("stopped=%v interval=%v", s.Stopped(), s.Interval())
	}
}

func TestFloodStrikesResetOnSuccess(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true}
	x := strings.Repeat("x", 24)
	s := run(t, cfg, []step{
		{at: 0, append: x, want: []want{{streamedit.Send, 0, x + " ▉"}}},
		{at: 800 * ms, append: x, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 2400 * ms, tick: true, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 5600 * ms, tick: true, want: []want{{streamedit.Edit, 0, x + x + " ▉"}}}, // success: strikes back to 0
		{at: 8800 * ms, append: x, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + x + " ▉"}}},
		{at: 15200 * ms, tick: true, err: errFlood, want: []want{{streamedit.Edit, 0, x + x + x + " ▉"}}},
	})
	if s.Stopped() {
		t.Error("stopped after 2 consecutive strikes")
	}
	if s.Interval() != 10*time.Second {
		t.Errorf("interval %v, want the 10s cap", s.Interval())
	}
}

func TestOtherErrorStops(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("slack"), CanEdit: true}
	x := strings.Repeat("x", 24)
	run(t, cfg, []step{
		{at: 0, append: x, want: []want{{streamedit.Send, 0, x + " ▉"}}},
		{at: 800 * ms, append: x, err: errors.New("message not found"), want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 5000 * ms, append: x},
		{at: 6000 * ms, final: fin(x + x + x), want: []want{{streamedit.Edit, 0, x}, {streamedit.Send, 1, x + x}}},
	})
}

func TestStoppedFinalDiffers(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("slack"), CanEdit: true}
	x := strings.Repeat("x", 24)
	run(t, cfg, []step{
		{at: 0, append: x, want: []want{{streamedit.Send, 0, x + " ▉"}}},
		{at: 800 * ms, append: x, err: errors.New("message not found"), want: []want{{streamedit.Edit, 0, x + x + " ▉"}}},
		{at: 6000 * ms, final: fin("Something else."), want: []want{{streamedit.Send, 1, "Something else."}, {streamedit.Delete, 0, ""}}},
	})
}

func TestFirstSendFailsThenFinal(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("slack"), CanEdit: true}
	x := strings.Repeat("x", 24)
	run(t, cfg, []step{
		{at: 0, append: x, err: errors.New("boom"), want: []want{{streamedit.Send, 0, x + " ▉"}}},
		{at: 5000 * ms, append: x},
		{at: 6000 * ms, final: fin(x + x), want: []want{{streamedit.Send, 0, x + x}}},
	})
}

func TestCannotEdit(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limit{Max: 64, Measure: chunk.Runes}, CanEdit: false}
	long := strings.Repeat("word ", 20) // 100 runes
	run(t, cfg, []step{
		{at: 0, append: long},
		{at: 5 * time.Second, tick: true},
		{at: 6 * time.Second, final: fin(strings.TrimSpace(long)), want: []want{
			{streamedit.Send, 0, strings.Repeat("word ", 10) + "word (1/2)"},
			{streamedit.Send, 1, strings.Repeat("word ", 8) + "word (2/2)"},
		}},
	})
}

func TestOverflow(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limit{Max: 64, Measure: chunk.Runes}, CanEdit: true}
	line := strings.Repeat("l", 39) + "\n" // 40 runes
	run(t, cfg, []step{
		{at: 0, append: line, want: []want{{streamedit.Send, 0, line + " ▉"}}},
		// 80 runes + cursor > 64: message 0 is finished at the newline
		// without cursor, and the rest goes to message 1.
		{at: time.Second, append: line, want: []want{
			{streamedit.Edit, 0, line[:39]},
			{streamedit.Send, 1, line + " ▉"},
		}},
		// 40+30+2 > 64: message 1 is finished at its newline, dropping the
		// cursor, and the rest goes to message 2.
		{at: 2 * time.Second, append: strings.Repeat("m", 30), want: []want{
			{streamedit.Edit, 1, line[:39]},
			{streamedit.Send, 2, strings.Repeat("m", 30) + " ▉"},
		}},
		{at: 3 * time.Second, final: fin(line + line + strings.Repeat("m", 30)), want: []want{
			{streamedit.Edit, 2, strings.Repeat("m", 30)},
		}},
	})
}

func TestFinalRewrites(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limit{Max: 64, Measure: chunk.Runes}, CanEdit: true}
	line := strings.Repeat("l", 39) + "\n"
	run(t, cfg, []step{
		{at: 0, append: line, want: []want{{streamedit.Send, 0, line + " ▉"}}},
		{at: time.Second, append: line, want: []want{
			{streamedit.Edit, 0, line[:39]},
			{streamedit.Send, 1, line + " ▉"},
		}},
		// The final answer does not start with what message 0 shows: it is
		// written from message 0 on, and message 1 is deleted.
		{at: 2 * time.Second, final: fin("Actually, no."), want: []want{
			{streamedit.Edit, 0, "Actually, no."},
			{streamedit.Delete, 1, ""},
		}},
	})
}

func TestFinalBeforeAnything(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("discord"), CanEdit: true}
	run(t, cfg, []step{
		{at: 0, append: "hi"},
		{at: time.Second, final: fin("hi there"), want: []want{{streamedit.Send, 0, "hi there"}}},
	})
	run(t, cfg, []step{
		{at: 0, final: fin("")},
	})
}

func TestFinalEmptyKeepsShownText(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("discord"), CanEdit: true}
	x := strings.Repeat("x", 24)
	run(t, cfg, []step{
		{at: 0, append: x, want: []want{{streamedit.Send, 0, x + " ▉"}}},
		{at: time.Second, final: fin(""), want: []want{{streamedit.Edit, 0, x}}},
	})
}

// Slack's limit counts the text once the gateway escaped it: every
// message of a stream full of "<" fits it so measured.
func TestOverflowMeasuresEscapedText(t *testing.T) {
	l := chunk.Limit{Max: 64, Measure: chunk.EscapedRunes}
	c := &clock{t: t0}
	s := streamedit.New(streamedit.Config{Limit: l, CanEdit: true, Now: c.Now})
	var acts []streamedit.Action
	for i := range 10 {
		c.at(time.Duration(i) * time.Second)
		acts = append(acts, s.Append(strings.Repeat("a<b ", 4))...)
	}
	acts = append(acts, s.Final(strings.Repeat("a<b ", 40))...)
	messages := map[int]bool{}
	for _, a := range acts {
		messages[a.Message] = true
		if n := l.Len(a.Text); n > l.Max {
			t.Errorf("message %d: %d characters once escaped, limit %d: %q", a.Message, n, l.Max, a.Text)
		}
	}
	if len(messages) < 3 {
		t.Errorf("%d messages for 400 characters once escaped", len(messages))
	}
}

// Replace sets the text as a whole: an extension is appended, a change
// to what the message shows is edited in when an update is due, and the
// final edit goes over it as usual.
func TestReplace(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true}
	c := &clock{t: t0}
	cfg.Now = c.Now
	s := streamedit.New(cfg)
	x := strings.Repeat("x", 24)
	check := func(acts []streamedit.Action, ws ...want) {
		t.Helper()
		var got []want
		for _, a := range acts {
			got = append(got, want{a.Kind, a.Message, a.Text})
			s.OnResult(a, nil)
		}
		if !slices.Equal(got, ws) {
			t.Fatalf("actions %v, want %v", got, ws)
		}
	}
	check(s.Replace(x), want{streamedit.Send, 0, x + " ▉"})
	c.at(time.Second)
	check(s.Replace(x + "yy")) // 2 new: not due
	z := strings.Repeat("z", 24)
	check(s.Replace(x[:20]+z), want{streamedit.Edit, 0, x[:20] + z + " ▉"}) // 24 new after the change at 20
	c.at(2 * time.Second)
	check(s.Final(x[:20]+z+"."), want{streamedit.Edit, 0, x[:20] + z + "."})
}

// A Replace that changes what a finished message shows stops the
// stream, and the final writes over every message.
func TestReplaceBeforeAFinishedMessage(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limit{Max: 40, Measure: chunk.Runes}, CanEdit: true}
	c := &clock{t: t0}
	cfg.Now = c.Now
	s := streamedit.New(cfg)
	long := strings.Repeat("a", 30) + " " + strings.Repeat("b", 30)
	for _, a := range s.Replace(long) {
		s.OnResult(a, nil)
	}
	c.at(time.Second)
	if acts := s.Replace("c" + long[1:] + strings.Repeat("d", 30)); acts != nil {
		t.Fatalf("streamed on after a change to a finished message: %v", acts)
	}
	var got []want
	for _, a := range s.Final("final") {
		got = append(got, want{a.Kind, a.Message, a.Text})
	}
	if w := []want{{streamedit.Edit, 0, "final"}, {streamedit.Delete, 1, ""}}; !slices.Equal(got, w) {
		t.Fatalf("final %v, want %v", got, w)
	}
}

// A final without text after a Replace that took back everything the
// message showed removes the message: a blank edit is refused.
func TestReplaceToNothingThenEmptyFinal(t *testing.T) {
	cfg := streamedit.Config{Limit: chunk.Limits("telegram"), CanEdit: true}
	c := &clock{t: t0}
	cfg.Now = c.Now
	s := streamedit.New(cfg)
	x := strings.Repeat("x", 24)
	for _, a := range s.Replace(x) {
		s.OnResult(a, nil)
	}
	s.Replace("")
	acts := s.Final("")
	if len(acts) != 1 || acts[0].Kind != streamedit.Delete || acts[0].Message != 0 {
		t.Fatalf("final %v, want the message deleted", acts)
	}
}

// A code block longer than a message is continued as a code block: a
// message the stream finishes inside it closes it, the next reopens it
// with its language, during the stream and in the final answer, as
// chunk.Parts cuts an answer that is not streamed.
func TestOverflowInsideACodeBlock(t *testing.T) {
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	code := "Here:\n```go\n" + strings.Repeat("x := 1 // a line of code\n", 8) + "```\nDone."
	for _, tt := range []struct {
		name string
		fail error // the result of the stream's updates from the sixth line on
	}{
		{"streamed", nil},
		{"updates stopped", errors.New("gone")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			s := streamedit.New(streamedit.Config{Limit: l, CanEdit: true, Now: c.Now})
			live := map[int]string{}
			apply := func(acts []streamedit.Action, err error) {
				t.Helper()
				for _, a := range acts {
					if a.Kind != streamedit.Delete && !l.Fits(a.Text) {
						t.Fatalf("%v %d: %d > %d: %q", a.Kind, a.Message, l.Len(a.Text), l.Max, a.Text)
					}
					s.OnResult(a, err)
					if err != nil {
						return
					}
					live[a.Message] = a.Text
					if a.Kind == streamedit.Delete {
						delete(live, a.Message)
					}
				}
			}
			for i, line := range strings.SplitAfter(code, "\n") {
				c.at(time.Duration(i) * time.Second)
				var err error
				if i > 4 {
					err = tt.fail
				}
				apply(s.Append(line), err)
				for m, text := range live {
					if strings.HasSuffix(text, streamedit.DefaultCursor) {
						continue
					}
					// A finished message.
					if !chunk.Balanced(text) {
						t.Errorf("line %d: message %d is left inside the code block: %q", i, m, text)
					}
				}
			}
			apply(s.Final(code), nil)
			if len(live) < 3 {
				t.Fatalf("%d messages, want 3 or more: %v", len(live), live)
			}
			for m := range len(live) {
				text := live[m]
				if !chunk.Balanced(text) {
					t.Errorf("message %d is left inside the code block: %q", m, text)
				}
				if m > 0 && m < len(live)-1 && !strings.HasPrefix(text, "```go\n") {
					t.Errorf("message %d does not continue the code block: %q", m, text)
				}
			}
		})
	}
}

// Updates that stop while the message shows the start of a fence line
// (the model's "```" before its "python", or a closing fence's first
// backticks) do not split that line between the message and the rest:
// the line goes whole with the rest, so the rest's code block has its
// language and ends where the answer's does, instead of the language
// shown as a line of code or the answer after the block shown as code;
// a rest that starts with the block's close does not reopen it empty.
func TestStoppedInsideAFenceLine(t *testing.T) {
	l := chunk.Limit{Max: 200, Measure: chunk.Runes}
	for _, tt := range []struct {
		name        string
		shown, rest string
		want        []string // the messages shown at the end
	}{
		{
			"an opening fence's backticks before its language",
			"Here is the code you asked for:\n```", "python\nprint(1)\n```\nDone.",
			[]string{"Here is the code you asked for:", "```python\nprint(1)\n```\nDone."},
		},
		{
			"a closing fence's first backticks",
			"Here is the code:\n```python\nprint(1)\n``", "`\nDone, and `x` is 1 as you asked.",
			[]string{"Here is the code:\n```python\nprint(1)\n```", "Done, and `x` is 1 as you asked."},
		},
		{
			"the line before a closing fence",
			"Here is the code:\n```python\nprint(1)\n", "```\nDone, and `x` is 1 as you asked.",
			[]string{"Here is the code:\n```python\nprint(1)\n```", "Done, and `x` is 1 as you asked."},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			s := streamedit.New(streamedit.Config{Limit: l, CanEdit: true, Now: c.Now})
			live := map[int]string{}
			apply := func(acts []streamedit.Action, err error) {
				t.Helper()
				for _, a := range acts {
					s.OnResult(a, err)
					if err != nil {
						return
					}
					live[a.Message] = a.Text
					if a.Kind == streamedit.Delete {
						delete(live, a.Message)
					}
				}
			}
			apply(s.Append(tt.shown), nil)
			if live[0] != tt.shown+streamedit.DefaultCursor {
				t.Fatalf("streamed %q, want %q", live[0], tt.shown+streamedit.DefaultCursor)
			}
			c.at(time.Minute)
			apply(s.Append(tt.rest), errors.New("gone")) // updates stop
			apply(s.Final(tt.shown+tt.rest), nil)
			var got []string
			for m := range len(live) {
				got = append(got, live[m])
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("messages\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// A message the stream finishes at a space is not finished before
// backticks in the middle of a line ("in ```fenced blocks"): the next
// message would start with them, a fence line, and show the rest as
// code.
func TestOverflowBeforeMidLineBackticks(t *testing.T) {
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	text := "Wrap the code in " + strings.Repeat("word ", 8) + "```fenced blocks, the usual kind " + strings.Repeat("and more words ", 5)
	c := &clock{t: t0}
	s := streamedit.New(streamedit.Config{Limit: l, CanEdit: true, Now: c.Now})
	live := map[int]string{}
	for i, w := range strings.SplitAfter(text, " ") {
		c.at(time.Duration(i) * time.Second)
		for _, a := range s.Append(w) {
			s.OnResult(a, nil)
			live[a.Message] = a.Text
		}
	}
	for _, a := range s.Final(text) {
		live[a.Message] = a.Text
	}
	for m := range len(live) {
		if strings.HasPrefix(live[m], "```") || !chunk.Balanced(live[m]) {
			t.Errorf("message %d opens a code block: %q", m, live[m])
		}
	}
}

// A message the stream finishes just before the line that closes its
// code block (the model's "```", which may come before its newline, or
// an indented close) does not leave that line to the next message after
// a reopened fence, an empty block: the message's close stands in for
// it, and the next message starts after it, while streaming and in the
// final answer.
func TestOverflowJustBeforeTheClosingFence(t *testing.T) {
	emptyBlock := regexp.MustCompile("(?m)^```\\w*\n *```")
	l := chunk.Limit{Max: 64, Measure: chunk.Runes}
	// 60 runes: the closing line comes just past what fits with the
	// cursor, and the cut falls on the newline before it.
	code := "```go\n" + strings.Repeat("x", 24) + "\n" + strings.Repeat("y", 28) + "\n"
	for _, tt := range []struct {
		name         string
		close, after string
	}{
		{"backticks before their newline", "```", "\nDone, and more words after the block."},
		{"an indented closing line", "  ```\n", "Done, and more words after the block."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			s := streamedit.New(streamedit.Config{Limit: l, CanEdit: true, Now: c.Now})
			live := map[int]string{}
			apply := func(acts []streamedit.Action) {
				t.Helper()
				for _, a := range acts {
					if a.Kind != streamedit.Delete && !l.Fits(a.Text) {
						t.Fatalf("%v %d: %d > %d: %q", a.Kind, a.Message, l.Len(a.Text), l.Max, a.Text)
					}
					s.OnResult(a, nil)
					live[a.Message] = a.Text
				}
				for m, text := range live {
					if emptyBlock.MatchString(text) {
						t.Fatalf("message %d shows an empty code block: %q", m, text)
					}
				}
			}
			apply(s.Append(code[:30]))
			c.at(time.Second)
			apply(s.Append(code[30:] + tt.close))
			c.at(2 * time.Second)
			apply(s.Append(tt.after))
			whole := code + tt.close + tt.after
			apply(s.Final(whole))
			got := []string{live[0], live[1]}
			want := []string{code + "```", "Done, and more words after the block."}
			if len(live) != 2 || !slices.Equal(got, want) {
				t.Fatalf("messages\n%v\nwant\n%q", live, want)
			}
		})
	}
}
