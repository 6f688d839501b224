package worker

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/command"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// transcriptCommand is a /retry, /undo or /compress the router queued as a turn of
// its own: the turn edits the conversation instead of sending the
// command to the model.
type transcriptCommand struct {
	name string // "retry", "undo" or "compress"
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
	case "retry", "undo", "compress":
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
	if cmd.name == "compress" {
		return // it needs the model: compressCommand, once the turn has one
	}
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

// compressCommand performs /compress, Hermes's manual compression: the
// conversation's older messages are summarised now, as they would be once
// the prompt outgrew agent.compress_at of the window, keeping the last
// agent.protect_last verbatim, and the turn answers with what it did, in
// Hermes's words, without a call to the model as the user's input. As
// Hermes's, "/compress <focus>" (TurnRequested.compress_focus) asks the
// summary to keep what concerns the focus topic in full detail, and the
// answer names it; "/compress here N" (compress_keep_last) keeps the
// last N exchanges instead and summarises everything before them; and
// "/compress --preview" (compress_preview) only says what it would do.
func (r *turnRun) compressCommand(ctx context.Context, b Backend, model, system string, ls *loopState) (store.Final, error) {
	// As in Hermes, an earlier summary counts as a message.
	before, tokens := len(ls.prior), estimateTokens(system, ls.summary, ls.prior)
	if ls.summary != "" {
		before++
	}
	if before < 4 {
		return r.finishWith(ctx, ls, "Not enough conversation to compress (need at least 4 messages).")
	}
	focus, keep := compressFocusOf(r.req), compressKeepOf(r.req)
	if r.req.GetCompressPreview() {
		return r.finishWith(ctx, ls, r.compressPreview(ls, before, tokens, keep, focus))
	}
	cut, partial := r.compressCut(ls, keep)
	if cut <= 0 {
		return r.finishWith(ctx, ls, fmt.Sprintf("Nothing to compress yet: the last %d messages are always kept as they are.", r.s.cfg.Agent.ProtectLast))
	}
	kept := len(ls.prior) - cut
	done, err := r.compress(ctx, b, model, system, ls, true, focus, keep)
	if err != nil {
		if fin, stopped, serr := r.stopFinal(ctx, ls, err); stopped {
			return fin, serr
		}
		return store.Final{}, err
	}
	if !done {
		return r.finishWith(ctx, ls, "Compression failed: the model gave no summary. Try again later.")
	}
	after := len(ls.prior) + 1 // the summary stands for the rest
	lines := fmt.Sprintf("🗜️ Compressed: %d → %d messages\n", before, after)
	if partial {
		lines += fmt.Sprintf("Kept the last %d exchange(s) (%d message(s)) verbatim.\n", keep, kept)
	}
	if focus != "" {
		lines += fmt.Sprintf("Focus: \"%s\"\n", focus)
	}
	return r.finishWith(ctx, ls, lines+fmt.Sprintf("~%s → ~%s tokens",
		thousands(tokens), thousands(estimateTokens(system, ls.summary, ls.prior))))
}

// compressKeepOf is the turn's "/compress here N" (0: the full form),
// within the bounds the router gives it, so a turn from elsewhere keeps
// no more than command.CompressKeepMax exchanges.
func compressKeepOf(req *turnsv1.TurnRequested) int {
	return min(max(int(req.GetCompressKeepLast()), 0), command.CompressKeepMax)
}

// compressPreview is Hermes's answer to "/compress --preview": what the
// compression would summarise and keep, each line under 🗜️, with no
// model call and nothing written (the command's turn stores its answer
// alone, never in the transcript). before and tokens are the
// conversation's messages (an earlier summary counting as one) and its
// estimated tokens.
func (r *turnRun) compressPreview(ls *loopState, before, tokens, keep int, focus string) string {
	cut, partial := r.compressCut(ls, keep)
	lines := []string{"Preview — no changes made."}
	if cut <= 0 {
		lines = append(lines, fmt.Sprintf("Nothing to compress yet: the last %d messages are always kept as they are.", r.s.cfg.Agent.ProtectLast))
	} else {
		head := cut
		if ls.summary != "" {
			head++ // the earlier summary is folded into the new one
		}
		lines = append(lines, fmt.Sprintf("Would compress %d of %d message(s) (~%s tokens currently in context).", head, before, thousands(tokens)))
	}
	switch {
	case partial:
		lines = append(lines, fmt.Sprintf("Boundary: keeping the last %d exchange(s) (%d message(s)) verbatim.", keep, len(ls.prior)-cut))
	case keep > 0:
		lines = append(lines, "Boundary: 'here' split would keep everything — falling back to full compression.")
	}
	if focus != "" {
		lines = append(lines, fmt.Sprintf("Focus topic: \"%s\"", focus))
	}
	lines = append(lines, "Run the command again without --preview to apply.")
	return "🗜️ " + strings.Join(lines, "\n🗜️ ")
}

// thousands writes n with comma separators, as Python's {n:,}.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
