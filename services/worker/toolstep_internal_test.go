package worker

import (
	"encoding/json"
	"strings"
	"testing"
)

// A call's arguments fit their bound as a JSON object that parses: whole
// when they fit, else with the longest values shortened (a string's head
// and "…", another value's size), every key kept while the keys fit.
func TestBoundedArguments(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name, args string
		max        int
		want       string
	}{
		{"fits", `{"path": "a.txt", "n": 2}`, 100, `{"path":"a.txt","n":2}`},
		{"a long string", `{"path":"a.txt","content":"` + long + `"}`, 60, `{"path":"a.txt","content":"` + strings.Repeat("x", 28) + `…"}`},
		{"two long strings share", `{"a":"` + long + `","b":"` + long + `"}`, 41, `{"a":"` + strings.Repeat("x", 10) + `…","b":"` + strings.Repeat("x", 10) + `…"}`},
		{"a long array", `{"q":"hi","ids":[` + strings.Repeat("1,", 100) + `1]}`, 40, `{"q":"hi","ids":"[203 bytes]"}`},
		{"escapes count", `{"s":"` + strings.Repeat(`\"`, 50) + `"}`, 20, `{"s":"` + strings.Repeat(`\"`, 4) + `…"}`},
		{"runes stay whole", `{"s":"` + strings.Repeat("é", 50) + `"}`, 20, `{"s":"` + strings.Repeat("é", 4) + `…"}`},
		{"keys that do not fit", `{"aaaaaaaaaa":1,"bbbbbbbbbb":2,"cccccccccc":"` + long + `"}`, 40, `{"aaaaaaaaaa":1,"bbbbbbbbbb":2}`},
		{"not an object", `[` + long + `]`, 10, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := boundedArguments(tt.args, tt.max)
			if got != tt.want || len(got) > tt.max || !json.Valid([]byte(got)) {
				t.Errorf("boundedArguments(%d) = %s (%d bytes), want %s", tt.max, got, len(got), tt.want)
			}
		})
	}
}

// Whatever the model writes, the arguments a step carries are a JSON
// object within their bound ("{}" for what is not one), and the
// compacted arguments themselves when those fit.
func FuzzBoundedArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"path":"x","content":"` + strings.Repeat("y", 500) + `"}`,
		`{"a":[1,2,{"b":"c"}],"d":null}`, `{"s":"\u00e9\"\\"}`, `not json`, `{"a":`} {
		f.Add(s, 64)
	}
	f.Fuzz(func(t *testing.T, args string, max int) {
		if max < 2 || max > 4096 {
			return
		}
		got := boundedArguments(args, max)
		var obj map[string]json.RawMessage
		if len(got) > max || json.Unmarshal([]byte(got), &obj) != nil || obj == nil {
			t.Fatalf("boundedArguments(%q, %d) = %q: not an object within the bound", args, max, got)
		}
		if c := compact(args); isObject(c) && len(c) <= max && got != c {
			t.Fatalf("%q fits in %d bytes, got %q", c, max, got)
		}
	})
}
