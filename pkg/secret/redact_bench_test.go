package secret

import (
	"fmt"
	"strings"
	"testing"
)

// largeInputs are realistic tool results: a build/server log with no
// secrets, a JSON API response with a few secret-named keys, and a large
// mixed text with an occasional credential.
func largeInputs() []struct{ name, text string } {
	var log strings.Builder
	for i := 0; log.Len() < 64<<10; i++ {
		fmt.Fprintf(&log, "2026-12-05T22:%02d:%02d.123Z INFO worker/loop.go:%d handled turn session=%d user=u%d took=%dms status=ok path=/v1/chat/completions?stream=true&model=gpt\n",
			i%60, i%60, 100+i%900, i, i%37, i%250)
	}
	var js strings.Builder
	js.WriteString(`{"items": [`)
	for i := 0; js.Len() < 64<<10; i++ {
		if i > 0 {
			js.WriteString(", ")
		}
		fmt.Fprintf(&js, `{"id": %d, "name": "item-%d", "description": "A plain description of the item, with some words.", "url": "https://example.test/items/%d?page=2&sort=asc", "tags": ["a", "b"]`, i, i, i)
		if i%100 == 7 {
			fmt.Fprintf(&js, `, "api_key": "sk-proj-%020d"`, i)
		}
		js.WriteString("}")
	}
	js.WriteString("]}")
	var big strings.Builder
	for i := 0; big.Len() < 1<<20; i++ {
		fmt.Fprintf(&big, "Line %d: the quick brown fox jumps over the lazy dog; see https://docs.example.test/page/%d for details.\n", i, i)
		if i%2000 == 999 {
			fmt.Fprintf(&big, "export OPENAI_API_KEY=sk-abcdefghij%010d and Authorization: Bearer tok%020d\n", i, i)
		}
	}
	return []struct{ name, text string }{
		{"log64K", log.String()},
		{"json64K", js.String()},
		{"text1M", big.String()},
	}
}

func BenchmarkRedact(b *testing.B) {
	for _, in := range largeInputs() {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.text)))
			b.ReportAllocs()
			for b.Loop() {
				Redact(in.text)
			}
		})
	}
}
