package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/outbox"
	"github.com/switchboard-chat/switchboard/pkg/toolline"
)

// The chat's side of the agent's tool calls, as Hermes's gateway shows
// them:
//
//   - a call waiting for approval is a prompt the user must get (an
//     outbox row, like an answer), in Hermes's words;
//   - each call the agent starts is a progress line ("🔍 session_search:
//     "tea""), by the platform's tool progress mode. Where the platform
//     edits, the turn's lines gather in one message edited in place (a
//     new one once it is full, or after an approval prompt); elsewhere
//     each line is a message of its own. A message that starts is an
//     outbox row (chat order, one send per idempotency key); the edits
//     that add lines are best effort under the shared rate limit, and the
//     lines still unshown when the answer comes are queued as one last
//     edit before it. The progress message stays when the answer arrives.

// approvalCommandMax is how much of the call the approval prompt shows.
const approvalCommandMax = 200

// approvalText is Hermes's approval prompt, with the command prefix the
// platform's users type: the whole prompt where no buttons show, the
// text above them where they do.
func approvalText(platform string, tp *repliesv1.ToolProgress) string {
	cmd := tp.GetCommand()
	if cmd == "" {
		cmd = strings.TrimSpace(tp.GetToolName() + " " + tp.GetPreview())
	}
	if r := []rune(cmd); len(r) > approvalCommandMax {
		cmd = string(r[:approvalCommandMax]) + "..."
	}
	reason := tp.GetReason()
	if reason == "" {
		reason = "dangerous command"
	}
	p := command.TypedPrefix(platform)
	return "⚠️ **Dangerous command requires approval:**\n```\n" + cmd + "\n```\nReason: " + reason + "\n\n" +
		"Reply `" + p + "approve` to execute, `" + p + "approve session` to approve this pattern for the session, `" +
		p + "approve always` to approve permanently, or `" + p + "deny` to cancel."
}

// progressLine is Hermes's progress line for a started call in mode, the
// preview cut at previewLength (0: 40, verbose arguments uncut).
func progressLine(mode string, previewLength int, tp *repliesv1.ToolProgress) string {
	emoji := toolline.Emoji(tp.GetEmoji(), toolline.ChatEmoji)
	name := tp.GetToolName()
	preview := toolline.Preview(tp)
	if mode == ToolProgressVerbose {
		if keys, args := argumentsOf(tp.GetArguments()); len(keys) > 0 {
			if r := []rune(args); previewLength > 0 && len(r) > previewLength {
				args = string(r[:max(previewLength-3, 0)]) + "..."
			}
			return fmt.Sprintf("%s %s([%s])\n%s", emoji, name, strings.Join(keys, ", "), args)
		}
		if preview != "" {
			return fmt.Sprintf("%s %s: \"%s\"", emoji, name, preview)
		}
		return emoji + " " + name + "..."
	}
	if preview == "" {
		return emoji + " " + name + "..."
	}
	limit := previewLength
	if limit <= 0 {
		limit = 40
	}
	if r := []rune(preview); len(r) > limit {
		preview = string(r[:max(limit-3, 0)]) + "..."
	}
	return fmt.Sprintf("%s %s: \"%s\"", emoji, name, preview)
}

// argumentsOf reads a JSON object of arguments: its keys quoted as a
// Python list shows them ('path'), in the order written, and the object
// as Python's json.dumps writes it (", " and ": " between items). No keys
// for anything else.
func argumentsOf(raw string) (keys []string, args string) {
	dec := json.NewDecoder(strings.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, ""
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			break // cut by the worker: the keys read so far
		}
		keys = append(keys, "'"+fmt.Sprint(k)+"'")
	}
	var b bytes.Buffer
	if json.Compact(&b, []byte(raw)) != nil {
		return keys, raw
	}
	return keys, spaced(b.String())
}

