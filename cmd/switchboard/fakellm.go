package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"golang.org/x/sync/errgroup"

	"github.com/switchboard-chat/switchboard/pkg/fakellm"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func init() {
	register(command{name: "fakellm", summary: "serve the fake LLM (OpenAI and Anthropic wire formats) for tests and benchmarks", run: runFakeLLM})
}

func runFakeLLM(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
	addr := fs.String("addr", ":8700", "listen address")
	latency := fs.Duration("latency", 0, "delay before every answer")
	chunkDelay := fs.Duration("chunk-delay", 0, "delay between streamed chunks")
	apiKey := fs.String("api-key", "", "require this API key")
	opsAddr := fs.String("ops-addr", "", "operations server (/metrics, /healthz, /readyz) address; empty: none")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	log := telemetry.NewLogger(telemetry.LogConfig{Level: "info", Format: "text"}, os.Stderr)
	srv := fakellm.New(fakellm.Config{Addr: *addr, Latency: *latency, ChunkDelay: *chunkDelay, APIKey: *apiKey,
		MaxRecorded: -1, Log: log})
	fmt.Fprintf(os.Stderr, "fake LLM on %s (OpenAI: /v1/chat/completions, Anthropic: /v1/messages)\n", *addr)
	if *opsAddr == "" {
		return srv.Run(ctx)
	}
	// As every other command in a cluster: probes and metrics on the ops port.
	ops := telemetry.NewServer(*opsAddr, telemetry.NewHealth(), false, log)
	if err := ops.Listen(); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ops.Run(gctx) })
	g.Go(func() error { return srv.Run(gctx) })
	return g.Wait()
}
