package platformtest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Outage is an address where nothing listens yet: a platform that is
// down when its gateway starts (connections are refused). End starts
// listening there and forwards every connection to a fake, as if the
// platform came up. Point the gateway at Addr.
type Outage struct {
	addr string

	mu       sync.Mutex
	ln       net.Listener
	conns    []net.Conn
	accepted int
}

// NewOutage reserves a loopback address for t; whatever End started
// stops when t ends.
func NewOutage(t *testing.T) *Outage {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &Outage{addr: ln.Addr().String()}
	_ = ln.Close()
	t.Cleanup(o.close)
	return o
}

// Addr is the reserved host:port.
func (o *Outage) Addr() string { return o.addr }

// End listens on Addr and forwards each connection to target
// (host:port, a fake's server).
func (o *Outage) End(t *testing.T, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Fatalf("listen on the reserved %s: %v", o.addr, err)
	}
	o.mu.Lock()
	o.ln = ln
	o.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.mu.Lock()
			o.accepted++
			o.mu.Unlock()
			go o.forward(c, target)
		}
	}()
}

// Accepted counts the connections made to Addr since End: a client
// that keeps its connections alive makes few.
func (o *Outage) Accepted() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.accepted
}

func (o *Outage) forward(c net.Conn, target string) {
	up, err := net.Dial("tcp", target)
	if err != nil {
		_ = c.Close()
		return
	}
	o.mu.Lock()
	o.conns = append(o.conns, c, up)
	o.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	_ = c.Close()
	_ = up.Close()
}

func (o *Outage) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ln != nil {
		_ = o.ln.Close()
	}
	for _, c := range o.conns {
		_ = c.Close()
	}
}
