package node

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/transport"
)

// Secure by default
//
// A node whose gRPC or gossip port is reachable from other hosts (bound to
// an address other than loopback, or advertised at one) must
// authenticate its peers: with Config.TLS every member proves its identity
// with a certificate of the cluster's CA, and gossip is encrypted with the
// cluster's keys. On loopback (the quick start, tests) both may be off: only
// processes of this host can connect. Anywhere else Validate refuses a
// configuration without them, unless Config.Insecure says the operator
// accepts that anyone who can reach the ports can act as any member (crash
// it, take its locks, remove it); the node then logs a loud warning at
// start. A node reachable from other hosts must also be given its cluster id:
// the default is for loopback only.

// checkSecurity is the part of Validate that enforces the above (c has its
// defaults; clusterSet says whether the user named the cluster).
func (c Config) checkSecurity(clusterSet bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", lockerr.ErrInvalidConfig, fmt.Sprintf(format, a...))
	}
	exposed := c.exposedAddrs()
	if len(exposed) > 0 && !clusterSet {
		return bad("listening on %s (not loopback) needs an explicit ClusterID: the default %q is for loopback only",
			strings.Join(exposed, ", "), defaultClusterID)
	}
	if c.TLS != nil {
		if err := transport.ValidateClusterID(c.ClusterID); err != nil {
			return bad("with TLS the %v", err)
		}
	}
	if c.Insecure {
		return nil
	}
	// Advertised elsewhere, a loopback bind is reached through whatever
	// forwards to it (a proxy, a port forward): exposed all the same.
	grpcExposed := c.Listener != nil && !isLoopback(c.Listener.Addr().String()) ||
		c.Listener == nil && !isLoopback(c.ListenAddr) ||
		c.AdvertiseAddr != "" && !isLoopback(c.AdvertiseAddr)
	if grpcExposed && c.TLS == nil {
		return bad("refusing to serve raft on %s without TLS: anyone who can reach it could act as any member; "+
			"configure TLS (the cluster's CA and this member's certificate) or, knowingly, Insecure", c.listenAddr())
	}
	if g := c.Gossip; g != nil && len(g.Keys) == 0 && len(g.SecretKey) == 0 {
		bind := g.BindAddr
		if bind == "" {
			bind = "127.0.0.1"
		}
		for _, a := range []string{bind, g.AdvertiseAddr} {
			if a != "" && !isLoopback(net.JoinHostPort(a, "0")) {
				return bad("refusing to gossip on %s without encryption: configure gossip keys or, knowingly, Insecure", a)
			}
		}
	}
	return nil
}

// exposedAddrs lists the configured addresses other hosts could reach.
func (c Config) exposedAddrs() []string {
	var out []string
	if a := c.listenAddr(); !isLoopback(a) {
		out = append(out, a)
	}
	if a := c.AdvertiseAddr; a != "" && !isLoopback(a) {
		out = append(out, a)
	}
	if g := c.Gossip; g != nil {
		for _, a := range []string{g.BindAddr, g.AdvertiseAddr} {
			if a != "" && !isLoopback(net.JoinHostPort(a, "0")) {
				out = append(out, a)
			}
		}
	}
	return out
}

func (c Config) listenAddr() string {
	if c.Listener != nil {
		return c.Listener.Addr().String()
	}
	return c.ListenAddr
}

// isLoopback reports whether "host:port" names only this host: a loopback
// IP or "localhost". An empty host, 0.0.0.0, :: and any other name or
// address are reachable from elsewhere (or may be).
func isLoopback(addr string) bool { return hostIs(addr, "localhost", net.IP.IsLoopback) }

// tlsMemberID returns the member id this node's certificate names.
func tlsMemberID(t *transport.TLS) (string, uint64, error) {
	cert, err := t.Certificate()
	if err != nil {
		return "", 0, err
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return "", 0, fmt.Errorf("TLS certificate is empty")
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return "", 0, err
		}
	}
	return transport.MemberIdentity(leaf)
}

// warnIfInsecure logs, once at start, what running without TLS off
// loopback means.
func (c Config) warnIfInsecure(log *slog.Logger) {
	if !c.Insecure || c.TLS != nil {
		return
	}
	exposed := c.exposedAddrs()
	if len(exposed) == 0 {
		return
	}
	log.Warn("INSECURE: serving without TLS on addresses other hosts can reach; anyone who can connect can "+
		"impersonate any member, crash this node, take or release its locks and remove it from the cluster",
		"addrs", strings.Join(exposed, ", "), "gossip_encrypted", c.Gossip != nil && len(c.Gossip.Keys)+len(c.Gossip.SecretKey) > 0)
}
