package main

import (
	"strings"
	"testing"
)

func totals(exposition string) gcTotals {
	var g gcTotals
	for line := range strings.SplitSeq(exposition, "\n") {
		g.add(line)
	}
	return g
}

func TestGCDelta(t *testing.T) {
	before := map[string]gcTotals{
		"dev#0": totals(`# HELP go_cpu_classes_gc_total_cpu_seconds_total Estimated total CPU time spent performing GC tasks.
# TYPE go_cpu_classes_gc_total_cpu_seconds_total counter
go_cpu_classes_gc_total_cpu_seconds_total 1.5
go_cpu_classes_total_cpu_seconds_total 30
go_cpu_classes_idle_cpu_seconds_total 10
go_gc_heap_live_bytes 3.145728e+07
go_goroutines 80`),
		"router#1": totals("go_cpu_classes_gc_total_cpu_seconds_total 0.1\ngo_cpu_classes_total_cpu_seconds_total 4\ngo_gc_heap_live_bytes 1e+06"),
		"old#2":    totals("go_goroutines 3"),
		"garbled":  totals("go_gc_heap_live_bytes 12MB"),
	}
	after := map[string]gcTotals{
		"dev#0":    totals("go_cpu_classes_gc_total_cpu_seconds_total 4.5\ngo_cpu_classes_total_cpu_seconds_total 90\ngo_cpu_classes_idle_cpu_seconds_total 30\ngo_gc_heap_live_bytes 6.291456e+07\ngo_threads 9"),
		"router#1": totals("go_cpu_classes_gc_total_cpu_seconds_total 0.1\ngo_cpu_classes_total_cpu_seconds_total 4\ngo_gc_heap_live_bytes 2097152"),
		"old#2":    totals("go_goroutines 3"),
		"new#3":    totals("go_cpu_classes_gc_total_cpu_seconds_total 1\ngo_cpu_classes_total_cpu_seconds_total 2\ngo_gc_heap_live_bytes 1"),
		"garbled":  totals("go_gc_heap_live_bytes not-a-number\ngo_cpu_classes_total_cpu_seconds_total"),
	}
	got := gcDelta(before, after)
	want := map[string]GC{
		"dev#0":    {CPUPercent: 7.5, LiveHeapMB: 60},
		"router#1": {CPUPercent: 0, LiveHeapMB: 2}, // no CPU in the window: no share
	}
	if len(got) != len(want) {
		t.Fatalf("gcDelta = %v, want %v", got, want)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %+v, want %+v", name, got[name], w)
		}
	}
	if s, w := formatGC(got), "dev#0 7.5% 60 MB, router#1 0.0% 2 MB"; s != w {
		t.Errorf("formatGC = %q, want %q", s, w)
	}
}
