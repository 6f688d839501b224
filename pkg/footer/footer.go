// Package footer renders Hermes's runtime footer (gateway/runtime_footer.py):
// one line of runtime state that /footer on appends to an agent's final
// answers. The router shows it as /footer's example; the worker appends
// it to a turn's final text.
package footer

import (
	"math"
	"strconv"
	"strings"
)

// Fields are the footer's fields, in order: Hermes's defaults (model,
// context_pct, cwd) without cwd, which Switchboard's workers do not have
// (their tools run in no user's working directory).
var Fields = []string{"model", "context_pct"}

// sep joins the fields, as Hermes's " · ".
const sep = " · "

// Format renders the footer: the model without its vendor prefix
// ("openai/gpt-5.4" → "gpt-5.4") and how full the context window is,
// contextTokens (the prompt of the turn's last model call) of window,
// as a whole percentage from 0 to 100. A field without data is left out,
// as Hermes does ("a partially-populated footer is better than a line
// with ?%"); "" when none has data.
func Format(model string, contextTokens, window int64) string {
	var parts []string
	if m := model[strings.LastIndex(model, "/")+1:]; m != "" {
		parts = append(parts, m)
	}
	if pct, ok := Percent(contextTokens, window); ok {
		parts = append(parts, strconv.Itoa(pct)+"%")
	}
	return strings.Join(parts, sep)
}

// Percent is how full a window of window tokens is with contextTokens
// in it, as a whole percentage from 0 to 100: the footer's figure, which
// /context shows too. ok is false without data (either is 0 or less).
func Percent(contextTokens, window int64) (pct int, ok bool) {
	if window <= 0 || contextTokens <= 0 {
		return 0, false
	}
	return int(max(0, min(100, math.Round(float64(contextTokens)/float64(window)*100)))), true
}

// Append is answer with the footer after a blank line, as Hermes appends
// it; answer as it is when the footer is empty or the answer blank (an
// answer that was only its media stays without text).
func Append(answer, line string) string {
	if line == "" || strings.TrimSpace(answer) == "" {
		return answer
	}
	return strings.TrimRight(answer, " \t\n") + "\n\n" + line
}
