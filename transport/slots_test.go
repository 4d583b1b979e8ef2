package transport

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/lockraft/lockraft/internal/nettest"
	"github.com/lockraft/lockraft/transport/transportpb"
)

// The handshake-slot attack
//
// A node accepts at most MaxConns connections at once, handshakes included,
// and anyone who can reach its port can open a connection and say nothing:
// it holds its slot until handshakeTimeout (10 s). An outsider that keeps
// every slot that way, reopening what the node closes, keeps every new
// connection of a member out: a restarted member cannot rejoin, a light
// member cannot reconnect. A member must get in regardless, whether the
// idle connections come from one address or from several (each of the
// tests below), within less than handshakeTimeout, so without waiting the
// idle connections out.

// slotsNode is a node of 64 connection slots (the default is 1024), of
// which one source may hold 16 handshakes once half are taken (the
// default's share, a quarter).
func slotsNode(t *testing.T, p *pki) *node {
	lim := defaultLimits(64)
	return newNode(t, "c1", 1, withTLS(p.member("c1", 1)), func(c *Config) { c.limits = &lim })
}

// memberGetsIn dials n as light member 2 and makes one call, which must be
// served within 5 s (half the handshake timeout).
func memberGetsIn(t *testing.T, p *pki, n *node) {
	t.Helper()
	c := dialRaw(t, n.t.Addr(), p.memberRole("c1", 2, "light"), "c1", 2)
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.rpc.Keepalive(ctx, &transportpb.KeepaliveRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err, "a member could not connect while idle connections held the node's slots (refused connections: %d)",
		n.t.Refusals(refusedConn))
	t.Logf("the member got in after %v; %d connections refused meanwhile", time.Since(start).Round(time.Millisecond),
		n.t.Refusals(refusedConn))
}

func TestAttackHandshakeSlotsOneSource(t *testing.T) {
	p := newPKI(t)
	n := slotsNode(t, p)
	nettest.HoldIdle(t, n.t.Addr(), "127.0.0.2", 128, 50*time.Millisecond, new(nettest.IdleConns))
	// The node refuses the hog's connections beyond what it may hold.
	require.Eventually(t, func() bool { return n.t.Refusals(refusedConn) >= 64 }, waitFor, tick)
	memberGetsIn(t, p, n)
}

func TestAttackHandshakeSlotsManySources(t *testing.T) {
	p := newPKI(t)
	n := slotsNode(t, p)
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		nettest.HoldIdle(t, n.t.Addr(), src, 32, 50*time.Millisecond, new(nettest.IdleConns))
	}
	require.Eventually(t, func() bool { return n.t.Refusals(refusedConn) >= 64 }, waitFor, tick)
	memberGetsIn(t, p, n)
}
