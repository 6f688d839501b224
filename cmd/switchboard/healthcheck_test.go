package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte(`{"ready":true}`))
		case "/draining":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/moved":
			http.Redirect(w, r, "/draining", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)

	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/readyz"
	_ = ln.Close()

	tests := []struct {
		name    string
		args    []string
		wantErr bool
		usage   bool
	}{
		{name: "ready", args: []string{srv.URL + "/readyz"}},
		{name: "ready with timeout flag", args: []string{"--timeout", "2s", srv.URL + "/readyz"}},
		{name: "not ready", args: []string{srv.URL + "/draining"}, wantErr: true},
		{name: "redirect to failing", args: []string{srv.URL + "/moved"}, wantErr: true},
		{name: "not found", args: []string{srv.URL + "/nope"}, wantErr: true},
		{name: "connection refused", args: []string{"--timeout", "1s", closed}, wantErr: true},
		{name: "not a url", args: []string{"127.0.0.1:9090"}, wantErr: true},
		{name: "bad scheme", args: []string{"ftp://127.0.0.1/readyz"}, wantErr: true},
		{name: "two urls", args: []string{srv.URL, srv.URL}, wantErr: true, usage: true},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: true, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := runHealthcheck(context.Background(), tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("runHealthcheck(%q) = %v, want error %v", tt.args, err, tt.wantErr)
			}
			if errors.Is(err, errUsage) != tt.usage {
				t.Fatalf("runHealthcheck(%q) = %v, usage error want %v", tt.args, err, tt.usage)
			}
		})
	}
}

func TestHealthcheckDefaultURL(t *testing.T) {
	t.Parallel()
	if defaultHealthURL != "http://127.0.0.1:9090/readyz" {
		t.Fatalf("defaultHealthURL = %q; compose health checks and docs assume the default ops port", defaultHealthURL)
	}
	// The timeout bounds a server that never answers.
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	if err := checkHealth(context.Background(), srv.URL, 50*time.Millisecond); err == nil {
		t.Fatal("checkHealth against a hanging server succeeded")
	}
}
