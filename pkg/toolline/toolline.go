// Package toolline is how a tool call the agent makes is named to the
// people watching it, as Hermes names it: the tool's emoji and the
// call's one-line label. Delivery builds chat platforms' progress lines
// from them ("🔍 session_search: \"tea\""), the API gateway its
// hermes.tool.progress events.
package toolline

import (
	"cmp"

	repliesv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/replies/v1"
)

// The emoji of a tool without one of its own: Hermes's gateway shows
// "⚙️" in chats' progress lines, its API server "⚡" (agent/display.py,
// get_tool_emoji's default) in hermes.tool.progress events.
const (
	ChatEmoji = "⚙️"
	APIEmoji  = "⚡"
)

// Emoji is the tool's own emoji, else fallback.
func Emoji(own, fallback string) string { return cmp.Or(own, fallback) }

// Preview is the call's main argument on one line (a command, a query, a
// path), as the worker previews it (Hermes's build_tool_preview); an
// external agent's step carries it as its detail. Empty for none.
func Preview(tp *repliesv1.ToolProgress) string {
	return cmp.Or(tp.GetPreview(), tp.GetDetail())
}

// Label is the call's one-line label: its preview, else the tool's name
// (Hermes's `build_tool_preview(...) or function_name`).
func Label(name, preview string) string { return cmp.Or(preview, name) }
