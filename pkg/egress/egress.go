// Package egress guards the connections Switchboard opens to URLs that
// others chose: an attachment a remote agent or a proactive send names by
// URL, a file an activity points at. Such a URL could name the gateway's
// own network (a cloud's metadata service, an internal API, the
// loopback), so a guarded client reaches only public addresses, checked
// on the address each connection dials (after DNS, on every redirect),
// unless the operator allows private addresses or names hosts.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is a connection refused because its address is not public
// and not allowed.
var ErrRefused = errors.New("address refused")

// Config says what a guarded client may reach besides public addresses.
type Config struct {
	// AllowPrivate lets it reach any address: for attachments served
	// from inside the operator's network, or local fakes in development.
	AllowPrivate bool `koanf:"allow_private"`
	// AllowHosts are host names (exact, any case), addresses or CIDR
	// prefixes it may reach though they are not public: a name is
	// trusted whatever it resolves to, an address or prefix by the
	// address dialled.
	AllowHosts []string `koanf:"allow_hosts"`
}

// Validate checks AllowHosts: each a host name, an IP address or a CIDR
// prefix, without a scheme, port or path.
func (c Config) Validate() error {
	_, err := c.policy()
	return err
}

// policy is Config parsed.
type policy struct {
	any      bool
	names    map[string]bool
	prefixes []netip.Prefix
}

func (c Config) policy() (policy, error) {
	p := policy{any: c.AllowPrivate, names: map[string]bool{}}
	for _, h := range c.AllowHosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			continue
		case strings.Contains(h, "://"):
			return policy{}, fmt.Errorf("allow_hosts: %q is a URL; name its host only", h)
		case strings.Contains(h, "/"):
			pre, err := netip.ParsePrefix(h)
			if err != nil {
				return policy{}, fmt.Errorf("allow_hosts: %q is not a CIDR prefix", h)
			}
			p.prefixes = append(p.prefixes, unmapPrefix(pre.Masked()))
		default:
			if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
				ip = ip.Unmap().WithZone("")
				p.prefixes = append(p.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			if strings.ContainsAny(h, ":@?# ") {
				return policy{}, fmt.Errorf("allow_hosts: %q is not a host name, address or prefix (no scheme or port)", h)
			}
			p.names[strings.ToLower(strings.TrimSuffix(h, "."))] = true
		}
	}
	return p, nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n ≥ 96) into a.b.c.d/(n-96), the
// form addresses are compared in.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

var (
	// cgnat is the shared address space (100.64.0.0/10), private in effect.
	cgnat = netip.MustParsePrefix("100.64.0.0/10")
	// nat64 (RFC 6052) and sixToFour (RFC 3056) carry an IPv4 address,
	// which a translator or relay reaches: public only when it is.
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// localNAT64 (RFC 8215) translates into the operator's own network.
	localNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
)

// Public reports whether ip is a public unicast address: not loopback,
// private, link-local (a cloud's metadata service), shared (CGNAT),
// unspecified, multicast or in 0.0.0.0/8, nor an IPv6 address that
// carries such an IPv4 address (NAT64, 6to4) or translates into a local
// network.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	switch a := ip.As16(); {
	case nat64.Contains(ip):
		return Public(netip.AddrFrom4([4]byte(a[12:16])))
	case sixToFour.Contains(ip):
		return Public(netip.AddrFrom4([4]byte(a[2:6])))
	case localNAT64.Contains(ip):
		return false
	}
	return ip.IsGlobalUnicast() && !ip.IsPrivate() && !cgnat.Contains(ip) && !(ip.Is4() && ip.As4()[0] == 0)
}

// Control is a net.Dialer Control that refuses a connection to an
// address that is not public.
func Control(network, address string, c syscall.RawConn) error {
	return policy{}.control(network, address, c)
}

// control refuses a connection to an address that is neither public nor
// allowed.
func (p policy) control(_, address string, _ syscall.RawConn) error {
	if p.any {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an address", ErrRefused, host)
	}
	ip = ip.Unmap().WithZone("")
	if Public(ip) {
		return nil
	}
	for _, pre := range p.prefixes {
		if pre.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is not a public address", ErrRefused, ip)
}

// dialTimeout bounds one connection's set-up.
const dialTimeout = 30 * time.Second

// dialer returns the DialContext of a guarded transport: a host AllowHosts
// names is dialled as it is, any other only to an address control lets
// through.
func (p policy) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	guarded := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: p.control}
	open := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err == nil && p.names[strings.ToLower(strings.TrimSuffix(host, "."))] {
			return open.DialContext(ctx, network, addr)
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

// Guard returns a copy of hc whose connections reach only what cfg
// allows. It dials directly, without a proxy from the environment (the
// check would see the proxy's address). A client with a transport other
// than an *http.Transport keeps it: that transport decides where
// connections go (tests' fakes). An invalid cfg (see Validate) allows
// only public addresses.
func Guard(hc *http.Client, cfg Config) *http.Client {
	if hc == nil {
		hc = &http.Client{}
	}
	c := *hc
	base, ok := hc.Transport.(*http.Transport)
	if hc.Transport == nil {
		base, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok {
		return &c
	}
	p, err := cfg.policy()
	if err != nil {
		p = policy{}
	}
	t := base.Clone()
	t.Proxy = nil
	t.DialContext = p.dialer()
	c.Transport = t
	return &c
}

// Client is a new guarded client whose requests take at most timeout
// each (0: no bound but the request's context).
func Client(cfg Config, timeout time.Duration) *http.Client {
	return Guard(&http.Client{Timeout: timeout}, cfg)
}
