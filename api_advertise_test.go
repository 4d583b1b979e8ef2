package lockraft_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// L1 needs members that can dial each other: a replica bound to every
// interface must not advertise the wildcard (the others would dial
// themselves and the cluster would never form). Join refuses such a bind
// without an advertise address, for gRPC and for gossip.
func TestWildcardBindNeedsAdvertiseAddr(t *testing.T) {
	for _, bind := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		_, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(bind),
			lockraft.WithClusterID("adv"), lockraft.WithInsecure(),
			lockraft.WithStaticMembers(1, map[lockraft.MemberID]string{1: "127.0.0.1:1"}), fast())
		require.ErrorIs(t, err, lockraft.ErrInvalidConfig, bind)
		require.Contains(t, err.Error(), "advertise address", bind)
	}
	_, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("0.0.0.0:0"),
		lockraft.WithAdvertiseAddr("0.0.0.0:7400"), lockraft.WithClusterID("adv"), lockraft.WithInsecure(),
		lockraft.WithStaticMembers(1, map[lockraft.MemberID]string{1: "0.0.0.0:7400"}), fast())
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	require.Contains(t, err.Error(), "wildcard")
	// Gossip on a wildcard, gRPC on loopback: the gossip bind needs one too.
	_, err = lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithClusterID("adv"), lockraft.WithInsecure(),
		lockraft.WithGossip(lockraft.Gossip{BootstrapExpect: 1, BindAddr: "0.0.0.0", Timing: lockraft.FastGossipTiming()}), fast())
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	require.Contains(t, err.Error(), "gossip bound to")
}

// With static peers (Join's list), a replica bound to every interface
// without an advertise address is told that first: the wildcard is why it
// finds itself among no peers, and "is not among peers" alone hid the fix.
func TestWildcardBindStaticPeersNamesAdvertise(t *testing.T) {
	a, b := freeAddr(t), freeAddr(t)
	_, port, err := net.SplitHostPort(a)
	require.NoError(t, err)
	for _, bind := range []string{"0.0.0.0:" + port, "[::]:" + port, ":" + port} {
		_, err := lockraft.Join([]string{a, b}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(bind),
			lockraft.WithClusterID("adv"), lockraft.WithInsecure(), fast())
		require.ErrorIs(t, err, lockraft.ErrInvalidConfig, bind)
		require.Contains(t, err.Error(), "needs an advertise address", bind)
		require.NotContains(t, err.Error(), "not among peers", bind)
	}
	// A plain address that matches no peer still says so.
	_, err = lockraft.Join([]string{a, b}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("127.0.0.1:1"),
		lockraft.WithClusterID("adv"), lockraft.WithInsecure(), fast())
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	require.Contains(t, err.Error(), "not among peers")
}

// With an advertise address, three static replicas bound to 0.0.0.0 find
// themselves in the peer list by it, advertise it, and serve locks (L1,
// S2 tokens increase across members).
func TestAdvertiseAddrStatic(t *testing.T) {
	var ports []string
	for range 3 {
		_, p, err := net.SplitHostPort(freeAddr(t))
		require.NoError(t, err)
		ports = append(ports, p)
	}
	var peers []string
	for _, p := range ports {
		peers = append(peers, net.JoinHostPort("127.0.0.1", p))
	}
	var nodes []*lockraft.Node
	for i, p := range ports {
		n, err := lockraft.Join(peers, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("0.0.0.0:"+p),
			lockraft.WithAdvertiseAddr("127.0.0.1"), lockraft.WithClusterID("adv"), lockraft.WithInsecure(), fast())
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		require.Equal(t, lockraft.MemberID(i+1), n.ID(), "found itself by its advertise address")
		require.Equal(t, peers[i], n.Addr(), "advertises 127.0.0.1 with the bound port")
		nodes = append(nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lockInTurn(ctx, t, nodes, "adv")
}

// Gossip bound to 0.0.0.0 takes the host of WithAdvertiseAddr: what the
// others are given as a seed and dial is 127.0.0.1, never the wildcard.
func TestAdvertiseAddrGossip(t *testing.T) {
	n, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr("0.0.0.0:0"),
		lockraft.WithAdvertiseAddr("127.0.0.1"), lockraft.WithClusterID("adv"), lockraft.WithInsecure(),
		lockraft.WithGossip(lockraft.Gossip{BootstrapExpect: 1, BindAddr: "0.0.0.0", Timing: lockraft.FastGossipTiming()}), fast())
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(context.Background()) })
	require.True(t, strings.HasPrefix(n.GossipAddr(), "127.0.0.1:"), "gossip advertises %s", n.GossipAddr())
	require.True(t, strings.HasPrefix(n.Addr(), "127.0.0.1:"), "gRPC advertises %s", n.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := n.Lock(ctx, "adv")
	require.NoError(t, err, fmt.Sprint(n.Addr()))
	require.NoError(t, l.Unlock(ctx))
}
