package command

import (
	"slices"
	"strings"
	"testing"
)

func TestApprovals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args string
		want ApprovalsArgs
	}{
		{"", ApprovalsArgs{}},
		{"  \n ", ApprovalsArgs{}},
		{"manual", ApprovalsArgs{Set: true, Mode: "manual"}},
		{" SMART ", ApprovalsArgs{Set: true, Mode: "smart"}},
		{"Off", ApprovalsArgs{Set: true, Mode: "off"}},
		{"auto", ApprovalsArgs{Set: true}},
		{"on", ApprovalsArgs{Set: true}},
		{"smart now", ApprovalsArgs{Set: true}},
		{"status", ApprovalsArgs{Set: true}},
	} {
		if got := Approvals(tc.args); got != tc.want {
			t.Errorf("Approvals(%q) = %+v, want %+v", tc.args, got, tc.want)
		}
	}
}

// FuzzApprovals: no argument shows; any argument asks for a change, and
// names a mode exactly when, trimmed and lowercased, it is one.
func FuzzApprovals(f *testing.F) {
	for _, s := range []string{"", " ", "manual", "SMART", " off\n", "auto", "smart now", "\x00", "ｏｆｆ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		a := Approvals(args)
		req := strings.ToLower(strings.TrimSpace(args))
		if a.Set != (req != "") {
			t.Fatalf("Approvals(%q).Set = %v", args, a.Set)
		}
		if want := slices.Contains(ApprovalModes, req); (a.Mode != "") != want {
			t.Fatalf("Approvals(%q) = %+v, mode named: %v", args, a, want)
		}
		if a.Mode != "" && a.Mode != req {
			t.Fatalf("Approvals(%q).Mode = %q, want %q", args, a.Mode, req)
		}
	})
}
