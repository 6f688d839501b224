package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

func init() {
	register(command{name: "healthcheck", summary: "GET a health URL; exit 0 on 200 (container health checks)", run: runHealthcheck})
}

// defaultHealthURL is the readiness endpoint of a process on the default
// ops port.
const defaultHealthURL = "http://127.0.0.1:9090/readyz"

// runHealthcheck lets an image without a shell or wget check itself:
// `switchboard healthcheck [--timeout 3s] [URL]`.
func runHealthcheck(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("switchboard healthcheck", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	target := defaultHealthURL
	switch fs.NArg() {
	case 0:
	case 1:
		target = fs.Arg(0)
	default:
		fmt.Fprintln(os.Stderr, "usage: switchboard healthcheck [--timeout D] [URL]")
		return errUsage
	}
	return checkHealth(ctx, target, *timeout)
}

// checkHealth GETs target and succeeds only on 200 OK.
func checkHealth(ctx context.Context, target string, timeout time.Duration) error {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("health url %q: want http(s)://host[:port]/path", target)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("health request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check %s: status %d", u.Redacted(), resp.StatusCode)
	}
	return nil
}
