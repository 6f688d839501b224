package command

// MenuEntry is a command as a platform's command menu shows it
// (Telegram's setMyCommands): its canonical name and a one-line
// description.
type MenuEntry struct {
	Name, Description string
}

// menu is every command a user types, in /help's order, with Hermes's
// description (hermes_cli/commands.py) where it fits what the command
// does here, else this gateway's. Each fits every platform's menu
// limits: a name of at most 32 lowercase letters, digits and
// underscores, a description of at most 100 characters (Discord's, the
// tightest; Telegram takes 256), and at most 100 entries.
var menu = []MenuEntry{
	{"new", "Start a new session (fresh session ID + history)"},
	{"stop", "Stop the current task"},
	{"queue", "Queue a prompt for the next turn (doesn't interrupt)"},
	{"steer", "Inject a message after the next tool call without interrupting"},
	{"status", "Show session, model, token, and context info"},
	{"usage", "Show token usage for the current session"},
	{"context", "Show the context window: usage gauge, category breakdown, compression stats, throughput"},
	{"insights", "Show usage insights and analytics (last 30 days)"},
	{"model", "Show or switch the model (session-scoped)"},
	{"provider", "Show the model provider and this session's model"},
	{"approve", "Approve a pending dangerous command"},
	{"deny", "Deny a pending dangerous command (optionally with a reason)"},
	{"title", "Set a title for the current session"},
	{"sessions", "Browse and resume previous sessions"},
	{"resume", "Resume a previously-named session"},
	{"branch", "Branch the current session (explore a different path)"},
	{"retry", "Retry the last message (resend to agent)"},
	{"undo", "Remove the last N exchanges (default 1)"},
	{"compress", "Compress conversation context"},
	{"save", "Export the current conversation (bare /save shows usage)"},
	{"personality", "Set a predefined personality"},
	{"reasoning", "Manage reasoning effort and display"},
	{"yolo", "Toggle YOLO mode (skip all dangerous command approvals)"},
	{"approvals", "Show or set the persistent dangerous-command approval mode"},
	{"verbose", "Cycle tool progress display: off -> new -> all -> verbose"},
	{"busy", "Control how messages behave while the agent is working"},
	{"footer", "Toggle gateway runtime-metadata footer on final replies"},
	{"voice", "Toggle voice mode"},
	{"fast", "Fast mode — OpenAI Priority Processing / Anthropic Fast Mode"},
	{"background", "Run a prompt in a separate background session"},
	{"agents", "Show active agents and running tasks"},
	{"btw", "Ask a side question about the current conversation without interrupting it"},
	{"moa", "Run one prompt through the default Mixture of Agents preset, then restore your model"},
	{"goal", "Set a standing goal Hermes works on across turns until achieved"},
	{"subgoal", "Add or manage extra criteria on the active goal"},
	{"loop", "Re-run a prompt on a recurring interval in this session"},
	{"heartbeat", "Set a recurring prompt that re-enters this session when idle"},
	{"topic", "Enable or inspect Telegram DM topic sessions"},
	{"sethome", "Set this chat as the home channel"},
	{"cron", "Manage scheduled tasks"},
	{"memory", "Review pending memory writes / toggle the approval gate"},
	{"bundles", "List skill bundles (aliases /<name> for multiple skills)"},
	{"platform", "Pause, resume, or list a failing gateway platform"},
	{"pause", "Pause new work globally (emergency stop); '/pause off' resumes"},
	// Named as Telegram takes it (no "-"): /reload_skills is its alias.
	{"reload_skills", "Re-scan skills.dirs for newly installed or removed skills"},
	{"whoami", "Show who the gateway thinks you are"},
	{"profile", "Show the agent profile this chat talks to"},
	{"version", "Show the running Switchboard release"},
	{"commands", "Browse all commands (paginated)"},
	{"help", "Show available commands"},
}

// Menu returns the commands for a platform's command menu, in /help's
// order: every command Names lists but Telegram's /start, a name with
// "-" under its alias with "_".
func Menu() []MenuEntry {
	out := make([]MenuEntry, len(menu))
	copy(out, menu)
	return out
}
