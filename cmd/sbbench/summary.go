package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

func (sr *ShapeResult) run(n int, stream bool) *RunResult {
	for i := range sr.Runs {
		if sr.Runs[i].Sessions == n && sr.Runs[i].Stream == stream {
			return &sr.Runs[i]
		}
	}
	return nil
}

func (r *Result) shape(name string) *ShapeResult {
	for i := range r.Shapes {
		if r.Shapes[i].Shape == name {
			return &r.Shapes[i]
		}
	}
	return nil
}

// targets checks the targets against the dev shape (streaming off)
// and the reference pipeline of the same run.
func targets(r *Result) []Target {
	var ts []Target
	dev := r.shape("dev")
	if dev == nil {
		return nil
	}
	if r.Reference != nil {
		if ref, ok := r.Reference.Levels["64"]; ok && ref.TurnsPerSec > 0 {
			if run := dev.run(64, false); run != nil {
				v := run.TurnsPerSec / ref.TurnsPerSec
				ts = append(ts, Target{Name: "throughput at 64 sessions / reference", Value: round2(v), Limit: 0.6, Unit: "ratio ≥", Passed: v >= 0.6})
			}
		}
		if ref, ok := r.Reference.Levels["1"]; ok && ref.E2E.P50 > 0 {
			if run := dev.run(1, false); run != nil {
				v := run.E2E.P50 / ref.E2E.P50
				ts = append(ts, Target{Name: "p50 at 1 session / reference", Value: round2(v), Limit: 2, Unit: "ratio ≤", Passed: v <= 2})
				v = run.E2E.P99 / ref.E2E.P99
				ts = append(ts, Target{Name: "p99 at 1 session / reference", Value: round2(v), Limit: 3, Unit: "ratio ≤", Passed: v <= 3})
			}
		}
	}
	var idle float64
	for _, v := range dev.IdleRSSMB {
		idle += v
	}
	if idle > 0 {
		ts = append(ts, Target{Name: "idle RSS of switchboard dev", Value: idle, Limit: 120, Unit: "MB <", Passed: idle < 120})
	}
	if run := dev.run(64, true); run != nil || dev.run(64, false) != nil {
		var peak float64
		for i := range dev.Runs {
			if dev.Runs[i].Sessions == 64 {
				for _, v := range dev.Runs[i].PeakRSSMB {
					peak = max(peak, v)
				}
			}
		}
		ts = append(ts, Target{Name: "peak RSS of switchboard dev at 64 sessions", Value: peak, Limit: 250, Unit: "MB <", Passed: peak < 250,
			Note: "VmHWM: the peak since start, so it includes the lower levels"})
	}
	return ts
}

