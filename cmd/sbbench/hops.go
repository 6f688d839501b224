package main

import (
	"bufio"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Hop is the time the handlers of one bus consumer spent, from the
// switchboard_bus_handle_seconds histogram of every process.
type Hop struct {
	MsPerMessage    float64 `json:"ms_per_message"`
	MessagesPerTurn float64 `json:"messages_per_turn"`
}

// hopTotals maps consumer (partition suffix removed) to summed handler
// seconds and messages, plus "publish" for JetStream publish round trips.
type hopTotals map[string][2]float64

var (
	metricLine = regexp.MustCompile(`^(switchboard_bus_(?:handle|publish)_seconds)_(sum|count)\{(\w+)="([^"]*)"\} (\S+)$`)
	partition  = regexp.MustCompile(`[-_.]?\d+$`)
)

// scrape is what one read of every process's /metrics gave.
type scrape struct {
	hops hopTotals
	// gc maps process name to its Go runtime's counters.
	gc map[string]gcTotals
}

func (s *system) scrapeMetrics() scrape {
	out := scrape{hops: hopTotals{}, gc: map[string]gcTotals{}}
	c := &http.Client{Timeout: 5 * time.Second}
	for _, p := range s.procs {
		resp, err := c.Get("http://" + p.opsAddr + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var g gcTotals
		for sc.Scan() {
			g.add(sc.Text())
			out.hops.add(sc.Text())
		}
		resp.Body.Close()
		out.gc[p.name] = g
	}
	return out
}

// add counts one exposition line of the bus's handle and publish
// histograms.
func (t hopTotals) add(line string) {
	m := metricLine.FindStringSubmatch(line)
	if m == nil {
		return
	}
	v, err := strconv.ParseFloat(m[5], 64)
	if err != nil {
		return
	}
	key := "publish"
	if strings.HasSuffix(m[1], "handle_seconds") {
		key = partition.ReplaceAllString(m[4], "")
	}
	cur := t[key]
	if m[2] == "sum" {
		cur[0] += v
	} else {
		cur[1] += v
	}
	t[key] = cur
}

func hopDelta(before, after hopTotals, turns int64) map[string]Hop {
	out := map[string]Hop{}
	for k, a := range after {
		b := before[k]
		n := a[1] - b[1]
		if n <= 0 || turns == 0 {
			continue
		}
		out[k] = Hop{MsPerMessage: round2((a[0] - b[0]) / n * 1000), MessagesPerTurn: round2(n / float64(turns))}
	}
	return out
}
