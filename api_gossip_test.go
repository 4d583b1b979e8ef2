package lockraft_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// Three replicas started with lockraft.Join and one gossip seed each form a
// cluster by themselves and serve locks: each is given its name and the
// same founders list, as a StatefulSet's pods would be.
func TestJoinWithGossip(t *testing.T) {
	founders := []string{"orders-0", "orders-1", "orders-2"}
	var nodes []*lockraft.Node
	var seeds []string
	for i := 0; i < 3; i++ {
		g := lockraft.Gossip{Name: founders[i], Founders: founders, Timing: lockraft.FastGossipTiming()}
		n, err := lockraft.Join(seeds, lockraft.WithDataDir(t.TempDir()), lockraft.WithGossip(g), fast())
		require.NoError(t, err)
		t.Cleanup(func() { n.Close(context.Background()) })
		nodes = append(nodes, n)
		seeds = []string{n.GossipAddr()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lockInTurn(ctx, t, nodes, "gossip")
}

// Gossip without founders is refused with a message that says what to
// configure; BootstrapExpect 1 alone (the development mode) is accepted.
func TestJoinGossipNeedsFounders(t *testing.T) {
	_, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithGossip(lockraft.Gossip{}))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
	require.Contains(t, err.Error(), "Gossip.Founders is required")
	n, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()),
		lockraft.WithGossip(lockraft.Gossip{BootstrapExpect: 1, Timing: lockraft.FastGossipTiming()}), fast())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := n.Lock(ctx, "dev")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, n.Close(ctx))
}

func TestJoinGossipAndStaticMembersExclusive(t *testing.T) {
	_, err := lockraft.Join(nil, lockraft.WithDataDir(t.TempDir()), lockraft.WithGossip(lockraft.Gossip{}),
		lockraft.WithStaticMembers(1, map[lockraft.MemberID]string{1: "127.0.0.1:1"}))
	require.ErrorIs(t, err, lockraft.ErrInvalidConfig)
}
