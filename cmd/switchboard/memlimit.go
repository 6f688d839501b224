package main

import (
	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimit tells the Go runtime a soft memory limit before any
// service starts: 90% of the memory limit of the container (cgroup) it
// runs in, so that its heap collects harder instead of the kernel
// killing the process; none outside a container. GOMEMLIMIT, when set,
// wins; AUTOMEMLIMIT=off turns this off. provider nil reads the cgroup.
// It returns the limit now in force.
func memoryLimit(provider memlimit.Provider) int64 {
	opts := []memlimit.Option{memlimit.WithRatio(0.9)}
	if provider != nil {
		opts = append(opts, memlimit.WithProvider(provider))
	}
	// Without a cgroup (a laptop, a test) there is nothing to follow.
	limit, _ := memlimit.Set(opts...)
	return limit
}
