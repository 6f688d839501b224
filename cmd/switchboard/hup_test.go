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

// TestSIGHUPDrainsAProcessWithoutSkills: a process holding no skills has
// nothing to scan again on a SIGHUP (a terminal closed under it, say): it
// drains and stops as on SIGTERM, exit code 0, not at once by the
// signal's default.
func TestSIGHUPDrainsAProcessWithoutSkills(t *testing.T) {
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
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("fakellm ended by %v, want a drain and exit 0\n%s", exit, out.String())
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "SIGHUP: this process holds no skills") {
			t.Errorf("no word of the SIGHUP in its output:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("fakellm still running 30 s after SIGHUP\n%s", out.String())
	}
}
