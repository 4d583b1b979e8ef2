package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/cluster"
)

func TestCommitHintQuorumIsTwo(t *testing.T) {
	cs := func(voters, outgoing int) *raftpb.ConfState {
		c := &raftpb.ConfState{}
		for i := 1; i <= voters; i++ {
			c.Voters = append(c.Voters, uint64(i))
		}
		for i := 1; i <= outgoing; i++ {
			c.VotersOutgoing = append(c.VotersOutgoing, uint64(i))
		}
		return c
	}
	require.False(t, commitHintQuorum(cs(1, 0)), "one voter: no follower to hint")
	require.True(t, commitHintQuorum(cs(2, 0)))
	require.True(t, commitHintQuorum(cs(3, 0)))
	require.False(t, commitHintQuorum(cs(4, 0)), "four voters: a quorum is three")
	require.False(t, commitHintQuorum(cs(5, 0)))
	require.False(t, commitHintQuorum(cs(3, 3)), "joint configuration")
	require.False(t, commitHintQuorum(nil))
}

// TestHintedCommit: a follower commits min(leader's durable, own durable) only
// when it follows the hinting leader in the term both indexes are of.
func TestHintedCommit(t *testing.T) {
	status := func(state raft.StateType, term, lead, commit uint64) raft.BasicStatus {
		return raft.BasicStatus{
			HardState: &raftpb.HardState{Term: new(term), Commit: new(commit)},
			SoftState: raft.SoftState{Lead: lead, RaftState: state},
		}
	}
	hints := func(leader, leaderTerm, leaderIndex, durableTerm, durableIndex uint64) *commitHints {
		return &commitHints{leader: leader, leaderTerm: leaderTerm, leaderIndex: leaderIndex,
			durableTerm: durableTerm, durableIndex: durableIndex}
	}
	follower := status(raft.StateFollower, 7, 1, 40)
	for _, c := range []struct {
		name string
		h    *commitHints
		st   raft.BasicStatus
		want uint64
	}{
		{"own disk is behind", hints(1, 7, 50, 7, 45), follower, 45},
		{"leader's disk is behind", hints(1, 7, 44, 7, 50), follower, 44},
		{"already committed", hints(1, 7, 50, 7, 40), follower, 0},
		{"no hint yet", hints(0, 0, 0, 7, 50), follower, 0},
		{"own durable entries of an older term", hints(1, 7, 50, 6, 50), follower, 0},
		{"hint of an older term", hints(1, 6, 50, 6, 50), follower, 0},
		{"hint from a node that is not the leader", hints(2, 7, 50, 7, 50), follower, 0},
		{"this node leads", hints(1, 7, 50, 7, 50), status(raft.StateLeader, 7, 1, 40), 0},
		{"candidate", hints(1, 7, 50, 7, 50), status(raft.StateCandidate, 7, 0, 40), 0},
		{"this node moved to a later term", hints(1, 7, 50, 7, 50), status(raft.StateFollower, 8, 1, 40), 0},
	} {
		require.Equal(t, c.want, c.h.hintedCommit(c.st), c.name)
	}
}

// loadFollowers runs pairs Lock+Unlock pairs from 16 callers on the
// followers of tc (distinct names) and returns the cluster's hint counters:
// sent by the leader, used by the followers.
func loadFollowers(t *testing.T, tc *cluster.Cluster[*Node], pairs int) (sent, used uint64) {
	t.Helper()
	lead := leader(t, tc)
	ctx := ctxT(t, 60*time.Second)
	var followers []*Node
	for id, n := range tc.All() {
		if id != lead {
			followers = append(followers, n)
		}
	}
	callPairs(t, ctx, 16, int64(pairs), func(g int) *Node { return followers[g%len(followers)] },
		func(g int, i int64) (string, string) { return fmt.Sprintf("hint/%d/%d", g, i), "o" })
	for id, n := range tc.All() {
		st, err := n.Status(ctx)
		require.NoError(t, err)
		if id == lead {
			sent = st.CommitHintsSent
		} else {
			used += st.CommitHintsUsed
		}
	}
	return sent, used
}

// TestFollowersCommitOnLeaderHints: under load from callers on the followers
// the leader's hints ride along with its appends and move the followers'
// commit indexes; with hints off, or with five voters (a quorum of three),
// none is sent.
func TestFollowersCommitOnLeaderHints(t *testing.T) {
	t.Run("three voters", func(t *testing.T) {
		tc := newCluster(t, 3)
		sent, used := loadFollowers(t, tc, 1600)
		t.Logf("hints sent %d, used %d", sent, used)
		require.Positive(t, sent)
		require.Positive(t, used)
	})
	t.Run("hints off", func(t *testing.T) {
		tc := newCluster(t, 3, func(c *Config) { c.NoCommitHints = true })
		sent, used := loadFollowers(t, tc, 320)
		require.Zero(t, sent)
		require.Zero(t, used)
	})
	t.Run("five voters", func(t *testing.T) {
		tc := newCluster(t, 5)
		sent, used := loadFollowers(t, tc, 320)
		require.Zero(t, sent)
		require.Zero(t, used)
	})
}
