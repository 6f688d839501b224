// Package natsd runs an embedded NATS server with JetStream, for
// `switchboard dev` and for tests. It is the real nats-server, in-process.
package natsd

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config says where the embedded server listens and stores.
type Config struct {
	// Host and Port to listen on; Port -1 picks a free port.
	Host string
	Port int
	// StoreDir holds JetStream data; empty uses a temporary directory that
	// is removed on Shutdown.
	StoreDir string
	// SyncAlways flushes every JetStream write to disk before acking.
	SyncAlways bool
}

// Server is a running embedded NATS server.
type Server struct {
	srv     *server.Server
	tempDir string
}

// Start launches the server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	s := &Server{}
	dir := cfg.StoreDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "switchboard-nats-*")
		if err != nil {
			return nil, fmt.Errorf("jetstream store dir: %w", err)
		}
		dir, s.tempDir = tmp, tmp
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	opts := &server.Options{
		ServerName: "switchboard-dev",
		Host:       host,
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
		SyncAlways: cfg.SyncAlways,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("new nats server: %w", err)
	}
	s.srv = srv
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		s.cleanup()
		return nil, fmt.Errorf("embedded nats server not ready after 10s")
	}
	return s, nil
}

// ClientURL is the URL clients dial.
func (s *Server) ClientURL() string { return s.srv.ClientURL() }

// InProcessConn opens a client connection that does not leave the process
// (nats.InProcessServer takes the Server for it).
func (s *Server) InProcessConn() (net.Conn, error) { return s.srv.InProcessConn() }

// Shutdown stops the server and removes a temporary store.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.cleanup()
}

func (s *Server) cleanup() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir)
	}
}
