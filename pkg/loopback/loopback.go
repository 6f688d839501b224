// Package loopback tells addresses of this machine's loopback interface
// from others: services that accept calls without a credential listen
// only there.
package loopback

import (
	"net"
	"strings"
)

// Addr reports whether addr (host:port, as given to net.Listen) binds
// only to loopback: localhost, 127.0.0.0/8 or ::1. An empty host (":80")
// binds every interface.
func Addr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return host == "localhost" || isLoopbackIP(host)
}

// Host reports whether an HTTP Host header (host, or host:port) names
// loopback: localhost or a name under .localhost, 127.0.0.0/8 or ::1.
func Host(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || isLoopbackIP(host)
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