func writeSummary(w io.Writer, r *Result) {
	fmt.Fprintf(w, "Switchboard load benchmark %s (%v CPUs, %s, load at start %v)\n", r.Date.Format("2006-01-02 15:04Z"),
		r.Host["cpus"], r.Host["go"], r.Host["loadavg_at_start"])
	fmt.Fprintf(w, "warm-up %vs, window %vs per run; fake LLM at zero latency; 400-byte messages\n\n", r.Options["warmup_s"], r.Options["duration_s"])
	fmt.Fprintf(w, "%-10s %5s %6s %9s %8s %8s %8s %8s %9s %9s %7s\n", "shape", "sess", "stream", "turns/s", "p50 ms", "p90 ms", "p99 ms", "ttft p50", "cpu ms/t", "infra ms", "errors")
	if ref := r.Reference; ref != nil {
		keys := make([]string, 0, len(ref.Levels))
		for k := range ref.Levels {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return len(keys[i]) < len(keys[j]) || len(keys[i]) == len(keys[j]) && keys[i] < keys[j]
		})
		for _, k := range keys {
			l := ref.Levels[k]
			fmt.Fprintf(w, "%-10s %5s %6s %9.0f %8.2f %8.2f %8.2f %8s %9.2f %9s %7s\n", "reference", k, "-", l.TurnsPerSec, l.E2E.P50, l.E2E.P90, l.E2E.P99, "-", l.CPUmsPerTurn, "(incl.)", "-")
		}
		if ref.Error != "" {
			fmt.Fprintf(w, "reference error: %.300s\n", ref.Error)
		}
	}
	for _, s := range r.Shapes {
		for _, run := range s.Runs {
			st, ttft := "off", "-"
			if run.Stream {
				st = "on"
				if run.FirstToken != nil {
					ttft = fmt.Sprintf("%.2f", run.FirstToken.P50)
				}
			}
			fmt.Fprintf(w, "%-10s %5d %6s %9.0f %8.2f %8.2f %8.2f %8s %9.2f %9.2f %7d\n", s.Shape, run.Sessions, st, run.TurnsPerSec,
				run.E2E.P50, run.E2E.P90, run.E2E.P99, ttft, run.CPUmsPerTurn, run.InfraCPUms, run.Errors)
		}
		if s.Error != "" {
			fmt.Fprintf(w, "%-10s error: %.500s\n", s.Shape, s.Error)
		}
	}
	fmt.Fprintln(w, "\ncpu ms/t: CPU of the switchboard processes per turn; infra ms: postgres+redis+nats-server per turn (machine-wide, shared)")
	fmt.Fprintln(w, "\nA turn's hops (median ms, from the API gateway's Server-Timing header or, streaming, trailer)")
	// timelineHops is an array: the slice's capacity is its length, so
	// append copies.
	hopCols := append(timelineHops[:], hopClient)
	fmt.Fprintf(w, "  %-18s", "")
	for _, k := range hopCols {
		fmt.Fprintf(w, " %8s", k)
	}
	fmt.Fprintln(w)
	for _, s := range r.Shapes {
		for _, run := range s.Runs {
			if len(run.Timeline) == 0 {
				continue
			}
			st := "off"
			if run.Stream {
				st = "on"
			}
			fmt.Fprintf(w, "  %-10s %3d %3s:", s.Shape, run.Sessions, st)
			for _, k := range hopCols {
				fmt.Fprintf(w, " %8.2f", run.Timeline[k])
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w, "  (gateway: request read to message published; router: to the turn published; worker: to the reply"+
		" published; delivery: to the reply sent to the gateway; return: to the reply collected; client: end-to-end minus total)")
	fmt.Fprintln(w, "\nHandlers (mean handler ms per message × messages per turn, from /metrics), streaming off")
	writePlainRuns(w, r, func(run *RunResult) string {
		keys := make([]string, 0, len(run.Hops))
		for k := range run.Hops {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			h := run.Hops[k]
			parts[i] = fmt.Sprintf("%s %.2f×%.1f", k, h.MsPerMessage, h.MessagesPerTurn)
		}
		return strings.Join(parts, ", ")
	})
	fmt.Fprintln(w, "\nCPU ms per turn by part, streaming off (the machine's total includes everything else running)")
	writePlainRuns(w, r, func(run *RunResult) string {
		if run.Turns == 0 {
			return ""
		}
		parts := []string{fmt.Sprintf("switchboard %.2f", run.CPUmsPerTurn)}
		for _, name := range []string{"postgres", "redis-server", "nats-server"} {
			if ms, ok := run.InfraByMs[name]; ok && ms > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", name, ms))
			}
		}
		parts = append(parts, fmt.Sprintf("load generator %.2f", run.LoadCPUms), fmt.Sprintf("machine %.2f", run.MachineCPUms))
		return strings.Join(parts, ", ")
	})
	fmt.Fprintln(w, "\nGo collector, streaming off (its share of each process's CPU in the window; the live heap after its last collection)")
	writePlainRuns(w, r, func(run *RunResult) string { return formatGC(run.GC) })
	fmt.Fprintln(w, "\nWork per turn, streaming off (Postgres's database counters, flushed about once a second; Redis commands of every client)")
	writePlainRuns(w, r, func(run *RunResult) string { return formatWork(run.WorkPerTurn) })
	fmt.Fprintln(w, "\nRSS (MB): idle VmRSS after start → VmHWM peak after the last run")
	for _, s := range r.Shapes {
		var parts []string
		var last map[string]float64
		if len(s.Runs) > 0 {
			last = s.Runs[len(s.Runs)-1].PeakRSSMB
		}
		for _, p := range s.Processes {
			parts = append(parts, fmt.Sprintf("%s %.0f → %.0f", p, s.IdleRSSMB[p], last[p]))
		}
		fmt.Fprintf(w, "  %-10s %s\n", s.Shape, strings.Join(parts, ", "))
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w, "\nTargets (dev shape, streaming off, against the reference of this run)")
		for _, t := range r.Targets {
			verdict := "FAIL"
			if t.Passed {
				verdict = "ok"
			}
			fmt.Fprintf(w, "  %-44s %8.2f  (%s %g)  %s\n", t.Name, t.Value, t.Unit, t.Limit, verdict)
		}
	}
}

// writePlainRuns prints a line of every run without streaming, of every
// shape: what line returns for it, unless that is empty.
func writePlainRuns(w io.Writer, r *Result, line func(*RunResult) string) {
	for _, s := range r.Shapes {
		for i := range s.Runs {
			run := &s.Runs[i]
			if run.Stream {
				continue
			}
			if text := line(run); text != "" {
				fmt.Fprintf(w, "  %-10s %3d: %s\n", s.Shape, run.Sessions, text)
			}
		}
	}
}
