package router

import (
	"context"
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/command"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
	"github.com/switchboard-chat/switchboard/pkg/memorygate"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// /memory is Hermes's (gateway _handle_memory_command over
// hermes_cli/write_approval_commands.py): it lists the memory writes the
// approval gate holds, approves or rejects them by id (or all), and
// shows or sets the gate, in Hermes's words. As Hermes's (busy_policy
// reject), it waits for the running turn (refusedMidTurn).
//
// Differs from Hermes: Hermes keeps one memory per profile and writes
// memory.write_approval into the profile's config.yaml. Here memories
// belong to their owner, the user key the memory tool files them under
// (a DM's user, or in a group the group's conversation, per member
// where group_sessions_per_user is on: memorygate.Owner), so the
// gate and the pending writes are the owner's: memory.write_approval is
// the default, /memory approval on|off sets it for the owner alone
// (memory_write_approval), and each chat sees only its owner's pending
// writes (memory_pending_writes). Approving applies a write exactly
// once: its claim is a conditional UPDATE that one of any number of
// racing replicas wins, and the command, its effect and its answer
// commit together (once), so a redelivered /memory approve answers
// again without applying anything again.
//
// The buttons of a list outside a DM belong to the list's owner, as a
// /model picker's do: in a group whose sessions are per user each
// member's writes are their own, so every button carries data
// ("a-<id|all>.<owner tag>", "r-…"), the tag mapped back to the session
// key of whoever listed them (Redis, a day, as the picker's), and a
// press approves or rejects that owner's writes, whoever presses, as
// Hermes's Telegram callback does (it refuses only users the gateway
// does not authorize; its one memory per profile is everyone's). An id
// is looked up among the owner's writes only, so a button never acts
// on the presser's own; a tag Redis no longer knows, or a group list's
// button without data (sent before its buttons carried their owner),
// answers memoryListExpired and changes nothing.

// Hermes's texts.
const (
	memoryNoPending = "No pending memory writes."
	memoryUnknown   = "Unknown /memory subcommand. Use: pending, approve <id>, reject <id>, approval <on|off>."
	memoryUsage     = "Usage: /memory approve|reject <id>  (or 'all')"
	memoryRaced     = "no longer pending or already being processed"
	// memoryListExpired answers a press of a list's button whose owner
	// the router no longer knows.
	memoryListExpired = "This list of memory writes has expired — use /memory pending again."
)

// memoryCommand answers /memory [pending|approve|reject|approval] [id|on|off].
func (s *Service) memoryCommand(ctx context.Context, m *msgCtx, sess sessionstore.Session, args string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	owner := memorygate.Owner(m.key, m.src)
	by := m.platform + ":" + m.src.GetUserId()
	if press := m.ev.GetButtonPress(); press.GetMessageId() != "" && (press.GetData() != "" || !isDM(m.src)) {
		return s.memoryPress(ctx, m, sess, press.GetData(), by)
	}
	a := command.Memory(args)
	switch a.Sub {
	case command.MemoryShow:
		state, err := s.memoryState(ctx, owner)
		if err != nil {
			return err
		}
		return s.memoryList(ctx, m, sess, owner, state+"\n\n")
	case command.MemoryPending:
		return s.memoryList(ctx, m, sess, owner, "")
	case command.MemoryApprove, command.MemoryReject:
		if a.Target == "" {
			return reply(memoryUsage)
		}
		return s.memoryDecide(ctx, m, sess, owner, a.Sub == command.MemoryApprove, a.Target, by)
	case command.MemoryApproval:
		if a.Gate == "" {
			state, err := s.memoryState(ctx, owner)
			if err != nil {
				return err
			}
			return reply(state + "\nSet with: /memory approval <on|off>")
		}
		if a.Gate != "on" && a.Gate != "off" {
			return reply(fmt.Sprintf("Invalid value '%s'. Use: on or off.", a.Gate))
		}
		return s.once(ctx, m, "memory", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
			if err := s.memory.InTx(st.Tx()).SetEnabled(ctx, owner, a.Gate == "on", by); err != nil {
				return "", 0, err
			}
			s.log.InfoContext(ctx, "memory write approval changed", "owner", owner, "on", a.Gate == "on", "by", by)
			return fmt.Sprintf("memory.write_approval set to '%s'.", a.Gate), sess.Generation, nil
		})
	}
	return reply(memoryUnknown)
}

