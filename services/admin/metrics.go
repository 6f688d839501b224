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
