package loopback

import "testing"

func TestAddr(t *testing.T) {
	tests := map[string]bool{
		"127.0.0.1:8642": true, "localhost:1": true, "[::1]:7070": true, "127.1.2.3:80": true,
		":8642": false, "0.0.0.0:8642": false, "10.0.0.1:80": false, "[::]:80": false,
		"example.test:80": false, "127.0.0.1": false, "": false,
	}
	for addr, want := range tests {
		if got := Addr(addr); got != want {
			t.Errorf("Addr(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestHost(t *testing.T) {
	tests := map[string]bool{
		"localhost": true, "LOCALHOST:8642": true, "app.localhost:80": true, "127.0.0.1": true,
		"127.0.0.1:8642": true, "[::1]:8642": true, "::1": true,
		"evil.example.test": false, "evil.example.test:8642": false, "localhost.evil.test": false,
		"10.0.0.1": false, "": false,
	}
	for host, want := range tests {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}
