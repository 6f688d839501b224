package command

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args string
		want MemoryArgs
	}{
		{"", MemoryArgs{Sub: MemoryShow}},
		{"  \n ", MemoryArgs{Sub: MemoryShow}},
		{"pending", MemoryArgs{Sub: MemoryPending}},
		{"PENDING extra", MemoryArgs{Sub: MemoryPending}},
		{"approve abc12345", MemoryArgs{Sub: MemoryApprove, Target: "abc12345"}},
		{"apply ABC12345", MemoryArgs{Sub: MemoryApprove, Target: "ABC12345"}},
		{"approve All", MemoryArgs{Sub: MemoryApprove, Target: "all"}},
		{"approve", MemoryArgs{Sub: MemoryApprove}},
		{"approve abc12345 def67890", MemoryArgs{Sub: MemoryApprove, Target: "abc12345"}},
		{"reject abc12345", MemoryArgs{Sub: MemoryReject, Target: "abc12345"}},
		{"deny all", MemoryArgs{Sub: MemoryReject, Target: "all"}},
		{"Drop x", MemoryArgs{Sub: MemoryReject, Target: "x"}},
		{"reject", MemoryArgs{Sub: MemoryReject}},
		{"approval", MemoryArgs{Sub: MemoryApproval}},
		{"approval on", MemoryArgs{Sub: MemoryApproval, Gate: "on"}},
		{"approval Enabled", MemoryArgs{Sub: MemoryApproval, Gate: "on"}},
		{"mode 1", MemoryArgs{Sub: MemoryApproval, Gate: "on"}},
		{"approval OFF", MemoryArgs{Sub: MemoryApproval, Gate: "off"}},
		{"approval no", MemoryArgs{Sub: MemoryApproval, Gate: "off"}},
		{"approval maybe", MemoryArgs{Sub: MemoryApproval, Gate: "maybe"}},
		{"approval Maybe So", MemoryArgs{Sub: MemoryApproval, Gate: "maybe"}},
		{"diff abc", MemoryArgs{Sub: MemoryUnknown}},
		{"list", MemoryArgs{Sub: MemoryUnknown}},
		{"approve " + strings.Repeat("é", 100), MemoryArgs{Sub: MemoryApprove, Target: strings.Repeat("é", MemoryWordMax)}},
	} {
		if got := Memory(tc.args); got != tc.want {
			t.Errorf("Memory(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

// FuzzMemory: whatever the argument, Memory picks one subcommand, keeps
// an id or value of valid UTF-8 without spaces within MemoryWordMax
// characters, and a gate value only for approval.
func FuzzMemory(f *testing.F) {
	for _, s := range []string{"", "pending", "approve abc12345", "reject all", "approval on", "mode\u00a0off", "deny \xff\xfe", "approve " + strings.Repeat("x", 80)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		a := Memory(args)
		switch a.Sub {
		case MemoryShow, MemoryPending, MemoryUnknown:
			if a.Target != "" || a.Gate != "" {
				t.Fatalf("Memory(%q) = %+v: stray argument", args, a)
			}
		case MemoryApprove, MemoryReject:
			if a.Gate != "" {
				t.Fatalf("Memory(%q) = %+v: gate outside approval", args, a)
			}
		case MemoryApproval:
			if a.Target != "" {
				t.Fatalf("Memory(%q) = %+v: target outside approve/reject", args, a)
			}
		default:
			t.Fatalf("Memory(%q): unknown subcommand %q", args, a.Sub)
		}
		if a.Sub == MemoryShow && strings.TrimSpace(strings.ToValidUTF8(args, "x")) != "" && len(strings.Fields(strings.ToValidUTF8(args, "x"))) > 0 {
			t.Fatalf("Memory(%q): words read as bare /memory", args)
		}
		for _, w := range []string{a.Target, a.Gate} {
			if !utf8.ValidString(w) || utf8.RuneCountInString(w) > MemoryWordMax || strings.ContainsFunc(w, func(r rune) bool { return strings.TrimSpace(string(r)) == "" }) {
				t.Fatalf("Memory(%q) = %+v: word %q is not one short valid word", args, a, w)
			}
		}
	})
}
