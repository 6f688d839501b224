package egress

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestPublic(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"52.112.0.1": true, "2603:1063::1": true, "8.8.8.8": true,
		"127.0.0.1": false, "::1": false, "10.0.0.5": false, "172.16.3.4": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "100.64.0.1": false, "0.0.0.0": false, "0.1.2.3": false,
		"fd00::1": false, "::ffff:127.0.0.1": false, "::ffff:10.1.1.1": false, "224.0.0.1": false, "::": false,
		"255.255.255.255": false,
		// IPv6 that carries an IPv4 address is as public as it.
		"64:ff9b::808:808": true, "64:ff9b::a9fe:a9fe": false, "64:ff9b::7f00:1": false,
		"2002:808:808::1": true, "2002:c0a8:101::1": false, "2002:a00:1::1": false,
		"64:ff9b:1::808:808": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

// The dialer's Control sees the address a connection goes to, after DNS:
// it is what refuses a name that resolves into the gateway's network.
func TestControl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		addr string
		ok   bool
	}{
		{"public", Config{}, "52.112.0.1:443", true},
		{"public v6", Config{}, "[2603:1063::1]:443", true},
		{"loopback", Config{}, "127.0.0.1:80", false},
		{"v4-mapped loopback", Config{}, "[::ffff:127.0.0.1]:80", false},
		{"metadata service", Config{}, "169.254.169.254:80", false},
		{"link-local with a zone", Config{}, "[fe80::1%eth0]:80", false},
		{"not an address", Config{}, "example.org:80", false},
		{"no port", Config{}, "127.0.0.1", false},
		{"private allowed", Config{AllowPrivate: true}, "10.1.2.3:80", true},
		{"an allowed address", Config{AllowHosts: []string{"127.0.0.1"}}, "127.0.0.1:8080", true},
		{"another address", Config{AllowHosts: []string{"127.0.0.1"}}, "127.0.0.2:8080", false},
		{"an allowed prefix", Config{AllowHosts: []string{"10.20.0.0/16"}}, "10.20.5.6:443", true},
		{"outside the prefix", Config{AllowHosts: []string{"10.20.0.0/16"}}, "10.21.5.6:443", false},
		{"a mapped prefix", Config{AllowHosts: []string{"::ffff:10.0.0.0/104"}}, "10.3.4.5:443", true},
		{"a v6 address", Config{AllowHosts: []string{"[fd00::7]"}}, "[fd00::7]:443", true},
		{"a name allows no address", Config{AllowHosts: []string{"files.internal"}}, "10.1.2.3:80", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := tt.cfg.policy()
			if err != nil {
				t.Fatal(err)
			}
			err = p.control("tcp", tt.addr, nil)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrRefused)) {
				t.Fatalf("control(%s) = %v, want allowed %v", tt.addr, err, tt.ok)
			}
		})
	}
	if err := Control("tcp", "127.0.0.1:80", nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("Control allowed the loopback: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		hosts []string
		ok    bool
	}{
		{nil, true},
		{[]string{"files.example.internal", "10.0.0.0/8", "127.0.0.1", "::1", "[fd00::1]", "Minio.Local."}, true},
		{[]string{""}, true},
		{[]string{"10.0.0.0/33"}, false},
		{[]string{"http://files.internal"}, false},
		{[]string{"files.internal:9000"}, false},
		{[]string{"not/a/prefix"}, false},
	} {
		if err := (Config{AllowHosts: tt.hosts}).Validate(); (err == nil) != tt.ok {
			t.Errorf("Validate(%q) = %v, want ok %v", tt.hosts, err, tt.ok)
		}
	}
}

func get(t *testing.T, hc *http.Client, u string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// A real connection: the loopback refused by default, by its address and
// by a name that resolves to it (localhost), also after a redirect from
// a host that is allowed; reached when allowed.
func TestClient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hop" {
			http.Redirect(w, r, "http://"+r.URL.Query().Get("to")+"/file", http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("inside"))
	}))
	t.Cleanup(srv.Close)
	byIP := srv.URL + "/file"
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	byName := "http://localhost:" + port + "/file"
	tests := []struct {
		name string
		cfg  Config
		url  string
		ok   bool
	}{
		{"loopback address refused", Config{}, byIP, false},
		{"name resolving to the loopback refused", Config{}, byName, false},
		{"private allowed", Config{AllowPrivate: true}, byIP, true},
		{"private allowed, by name", Config{AllowPrivate: true}, byName, true},
		{"the address allowed", Config{AllowHosts: []string{"127.0.0.0/8"}}, byIP, true},
		{"the name allowed", Config{AllowHosts: []string{"LOCALHOST"}}, byName, true},
		{"the name allowed, not the address", Config{AllowHosts: []string{"localhost"}}, byIP, false},
		{"a redirect from an allowed name to the address", Config{AllowHosts: []string{"localhost"}},
			"http://localhost:" + port + "/hop?to=127.0.0.1:" + port, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := get(t, Client(tt.cfg, 5*time.Second), tt.url)
			if tt.ok {
				if err != nil || body != "inside" {
					t.Fatalf("got %q, %v; want the file", body, err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("got %q, %v; want refused", body, err)
			}
		})
	}
}

// Guard keeps a client's settings and a transport of its own.
func TestGuard(t *testing.T) {
	t.Parallel()
	hc := &http.Client{Timeout: 7 * time.Second}
	g := Guard(hc, Config{})
	if g.Timeout != 7*time.Second || g.Transport == nil || hc.Transport != nil {
		t.Fatalf("guarded client: timeout %v, transport %T; original transport %T", g.Timeout, g.Transport, hc.Transport)
	}
	if tr := g.Transport.(*http.Transport); tr.Proxy != nil {
		t.Fatal("a guarded transport uses the environment's proxy")
	}
	own := roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("own") })
	if g := Guard(&http.Client{Transport: own}, Config{}); g.Transport == nil {
		t.Fatal("a client's own transport was dropped")
	} else if _, err := g.Transport.RoundTrip(&http.Request{}); err == nil || err.Error() != "own" {
		t.Fatalf("a client's own transport was replaced: %v", err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzControl: the check never panics, refuses with ErrRefused, and
// without allowances lets through exactly the public addresses.
func FuzzControl(f *testing.F) {
	for _, s := range []string{"127.0.0.1:80", "[::ffff:10.0.0.1]:443", "[fe80::1%lo]:1", "8.8.8.8:53", "x:1", ":", "[::]:0", "100.64.0.1:80"} {
		f.Add(s, "10.0.0.0/8")
	}
	f.Fuzz(func(t *testing.T, addr, allow string) {
		err := Control("tcp", addr, nil)
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Fatalf("refusal without ErrRefused: %v", err)
		}
		if err == nil {
			host := addr[:strings.LastIndex(addr, ":")]
			ip, perr := netip.ParseAddr(strings.Trim(host, "[]"))
			if perr != nil || !Public(ip) {
				t.Fatalf("%q let through", addr)
			}
		}
		p, perr := Config{AllowHosts: strings.Split(allow, ",")}.policy()
		if perr != nil {
			return
		}
		if aerr := p.control("tcp", addr, nil); err == nil && aerr != nil {
			t.Fatalf("%q: public, refused with allow_hosts %q: %v", addr, allow, aerr)
		}
	})
}
