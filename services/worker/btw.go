package worker

import (
	"context"
	"errors"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/llm"
	"github.com/switchboard-chat/switchboard/pkg/placeholder"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
)

// sideInstructions is the system prompt of a /btw side question: what
// Hermes's one-shot side question tells the model, in our words.
const sideInstructions = "You are the assistant of the conversation transcribed in the user's message. " +
	"The user asked a quick side question with /btw while that conversation goes on.\n" +
	"Rules:\n" +
	"- Answer only the side question. Do not continue, redo or critique the main task.\n" +
	"- The transcript is your context. It is a snapshot and may lack the very latest activity.\n" +
	"- If the transcript does not hold enough to answer, say so plainly instead of guessing.\n" +
	"- You have no tools here: answer directly, in text.\n" +
	"- Be concise and direct."

// Budgets of the transcript a side question shows the model, Hermes's:
// each message is cut to sideMessageChars, and the newest messages that
// fit in sideTranscriptChars are kept.
const (
	sideMessageChars    = 2000
	sideTranscriptChars = 24000
)

// sideQuestion answers a /btw side question (TurnRequested.side_question)
// as Hermes's gateway does when no agent of the chat is at hand: one
// model call, without tools, whose only message is the chat's
// conversation (begin loaded it into ls: a snapshot of what was
// committed when the attempt began; the turn the chat is running has
// committed its steps as it went, its unanswered input not yet) rendered
// as a plain transcript, followed by the question. Rendering it, rather
// than replaying it as the conversation's own messages, keeps tool calls
// and their results out of the request, which no provider then refuses
// for lack of tool definitions. The answer is the turn's final alone:
// nothing is written to any transcript (finishAfter), and publishFinal
// puts Hermes's header on it.
func (r *turnRun) sideQuestion(ctx context.Context, ls *loopState) (store.Final, error) {
	var question []string
	for _, m := range ls.turn {
		if m.Role == llm.RoleUser && strings.TrimSpace(m.Content) != "" {
			question = append(question, m.Content)
		}
	}
	backend, model := r.s.backendFor(r.req.GetModelOverride())
	r.model = model
	prompt := "Conversation transcript (snapshot):\n-----\n" + renderTranscript(ls.summary, ls.prior) +
		"\n-----\n\nSide question: " + strings.Join(question, "\n")
	ask := &loopState{turn: []store.Message{{Role: llm.RoleUser, Content: prompt}}}
	resp, err := r.callModel(ctx, backend, model, sideInstructions, ask, false)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, errLockLost) || errors.Is(err, errStopped) || errors.Is(err, errInterrupted) {
			return store.Final{}, err
		}
		r.log.Warn("side question's model call failed", "class", string(llm.ClassOf(err)), "err", err)
		return r.finish(ctx, ls, nil, store.Final{Status: store.StatusFailed, Kind: store.FinalError,
			ErrorCode: errorCode(err), Text: llm.UserMessage(err)})
	}
	return r.finish(ctx, ls, nil, store.Final{Status: store.StatusCompleted, Kind: store.FinalText, Text: resp.Text})
}

// renderTranscript is a conversation as a side question shows it: one
// line per message ("USER: …", "ASSISTANT: …", "TOOL RESULT: …", an
// assistant's calls as "ASSISTANT [called tools: a, b]"), each cut to
// sideMessageChars, its summary first; the newest lines that fit in
// sideTranscriptChars, after a note when older ones were left out.
func renderTranscript(summary string, msgs []store.Message) string {
	var lines []string
	if s := strings.TrimSpace(summary); s != "" {
		lines = append(lines, "SUMMARY OF THE EARLIER CONVERSATION: "+truncate(s, sideMessageChars))
	}
	for _, m := range msgs {
		text := strings.TrimSpace(m.Content)
		switch m.Role {
		case llm.RoleUser:
			if text != "" {
				lines = append(lines, "USER: "+truncate(text, sideMessageChars))
			}
		case llm.RoleAssistant:
			if len(m.ToolCalls) > 0 {
				names := make([]string, len(m.ToolCalls))
				for i, tc := range m.ToolCalls {
					names[i] = tc.Name
				}
				lines = append(lines, "ASSISTANT [called tools: "+strings.Join(names, ", ")+"]")
			}
			if text != "" {
				lines = append(lines, "ASSISTANT: "+truncate(text, sideMessageChars))
			}
		case llm.RoleTool:
			if text != "" {
				lines = append(lines, "TOOL RESULT: "+truncate(text, sideMessageChars))
			}
		}
	}
	kept, used := 0, 0
	for i := len(lines) - 1; i >= 0; i-- {
		if used+len(lines[i])+1 > sideTranscriptChars && kept > 0 {
			break
		}
		kept++
		used += len(lines[i]) + 1
	}
	if kept == 0 {
		return "(no prior conversation)"
	}
	out := strings.Join(lines[len(lines)-kept:], "\n")
	if kept < len(lines) {
		out = "[...older conversation omitted...]\n" + out
	}
	return out
}

// sideAnswer is what a /btw side question's answer delivers to the chat,
// as Hermes: "💬 /btw:", the question's first 60 characters, and the
// answer, or "(No response generated)".
func (r *turnRun) sideAnswer(text string) string {
	if strings.TrimSpace(text) == "" {
		text = placeholder.NoResponse
	}
	return "💬 /btw: \"" + r.backgroundPrompt() + "\"\n\n" + text
}