// spaced puts a space after every "," and ":" of compact JSON outside its
// strings.
func spaced(compact string) string {
	var b strings.Builder
	in, esc := false, false
	for _, r := range compact {
		b.WriteRune(r)
		switch {
		case esc:
			esc = false
		case in && r == '\\':
			esc = true
		case r == '"':
			in = !in
		case !in && (r == ',' || r == ':'):
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// toolLines is one turn's tool progress in its chat.
type toolLines struct {
	// seq is the last event handled: a redelivered one is not shown twice.
	seq int64
	// lastTool (mode new) and lastLine, repeat (a repeated line becomes
	// "line (×2)") are Hermes's dedup.
	lastTool string
	lastLine string
	repeat   int
	// lines are those of the message being edited; key is the outbox key
	// of its send, id its platform message id once known, shown the text
	// the platform shows.
	lines []string
	key   string
	id    string
	shown string
	// prompted: an approval prompt was queued below the stream's last
	// message (and no message of the stream started since): like an
	// open progress message, it is below a reasoning block that the
	// answer must not go on in (reasoningAboveTools, foreignBlock).
	prompted bool
	// fromStart: this replica handled the turn's first event (seq 1),
	// on reply partition partition, and has owned that partition since,
	// so, its partition's events coming in order, every event since: a
	// turn it holds no stream of (turnState) streamed nothing yet, on
	// no replica, and a tools' message needs no mark below another
	// replica's stream (markTools), which would cost a read per turn.
	// Letting go of the partition ends it (lostPartition): another
	// replica may stream the turn meanwhile.
	fromStart bool
	// partition is the reply partition of the turn's events: this
	// replica forgets the turn's progress when it lets go of it
	// (lostPartition).
	partition int
	// ev is the event that last changed lines, for the edit that shows
	// them.
	ev      *repliesv1.ReplyEvent
	touched time.Time
}

type toolTurns struct {
	mu sync.Mutex
	m  map[string]*toolLines
}

func newToolTurns() *toolTurns { return &toolTurns{m: map[string]*toolLines{}} }

// get is the progress of turn, whose events come from reply partition
// p, made if there is none.
func (t *toolTurns) get(turn string, p int) *toolLines {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl := t.m[turn]
	if tl == nil {
		tl = &toolLines{partition: p}
		t.m[turn] = tl
	}
	tl.touched = time.Now()
	return tl
}

func (t *toolTurns) peek(turn string) *toolLines {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[turn]
}

func (t *toolTurns) forget(turn string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, turn)
}

// seenFrom records that this replica handled the turn's first event,
// from reply partition p (toolLines.fromStart).
func (t *toolTurns) seenFrom(turn string, p int) {
	tl := t.get(turn, p)
	t.mu.Lock()
	defer t.mu.Unlock()
	tl.fromStart = true
}

// fromStart reports whether this replica saw the turn from its first
// event and has owned its partition since (toolLines.fromStart). Under
// the lock: lostPartition writes it from the partition's owner loop.
func (t *toolTurns) fromStart(turn string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl := t.m[turn]
	return tl != nil && tl.fromStart
}

// lostPartition forgets the progress of reply partition p's turns,
// which this replica let go of: the replica that takes p over may
// stream them and post their next progress lines, so, should p come
// back here, their tools' messages go below that stream, with the mark
// (markTools), and their next lines in a new message, as on a replica
// that took them over, not in the progress message this replica knew
// of, above that stream.
func (t *toolTurns) lostPartition(p int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, tl := range t.m {
		if tl.partition == p {
			delete(t.m, id)
		}
	}
}

// prune forgets turns last touched before cutoff (their answer never
// reached this replica).
func (t *toolTurns) prune(cutoff time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, tl := range t.m {
		if tl.touched.Before(cutoff) {
			delete(t.m, id)
		}
	}
}

// toolStep renders a step of a tool call on a chat platform: the approval
// prompt, or a progress line. An error nak's the event (a message that
// must be queued was not).
func (s *Service) toolStep(ctx context.Context, ev *repliesv1.ReplyEvent, tp *repliesv1.ToolProgress) error {
	switch tp.GetPhase() {
	case repliesv1.ToolPhase_TOOL_PHASE_AWAITING_APPROVAL:
		return s.approvalPrompt(ctx, ev, tp)
	case repliesv1.ToolPhase_TOOL_PHASE_STARTED:
		s.typing.resume(ctx, ev)
		return s.toolLine(ctx, ev, tp)
	default:
		s.typing.resume(ctx, ev)
		s.flushTools(ctx, ev.GetTurnId())
		return nil
	}
}

// approvalPrompt queues the approval prompt to the chat the turn answers,
// once per event (its key), after the lines shown so far: later lines
// start a message below it. The typing indicator pauses while the
// answer is awaited (Slack's hides the message box).
func (s *Service) approvalPrompt(ctx context.Context, ev *repliesv1.ReplyEvent, tp *repliesv1.ToolProgress) error {
	platform := ev.GetTarget().GetPlatform()
	s.typing.pause(ev.GetTurnId())
	// The text said before the call shows above its prompt.
	s.textFirst(ctx, ev)
	if tl := s.tools.peek(ev.GetTurnId()); tl != nil && tl.key != "" {
		if err := s.lastEdit(ctx, ev, tl, ":tpa"); err != nil {
			return err
		}
		tl.key, tl.id, tl.shown, tl.lines = "", "", "", nil
	} else if err := s.closeBlock(ctx, ev); err != nil {
		// A block of a call that only reasoned stays above the
		// prompt, and the answer after the approval goes below it, as
		// Hermes closes its stream before the prompt: the segment's
		// record first, the step comes back.
		return err
	}
	reqs := s.textRequests(ev, keyBase(ctx, ev)+":a", approvalText(platform, tp), deliveryv1.TextFormat_TEXT_FORMAT_MARKDOWN, false)
	// A gateway that renders buttons puts them under the prompt's end.
	reqs[len(reqs)-1].Approval = &deliveryv1.Approval{Choices: approvalChoices, ToolCallId: tp.GetToolCallId()}
	if err := s.enqueue(ctx, reqs...); err != nil {
		return err
	}
	if ev.GetTurnId() != "" {
		s.tools.get(ev.GetTurnId(), partitionOf(ctx)).prompted = true
	}
	return nil
}

// approvalChoices are the answers an approval prompt's buttons offer, as
// Hermes's do: once, for the session, always, deny.
var approvalChoices = []string{"once", "session", "always", "deny"}

// toolLine shows a started call by the platform's tool progress mode:
// the one /verbose chose, carried on the event, else the configured one.
func (s *Service) toolLine(ctx context.Context, ev *repliesv1.ReplyEvent, tp *repliesv1.ToolProgress) error {
	platform := ev.GetTarget().GetPlatform()
	mode, previewLength := s.cfg.toolProgress(platform)
	if chosen, ok := toolProgressMode(ev.GetToolProgressMode()); ok && chosen != "" {
		mode = chosen
	}
	if mode == ToolProgressOff || ev.GetTurnId() == "" {
		return nil
	}
	tl := s.tools.get(ev.GetTurnId(), partitionOf(ctx))
	if ev.GetSeq() <= tl.seq {
		return nil // shown before this event came back
	}
	if mode == ToolProgressNew && tp.GetToolName() == tl.lastTool {
		tl.seq = ev.GetSeq()
		return nil
	}
	// The text said before the call shows above its progress.
	s.textFirst(ctx, ev)
	line := progressLine(mode, previewLength, tp)
	repeat := 0
	if line == tl.lastLine {
		repeat = tl.repeat + 1
	}
	shown := line
	if repeat > 0 {
		shown = fmt.Sprintf("%s (×%d)", line, repeat+1)
	}
	lines := append(append([]string(nil), tl.lines...), shown)
	if repeat > 0 && len(tl.lines) > 0 {
		lines = append(append([]string(nil), tl.lines[:len(tl.lines)-1]...), shown)
	}
	key := keyBase(ctx, ev) + ":tp"
	if s.cfg.platform(platform).Streaming != StreamEdit {
		// Nothing to edit: every line is a message.
		if err := s.enqueueText(ctx, ev, key, shown, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, false); err != nil {
			return err
		}
	} else if text := strings.Join(lines, "\n"); tl.key == "" || !progressFits(platform, text) {
		// A new progress message: the full one keeps what it shows
		// and gets its last lines.
		if tl.key != "" {
			if err := s.lastEdit(ctx, ev, tl, ":tpo"); err != nil {
				return err
			}
			lines = []string{shown}
		} else if err := s.closeBlock(ctx, ev); err != nil {
			return err // the segment's record first: the step comes back
		}
		if err := s.enqueueText(ctx, ev, key, strings.Join(lines, "\n"), deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, false); err != nil {
			return err
		}
		tl.key, tl.id, tl.shown = key+":0", "", strings.Join(lines, "\n")
	}
	tl.seq, tl.lastTool, tl.lastLine, tl.repeat = ev.GetSeq(), tp.GetToolName(), line, repeat
	tl.lines, tl.ev = lines, ev
	s.flushTools(ctx, ev.GetTurnId())
	return nil
}

// progressFits reports whether a progress message fits the platform with
// Hermes's room to spare.
func progressFits(platform, text string) bool {
	l := chunk.Limits(platform)
	if l.Max > 128 {
		l.Max -= 64
	}
	return l.Fits(text)
}

// flushTools edits the turn's progress message to show its lines, best
// effort: not before its send went through, not beyond the shared rate
// limit (the next step, delta or the answer tries again).
func (s *Service) flushTools(ctx context.Context, turn string) {
	tl := s.tools.peek(turn)
	if tl == nil || tl.key == "" || tl.ev == nil {
		return
	}
	text := strings.Join(tl.lines, "\n")
	if text == tl.shown || !s.toolMessage(ctx, tl) {
		return
	}
	ev := tl.ev
	if wait, err := s.limiter.Take(ctx, s.now(), s.buckets(ev.GetTarget())...); err == nil && wait > 0 {
		return
	}
	req := s.request(ev, keyBase(ctx, ev)+":tpe", deliveryv1.SendOp_SEND_OP_EDIT)
	req.Text, req.Format, req.MessageId = text, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, tl.id
	if rec, err := s.progress(ctx, req); err == nil && rec.GetOk() {
		tl.shown = text
	}
}

// toolMessage learns the platform message id of the progress message
// once its send went through.
func (s *Service) toolMessage(ctx context.Context, tl *toolLines) bool {
	if tl.id != "" {
		return true
	}
	row, err := s.store.GetByKey(ctx, tl.key)
	if err != nil || row.State != outbox.Sent || row.PlatformMessageID == "" {
		return false
	}
	tl.id = row.PlatformMessageID
	return true
}

// lastEdit queues the edit that shows the progress message's last lines
// (before the answer, an approval prompt or the next progress message),
// when some are unshown and the message was sent; suffix tells the
// moments apart in its key.
func (s *Service) lastEdit(ctx context.Context, ev *repliesv1.ReplyEvent, tl *toolLines, suffix string) error {
	text := strings.Join(tl.lines, "\n")
	if text == tl.shown || !s.toolMessage(ctx, tl) {
		return nil
	}
	req := s.request(ev, keyBase(ctx, ev)+suffix, deliveryv1.SendOp_SEND_OP_EDIT)
	req.Text, req.Format, req.MessageId = text, deliveryv1.TextFormat_TEXT_FORMAT_PLAIN, tl.id
	if err := s.enqueue(ctx, req); err != nil {
		return err
	}
	tl.shown = text
	return nil
}

// endTools queues the progress message's last edit before the turn's
// answer (ev) and forgets the turn's progress.
func (s *Service) endTools(ctx context.Context, ev *repliesv1.ReplyEvent) error {
	tl := s.tools.peek(ev.GetTurnId())
	if tl == nil {
		return nil
	}
	if tl.key != "" {
		if err := s.lastEdit(ctx, ev, tl, ":tpf"); err != nil {
			return err
		}
	}
	s.tools.forget(ev.GetTurnId())
	return nil
}
