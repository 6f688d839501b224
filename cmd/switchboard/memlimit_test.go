package main

import (
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Not parallel: it sets the process's memory limit and environment.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	const container = 512 << 20
	for _, tc := range []struct {
		name, gomemlimit string
		want             int64
	}{
		{"90% of the container's limit", "", container * 9 / 10},
		{"GOMEMLIMIT wins", "300MiB", 123 << 20},
	} {
		t.Setenv("GOMEMLIMIT", tc.gomemlimit)
		debug.SetMemoryLimit(123 << 20) // what the runtime read from GOMEMLIMIT, in the second case
		if got := memoryLimit(memlimit.Limit(container)); got != tc.want {
			t.Errorf("%s: limit %d, want %d", tc.name, got, tc.want)
		}
	}
}
