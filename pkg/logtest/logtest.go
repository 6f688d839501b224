// Package logtest holds what tests need to read the logs of code that
// logs from several goroutines.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a log sink safe for concurrent writes and reads: a logger's
// goroutines write to it while the test reads what was logged so far.
// The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
