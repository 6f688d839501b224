package secret

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// largeInputs are realistic tool results: a build/server log with no
// secrets, a JSON API response with a few secret-named keys, a large
// mixed text with an occasional credential, ordinary prose with no
// secrets, and a large pretty-printed JSON document with one
// secret-named field.
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
		{"prose64K", prose(64 << 10)},
		{"prettyJSON1M", prettyJSON(1 << 20)},
	}
}

// prose is n bytes or more of ordinary English paragraphs, such as a
// chat transcript or a fetched web page holds: no secrets.
func prose(n int) string {
	sentences := []string{
		"The gateway receives a message from the platform and hands it to the router.",
		"Each session keeps its own history, so a reply always follows the question that asked for it.",
		"When a worker restarts, the turn it was running resumes from the bus after a short pause.",
		"Operators watch the dashboards for slow turns, failed deliveries and queues that grow without end.",
		"Our team meets on Thursday afternoons to review the week's incidents and plan the next release.",
		"Please send the quarterly report to finance before Friday; they need it for the board meeting.",
		"She walked along the river at dawn, past the old mill and the bakery that opens at six.",
		"A well-kept garden needs water, patience, and someone who notices when the roses look tired.",
		"Results (see the appendix) show a 12% improvement over last year's numbers, but the sample is small.",
		"Don't forget: the office is closed on Monday, and the heating engineer arrives on Tuesday at 9:30.",
	}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(sentences[i%len(sentences)])
		if i%5 == 4 {
			b.WriteString("\n\n")
		} else {
			b.WriteString(" ")
		}
	}
	return b.String()
}

// prettyJSON is n bytes or more of an indented JSON document (an API
// response a tool fetched), with one secret-named field in the middle.
func prettyJSON(n int) string {
	type item struct {
		ID          int               `json:"id"`
		Name        string            `json:"name"`
		Description string            `json:"description"`
		URL         string            `json:"url"`
		Price       float64           `json:"price"`
		Tags        []string          `json:"tags"`
		Attributes  map[string]string `json:"attributes"`
		APIKey      string            `json:"api_key,omitempty"`
	}
	// One item's indented size, to know how many make n bytes.
	const itemSize = 380
	items := make([]item, n/itemSize+1)
	for i := range items {
		items[i] = item{
			ID: i, Name: fmt.Sprintf("item-%d", i),
			Description: "A plain description of the item, with some words.",
			URL:         fmt.Sprintf("https://example.test/items/%d?page=2&sort=asc", i),
			Price:       float64(i) * 1.25, Tags: []string{"red", "large"},
			Attributes: map[string]string{"color": "red", "size": "L", "origin": "somewhere"},
		}
	}
	items[len(items)/2].APIKey = "0123456789abcdef0123456789abcdef"
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"items": items, "total": len(items)}); err != nil {
		panic(err)
	}
	return b.String()
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
