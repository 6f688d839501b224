package main

import (
	"testing"
	"time"
)

func TestPercentilesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := percentiles(d)
	want := Percentiles{P50: 50, P90: 90, P99: 99, Max: 100}
	if got != want {
		t.Fatalf("percentiles = %+v, want %+v", got, want)
	}
	if got := percentiles(nil); got != (Percentiles{}) {
		t.Fatalf("empty = %+v", got)
	}
}

func TestHopDelta(t *testing.T) {
	before := hopTotals{"worker-turns": {1, 10}, "publish": {0.5, 100}}
	after := hopTotals{"worker-turns": {3, 30}, "publish": {0.9, 180}, "router-inbound": {0.2, 20}}
	got := hopDelta(before, after, 20)
	want := map[string]Hop{
		"worker-turns":   {MsPerMessage: 100, MessagesPerTurn: 1},
		"publish":        {MsPerMessage: 5, MessagesPerTurn: 4},
		"router-inbound": {MsPerMessage: 10, MessagesPerTurn: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("hops = %v", got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %+v, want %+v", k, got[k], w)
		}
	}
}

func TestMetricLineAndPartition(t *testing.T) {
	tests := []struct {
		line, key string
		ok        bool
	}{
		{`switchboard_bus_handle_seconds_sum{consumer="router-inbound-12"} 1.5`, "router-inbound", true},
		{`switchboard_bus_handle_seconds_count{consumer="worker-turns"} 7`, "worker-turns", true},
		{`switchboard_bus_publish_seconds_sum{subject="sb.replies.3"} 0.2`, "", true},
		{`switchboard_bus_handle_seconds_bucket{consumer="x",le="0.1"} 7`, "", false},
	}
	for _, tt := range tests {
		m := metricLine.FindStringSubmatch(tt.line)
		if (m != nil) != tt.ok {
			t.Fatalf("%q matched=%v", tt.line, m != nil)
		}
		if m != nil && tt.key != "" {
			if got := partition.ReplaceAllString(m[4], ""); got != tt.key {
				t.Errorf("%q key = %q, want %q", tt.line, got, tt.key)
			}
		}
	}
}

func TestParseList(t *testing.T) {
	if _, err := parseList(" , ", func(s string) (string, error) { return s, nil }); err == nil {
		t.Fatal("empty list accepted")
	}
	got, err := parseList("1, 16,64", func(s string) (string, error) { return s, nil })
	if err != nil || len(got) != 3 || got[1] != "16" {
		t.Fatalf("got %v, %v", got, err)
	}
}

func TestCommandCalls(t *testing.T) {
	for _, tc := range []struct {
		name, info string
		want       int64
	}{
		{"none", "# Commandstats\r\n", 0},
		{"two commands", "# Commandstats\r\ncmdstat_get:calls=12,usec=40,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n" +
			"cmdstat_evalsha:calls=5,usec=90,usec_per_call=18.00,rejected_calls=1,failed_calls=0\r\n", 17},
		{"other sections and garbage are skipped", "# Server\r\nredis_version:7.0.15\r\ncmdstat_set:calls=x\r\ncmdstat_del:calls=3\r\n", 3},
	} {
		if got := commandCalls(tc.info); got != tc.want {
			t.Errorf("%s: %d calls, want %d", tc.name, got, tc.want)
		}
	}
}

func TestWorkPerTurn(t *testing.T) {
	before := work{"pg_transactions": 100, "redis_commands": 1000}
	after := work{"pg_transactions": 160, "redis_commands": 1200, "pg_rows_inserted": 50}
	got := after.perTurn(before, 20)
	if len(got) != 2 || got["pg_transactions"] != 3 || got["redis_commands"] != 10 {
		t.Fatalf("per turn %v, want 3 transactions and 10 commands (a counter read only after is left out)", got)
	}
	if after.perTurn(before, 0) != nil {
		t.Fatal("per turn of no turns")
	}
	if s := formatWork(got); s != "pg transactions 3.00, redis commands 10.00" {
		t.Fatalf("formatted %q", s)
	}
}
