package transport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

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

// hogSlots keeps n idle TCP connections to addr open from the local
// address src, each reopened 50 ms after the node closes it, until the
// test ends. It says nothing on them: no TLS, no preface.
func hogSlots(t *testing.T, addr, src string, n int) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	probe, err := d.Dial("tcp", addr)
	if err != nil {
		// Linux routes all of 127.0.0.0/8 to loopback; other systems may not.
		t.Skipf("cannot connect from %s here: %v", src, err)
	}
	_ = probe.Close()
	for range n {
		wg.Go(func() {
			for {
				if c, err := d.Dial("tcp", addr); err == nil {
					closed := make(chan struct{})
					go func() { _, _ = c.Read(make([]byte, 1)); close(closed) }()
					select {
					case <-closed:
					case <-stop:
					}
					_ = c.Close()
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
}

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
	hogSlots(t, n.t.Addr(), "127.0.0.2", 128)
	// The node refuses the hog's connections beyond what it may hold.
	require.Eventually(t, func() bool { return n.t.Refusals(refusedConn) >= 64 }, waitFor, tick)
	memberGetsIn(t, p, n)
}

func TestAttackHandshakeSlotsManySources(t *testing.T) {
	p := newPKI(t)
	n := slotsNode(t, p)
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"} {
		hogSlots(t, n.t.Addr(), src, 32)
	}
	require.Eventually(t, func() bool { return n.t.Refusals(refusedConn) >= 64 }, waitFor, tick)
	memberGetsIn(t, p, n)
}
