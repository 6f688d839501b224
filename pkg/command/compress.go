package command

import (
	"strconv"
	"strings"
)

// How many exchanges "/compress here [N]" keeps verbatim: Hermes's
// default and ceiling (a larger N is cut to it, a smaller one raised to 1).
const (
	CompressKeepDefault = 2
	CompressKeepMax     = 100
)

// Compress is /compress's argument, read as Hermes reads it.
type Compress struct {
	// Preview: --preview, --dry-run or --dryrun, anywhere: say what
	// would be compressed and change nothing.
	Preview bool
	// Aggressive: --aggressive, anywhere, which Hermes refuses.
	Aggressive bool
	// Keep is the number of recent exchanges (a user message and what
	// followed it) kept verbatim by "here [N]" (also "up to here [N]",
	// "--keep N", "-k N", "--keep=N"), from 1 to CompressKeepMax; 0 for
	// the full form, which keeps the usual tail (agent.protect_last).
	Keep int
	// Focus is the full form's focus topic (CompressFocus of what is
	// left); "" for none, and always with Keep.
	Focus string
}

// ParseCompress reads /compress's argument as Hermes does. The flags go
// first, wherever they are; then a first word "here" makes the "here"
// form, so a focus topic that is literally "here" (or starts with the
// word) cannot be given: as in Hermes, "here" wins. Its N is the next
// word; one that is no number keeps CompressKeepDefault, and any words
// after it are ignored. Anything else is the focus topic.
func ParseCompress(args string) Compress {
	var c Compress
	var rest []string
	for _, w := range strings.Fields(args) {
		switch strings.ToLower(w) {
		case "--preview", "--dry-run", "--dryrun":
			c.Preview = true
		case "--aggressive":
			c.Aggressive = true
		default:
			rest = append(rest, w)
		}
	}
	lower := make([]string, len(rest))
	for i, w := range rest {
		lower[i] = strings.ToLower(w)
	}
	if len(lower) >= 3 && lower[0] == "up" && lower[1] == "to" && lower[2] == "here" {
		lower = lower[2:]
	}
	switch {
	case len(lower) == 0:
	case lower[0] == "here":
		c.Keep = CompressKeepDefault
		if len(lower) > 1 {
			c.Keep = keepCount(lower[1])
		}
		return c
	case (lower[0] == "--keep" || lower[0] == "-k") && len(lower) > 1:
		c.Keep = keepCount(lower[1])
		return c
	case strings.HasPrefix(lower[0], "--keep="):
		c.Keep = keepCount(strings.TrimPrefix(lower[0], "--keep="))
		return c
	}
	c.Focus = CompressFocus(strings.Join(rest, " "))
	return c
}

// keepCount is Hermes's keep count of "here N": N within 1 and
// CompressKeepMax, CompressKeepDefault when it is no number.
func keepCount(w string) int {
	n, err := strconv.Atoi(w)
	if err != nil {
		return CompressKeepDefault
	}
	return max(1, min(n, CompressKeepMax))
}

// String is c as an argument ParseCompress reads back as c (Aggressive
// aside, which it leaves out): "[--preview] [here N | focus]".
func (c Compress) String() string {
	var parts []string
	if c.Preview {
		parts = append(parts, "--preview")
	}
	switch {
	case c.Keep > 0:
		parts = append(parts, "here", strconv.Itoa(c.Keep))
	case c.Focus != "":
		parts = append(parts, c.Focus)
	}
	return strings.Join(parts, " ")
}
