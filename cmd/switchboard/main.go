// Command switchboard runs any Switchboard service, or all of them in one
// process for a laptop (`switchboard dev`).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = hangupStops(ctx)
	memoryLimit(nil)
	err := dispatch(ctx, os.Args[1:])
	stop()
	if errors.Is(err, errUsage) {
		os.Exit(2)
	}
	var code exitCode
	if errors.As(err, &code) {
		os.Exit(int(code))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "switchboard:", err)
		os.Exit(1)
	}
}

// skillsHeld is set once this process listens for SIGHUP to scan its
// skills again (skillSignals).
var skillsHeld atomic.Bool

// hangupStops returns a context that a SIGHUP ends, as SIGTERM ends
// main's, so the process drains and stops: a terminal closed under
// `switchboard dev` stops it. A process holding skills scans them again
// instead (skillSignals) and goes on. The signal's default, an exit
// without a drain, is never taken: SIGHUP stays ignored once this stops
// listening.
func hangupStops(parent context.Context) context.Context {
	signal.Ignore(syscall.SIGHUP)
	ctx, cancel := context.WithCancel(parent)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if skillsHeld.Load() {
				continue
			}
			fmt.Fprintln(os.Stderr, "switchboard: SIGHUP: this process holds no skills to scan again; stopping as on SIGTERM")
			cancel()
			return
		}
	}()
	return ctx
}
