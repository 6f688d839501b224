package api

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var abandonedRequests = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_api_abandoned_total",
	Help: "Stateless API requests whose client went away before the answer: their turn was stopped (/stop in the request's conversation).",
})

var runsRefused = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_api_runs_refused_total",
	Help: "Runs (/v1/runs) refused because gateways.api.max_concurrent_runs went on already (429).",
})

var mediaLinksDropped = promauto.NewCounter(prometheus.CounterOpts{
	Name: "switchboard_api_media_links_dropped_total",
	Help: "Links to kept files (GET /v1/media/{id}) written into a full link bucket, each dropping the oldest link before gateways.api.media_ttl: raise gateways.api.media_links_max_bytes.",
})
