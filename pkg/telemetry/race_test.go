//go:build race

package telemetry_test

// raceEnabled: the race detector makes sync.Pool (slog's buffers) drop
// what it is given now and then, so allocation counts say nothing under
// it.
const raceEnabled = true
