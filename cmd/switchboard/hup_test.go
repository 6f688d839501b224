package main

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPDoesNotStopAProcessWithoutSkills: a process holding no
// skills has nothing to reload on a SIGHUP and goes on; the SIGTERM after
// it, not the SIGHUP, ends it, with a drain and exit code 0.
func TestSIGHUPDoesNotStopAProcessWithoutSkills(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	cmd := exec.Command(binary(t), "fakellm", "--addr", addr)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fakellm not listening on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Both signals are pending before the process runs again, and the
	// kernel delivers the lower-numbered SIGHUP first: had it ended the
	// process, Wait would say so.
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatalf("%v: %v", sig, err)
		}
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("fakellm ended by %v, want a drain on SIGTERM and exit 0\n%s", exit, out.String())
		}
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fakellm still running 30 s after SIGTERM\n%s", out.String())
	}
}
