// Package reasoning renders a model's reasoning as a chat shows it with
// /reasoning show: Hermes's block before the answer ("💭 **Reasoning:**"
// and the thinking in a code block, cut to 15 lines). The worker puts it
// in the answer's final text; delivery shows the same block while the
// reasoning and the answer stream, so the final edit only completes what
// the message showed.
package reasoning

import (
	"fmt"
	"strings"
)

// MaxLines of the reasoning are shown (Hermes's 15); a note says how many
// more there were.
const MaxLines = 15

// Header starts the block, in Hermes's words.
const Header = "💭 **Reasoning:**"

// Block is the reasoning as shown: Header, then the thinking (trimmed,
// cut to MaxLines with "_... (n more lines)_", its code fences broken
// so that they do not close the block) in a code block. Empty when the
// thinking is blank.
func Block(thinking string) string {
	thinking = strings.TrimSpace(thinking)
	if thinking == "" {
		return ""
	}
	if lines := strings.Split(thinking, "\n"); len(lines) > MaxLines {
		thinking = strings.Join(lines[:MaxLines], "\n") + fmt.Sprintf("\n_... (%d more lines)_", len(lines)-MaxLines)
	}
	thinking = strings.ReplaceAll(thinking, "```", "`\u200b``")
	return Header + "\n```\n" + thinking + "\n```"
}

// WithAnswer is the answer as a chat that shows reasoning gets it: the
// Block before it, a blank line between. The answer alone when either
// is blank (an answer that is only tool calls shows no reasoning).
func WithAnswer(thinking, answer string) string {
	b := Block(thinking)
	if b == "" || strings.TrimSpace(answer) == "" {
		return answer
	}
	return b + "\n\n" + answer
}
