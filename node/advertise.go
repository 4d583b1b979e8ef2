package node

import (
	"fmt"
	"net"
	"strconv"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// Advertised addresses.
//
// A member listens on one address and tells the others another one when it
// binds a wildcard (0.0.0.0, [::], or ":port"): "0.0.0.0:7400" in another
// member's peer table would dial that member itself. So a wildcard bind needs
// an advertise address, for gRPC (Config.AdvertiseAddr) and for gossip
// (GossipConfig.AdvertiseAddr, which defaults to the host of the gRPC one).
// Nothing is guessed from the interfaces: a host with several addresses
// (pod network, node network, a VPN) would pick one the others cannot reach,
// and a wrong guess only shows as a cluster that never forms. Validate
// refuses the configuration instead (lockerr.ErrInvalidConfig).

// hostOf is the host of "host:port", or addr itself when it is not one (a
// bare host).
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// isUnspecified reports whether addr ("host:port" or a bare host) binds
// every interface: an empty host, 0.0.0.0 or ::.
func isUnspecified(addr string) bool { return hostIs(addr, "", net.IP.IsUnspecified) }

// hostIs reports whether addr's host (hostOf) is the name named, or an IP
// for which ipIs holds.
func hostIs(addr, named string, ipIs func(net.IP) bool) bool {
	host := hostOf(addr)
	if host == named {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ipIs(ip)
}

// checkAdvertise validates the advertise addresses against the binds.
func (c Config) checkAdvertise() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", lockerr.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	if a := c.AdvertiseAddr; a != "" {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			host, port = a, ""
		}
		if isUnspecified(host) {
			return bad("AdvertiseAddr %q is a wildcard address: advertise one the other members can dial", a)
		}
		if port != "" {
			if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
				return bad("AdvertiseAddr %q has a bad port", a)
			}
		}
	} else if isUnspecified(c.listenAddr()) {
		return bad("listening on %s (every interface) needs an advertise address (AdvertiseAddr, "+
			"lockraft.WithAdvertiseAddr): the other members cannot dial %s", c.listenAddr(), c.listenAddr())
	}
	if g := c.Gossip; g != nil {
		if g.AdvertiseAddr != "" && isUnspecified(g.AdvertiseAddr) {
			return bad("Gossip.AdvertiseAddr %q is a wildcard address", g.AdvertiseAddr)
		}
		if g.BindAddr != "" && isUnspecified(g.BindAddr) && g.AdvertiseAddr == "" && c.AdvertiseAddr == "" {
			return bad("gossip bound to %q (every interface) needs an advertise address (Gossip.AdvertiseAddr, "+
				"or the gRPC AdvertiseAddr whose host it then uses)", g.BindAddr)
		}
	}
	return nil
}

// advertised is the gRPC address this node gives the others: AdvertiseAddr,
// with the bound port when it names none (or port 0), else the listener's
// address.
func (c Config) advertised(bound string) string {
	a := c.AdvertiseAddr
	if a == "" {
		return bound
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		host, port = a, ""
	}
	if port == "" || port == "0" {
		_, port, _ = net.SplitHostPort(bound)
	}
	return net.JoinHostPort(host, port)
}

// gossipAdvertiseHost is the gossip advertise host: GossipConfig's own, else
// the host of the gRPC AdvertiseAddr when gossip binds a wildcard ("" lets
// memberlist advertise the bound address).
func (c Config) gossipAdvertiseHost(g GossipConfig) string {
	if g.AdvertiseAddr != "" || !isUnspecified(g.BindAddr) || c.AdvertiseAddr == "" {
		return g.AdvertiseAddr
	}
	return hostOf(c.AdvertiseAddr)
}
