package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	turnsv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/turns/v1"
	"github.com/switchboard-chat/switchboard/pkg/secret"
	"github.com/switchboard-chat/switchboard/services/worker/internal/store"
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

// A finished step shows its result masked as if the whole result were
// masked, though only the text before the cut and a margin past it are:
// a secret crossing the cut is masked, not shown in clear up to the cut,
// also when masking the text before it took out more than the margin.
func TestShownResultMasksASecretAcrossTheCut(t *testing.T) {
	t.Parallel()
	const key = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
	body := strings.Repeat("MIIEowIBAAKCAQEAsecretkeymaterial0123456789abcdefghijklmnopqrstuv\n", 50) // 3,300 bytes
	pem := "-----BEGIN RSA PRIVATE KEY-----\n" + body + "-----END RSA PRIVATE KEY-----\n"
	jwt := "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSIsInJvbGUiOiJhZG1pbiJ9.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJl"
	filler := strings.Repeat("a line of a large file\n", 500) // 11.5 KB after the secret: more than the margin
	tests := []struct {
		name, result string
		max          int
		clear        string // what of the secret must not be shown
	}{
		{"a key", "the key is " + key + " keep it safe\n" + filler, 20, key[:7]},
		{"a key at the cut", "the key is " + key + "\n" + filler, 11 + len(key)/2, key[:7]},
		{"a private key", "id_rsa:\n" + pem + filler, 100, "MIIEow"},
		{"a token", "Authorization: Bearer " + jwt + "\n" + filler, 40, "eyJhbGciOi"},
		{"a key after masked private keys", strings.Repeat(pem, 4) + "the key is " + key + "\n" + filler, 4*23 + 20, key[:7]},
		{"a private key after masked private keys", strings.Repeat(pem, 4) + "id_rsa:\n" + pem + filler, 4*23 + 60, "MIIEow"},
		{"a short result", "the key is " + key, 1000, key[:7]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shownResult(tt.result, tt.max)
			if strings.Contains(got, tt.clear) {
				t.Errorf("shownResult(%d) shows %q in clear: %q", tt.max, tt.clear, got)
			}
			// What it shows is what masking the whole result shows.
			whole := capResult(secret.Redact(tt.result), tt.max)
			shown, _, _ := strings.Cut(got, "\n\n[Output truncated")
			want, _, _ := strings.Cut(whole, "\n\n[Output truncated")
			if shown != want {
				t.Errorf("shownResult(%d) = %q, want %q", tt.max, shown, want)
			}
			if len(tt.result) > tt.max && !strings.HasSuffix(got, fmt.Sprintf("of %d bytes shown.]", len(tt.result))) {
				t.Errorf("shownResult(%d) = %q, want the cut said, of the result's %d bytes", tt.max, got, len(tt.result))
			}
		})
	}
}

// A large result's step masks what it can show, not the whole result:
// masking copies the text once per pattern, CPU and memory spent on text
// no step shows. (Not parallel: it counts the process's allocations.)
func TestShownResultMasksOnlyWhatItCanShow(t *testing.T) {
	result := strings.Repeat("a line of a large file\n", 100_000) // 2.3 MB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := shownResult(result, 1000)
	runtime.ReadMemStats(&after)
	// Masking the whole result allocates some 16 times its size; its
	// head, some 35 times the cut and the margin (318 KB here).
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(result))/2 {
		t.Errorf("showing %d bytes of a %d-byte result allocated %d bytes", len(got), len(result), n)
	}
}

// A finished step that no one sees — the turn's every input waits for
// the whole answer, which lists no tool calls (a chat completion's, a
// cron job's, a /background task's): the step is not published — masks
// nothing of its result for a preview: masking a large result's head is
// tens of milliseconds of CPU per call. (Not parallel: it counts the
// process's allocations.)
func TestUnpublishedToolStepMasksNothing(t *testing.T) {
	result := strings.Repeat("a line of a large file\n", 100_000) // 2.3 MB
	r := &turnRun{s: &Service{cfg: Config{Agent: AgentConfig{MaxToolResultBytes: 100_000}}},
		req:    &turnsv1.TurnRequested{TurnId: "turn-1"},
		target: &deliveryv1.Target{Platform: "api", ChatId: "req_1"}, answerOnly: true}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := r.toolFinished(context.Background(), store.ToolCall{ID: "call_1", Name: "read_file"}, result, false)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	// Masking the result's first 100,000 bytes and the margin allocates
	// some 1.9 MB.
	if n := after.TotalAlloc - before.TotalAlloc; n > 512<<10 {
		t.Errorf("an unpublished step of a %d-byte result allocated %d bytes", len(result), n)
	}
}