// memoryDecide approves or rejects the owner's pending write target (or
// all of them), once per inbound event: the decisions commit with the
// answer, which goes to the sender at sess's generation.
func (s *Service) memoryDecide(ctx context.Context, m *msgCtx, sess sessionstore.Session, owner string, approve bool, target, by string) error {
	return s.once(ctx, m, "memory", func(ctx context.Context, st *sessionstore.Store) (string, int64, error) {
		gate := s.memory.InTx(st.Tx())
		var text string
		var err error
		if approve {
			text, err = s.memoryApprove(ctx, gate, owner, target, by)
		} else {
			text, err = memoryReject(ctx, gate, owner, target, by)
		}
		return text, sess.Generation, err
	})
}

// memoryData is what a button of a pending-writes list outside a DM
// carries: "a-<id>.<tag>", "r-all.<tag>".
type memoryData struct {
	approve bool
	// target is a write's id or "all".
	target string
	// owner is the list owner's tag (ownerTag).
	owner string
}

// parseMemoryData reads a list's button data (outside input: a press
// carries it from the platform); ok false for any other.
func parseMemoryData(data string) (memoryData, bool) {
	if len(data) > 24 {
		return memoryData{}, false
	}
	base, tag, found := strings.Cut(data, ".")
	if !found || !isTag(tag) {
		return memoryData{}, false
	}
	act, target, found := strings.Cut(base, "-")
	if !found || (act != "a" && act != "r") || (target != "all" && !memorygate.ValidID(target)) {
		return memoryData{}, false
	}
	return memoryData{approve: act == "a", target: target, owner: tag}, true
}

// memoryPress answers a press of a pending-writes list's button outside
// a DM (or one with data): it approves or rejects the writes of the
// list's owner, whoever presses (the command's admin rules applied to
// the presser already).
func (s *Service) memoryPress(ctx context.Context, m *msgCtx, sess sessionstore.Session, data, by string) error {
	reply := func(text string) error { return s.notice(ctx, m, sess.Generation, text, "command") }
	d, ok := parseMemoryData(data)
	if !ok {
		return reply(memoryListExpired)
	}
	key, ok, err := s.tagOwner(ctx, m, d.owner)
	if err != nil {
		return err
	}
	if !ok {
		return reply(memoryListExpired)
	}
	if key != m.key {
		// The owner's running turn may be staging the writes reviewed.
		holder, err := s.locker.Owner(ctx, key)
		if err != nil {
			return fmt.Errorf("read memory list owner's lock: %w", err)
		}
		// The turn's lease stands in for a lock Redis lost.
		if holder, err = s.holderOrLease(ctx, key, holder); err != nil {
			return err
		}
		if holder != "" {
			// Recorded with the event (once), as the decision would be:
			// a redelivery after the owner's turn ended finds it and is
			// refused again, not decided.
			return s.once(ctx, m, "memory", func(context.Context, *sessionstore.Store) (string, int64, error) {
				return midTurnRefusal("memory"), sess.Generation, nil
			})
		}
	}
	return s.memoryDecide(ctx, m, sess, memorygate.Owner(key, m.src), d.approve, d.target, by)
}

// memoryState is Hermes's line for the owner's gate.
func (s *Service) memoryState(ctx context.Context, owner string) (string, error) {
	on, err := s.memory.Enabled(ctx, owner)
	if err != nil {
		return "", err
	}
	return "memory.write_approval = " + onOff(on), nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// memoryButtons bounds the pending writes that get buttons of their
// own in one answer; the list itself shows them all.
const memoryButtons = 8

// memoryList answers with head and Hermes's list of the owner's pending
// writes. Where buttons render (Telegram, Discord) each listed write
// gets Approve and Reject buttons (up to memoryButtons of them, then
// Approve all and Reject all when there are several), as Hermes's
// Telegram surface. In a DM a press sends the typed command ("/memory
// approve abc12345"), handled as if typed; outside a DM the buttons
// carry the owner's tag (memoryPress). Either applies once.
func (s *Service) memoryList(ctx context.Context, m *msgCtx, sess sessionstore.Session, owner, head string) error {
	list, err := s.memory.Pending(ctx, owner)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return s.notice(ctx, m, sess.Generation, head+memoryNoPending, "command")
	}
	lines := []string{fmt.Sprintf("Pending memory writes (%d):", len(list))}
	for _, p := range list {
		lines = append(lines, fmt.Sprintf("  %s  %s", p.ID, p.Summary))
	}
	lines = append(lines, "", "Apply: /memory approve <id>   Reject: /memory reject <id>")
	text := head + strings.Join(lines, "\n")
	if !pickerPlatforms[m.platform] {
		return s.notice(ctx, m, sess.Generation, text, "command")
	}
	tag := ""
	if !isDM(m.src) {
		if tag, err = s.rememberTagOwner(ctx, m); err != nil {
			return err
		}
	}
	return s.publishCommandNotice(ctx, m, sess.Generation, &repliesv1.Notice{Text: text, Picker: memoryPicker(list, tag)})
}

