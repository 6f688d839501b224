package main

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// timelineHops are the hops of a turn the API gateway reports in its
// Server-Timing header, in the order a turn passes them, then the total
// inside the gateway.
var timelineHops = [...]string{"gateway", "router", "worker", "delivery", "return", "total"}

// hopTotal is the index of "total" in timelineHops.
const hopTotal = len(timelineHops) - 1

// hopClient is the part of the end-to-end latency outside the gateway's
// total: both HTTP stacks and the load generator.
const hopClient = "client"

// turnTiming is one turn's hop durations in milliseconds, by the index
// of timelineHops; ok is false when the header had none of them.
type turnTiming struct {
	ms [len(timelineHops)]float64
	ok bool
}

// parseServerTiming reads the hop durations of a Server-Timing header
// ("router;dur=0.65, worker;dur=1.40, …"). Unknown metrics and
// parameters are skipped.
func parseServerTiming(h string) turnTiming {
	var t turnTiming
	for metric := range strings.SplitSeq(h, ",") {
		params := strings.Split(metric, ";")
		name := strings.TrimSpace(params[0])
		i := slices.Index(timelineHops[:], name)
		if i < 0 {
			continue
		}
		for _, p := range params[1:] {
			v, found := strings.CutPrefix(strings.TrimSpace(p), "dur=")
			if !found {
				continue
			}
			if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 1) {
				t.ms[i], t.ok = ms, true
			}
		}
	}
	return t
}

// timelineMedians is the median of each hop over the turns that reported
// timings, and of the client's part (end-to-end minus the gateway's
// total); nil when none did.
func timelineMedians(timings []turnTiming, e2e []time.Duration) map[string]float64 {
	cols := make([][]float64, len(timelineHops)+1)
	for i, t := range timings {
		if !t.ok {
			continue
		}
		for j := range timelineHops {
			cols[j] = append(cols[j], t.ms[j])
		}
		cols[len(timelineHops)] = append(cols[len(timelineHops)], max(float64(e2e[i])/float64(time.Millisecond)-t.ms[hopTotal], 0))
	}
	if len(cols[0]) == 0 {
		return nil
	}
	out := make(map[string]float64, len(cols))
	for j, c := range cols {
		name := hopClient
		if j < len(timelineHops) {
			name = timelineHops[j]
		}
		sort.Float64s(c)
		out[name] = round2(c[len(c)/2])
	}
	return out
}
