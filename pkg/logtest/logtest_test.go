package logtest

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Loggers on several goroutines write whole records to one Buffer while
// it is read; every record is there at the end (run with -race).
func TestBufferConcurrent(t *testing.T) {
	var buf Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				log.Info("line", "g", g, "i", i)
				_ = buf.String()
			}
		}()
	}
	wg.Wait()
	got := buf.String()
	if n := strings.Count(got, "msg=line"); n != 200 {
		t.Fatalf("%d records, want 200", n)
	}
	for g := range 4 {
		if !strings.Contains(got, fmt.Sprintf("g=%d i=49", g)) {
			t.Errorf("goroutine %d's last record missing", g)
		}
	}
}
