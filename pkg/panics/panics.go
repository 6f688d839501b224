// Package panics recovers a panic in one unit of a long-running loop's
// work (one outbox row, one send request, one platform connection, one
// sweep), so that one bad item does not kill the process: the panic is
// logged with its stack and the item's identity, counted in
// switchboard_panics_total{component}, and returned as an error wrapping
// ErrPanicked for the caller to handle the item as failed (retry it
// later or dead-letter it, never drop it). A panic in a loop's own
// machinery is left to end Run with an error, so the process restarts.
//
// pkg/bus recovers its handlers' panics itself and counts them in
// switchboard_bus_handler_panics_total{consumer}.
package panics

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// ErrPanicked is the error Recover returns for a recovered panic.
var ErrPanicked = errors.New("panicked")

var total = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchboard_panics_total",
	Help: "Panics recovered in long-running loops, by component; each item was handled as failed.",
}, []string{"component"})

// Recover runs f and returns its error. A panic in f is recovered, logged
// at error level with the stack, the component and attrs (the item's id:
// "delivery_id", 42), counted, and returned as an error wrapping
// ErrPanicked and carrying the panic's value. A panic in a goroutine f
// started is not recovered.
func Recover(log *slog.Logger, component string, f func() error, attrs ...any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Report(log, component, p, attrs...)
		}
	}()
	return f()
}

// Report does for p, a panic value the caller recovered itself (to
// re-panic some values, as an HTTP handler's http.ErrAbortHandler), what
// Recover does for a panic in f: it logs p with the stack, the component
// and attrs, counts it, and returns the error Recover would. Call it in
// the deferred function that recovered p, so that the stack shows where
// p was raised.
func Report(log *slog.Logger, component string, p any, attrs ...any) error {
	total.WithLabelValues(component).Inc()
	if log == nil {
		log = slog.Default()
	}
	args := append([]any{"component", component, "panic", fmt.Sprint(p), "stack", string(debug.Stack())}, attrs...)
	log.Error("panic recovered", args...)
	return fmt.Errorf("%s: %w: %v", component, ErrPanicked, p)
}
