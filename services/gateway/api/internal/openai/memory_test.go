package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
		if grew := heldWhileParsed([]byte(c.body)); grew > 16*int64(len(c.body)) {
			t.Errorf("%s: %d MB held for a body of %d MB", c.name, grew>>20, len(c.body)>>20)
		}
	}
}

// An object of many members is read keeping the members read only, not
// a copy of each level it is in: a message's, a content part's, a
// picture's image_url's, an input item's or a history entry's keys
// besides those read are skipped. Decoded into maps, and each level
// copied out of the one around it, such an object took 13 to 17 times
// a 1 MiB body; now 4 to 5.
func TestObjectsOfManyMembersHoldAFewCopiesOfTheBody(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, `,"%x":0`, i)
	}
	keys := b.String()
	for _, c := range []struct{ name, body string }{
		{"a message", `{"messages":[{"role":"user","content":"q"` + keys + `}]}`},
		{"a content part", `{"messages":[{"role":"user","content":[{"type":"text","text":"q"` + keys + `}]}]}`},
		{"a system message's part", `{"messages":[{"role":"system","content":[{"type":"text","text":"s"` + keys + `}]},{"role":"user","content":"q"}]}`},
		{"a picture's image_url", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"` + keys + `}}]}]}`},
		{"an input item", `{"input":[{"role":"user","content":"q"` + keys + `}]}`},
		{"a history entry", `{"input":"q","conversation_history":[{"role":"user","content":"h"` + keys + `}]}`},
	} {
		if grew := heldWhileParsed([]byte(c.body)); grew > 8*int64(len(c.body)) {
			t.Errorf("%s: %d MB held for a body of %d MB", c.name, grew>>20, len(c.body)>>20)
		}
	}
}

// A Responses request's metadata of more pairs than OpenAI's 16 is
// refused at its 17th pair, as its members are counted, without the
// values or the members after decoded: decoded whole into a map before
// it was counted, a 1 MiB metadata of small pairs took 7 to 9 times the
// body and 200,000 allocations, one for each key and each value.
func TestMetadataOfManyPairsIsRefusedAsItIsRead(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, `,"%x":""`, i)
	}
	body := []byte(`{"input":"q","metadata":{"k":"v"` + b.String() + `}}`)
	var inv *InvalidError
	if _, err := ParseResponses(body); !errors.As(err, &inv) || inv.Param != "metadata" || !strings.Contains(inv.Msg, "at most 16") {
		t.Fatalf("error %v, want too many metadata pairs", err)
	}
	if grew := heldWhileParsed(body); grew > 8*int64(len(body)) {
		t.Errorf("%d MB held for a body of %d MB", grew>>20, len(body)>>20)
	}
	// The sampled peak varies with the collector's timing; the count of
	// allocations does not: about a hundred, the 16 pairs kept among
	// them.
	if n := testing.AllocsPerRun(1, func() { _, _ = ParseResponses(body) }); n > 1000 {
		t.Errorf("%.0f allocations", n)
	}
}

// heldWhileParsed is how much more heap is in use at most, sampled every
// millisecond, while body is parsed (as a Responses request and as a run
// when it has an input, else as a chat completion) than before.
func heldWhileParsed(body []byte) int64 {
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
	if bytes.HasPrefix(body, []byte(`{"input"`)) {
		_, _ = ParseResponses(body)
		_, _ = ParseRun(body)
	} else {
		_, _ = Parse(body)
	}
	close(stop)
	grew := int64(<-peak) - int64(before.HeapInuse)
	runtime.KeepAlive(body)
	return grew
}

func maxOf(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// exactMembers and eachElement read JSON the body's decoding checked
// without decoding it again: a member's or an element's value is its
// exact slice of the JSON, whatever it holds (strings with brackets,
// quotes and escapes, nested values, spaces around), a key with escapes
// is read unescaped, and a repeated key's last value counts.
func TestMembersAndElementsAreSlicesOfTheJSON(t *testing.T) {
	t.Parallel()
	obj := " { \"r\\u006fle\" : \"a\\\"]}\" , \"content\":[1,{\"k\":\"]\"},[\"\\\\\"]] ,\"x\":{\"role\":1},\"role\":\n\"b\" } "
	f, err := exactMembers([]byte(obj), "role", "content", "url")
	if err != nil || len(f) != 2 || string(f["role"]) != `"b"` || string(f["content"]) != `[1,{"k":"]"},["\\"]]` {
		t.Fatalf("members %q, %v", f, err)
	}
	if f, err := exactMembers([]byte(" null "), "role"); err != nil || f != nil {
		t.Fatalf("null: %v, %v", f, err)
	}
	for _, b := range []string{`[1]`, `"role"`, `5`} {
		if _, err := exactMembers([]byte(b), "role"); err == nil {
			t.Fatalf("%s taken as an object", b)
		}
	}
	var got []string
	n, err := eachElement(json.RawMessage(` [ "a,]" , 1e5,null, {"k":[1,"}"]} ,[[]],true ] `), func(_ int, e json.RawMessage) error {
		got = append(got, string(e))
		return nil
	})
	if want := `"a,]"|1e5|null|{"k":[1,"}"]}|[[]]|true`; err != nil || n != 6 || strings.Join(got, "|") != want {
		t.Fatalf("elements %q (%d, %v), want %s", got, n, err, want)
	}
	if n, err := eachElement(json.RawMessage(`[]`), func(int, json.RawMessage) error { return nil }); n != 0 || err != nil {
		t.Fatalf("empty: %d, %v", n, err)
	}
	if _, err := eachElement(json.RawMessage(`{"a":1}`), func(int, json.RawMessage) error { return nil }); err != errNotArray {
		t.Fatalf("an object: %v", err)
	}
}
