// Package streamedit schedules the streaming of a reply by editing one
// platform message in place, as the Hermes gateway does: deltas are
// buffered, the message is edited at a bounded rate with a cursor at the
// end, continued in a new message when it outgrows the platform limit,
// slowed down and finally given up on under flood control, and replaced by
// the final answer at the end.
//
// A Stream does no I/O and keeps no timers. A delivery service drives it:
//
//	s := streamedit.New(cfg)
//	for {
//		select {
//		case d := <-deltas:
//			do(s.Append(d))
//		case now := <-ticker.C:
//			do(s.Tick(now))
//		case text := <-final:
//			do(s.Final(text))
//			return
//		}
//	}
//
// where do performs the actions in order, reports each with OnResult, and
// stops at the first that fails (the Stream plans again from what
// succeeded). Calls must not overlap: report the actions of one call
// before making the next.
package streamedit

import (
	"bytes"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
)

// ErrFlood marks a flood-control or rate-limit failure. Wrap platform
// errors with it (fmt.Errorf("edit: %w", streamedit.ErrFlood)) so OnResult
// backs off instead of giving up.
var ErrFlood = errors.New("streamedit: flood control")

// Kind is what an Action does to a platform message.
type Kind int

const (
	// Send posts a new message; the delivery service remembers its
	// platform id under Action.Message.
	Send Kind = iota + 1
	// Edit replaces the text of message Action.Message.
	Edit
	// Delete removes message Action.Message: the final answer needed fewer
	// messages than the stream had used.
	Delete
)

func (k Kind) String() string {
	switch k {
	case Send:
		return "send"
	case Edit:
		return "edit"
	case Delete:
		return "delete"
	}
	return "unknown"
}

// Action is one call for the delivery service to make.
type Action struct {
	Kind Kind
	// Message numbers the messages of this reply from 0, in the order
	// they were first sent.
	Message int
	Text    string
	// Final is set on the actions returned by Final.
	Final bool

	base, upto int  // text[base:upto] is what the message shows on success
	sealed     bool // the message is finished; the next starts at text[next:]
	next       int
	// reopen starts the next message of a sealed one: the code fence
	// the sealed one closed, reopened (chunk.Reopen).
	reopen string
}

// Config tunes a Stream. Zero fields take the defaults shown.
type Config struct {
	// Limit is the platform's message limit (chunk.Limits(platform)).
	Limit chunk.Limit
	// CanEdit is false for platforms that cannot edit a sent message:
	// they get only the final text.
	CanEdit bool
	// Interval is the shortest time between two progress updates: 800ms.
	Interval time.Duration
	// MaxInterval caps Interval as flood control doubles it: 10s.
	MaxInterval time.Duration
	// MinChars is how many new characters (runes) must be buffered before
	// an update is due: 24.
	MinChars int
	// MaxStrikes is how many consecutive flood failures stop progress
	// updates for the rest of the reply: 3.
	MaxStrikes int
	// Cursor ends the text while streaming: " ▉".
	Cursor string
	// Now is the clock Append reads: time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultInterval    = 800 * time.Millisecond
	DefaultMaxInterval = 10 * time.Second
	DefaultMinChars    = 24
	DefaultMaxStrikes  = 3
	DefaultCursor      = " ▉"
)

// Stream is the state of one streamed reply. It is not safe for
// concurrent use.
type Stream struct {
	cfg      Config
	text     []byte // every delta so far
	msg      int    // the message being streamed into
	exists   bool   // msg has been sent; messages before msg all were
	base     int    // text[base:] belongs to msg
	shown    int    // msg shows reopen+text[base:shown] (plus the cursor)
	lastEdit time.Time
	interval time.Duration
	strikes  int
	stopped  bool // progress updates given up: the rest goes with Final
	// drift: Replace changed text the finished messages show; nothing
	// more is streamed, and Final writes over every message.
	drift bool
	done  bool
	// reopen starts msg before text[base:]: the code fence that the
	// message before closed, reopened ("```go\n"), or "".
	reopen string
}

