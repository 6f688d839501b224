package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// hangups is this process's SIGHUP handling, set up by main (listen).
var hangups = &hangup{reloads: make(chan struct{}, 1)}

// hangup carries out each SIGHUP as onHangup decides: a skill reload
// (skillSignals), a drain and stop as on SIGTERM, or nothing. Whether a
// process with a terminal got it for the terminal's hang-up is read as
// it comes (terminalHungUp). Whether
// the process holds skills follows from its command, config and
// services (holdsSkills), known before any service starts (decide): a
// SIGHUP whose meaning depends on it and that comes before is held until
// then, so that a reload asked while a router or a gateway is still
// starting is carried out once it listens, never taken for a stop. The
// signal's default, an exit without a drain, is never taken.
type hangup struct {
	// reloads holds one reload asked and not yet begun: those asked
	// meanwhile are the same scan.
	reloads chan struct{}

	mu sync.Mutex
	// stop ends listen's context; nil until listen.
	stop context.CancelFunc
	// ignored: SIGHUP was ignored when the process started (nohup);
	// terminal: the process had a controlling terminal at start.
	ignored, terminal bool
	// decided: holds is known; pending: a SIGHUP came before.
	decided, holds, pending bool
	stopped                 bool
}

// listen returns a context that a SIGHUP ends where onHangup says stop.
// SIGHUP is handled for the rest of the process's life, unless it was
// ignored at start: handling it would end that ignore (os/signal's
// Notify does), so it is left alone.
func (h *hangup) listen(parent context.Context) context.Context {
	ignored := signal.Ignored(syscall.SIGHUP)
	terminal := !ignored && controllingTerminal()
	ctx, cancel := context.WithCancel(parent)
	h.mu.Lock()
	h.stop, h.ignored, h.terminal = cancel, ignored, terminal
	h.mu.Unlock()
	if ignored {
		return ctx
	}
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
	hungUp := h.terminal && terminalHungUp(controllingTerminal, hangupSettle)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.decided && onHangup(h.ignored, hungUp, false) != onHangup(h.ignored, hungUp, true) {
		// Not a hang-up (that stops either way): held until decided.
		h.pending = true
		return
	}
	h.actOn(hungUp)
}

// act carries out a SIGHUP held until the process knew whether it holds
// skills: not a hang-up of its terminal (received). h.mu is held.
func (h *hangup) act() { h.actOn(false) }

// hangupSettle bounds the wait for a terminal to go after a SIGHUP:
// a shell that exits sends its jobs SIGHUP (huponexit) just before it
// leaves the terminal without a session.
const hangupSettle = time.Second

// terminalHungUp reports whether the controlling terminal this process
// had is gone, now or within settle (have: whether it still has one).
// The kernel takes a terminal from every process of its session when it
// hangs up (a closed window, an SSH connection lost) and when the
// session's leader, the shell, exits, and sends SIGHUP then: a SIGHUP
// after which the terminal stays is an operator's (kill -HUP, docker
// kill -s HUP on a container run with a terminal, -t or tty: true).
func terminalHungUp(have func() bool, settle time.Duration) bool {
	const step = 50 * time.Millisecond
	for waited := time.Duration(0); ; waited += step {
		if !have() {
			return true
		}
		if waited >= settle {
			return false
		}
		time.Sleep(step)
	}
}

// actOn carries out a SIGHUP, hungUp when it came with the hang-up of
// the process's terminal; h.mu is held.
func (h *hangup) actOn(hungUp bool) {
	switch onHangup(h.ignored, hungUp, h.holds) {
	case hangupReload:
		select {
		case h.reloads <- struct{}{}:
		default: // a reload is asked already and not begun
		}
	case hangupStop:
		if h.stopped || h.stop == nil {
			return
		}
		h.stopped = true
		why := "this process holds no skills to scan again"
		if hungUp {
			why = "taken for the hang-up of the terminal this process runs in"
		}
		fmt.Fprintf(os.Stderr, "switchboard: SIGHUP: %s; stopping as on SIGTERM\n", why)
		h.stop()
	}
}

// hangupAction is what a SIGHUP does to this process.
type hangupAction int

const (
	// hangupStop drains and stops the process, as SIGTERM does.
	hangupStop hangupAction = iota
	// hangupReload scans skills again on every process (skillSignals).
	hangupReload
	// hangupIgnore does nothing.
	hangupIgnore
)

// onHangup is what a SIGHUP does to a process: ignoredAtStart holds
// from its start, hungUp from the signal (terminalHungUp), holdsSkills
// from its config. The one signal means two things, the hang-up of a
// terminal and an operator's reload (kill -HUP, systemd's ExecReload),
// told apart by how the process was started and by its terminal:
//   - with SIGHUP ignored (nohup): it stays ignored, as asked;
//   - when its terminal went with the signal (a closed window, a lost
//     SSH connection, the shell that ran `switchboard dev` exiting): the
//     process drains and stops, skills or not, as Hermes's CLI cleans up
//     and stops on the SIGHUP of an SSH disconnect (cli.py's
//     _signal_handler; its gateway takes the signal's default, an exit
//     without a drain). Its output goes nowhere from then on, and
//     nobody is left to stop it;
//   - else (systemd, a container, with a terminal or not, kill -HUP
//     from another shell): a process holding skills scans them again,
//     and any other drains and stops, having nothing to scan.
//
// A process with a terminal took every SIGHUP for a hang-up: a
// container run with one (docker run -t, compose's tty: true) stopped on
// the operator's reload.
func onHangup(ignoredAtStart, hungUp, holdsSkills bool) hangupAction {
	switch {
	case ignoredAtStart:
		return hangupIgnore
	case hungUp:
		return hangupStop
	case holdsSkills:
		return hangupReload
	}
	return hangupStop
}

// controllingTerminal reports whether this process has a controlling
// terminal, whose hang-up the kernel signals with SIGHUP: /dev/tty opens
// only then.
func controllingTerminal() bool {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	_ = f.Close()
	return true
}
