package admin

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var authFailures = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_admin_auth_failures_total",
	Help: "Admin API calls refused for a missing or wrong token.",
})

// pauseActions counts the emergency stop engaged (pause) and lifted
// (resume) through the API; the router's
// switchboard_router_pause_actions_total counts /pause from chats.
var pauseActions = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_admin_pause_actions_total",
	Help: "Emergency stops engaged (action=pause) and lifted (action=resume) through the admin API.",
}, []string{"action"})

// approvalModeChanges counts the approval mode set (or reset to the
// configured default) through the API; the
// router's switchboard_router_approval_mode_changes_total counts
// /approvals from chats.
var approvalModeChanges = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_admin_approval_mode_changes_total",
	Help: "Changes of the gateway-wide dangerous-command approval mode through the admin API, by the mode set (manual, smart, off; a reset counts the configured default it returns to).",
}, []string{"mode"})

// skillReloads counts skill reloads announced through the API; each
// process that follows one counts it in switchboard_skill_reloads_total
// {source="announced"}.
var skillReloads = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_admin_skill_reloads_total",
	Help: "Skill reloads announced through the admin API (the processes holding skills scan on their own).",
})
