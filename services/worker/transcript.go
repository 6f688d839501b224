package worker

import (
	"fmt"
	"strconv"
	"strings"

	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// transcriptCommand is a /retry or /undo the router queued as a turn of
// its own: the turn edits the conversation instead of sending the
// command to the model.
type transcriptCommand struct {
	name string // "retry" or "undo"
	n    int    // exchanges to remove
}

// transcriptCommandOf reads the command the router marked on the turn's
// one input.
func transcriptCommandOf(req *turnsv1.TurnRequested) (transcriptCommand, bool) {
	ins := req.GetInputs()
	if len(ins) != 1 {
		return transcriptCommand{}, false
	}
	name, arg, _ := strings.Cut(ins[0].GetTranscriptCommand(), " ")
	c := transcriptCommand{name: name, n: 1}
	if n, err := strconv.Atoi(arg); err == nil && n > 0 && name == "undo" {
		c.n = n
	}
	switch name {
	case "retry", "undo":
		return c, true
	}
	return transcriptCommand{}, false
}

// cutAt finds where removing the last n exchanges starts: the index in
// prior of the n-th last user message, or of the first one when fewer
// are left, and how many exchanges that removes (0: none).
func cutAt(prior []store.Message, n int) (idx, exchanges int) {
	idx = -1
	for i := len(prior) - 1; i >= 0 && exchanges < n; i-- {
		if prior[i].Role == llm.RoleUser {
			idx, exchanges = i, exchanges+1
		}
	}
	return idx, exchanges
}

// beginTranscriptCommand prepares a /retry or /undo turn that has written
// nothing yet. Both remove the conversation's last exchanges (the
// turn's first write does it, in the same transaction; see
// store.Turn.Cut). /undo then ends with a note of what it removed
// (ls.reply); /retry sends the removed user message to the model again
// as the turn's input. Messages folded into a summary are out of reach.
func (r *turnRun) beginTranscriptCommand(ls *loopState, cmd transcriptCommand) {
	n := cmd.n
	if cmd.name == "retry" {
		n = 1
	}
	i, exchanges := cutAt(ls.prior, n)
	if exchanges == 0 {
		ls.reply = "Nothing to " + cmd.name + "."
		if ls.summary != "" {
			ls.reply = "Nothing to " + cmd.name + ": the earlier conversation is summarized and cannot be changed."
		}
		return
	}
	removed := ls.prior[i:]
	r.st.Cut = removed[0].ID
	ls.prior = ls.prior[:i]
	preview := strings.Join(strings.Fields(truncate(removed[0].Content, 80)), " ")
	if cmd.name == "retry" {
		ls.turn = []store.Message{{Role: llm.RoleUser, Content: removed[0].Content, TurnID: r.req.GetTurnId()}}
		ls.unsaved = 1
		r.log.Info("retrying the last message", "removed", len(removed))
		return
	}
	what := "the last exchange"
	if exchanges > 1 {
		what = fmt.Sprintf("the last %d exchanges", exchanges)
	}
	if exchanges < cmd.n {
		what = fmt.Sprintf("all %d exchanges there were", exchanges)
	}
	ls.reply = fmt.Sprintf("↩️ Undid %s (%d messages), from: “%s”", what, len(removed), preview)
	r.log.Info("undid exchanges", "exchanges", exchanges, "removed", len(removed))
}
