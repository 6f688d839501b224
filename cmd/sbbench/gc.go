package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// GC is one process's Go collector over a run's window.
type GC struct {
	// CPUPercent is the part of the process's CPU the collector took
	// (the runtime's estimate, updated at each collection).
	CPUPercent float64 `json:"cpu_percent"`
	// LiveHeapMB is the heap that survived the last collection before
	// the window ended.
	LiveHeapMB float64 `json:"live_heap_mb"`
}

// gcTotals are a process's cumulative Go runtime counters, as its
// /metrics exports them (pkg/telemetry's runtime metrics).
type gcTotals struct {
	// cpu is GOMAXPROCS × wall time; idle the part of it no goroutine
	// or runtime task used.
	gcCPU, cpu, idle, liveBytes float64
	seen                        bool
}

// add reads one exposition line; lines of other metrics are ignored.
func (g *gcTotals) add(line string) {
	name, value, ok := strings.Cut(line, " ")
	if !ok {
		return
	}
	var dst *float64
	switch name {
	case "go_cpu_classes_gc_total_cpu_seconds_total":
		dst = &g.gcCPU
	case "go_cpu_classes_total_cpu_seconds_total":
		dst = &g.cpu
	case "go_cpu_classes_idle_cpu_seconds_total":
		dst = &g.idle
	case "go_gc_heap_live_bytes":
		dst = &g.liveBytes
	default:
		return
	}
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return
	}
	*dst = v
	g.seen = true
}

// gcDelta is each process's collector between two scrapes; a process
// missing from either, or without the runtime metrics, is left out.
func gcDelta(before, after map[string]gcTotals) map[string]GC {
	out := map[string]GC{}
	for name, a := range after {
		b, ok := before[name]
		if !ok || !a.seen || !b.seen {
			continue
		}
		g := GC{LiveHeapMB: round2(a.liveBytes / (1 << 20))}
		if cpu := (a.cpu - a.idle) - (b.cpu - b.idle); cpu > 0 {
			g.CPUPercent = math.Round((a.gcCPU-b.gcCPU)/cpu*1000) / 10
		}
		out[name] = g
	}
	return out
}

// formatGC lists each process's collector, in process name order.
func formatGC(gc map[string]GC) string {
	names := make([]string, 0, len(gc))
	for name := range gc {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %.1f%% %.0f MB", name, gc[name].CPUPercent, gc[name].LiveHeapMB)
	}
	return strings.Join(parts, ", ")
}
