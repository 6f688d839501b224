// Command sbbench is the load benchmark of issue 9: it starts Switchboard
// on this machine (one process, one process per service, and two routers
// plus two workers) against the local Postgres, Redis and NATS with the
// shipped fake LLM at zero latency, drives conversations through the API
// gateway over HTTP, measures the reference pipeline in the same run, and
// writes a JSON result file and a text summary.
//
//	go build -o bin/switchboard ./cmd/switchboard
//	go run ./cmd/sbbench -duration 30s -warmup 5s   # the full-length run
//
// Every run uses a fresh Postgres database, a fresh NATS subject prefix and
// a fresh Redis key prefix, and stops and removes what it started.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

type options struct {
	bin        string
	shapes     []string
	levels     []int
	streams    []bool
	warmup     time.Duration
	duration   time.Duration
	natsURL    string
	pgURL      string
	redisURL   string
	reference  string
	out        string
	summary    string
	pprofShape string
	pprofLevel int
	pprofOut   string
	keep       bool
	// conversation is how many turns a simulated user sends in one
	// conversation before starting a new one (0: one for the whole run).
	conversation int
}

func main() {
	var o options
	var shapes, levels, streams string
	flag.StringVar(&o.bin, "bin", "bin/switchboard", "switchboard binary to run (build it first: make build)")
	flag.StringVar(&shapes, "shapes", "dev,split,replicas", "shapes to run: dev (one process), split (one process per service), replicas (2 routers, 2 workers)")
	flag.StringVar(&levels, "levels", "1,16,64", "concurrent sessions per run")
	flag.StringVar(&streams, "stream", "off,on", "streaming modes: off, on or both")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up before each measurement window")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "measurement window per run (the issue asks 30s)")
	flag.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "NATS server for the split and replicas shapes (dev embeds its own)")
	flag.StringVar(&o.pgURL, "pg", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres server (a fresh database is created on it per shape)")
	flag.StringVar(&o.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis server")
	flag.StringVar(&o.reference, "reference", "/work/shared/bench/reference-pipeline", "reference pipeline source (copied to a temp dir and run there); empty skips it")
	flag.StringVar(&o.out, "out", "bench-results/latest.json", "JSON result file")
	flag.StringVar(&o.summary, "summary", "bench-results/latest.txt", "text summary file (also printed)")
	flag.StringVar(&o.pprofShape, "pprof-shape", "", "take a 10s CPU profile of this shape's first process during the -pprof-level run")
	flag.IntVar(&o.pprofLevel, "pprof-level", 64, "sessions of the profiled run")
	flag.StringVar(&o.pprofOut, "pprof-out", "bench-results/cpu.pprof", "CPU profile file")
	flag.IntVar(&o.conversation, "conversation", 20, "turns per conversation: each session then starts a new one (a new X-Session-Id), so the history a turn loads stays conversation-sized; 0 keeps one conversation for the whole run")
	flag.BoolVar(&o.keep, "keep", false, "keep the Postgres databases, NATS streams and Redis keys afterwards")
	clean := flag.Bool("clean", false, "delete every SBBENCH* stream on -nats and every sbbench:* key on -redis (left by -keep or a killed run) and exit")
	flag.Parse()
	if *clean {
		if err := deleteStreams(o.natsURL, "SBBENCH"); err != nil {
			log.Fatal(err)
		}
		n, err := deleteKeys(o.redisURL, "sbbench:")
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("deleted %d redis keys under sbbench:", n)
		return
	}
	var err error
	if o.shapes, err = parseList(shapes, func(s string) (string, error) {
		switch s {
		case "dev", "split", "replicas":
			return s, nil
		}
		return "", fmt.Errorf("unknown shape %q", s)
	}); err != nil {
		log.Fatal(err)
	}
	if o.levels, err = parseList(levels, func(s string) (int, error) {
		var n int
		_, err := fmt.Sscan(s, &n)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("bad level %q", s)
		}
		return n, nil
	}); err != nil {
		log.Fatal(err)
	}
	if o.streams, err = parseList(streams, func(s string) (bool, error) {
		switch s {
		case "off":
			return false, nil
		case "on":
			return true, nil
		}
		return false, fmt.Errorf("bad stream mode %q", s)
	}); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

func parseList[T any](s string, conv func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := conv(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// Result is the JSON result file.
type Result struct {
	Date      time.Time      `json:"date"`
	Host      map[string]any `json:"host"`
	Options   map[string]any `json:"options"`
	Reference *Reference     `json:"reference,omitempty"`
	Shapes    []ShapeResult  `json:"shapes"`
	Targets   []Target       `json:"targets"`
}

// ShapeResult is one deployment shape.
type ShapeResult struct {
	Shape     string             `json:"shape"`
	Processes []string           `json:"processes"`
	IdleRSSMB map[string]float64 `json:"idle_rss_mb"`
	Runs      []RunResult        `json:"runs"`
	Error     string             `json:"error,omitempty"`
}

// RunResult is one level and streaming mode of one shape.
type RunResult struct {
	Sessions    int          `json:"sessions"`
	Stream      bool         `json:"stream"`
	Seconds     float64      `json:"seconds"`
	Turns       int64        `json:"turns"`
	Errors      int64        `json:"errors"`
	LastError   string       `json:"last_error,omitempty"`
	TurnsPerSec float64      `json:"turns_per_s"`
	E2E         Percentiles  `json:"e2e_ms"`
	FirstToken  *Percentiles `json:"first_token_ms,omitempty"`
	// Hops: mean handler time per bus consumer (and JetStream publish
	// round trips) from each process's /metrics; not a per-turn trace.
	Hops map[string]Hop `json:"hops,omitempty"`
	// GC: each process's Go collector over the window, from /metrics.
	GC map[string]GC `json:"gc,omitempty"`
	// Timeline: the median ms of each hop of a turn, from the API
	// gateway's Server-Timing header or, streaming, trailer
	// (timelineHops), and of the client's part (end-to-end minus the
	// gateway's total).
	Timeline     map[string]float64 `json:"hop_ms_p50,omitempty"`
	CPUmsPerTurn float64            `json:"cpu_ms_per_turn_switchboard"`
	InfraCPUms   float64            `json:"cpu_ms_per_turn_infra"`
	MachineCPUms float64            `json:"cpu_ms_per_turn_machine"`
	// InfraByMs splits InfraCPUms by server; LoadCPUms is the load
	// generator's own CPU (HTTP clients), which shares the machine.
	InfraByMs map[string]float64 `json:"cpu_ms_per_turn_infra_by_server,omitempty"`
	LoadCPUms float64            `json:"cpu_ms_per_turn_load_generator"`
	// WorkPerTurn: what Postgres and Redis counted per turn (workKeys).
	// Postgres connections flush their counts about once a second, so
	// the edges of a short window blur them by up to a second's work.
	WorkPerTurn    map[string]float64 `json:"work_per_turn,omitempty"`
	PeakRSSMB      map[string]float64 `json:"peak_rss_mb"`
	CPUByProcessMs map[string]float64 `json:"cpu_ms_per_turn_by_process"`
}

// Percentiles in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Target is one of the targets with its verdict.
type Target struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Unit   string  `json:"unit"`
	Passed bool    `json:"passed"`
	Note   string  `json:"note,omitempty"`
}

func run(ctx context.Context, o options) error {
	bin, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("switchboard binary: %w (run make build)", err)
	}
	o.bin = bin
	res := &Result{Date: time.Now().UTC(), Host: hostInfo(), Options: map[string]any{
		"shapes": o.shapes, "levels": o.levels, "streams": o.streams,
		"warmup_s": o.warmup.Seconds(), "duration_s": o.duration.Seconds(),
		"llm": "shipped fake, zero latency", "message_bytes": len(userText),
	}}
	if o.reference != "" {
		log.Printf("reference pipeline: levels %v, %s each", o.levels, o.duration)
		ref, err := runReference(ctx, o)
		if err != nil {
			log.Printf("reference pipeline failed: %v", err)
		}
		res.Reference = ref
	}
	for _, shape := range o.shapes {
		if ctx.Err() != nil {
			break
		}
		log.Printf("shape %s", shape)
		sr := runShape(ctx, o, shape)
		if sr.Error != "" {
			log.Printf("shape %s: %s", shape, sr.Error)
		}
		res.Shapes = append(res.Shapes, sr)
	}
	res.Targets = targets(res)
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	var sum strings.Builder
	writeSummary(&sum, res)
	if o.summary != "" {
		if err := os.WriteFile(o.summary, []byte(sum.String()), 0o644); err != nil {
			return err
		}
	}
	_, _ = io.WriteString(os.Stdout, sum.String())
	log.Printf("wrote %s and %s", o.out, o.summary)
	return nil
}
