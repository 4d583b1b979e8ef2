package lockraft_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
	"github.com/lockraft/lockraft/membership"
	"github.com/lockraft/lockraft/node"
)

// Three replicas started with lockraft.Join and one gossip seed each form a
// cluster by themselves and serve locks.
func TestJoinWithGossip(t *testing.T) {
	g := node.GossipConfig{Timing: membership.FastTiming()}
	var nodes []*lockraft.Node
	var seeds []string
	for i := 0; i < 3; i++ {
		n, err := lockraft.Join(seeds, lockraft.WithDataDir(t.TempDir()), lockraft.WithGossip(g), fast())
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		nodes = append(nodes, n)
		seeds = []string{n.GossipAddr()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var last uint64
	for _, n := range nodes {
		l, err := n.Lock(ctx, "gossip")
		require.NoError(t, err)
		require.Greater(t, l.Token(), last)
		last = l.Token()
		require.NoError(t, l.Unlock(ctx))
	}
}

func TestJoinGossipAndStaticMembersExclusive(t *testing.T) {
	_, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithGossip(node.GossipConfig{}),
		lockraft.WithStaticMembers(1, map[uint64]string{1: "127.0.0.1:1"}))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
}
