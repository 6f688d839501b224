package main

import (
	"context"
	"fmt"
	"github.com/switchboard-chat/switchboard/pkg/bus"
	"io"
	"net/url"
	"os"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/switchboard-chat/switchboard/pkg/config"
	"github.com/switchboard-chat/switchboard/pkg/natsd"
	"github.com/switchboard-chat/switchboard/pkg/pg"
	"github.com/switchboard-chat/switchboard/pkg/telemetry"
)

func init() {
	register(command{name: "dev", summary: "run every service in one process with an embedded NATS server", run: runDev, serves: true})
}

// runDev is the laptop mode: an embedded NATS server, the local Postgres
// (database created and migrated on first run) and Redis, and every
// service in this one process.
func runDev(ctx context.Context, args []string) error {
	var cf commonFlags
	fs := newFlagSet("dev", &cf)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, warnings, err := loadConfig(cf.configPath)
	if err != nil {
		return err
	}
	hangups.decide(holdsSkills(cfg, devServices))
	// GOMEMLIMIT wins, and so does a lower limit from the container.
	if lim := int64(cfg.Dev.MemoryLimitMiB) << 20; lim > 0 && os.Getenv("GOMEMLIMIT") == "" && lim < debug.SetMemoryLimit(-1) {
		debug.SetMemoryLimit(lim)
	}
	if p := cfg.Dev.GCPercent; p > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(p)
	}
	return runDevWith(ctx, cfg, devOptions{opsAddr: cf.opsAddr, warnings: warnings, ready: printBanner})
}

// devOptions let a test run the dev process in-process: its own tracing
// exporter and a ready callback instead of the printed banner.
type devOptions struct {
	opsAddr  string
	warnings []config.Warning
	exporter sdktrace.SpanExporter
	ready    func(a *app, ops string)
	// logOut replaces stderr for the process log.
	logOut io.Writer
	// services overrides devServices (a test runs the workers apart).
	services []string
}

// runDevWith runs every dev service in this process with cfg.
func runDevWith(ctx context.Context, cfg *Config, o devOptions) error {
	if cfg.Dev.NATSStoreDir != "" {
		if err := os.MkdirAll(cfg.Dev.NATSStoreDir, 0o755); err != nil {
			return fmt.Errorf("nats store dir: %w", err)
		}
	}
	srv, err := natsd.Start(natsd.Config{Port: cfg.Dev.NATSPort, StoreDir: cfg.Dev.NATSStoreDir})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	cfg.NATS.URL = srv.ClientURL()

	a := newApp("dev", cfg)
	a.traceExporter = o.exporter
	// The services talk to the embedded server over an in-process pipe,
	// not loopback TCP: no socket syscalls per publish, ack and delivery.
	// The port stays open for everything outside this process.
	a.natsOptions = []nats.Option{nats.InProcessServer(srv)}
	if o.logOut != nil {
		a.log = telemetry.NewLogger(cfg.Log, o.logOut).With("process", a.name)
	}
	for _, w := range o.warnings {
		a.log.Warn(w.String())
	}
	if err := pg.EnsureDatabase(ctx, cfg.Postgres.URL); err != nil {
		return a.startFailed(ctx, "create database", err)
	}
	db, err := a.DB(ctx)
	if err != nil {
		a.close()
		return a.startFailed(ctx, "postgres", err)
	}
	if err := pg.Migrate(ctx, db, a.log); err != nil {
		a.close()
		return a.startFailed(ctx, "migrate", err)
	}
	a.migrated = true
	if _, err := a.Redis(ctx); err != nil {
		a.close()
		return a.startFailed(ctx, "redis", err)
	}
	if _, err := a.Bus(ctx); err != nil {
		a.close()
		return a.startFailed(ctx, "nats", err)
	}
	names := devServices
	if o.services != nil {
		names = o.services
	}
	return a.runServices(ctx, o.opsAddr, names, func(ops string) {
		if o.ready != nil {
			o.ready(a, ops)
		}
	})
}

// printBanner tells a person where everything is.
func printBanner(a *app, ops string) {
	cfg := a.cfg
	var b strings.Builder
	a.mu.Lock()
	var running, off []string
	for _, s := range devServicesOrNone() {
		if why, ok := a.off[s]; ok {
			off = append(off, s+" ("+why+")")
			continue
		}
		running = append(running, s)
	}
	a.mu.Unlock()
	fmt.Fprintf(&b, "\nSwitchboard dev is running (services: %s)\n", strings.Join(running, ", "))
	if len(off) > 0 {
		fmt.Fprintf(&b, "  Off              %s\n", strings.Join(off, ", "))
	}
	fmt.Fprintf(&b, "  NATS (embedded)  %s\n", bus.RedactURL(cfg.NATS.URL))
	fmt.Fprintf(&b, "  Postgres         %s\n", redact(cfg.Postgres.URL))
	fmt.Fprintf(&b, "  Redis            %s\n", redact(cfg.Redis.URL))
	fmt.Fprintf(&b, "  Readiness        http://%s/readyz\n", hostPort(ops))
	for _, e := range a.endpoints {
		fmt.Fprintf(&b, "  %-16s %s\n", e[0], e[1])
	}
	b.WriteString("Press Ctrl-C to stop.\n\n")
	fmt.Print(b.String())
}

func devServicesOrNone() []string {
	if len(devServices) == 0 {
		return []string{"none yet"}
	}
	return devServices
}

// redact hides the password in a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}

// hostPort turns ":9090" into "127.0.0.1:9090" for printing.
func hostPort(addr string) string {
	if strings.HasPrefix(addr, ":") || strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		return "127.0.0.1:" + addr[strings.LastIndex(addr, ":")+1:]
	}
	return addr
}