// New returns a Stream for one reply.
func New(cfg Config) *Stream {
	if cfg.Limit.Max <= 0 {
		cfg.Limit = chunk.DefaultLimit
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxInterval <= 0 {
		cfg.MaxInterval = DefaultMaxInterval
	}
	if cfg.MinChars <= 0 {
		cfg.MinChars = DefaultMinChars
	}
	if cfg.MaxStrikes <= 0 {
		cfg.MaxStrikes = DefaultMaxStrikes
	}
	if cfg.Cursor == "" {
		cfg.Cursor = DefaultCursor
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Stream{cfg: cfg, interval: cfg.Interval}
}

// Interval is the current shortest time between progress updates; it
// doubles on each flood failure, up to MaxInterval.
func (s *Stream) Interval() time.Duration { return s.interval }

// Stopped reports whether progress updates were given up.
func (s *Stream) Stopped() bool { return s.stopped }

// Append buffers a delta and returns the updates due now.
func (s *Stream) Append(delta string) []Action {
	if s.done {
		return nil
	}
	s.text = append(s.text, delta...)
	return s.Tick(s.cfg.Now())
}

// Replace sets the whole text so far (what the messages should show
// by now) and returns the updates due now. A text that extends the one
// before is an Append of the difference. One that changes what was
// already shown (a delivery service that shows the text transformed,
// the transformation of a longer text differing before the end) is
// taken as it is: the current message is edited to it when an update is
// due. When it changes what finished messages show, nothing more is
// streamed, and Final writes the answer over every message.
func (s *Stream) Replace(text string) []Action {
	if s.done {
		return nil
	}
	if len(text) >= len(s.text) && text[:len(s.text)] == string(s.text) {
		return s.Append(text[len(s.text):])
	}
	p := 0
	for p < len(text) && p < len(s.text) && text[p] == s.text[p] {
		p++
	}
	for p > 0 && p < len(text) && !utf8.RuneStart(text[p]) {
		p-- // never between the bytes of a rune
	}
	if p < s.base {
		s.drift = true
		return nil
	}
	s.text = append(s.text[:p], text[p:]...)
	s.shown = min(s.shown, p)
	return s.Tick(s.cfg.Now())
}

// Tick returns the updates due at now: none unless editing is possible and
// still on, at least MinChars characters are new since what the message
// shows, and Interval has passed since the last update (the first message
// is sent as soon as there is enough text).
//
// When the text with the cursor would exceed the limit, the current
// message is finished without the cursor at a newline or space in its
// second half (else at the limit) and the rest continues in a new message.
// A message finished inside a code fence closes it, and the next reopens
// it with its language tag, as chunk.Parts cuts; the message being
// streamed keeps room for that close.
func (s *Stream) Tick(now time.Time) []Action {
	if s.done || s.stopped || s.drift || !s.cfg.CanEdit {
		return nil
	}
	if utf8.RuneCount(s.text[s.shown:]) < s.cfg.MinChars {
		return nil
	}
	if !s.lastEdit.IsZero() && now.Sub(s.lastEdit) < s.interval {
		return nil
	}
	return s.update(now)
}

// Flush returns the update that shows all the text buffered so far now,
// however little is new and however recent the last update (the first
// message too): a delivery service about to post something below the
// stream (a tool's progress) shows the text before it first, as Hermes's
// segment break does. None when editing is off or nothing is new.
func (s *Stream) Flush(now time.Time) []Action {
	if s.done || s.stopped || s.drift || !s.cfg.CanEdit || s.shown >= len(s.text) {
		return nil
	}
	return s.update(now)
}

// update plans the actions that show all the text at now.
func (s *Stream) update(now time.Time) []Action {
	s.lastEdit = now
	var acts []Action
	msg, exists, base, reopen := s.msg, s.exists, s.base, s.reopen
	l := s.cfg.Limit
	for !l.Fits(s.finished(reopen, base, len(s.text)) + s.cfg.Cursor) {
		room := l.Max - l.Len(reopen)
		end, next := cutAt(s.text, base, l.Measure, room)
		if chunk.Reopen(reopen+string(s.text[base:end]), l) != "" {
			// Cut again leaving room for the close.
			end, next = cutAt(s.text, base, l.Measure, room-len(chunk.CloseFence))
		}
		a := s.show(msg, exists, reopen, base, end, "")
		a.Text = s.finished(reopen, base, end)
		a.sealed, a.next = true, next
		a.reopen = chunk.Reopen(reopen+string(s.text[base:end]), l)
		if a.reopen != "" && next == end+1 && s.text[end] == '\n' {
			// Finished just before a line that closes the fence, or may
			// (the model's "```" before its newline): the message's close
			// stands in for that line, and the next message starts after
			// it, as chunk.Parts cuts, rather than reopen the fence only
			// to close it (an empty block). A line not whole yet waits:
			// the message shows the text up to the cut for now.
			switch n, ok := closingLine(s.text[next:]); {
			case !ok:
			case n < 0:
				return append(acts, s.show(msg, exists, reopen, base, end, s.cfg.Cursor))
			default:
				a.next, a.reopen = next+n, ""
			}
		}
		acts = append(acts, a)
		msg, exists, base, reopen = msg+1, false, a.next, a.reopen
	}
	if base < len(s.text) {
		acts = append(acts, s.show(msg, exists, reopen, base, len(s.text), s.cfg.Cursor))
	}
	return acts
}

// finished is what a message that starts with reopen (chunk.Reopen)
// before text[base:] shows when it is finished at upto: the code fence it
// ends inside closed.
func (s *Stream) finished(reopen string, base, upto int) string {
	t := reopen + string(s.text[base:upto])
	switch {
	case chunk.Reopen(t, s.cfg.Limit) == "":
	case strings.HasSuffix(t, "\n"):
		t += strings.TrimPrefix(chunk.CloseFence, "\n")
	default:
		t += chunk.CloseFence
	}
	return t
}

// settled is where the message being streamed ends when updates
// stopped: where it was shown to, or, when the line it was shown to the
// middle of is a fence line or may become one (the first backticks of a
// fence, "```" before its language), before that line, which goes whole
// with the rest: a fence line is read when it is whole.
func (s *Stream) settled() int {
	t := s.text[s.base:s.shown]
	start := lastIndex(t, '\n') + 1 // of the last line
	line := strings.TrimLeft(string(t[start:]), " ")
	if run := len(line) - len(strings.TrimLeft(line, "`")); run < 3 && (run == 0 || run < len(line)) {
		return s.shown
	}
	return s.base + max(start-1, 0) // before the newline too
}

// show is the action that makes message msg, which starts with reopen,
// show text[base:upto]+cursor.
func (s *Stream) show(msg int, exists bool, reopen string, base, upto int, cursor string) Action {
	kind := Send
	if exists {
		kind = Edit
	}
	return Action{Kind: kind, Message: msg, Text: reopen + string(s.text[base:upto]) + cursor, base: base, upto: upto}
}

// cutAt finds where to finish a message that has room units for
// text[base:]: the end of its text and where the next message starts.
func cutAt(text []byte, base int, m chunk.Measure, room int) (end, next int) {
	n, e := 0, base
	for e < len(text) {
		r, size := utf8.DecodeRune(text[e:])
		w := m.Width(r, size)
		if n+w > room {
			break
		}
		n += w
		e += size
	}
	if e == base { // a limit below one rune; never loop forever
		_, size := utf8.DecodeRune(text[base:])
		e = base + size
	}
	window := text[base:e]
	if i := lastIndex(window, '\n'); i > 0 && i >= len(window)/2 {
		return base + i, base + i + 1
	}
	// Not at a space before backticks in the middle of a line: the next
	// message would start with them, a fence line (as chunk.Parts cuts).
	i := lastIndex(window, ' ')
	for i > 0 && startsFence(text[base+i+1:]) {
		i = lastIndex(window[:i], ' ')
	}
	if i > 0 && i >= len(window)/2 {
		return base + i, base + i + 1
	}
	return e, e
}

// closingLine reports whether b starts with a line that closes a code
// fence (backticks after spaces, then blanks only), or may once it is
// whole (so far blanks and backticks only, no newline yet: n < 0); n is
// the length of the line with its newline.
func closingLine(b []byte) (n int, ok bool) {
	line := b
	i := bytes.IndexByte(b, '\n')
	if i >= 0 {
		line = b[:i]
	}
	if i < 0 {
		return -1, len(bytes.Trim(line, " `\t\r")) == 0
	}
	t := bytes.TrimLeft(line, " ")
	return i + 1, bytes.HasPrefix(t, []byte("```")) && len(bytes.TrimRight(bytes.TrimLeft(t, "`"), " \t\r")) == 0
}

// startsFence reports whether b, its spaces trimmed, starts with ```.
func startsFence(b []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(b, " "), []byte("```"))
}

func lastIndex(b []byte, c byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// OnResult records the outcome of an action. A successful update moves the
// stream on. A flood failure (errors.Is(err, ErrFlood)) doubles Interval up
// to MaxInterval; MaxStrikes of them in a row, or any other failure, stop
// progress updates, and Final then sends only what the user has not seen.
// Results of final actions, and of updates reported after Final, change
// nothing.
func (s *Stream) OnResult(a Action, err error) {
	if a.Final || s.done || a.Kind == Delete {
		return
	}
	if err == nil {
		if a.Kind == Edit {
			s.strikes = 0
		}
		if a.sealed {
			s.msg, s.exists, s.base, s.shown, s.reopen = a.Message+1, false, a.next, a.next, a.reopen
			return
		}
		s.msg, s.exists, s.base, s.shown = a.Message, true, a.base, a.upto
		return
	}
	if !errors.Is(err, ErrFlood) {
		s.stopped = true
		return
	}
	s.strikes++
	s.interval = min(2*s.interval, s.cfg.MaxInterval)
	if s.strikes >= s.cfg.MaxStrikes {
		s.stopped = true
	}
}

// Final returns the actions that deliver the final answer, which replaces
// whatever was streamed and has no cursor. Long answers are split with
// chunk.SplitLimit.
//
//   - Nothing shown yet, or a platform that cannot edit: send the answer.
//   - Updates stopped: remove the cursor from the current message and send
//     only the part of the answer after what was shown; if the answer does
//     not start with what was shown, send all of it and delete the
//     messages that showed the stream.
//   - Otherwise, when the answer starts with the text of the finished
//     messages, the current message is edited to the rest (continued in
//     new messages if needed); when it does not, the answer is written over
//     the messages from the first, sending more or deleting the surplus.
//
// A message left inside a code fence closes it, and the answer's part
// after it reopens it (see Tick). When updates stopped with the message
// shown to the middle of a fence line ("```" before its language), the
// message ends before that line, which goes whole with the rest.
//
// After Final the Stream plans nothing more.
func (s *Stream) Final(text string) []Action {
	if s.done {
		return nil
	}
	s.done = true
	if !s.exists && s.msg == 0 {
		return sends(0, chunk.SplitLimit(text, s.cfg.Limit), text)
	}
	streamed := string(s.text)
	var acts []Action
	if text == "" && !s.drift {
		// Nothing to say: leave what was shown, without the cursor (or
		// remove the message, when Replace took what it showed back).
		if s.exists && s.shown > s.base {
			acts = append(acts, Action{Kind: Edit, Message: s.msg, Text: s.finished(s.reopen, s.base, s.shown), Final: true})
		} else if s.exists {
			acts = append(acts, Action{Kind: Delete, Message: s.msg, Final: true})
		}
		return acts
	}
	live := s.msg // messages 0..live-1 exist
	if s.exists {
		live++
	}
	if s.stopped {
		if s.drift || !strings.HasPrefix(text, streamed[:s.shown]) {
			// What was shown is wrong: send the answer, then remove it.
			acts = sends(live, chunk.SplitLimit(text, s.cfg.Limit), text)
			for i := range live {
				acts = append(acts, Action{Kind: Delete, Message: i, Final: true})
			}
			return acts
		}
		shown := s.settled()
		if s.exists && shown > s.base {
			acts = append(acts, Action{Kind: Edit, Message: s.msg, Text: s.finished(s.reopen, s.base, shown), Final: true})
		}
		// The rest continues the code fence the message ends inside
		// (its first line's indent kept), unless its first line is the
		// fence's close: then it starts after that line.
		reopen := chunk.Reopen(s.reopen+streamed[s.base:shown], s.cfg.Limit)
		rest := strings.TrimLeft(text[shown:], " \t\r\n")
		if reopen != "" && rest != "" {
			rest = strings.TrimLeft(text[shown:], "\r\n")
			first, after, _ := strings.Cut(rest, "\n")
			if strings.HasPrefix(strings.TrimLeft(first, " "), "```") {
				rest = strings.TrimLeft(after, " \t\r\n")
			} else {
				rest = reopen + rest
			}
		}
		acts = append(acts, sends(live, chunk.SplitLimit(rest, s.cfg.Limit), rest)...)
		if s.exists && shown == s.base {
			// Replace took back all the message showed: the rest went
			// in new messages, the stale one goes.
			acts = append(acts, Action{Kind: Delete, Message: s.msg, Final: true})
		}
		return acts
	}
	if !s.drift && len(text) > s.base && strings.HasPrefix(text, streamed[:s.base]) {
		parts := chunk.SplitLimit(s.reopen+text[s.base:], s.cfg.Limit)
		if !s.exists {
			return sends(s.msg, parts, text)
		}
		acts = append(acts, Action{Kind: Edit, Message: s.msg, Text: parts[0], Final: true})
		return append(acts, sends(s.msg+1, parts[1:], text)...)
	}
	// Rewrite from the first message.
	var parts []string
	if text != "" {
		parts = chunk.SplitLimit(text, s.cfg.Limit)
	}
	for i, p := range parts {
		kind := Send
		if i < live {
			kind = Edit
		}
		acts = append(acts, Action{Kind: kind, Message: i, Text: p, Final: true})
	}
	for i := len(parts); i < live; i++ {
		acts = append(acts, Action{Kind: Delete, Message: i, Final: true})
	}
	return acts
}

// sends posts parts as new messages numbered from first; nothing when the
// text is empty.
func sends(first int, parts []string, text string) []Action {
	if text == "" {
		return nil
	}
	acts := make([]Action, len(parts))
	for i, p := range parts {
		acts[i] = Action{Kind: Send, Message: first + i, Text: p, Final: true}
	}
	return acts
}
