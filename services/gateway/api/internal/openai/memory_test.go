package openai

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// A body of many small array items — a content array, a system
// message's, a flag, a conversation_history, tools — is read holding a
// few copies of the body, not tens: Hermes reads a content array's
// first 1,000 items only, and a flag or a history needs no more than
// whether its array is empty. Decoded whole, such arrays took 30 to 45
// times the body (a 1 MiB body 35 to 44 MB); read an element at a
// time, 3 to 9 (the copies of the message and its content as they are
// taken out). The peak is sampled while each is parsed, with the
// collector at 10% so that its headroom does not count.
func TestParsingHoldsAFewCopiesOfTheBody(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	const n = 1 << 20
	zeros := strings.Repeat(`0,`, n/2)
	for _, c := range []struct{ name, body string }{
		{"a user message's content", `{"messages":[{"role":"user","content":[` + zeros + `"q"]},{"role":"user","content":"q"}]}`},
		{"a system message's content", `{"messages":[{"role":"system","content":[` + zeros + `"s"]},{"role":"user","content":"q"}]}`},
		{"a system message's nested content", `{"messages":[{"role":"system","content":[[` + zeros + `"s"]]},{"role":"user","content":"q"}]}`},
		{"stream", `{"stream":[` + zeros + `0],"messages":[{"role":"user","content":"q"}]}`},
		{"an input item's content", `{"input":[{"role":"user","content":[` + zeros + `"q"]},"q"]}`},
		{"a history", `{"input":"q","conversation_history":[` + zeros + `0]}`},
		{"a run's history content", `{"input":"q","conversation_history":[{"role":"user","content":[` + zeros + `"h"]}]}`},
		{"tools", `{"input":"q","tools":[` + zeros + `0]}`},
	} {
		body := []byte(c.body)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		stop, peak := make(chan struct{}), make(chan uint64)
		go func() {
			var ms runtime.MemStats
			var max uint64
			for {
				runtime.ReadMemStats(&ms)
				max = maxOf(max, ms.HeapInuse)
				select {
				case <-stop:
					peak <- max
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		if strings.HasPrefix(c.body, `{"input"`) {
			_, _ = ParseResponses(body)
			_, _ = ParseRun(body)
		} else {
			_, _ = Parse(body)
		}
		close(stop)
		if grew := int64(<-peak) - int64(before.HeapInuse); grew > 16*int64(len(body)) {
			t.Errorf("%s: %d MB held for a body of %d MB", c.name, grew>>20, len(body)>>20)
		}
		runtime.KeepAlive(body)
	}
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