// memoryPicker is the buttons of a pending-writes list of owner tag (""
// a DM's: a press is the typed command).
func memoryPicker(list []memorygate.Pending, tag string) *deliveryv1.Picker {
	choice := func(label, sub, target string) *deliveryv1.PickerChoice {
		c := &deliveryv1.PickerChoice{Label: label, Command: "/memory " + sub + " " + target}
		if tag != "" {
			c.Data = tagged(sub[:1]+"-"+target, tag)
		}
		return c
	}
	p := &deliveryv1.Picker{}
	for _, w := range list[:min(len(list), memoryButtons)] {
		p.Rows = append(p.Rows, &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{
			choice("✅ Approve "+w.ID, "approve", w.ID),
			choice("❌ Reject "+w.ID, "reject", w.ID),
		}})
	}
	if len(list) > 1 {
		p.Rows = append(p.Rows, &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{
			choice("✅ Approve all", "approve", "all"),
			choice("❌ Reject all", "reject", "all"),
		}})
	}
	return p
}

// memoryApprove applies the owner's pending write target, or all of
// them, and says what became of each, as Hermes's _approve.
func (s *Service) memoryApprove(ctx context.Context, gate *memorygate.Store, owner, target, by string) (string, error) {
	list, err := gate.Pending(ctx, owner)
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return memoryNoPending, nil
	}
	var ids []string
	if target == "all" {
		for _, p := range list {
			ids = append(ids, p.ID)
		}
	} else {
		id := strings.ToLower(target)
		for _, p := range list {
			if p.ID == id {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return fmt.Sprintf("No pending memory write with id '%s'.", target), nil
		}
	}
	applied := 0
	var failed []string
	for _, id := range ids {
		o, msg, err := gate.Approve(ctx, owner, id, by)
		if err != nil {
			return "", err
		}
		switch o {
		case memorygate.Applied:
			applied++
			memoryDecisions.WithLabelValues("approved").Inc()
		case memorygate.NotPending:
			failed = append(failed, id+": "+memoryRaced)
		default:
			memoryDecisions.WithLabelValues("failed").Inc()
			failed = append(failed, id+": "+msg)
		}
	}
	s.log.InfoContext(ctx, "memory writes approved", "owner", owner, "applied", applied, "failed", len(failed), "by", by)
	out := fmt.Sprintf("Approved %d memory write(s).", applied)
	if len(failed) > 0 {
		out += "\nFailed:\n  " + strings.Join(failed, "\n  ")
	}
	return out, nil
}

// memoryReject drops the owner's pending write target, or all of them,
// as Hermes's _reject.
func memoryReject(ctx context.Context, gate *memorygate.Store, owner, target, by string) (string, error) {
	if target == "all" {
		list, err := gate.Pending(ctx, owner)
		if err != nil {
			return "", err
		}
		n := 0
		for _, p := range list {
			ok, err := gate.Reject(ctx, owner, p.ID, by)
			if err != nil {
				return "", err
			}
			if ok {
				n++
				memoryDecisions.WithLabelValues("rejected").Inc()
			}
		}
		return fmt.Sprintf("Rejected %d pending memory write(s).", n), nil
	}
	ok := false
	if memorygate.ValidID(strings.ToLower(target)) {
		var err error
		if ok, err = gate.Reject(ctx, owner, strings.ToLower(target), by); err != nil {
			return "", err
		}
	}
	if !ok {
		return fmt.Sprintf("No pending memory write with id '%s'.", target), nil
	}
	memoryDecisions.WithLabelValues("rejected").Inc()
	return fmt.Sprintf("Rejected pending memory write '%s'.", target), nil
}
