package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseServerTiming(t *testing.T) {
	for _, c := range []struct {
		header string
		want   turnTiming
	}{
		{"gateway;dur=0.130, router;dur=0.520, worker;dur=1.410, delivery;dur=0.210, return;dur=0.050, total;dur=2.380",
			turnTiming{ms: [6]float64{0.13, 0.52, 1.41, 0.21, 0.05, 2.38}, ok: true}},
		{"gateway;dur=0.2, total;dur=2.6", turnTiming{ms: [6]float64{0.2, 0, 0, 0, 0, 2.6}, ok: true}},
		{`cache;desc="hit", worker;desc="agent";dur=3, db;dur=9`, turnTiming{ms: [6]float64{0, 0, 3}, ok: true}},
		{"router;dur=-1, worker;dur=abc, delivery;dur=Inf, return;dur=NaN, total", turnTiming{}},
		{"", turnTiming{}},
	} {
		if got := parseServerTiming(c.header); got != c.want {
			t.Errorf("%q: got %+v, want %+v", c.header, got, c.want)
		}
	}
}

func TestTimelineMedians(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	timings := []turnTiming{
		{ms: [6]float64{0.1, 0.5, 1.0, 0.2, 0.1, 1.9}, ok: true},
		{}, // a turn without the header
		{ms: [6]float64{0.3, 0.7, 2.0, 0.2, 0.1, 3.3}, ok: true},
		{ms: [6]float64{0.2, 0.6, 1.5, 0.2, 0.1, 2.6}, ok: true},
	}
	e2e := []time.Duration{ms(2.2), ms(9), ms(3.5), ms(3.0)}
	got := timelineMedians(timings, e2e)
	want := map[string]float64{"gateway": 0.2, "router": 0.6, "worker": 1.5, "delivery": 0.2, "return": 0.1, "total": 2.6, "client": 0.3}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	if timelineMedians([]turnTiming{{}}, []time.Duration{ms(1)}) != nil {
		t.Error("turns without timings gave a timeline")
	}
}

// FuzzParseServerTiming: any header gives durations that are finite and
// not negative, each of a hop the header names, none when it names no
// duration; and the timing written back as a header reads back the same.
func FuzzParseServerTiming(f *testing.F) {
	f.Add("gateway;dur=0.130, router;dur=0.520, worker;dur=1.410, total;dur=2.380")
	f.Add(`worker;desc="a;b";dur=1e3,,;dur=`)
	f.Add("total;dur=0")
	f.Add("router;dur=1;dur=2, router;dur=x, worker ; dur=0x1p-2")
	f.Add("delivery;dur=-0, return;dur=1e400, gateway;dur=5e-324")
	f.Fuzz(func(t *testing.T, h string) {
		got := parseServerTiming(h)
		for i, v := range got.ms {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%q gave %v", h, got.ms)
			}
			if v != 0 && !strings.Contains(h, timelineHops[i]) {
				t.Fatalf("%q gave %s %v, a hop it does not name", h, timelineHops[i], v)
			}
		}
		if !got.ok {
			if got.ms != ([len(timelineHops)]float64{}) {
				t.Fatalf("%q gave %v, not ok", h, got.ms)
			}
			return
		}
		if !strings.Contains(h, "dur=") {
			t.Fatalf("%q, without a duration, gave %v", h, got.ms)
		}
		metrics := make([]string, len(timelineHops))
		for i, hop := range timelineHops {
			metrics[i] = hop + ";dur=" + strconv.FormatFloat(got.ms[i], 'g', -1, 64)
		}
		back := strings.Join(metrics, ", ")
		if again := parseServerTiming(back); again != got {
			t.Fatalf("%q gave %+v; written back as %q it reads %+v", h, got, back, again)
		}
	})
}
