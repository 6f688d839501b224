package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// hangups is this process's SIGHUP handling, set up by main (listen).
var hangups = &hangup{reloads: make(chan struct{}, 1)}

// hangup turns each SIGHUP into a skill reload (skillSignals) in a
// process holding skills, and into a drain and stop, as on SIGTERM, in
// any other. Whether the process holds skills follows from its command,
// config and services (holdsSkills), known before any service starts
// (decide): a SIGHUP that comes before is held until then, so that a
// reload asked while a router or a gateway is still starting is carried
// out once it listens, never taken for a stop. The signal's default, an
// exit without a drain, is never taken.
type hangup struct {
	// reloads holds one reload asked and not yet begun: those asked
	// meanwhile are the same scan.
	reloads chan struct{}

	mu sync.Mutex
	// stop ends listen's context; nil until listen.
	stop context.CancelFunc
	// decided: holds is known; pending: a SIGHUP came before.
	decided, holds, pending bool
	stopped                 bool
}

// listen returns a context that a SIGHUP ends in a process that holds no
// skills. SIGHUP is handled for the rest of the process's life.
func (h *hangup) listen(parent context.Context) context.Context {
	ctx, cancel := context.WithCancel(parent)
	h.mu.Lock()
	h.stop = cancel
	h.mu.Unlock()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	go func() {
		for range sig {
			h.received()
		}
	}()
	return ctx
}

// decide records whether this process holds skills, once its command
// knows its config and services, and acts on a SIGHUP held until now.
func (h *hangup) decide(holds bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.decided, h.holds = true, holds
	if h.pending {
		h.pending = false
		h.act()
	}
}

func (h *hangup) received() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.decided {
		h.pending = true
		return
	}
	h.act()
}

// act carries out a SIGHUP; h.mu is held.
func (h *hangup) act() {
	if h.holds {
		select {
		case h.reloads <- struct{}{}:
		default: // a reload is asked already and not begun
		}
		return
	}
	if h.stopped || h.stop == nil {
		return
	}
	h.stopped = true
	fmt.Fprintln(os.Stderr, "switchboard: SIGHUP: this process holds no skills to scan again; stopping as on SIGTERM")
	h.stop()
}
