package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Reference is the reference pipeline's result at each level.
type Reference struct {
	Levels map[string]RefLevel `json:"levels"`
	Error  string              `json:"error,omitempty"`
}

// RefLevel is one concurrency level of the reference pipeline.
type RefLevel struct {
	TurnsPerSec  float64     `json:"turns_per_s"`
	E2E          Percentiles `json:"e2e_ms"`
	CPUmsPerTurn float64     `json:"cpu_ms_per_turn_own"`
}

// runReference copies the reference pipeline to a temporary directory and
// runs its pipeline suite there against the same servers.
func runReference(ctx context.Context, o options) (*Reference, error) {
	ref := &Reference{Levels: map[string]RefLevel{}}
	dir, err := os.MkdirTemp("", "sbbench-ref-*")
	if err != nil {
		return ref, err
	}
	defer os.RemoveAll(dir)
	if err := copyDir(o.reference, dir); err != nil {
		ref.Error = err.Error()
		return ref, err
	}
	dbURL, err := withDatabase(o.pgURL, "bench")
	if err != nil {
		return ref, err
	}
	_ = execSQL(ctx, o.pgURL, "CREATE DATABASE bench") // exists already is fine
	ru, err := url.Parse(o.redisURL)
	if err != nil {
		return ref, err
	}
	var levels []string
	for _, n := range o.levels {
		levels = append(levels, fmt.Sprint(n))
	}
	out := filepath.Join(dir, "result.json")
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-suite", "pipeline", "-nats", o.natsURL, "-redis", ru.Host,
		"-pg", dbURL, "-levels", strings.Join(levels, ","), "-measure", o.duration.String(), "-out", out)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		ref.Error = fmt.Sprintf("%v: %.2000s", err, b)
		return ref, fmt.Errorf("reference pipeline: %w", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return ref, err
	}
	var res struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return ref, err
	}
	m := res.Metrics
	for _, n := range levels {
		p := "pipe.c" + n
		ref.Levels[n] = RefLevel{
			TurnsPerSec: round2(m[p+".turns_per_s"]),
			E2E: Percentiles{P50: round2(m[p+".e2e.p50_us"] / 1000), P90: round2(m[p+".e2e.p90_us"] / 1000),
				P99: round2(m[p+".e2e.p99_us"] / 1000), Max: round2(m[p+".e2e.max_us"] / 1000)},
			CPUmsPerTurn: round2(m[p+".cpu_us_per_turn_own"] / 1000),
		}
	}
	return ref, nil
}

func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			in.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
