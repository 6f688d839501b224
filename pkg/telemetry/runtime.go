package telemetry

import (
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Runtime metrics /metrics adds to the Go collector's defaults: what an
// operator sizes a process's memory limit by. The share of the process's
// CPU its collector takes is go_cpu_classes_gc_total_cpu_seconds_total over
// go_cpu_classes_total_cpu_seconds_total (GOMAXPROCS × wall time) minus
// go_cpu_classes_idle_cpu_seconds_total, all estimated by the runtime at
// each collection; the heap that survived the last one is
// go_gc_heap_live_bytes. A live heap near the soft memory limit makes the
// collector run often, and that share grow.
var runtimeMetrics = regexp.MustCompile(`^/(cpu/classes/(gc/total|total|idle):cpu-seconds|gc/heap/live:bytes)$`)

var registerRuntime sync.Once

// registerRuntimeMetrics swaps the default registry's Go collector for
// one that also exports runtimeMetrics, once per process.
func registerRuntimeMetrics() {
	registerRuntime.Do(func() {
		prometheus.Unregister(collectors.NewGoCollector())
		prometheus.MustRegister(collectors.NewGoCollector(
			collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: runtimeMetrics})))
	})
}
