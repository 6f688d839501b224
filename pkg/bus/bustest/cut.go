package bustest

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Cuttable is a TCP relay in front of a NATS server whose connections a
// test cuts: a client connected through it (its URL) loses its
// connection and cannot reconnect until Restore, while clients connected
// to the server directly go on. It is one replica whose NATS connection
// dropped (its server restarted, its cluster node left, the server
// closed it as a slow consumer) and that reconnects after a while: the
// server forgets its subscriptions meanwhile, as it does a killed
// process's, though the replica still runs.
type Cuttable struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	until time.Time // what clients send is held until then (Hold)
}

// NewCuttable relays to the server at url (nats://host:port) until t
// ends.
func NewCuttable(t testing.TB, url string) *Cuttable {
	t.Helper()
	host := url
	if i := len("nats://"); len(url) > i && url[:i] == "nats://" {
		host = url[i:]
	}
	c := &Cuttable{t: t, target: host, addr: "127.0.0.1:0"}
	if err := c.listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Cut)
	return c
}

// URL is the relay's address, to connect through.
func (c *Cuttable) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "nats://" + c.addr
}

// Cut closes the relayed connections and refuses new ones until Restore.
func (c *Cuttable) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln != nil {
		_ = c.ln.Close()
		c.ln = nil
	}
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// Restore accepts connections again, on the same address. It may be
// called from any goroutine (a timer's): a failure fails the test
// without stopping it.
func (c *Cuttable) Restore() {
	if err := c.listen(); err != nil {
		c.t.Error(err)
	}
}

func (c *Cuttable) listen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("relay listen on %s: %w", c.addr, err)
	}
	c.ln, c.addr = ln, ln.Addr().String()
	go c.accept(ln)
	return nil
}

func (c *Cuttable) accept(ln net.Listener) {
	for {
		down, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", c.target)
		if err != nil {
			_ = down.Close()
			continue
		}
		c.mu.Lock()
		if c.ln != ln { // cut meanwhile
			c.mu.Unlock()
			_ = down.Close()
			_ = up.Close()
			return
		}
		c.conns = append(c.conns, down, up)
		c.mu.Unlock()
		go relay(down, up)
		go c.send(up, down)
	}
}

// Hold holds what the relayed clients send from now on for d before it
// goes on to the server: their connections stay up, and what they send
// meanwhile reaches the server d late, as from a client whose link is
// congested or whose writes stall. What the server sends is not held.
func (c *Cuttable) Hold(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.until = time.Now().Add(d)
}

// send relays what a client sends (down) to the server (up), as relay,
// once a Hold is over.
func (c *Cuttable) send(up, down net.Conn) {
	defer func() {
		_ = up.Close()
		_ = down.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := down.Read(buf)
		if n > 0 {
			c.mu.Lock()
			held := time.Until(c.until)
			c.mu.Unlock()
			time.Sleep(held) // at once when not held
			if _, err := up.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// relay copies from one side to the other and closes both once either
// ends.
func relay(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}
