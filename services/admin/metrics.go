package admin

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var authFailures = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_admin_auth_failures_total",
	Help: "Admin API calls refused for a missing or wrong token.",
})
