package platform

import (
	"strconv"
	"strings"
	"testing"

	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
)

// A choice's payload is its whole command where it fits, its data and
// command name where it has data, a numbered no-op for a button without
// a command; a payload reads back as the press's text and data.
func TestPickerPayload(t *testing.T) {
	long := "/model " + strings.Repeat("x", MaxPickerCommand)
	tests := []struct {
		name         string
		choice       *deliveryv1.PickerChoice
		place        int
		payload      string
		text, data   string
		inert, valid bool
	}{
		{"a command", &deliveryv1.PickerChoice{Command: "/model gpt-4o"}, 0, "pc:/model gpt-4o", "/model gpt-4o", "", false, true},
		{"a model id with a slash and colon", &deliveryv1.PickerChoice{Command: "/model meta/llama-3.1:free"}, 1, "pc:/model meta/llama-3.1:free", "/model meta/llama-3.1:free", "", false, true},
		{"not ASCII", &deliveryv1.PickerChoice{Command: "/model modèle"}, 0, "pc:/model modèle", "/model modèle", "", false, true},
		{"data", &deliveryv1.PickerChoice{Command: "/model", Data: "p1"}, 9, "pd:p1:model", "/model", "p1", false, true},
		{"data for a long command", &deliveryv1.PickerChoice{Command: long, Data: "m12-0a1b2c3d"}, 2, "pd:m12-0a1b2c3d:model", "/model", "m12-0a1b2c3d", false, true},
		{"a counter", &deliveryv1.PickerChoice{Label: "1/3"}, 7, "pn:7", "", "", true, true},
		{"too long without data", &deliveryv1.PickerChoice{Command: long}, 0, "", "", "", false, false},
		{"no slash", &deliveryv1.PickerChoice{Command: "model x"}, 0, "", "", "", false, false},
		{"a control character", &deliveryv1.PickerChoice{Command: "/model a\nb"}, 0, "", "", "", false, false},
		{"data with a colon", &deliveryv1.PickerChoice{Command: "/model", Data: "a:b"}, 0, "", "", "", false, false},
		{"data without a command", &deliveryv1.PickerChoice{Data: "p1"}, 0, "", "", "", false, false},
		{"an uppercase name", &deliveryv1.PickerChoice{Command: "/Model", Data: "p1"}, 0, "", "", "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PickerPayload(tt.choice, tt.place)
			if got != tt.payload {
				t.Fatalf("payload %q, want %q", got, tt.payload)
			}
			if got == "" {
				return
			}
			if len(got) > 64 {
				t.Fatalf("payload of %d bytes passes Telegram's 64", len(got))
			}
			text, data, inert, ok := ParsePickerPayload(got)
			if !ok || text != tt.text || data != tt.data || inert != tt.inert {
				t.Fatalf("%q read as %q %q inert=%v ok=%v, want %q %q inert=%v", got, text, data, inert, ok, tt.text, tt.data, tt.inert)
			}
		})
	}
	for _, s := range []string{"", "pc:", "pc:model", "pd:p1", "pd::model", "pd:p1:", "pn:", "pn:07", "pn:-1", "pn:100", "ea:once", "mm:0"} {
		if _, _, _, ok := ParsePickerPayload(s); ok {
			t.Errorf("%q read as a picker's payload", s)
		}
	}
}

// FuzzPickerPayload: any payload is read without panicking; what is read
// is written back as the same payload.
func FuzzPickerPayload(f *testing.F) {
	for _, s := range []string{"pc:/model gpt-4o", "pd:p1:model", "pd:m3-1a2b3c4d:model", "pn:0", "pn:42", "pc:/model", "pc:/ x", "pd:p1:Model", "pn:007", "ea:once:call_1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		text, data, inert, ok := ParsePickerPayload(s)
		if !ok {
			return
		}
		c := &deliveryv1.PickerChoice{Command: text, Data: data}
		place := 0
		if inert {
			if text != "" || data != "" {
				t.Fatalf("%q: a no-op with text %q data %q", s, text, data)
			}
			place, _ = strconv.Atoi(strings.TrimPrefix(s, "pn:"))
		}
		if got := PickerPayload(c, place); got != s {
			t.Fatalf("%q read as %q %q inert=%v, written back as %q", s, text, data, inert, got)
		}
	})
}
