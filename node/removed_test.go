package node

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// TestL3NewLeaderDoesNotRemoveFreshLearner (L1/L3; review finding 6): the
// leader adds member X as a learner (entry c, committed and applied by the
// leader and one follower) and X receives raft data. The other follower, C,
// has entry c in its log but has not heard that it is committed when it
// becomes leader (a transfer here; a crash of the old leader in the
// review's scenario). Until C commits an entry of its own term its applied
// configuration lacks X, and reconcile saw X alive, with raft data and not
// in the configuration — and told it it was removed: X stopped for good
// with lockerr.ErrRemoved although c is committed. A leader must not judge the
// configuration before it is active, and must confirm its leadership
// before telling anyone it was removed.
func TestL3NewLeaderDoesNotRemoveFreshLearner(t *testing.T) {
	f := newGossipCluster(t, "lagging", 4, 3, func(c *Config) {
		c.NoCommitHints = true // commits reach C only through the leader's commit index
	})
	_, _, c := formThree(t, f)
	status := func(n *Node) (commit, applied uint64) {
		ch := make(chan [2]uint64, 1)
		require.NoError(t, n.do(context.Background(), func() {
			st := n.rn.Status()
			ch <- [2]uint64{st.GetCommit(), st.Applied}
		}))
		v := <-ch
		return v[0], v[1]
	}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		v, _, err := c.ConfState(ctx)
		return err == nil && len(v) == 3
	}, 10*time.Second, 5*time.Millisecond, "C applied the founding configuration")
	// From now on C hears appends but no commit beyond what it knows.
	var frozen atomic.Uint64
	clamp := func(m *raftpb.Message) *raftpb.Message {
		if f := frozen.Load(); m.GetCommit() > f {
			m = proto.Clone(m).(*raftpb.Message)
			m.Commit = new(f)
		}
		return m
	}
	first, _ := status(c)
	frozen.Store(first)
	faultsOf(f, c).RewriteIn(clamp)
	// A commit index that arrived before the clamp took effect stays.
	now, _ := status(c)
	frozen.Store(max(first, now))

	x := startSlot(t, f, 4, f.Member(1).GossipAddr())
	waitConf(t, f, 30*time.Second, "X added as a learner", func(v, l []uint64) bool { return slices.Contains(l, x.ID()) })
	require.Eventually(t, x.storage.HasState, 20*time.Second, 5*time.Millisecond, "X never received raft data")
	require.Eventually(t, func() bool {
		for _, m := range c.Members() {
			if m.Meta.RaftID == x.ID() && m.Meta.HasData {
				return true
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "C never saw X's raft data announced")
	commit, _ := status(c)
	require.Equal(t, frozen.Load(), commit, "premise: C has not learned the commit of X's addition (C leads: %v)", c.Leader() == c.ID())

	// C leads, and cannot commit an entry of its term: its followers'
	// acknowledgements are lost.
	faultsOf(f, c).RewriteIn(func(m *raftpb.Message) *raftpb.Message {
		if m.GetType() == raftpb.MessageType_MsgAppResp {
			return nil
		}
		return clamp(m)
	})
	require.Eventually(t, func() bool {
		if c.Leader() == c.ID() {
			return true
		}
		for _, n := range f.All() {
			if n.Leader() == n.ID() {
				_ = n.do(context.Background(), func() { n.rn.TransferLeader(c.ID()) })
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "C never led")
	voters, learners, err := c.ConfState(ctxT(t, 5*time.Second))
	require.NoError(t, err)
	require.NotContains(t, append(voters, learners...), x.ID(), "premise: C's applied configuration lacks X")

	// Many reconcile rounds (every 100 ms) with C leading, not yet active.
	require.Never(t, func() bool { return x.err() != nil }, 2*time.Second, 10*time.Millisecond,
		"X was told it was removed by a leader whose configuration lagged")

	// C may commit again: it applies c and X is in its configuration.
	faultsOf(f, c).RewriteIn(nil)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, l, err := c.ConfState(ctx)
		return err == nil && slices.Contains(l, x.ID())
	}, 10*time.Second, 10*time.Millisecond, "X not in the new leader's configuration")
	require.Never(t, func() bool { return x.err() != nil }, time.Second, 10*time.Millisecond, "X was stopped")
}
