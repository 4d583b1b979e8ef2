package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/cluster"
)

// quietCluster is a 3-node cluster with production's timing shape
// (heartbeat every 2 ticks, quiet for 2 heartbeats) at a 50 ms tick, so
// that a loaded machine's scheduling does not end the quiet spells.
func quietCluster(t *testing.T) *cluster.Cluster[*Node] {
	return newCluster(t, 3, func(c *Config) {
		c.TickInterval = 50 * time.Millisecond
		c.ElectionTicks = 20
		c.HeartbeatTicks = 2
		c.SessionTTL = 6 * time.Second
		c.KeepaliveInterval = time.Second
	})
}

// loopValue reads a value inside node id's loop.
func loopValue[T any](t *testing.T, tc *cluster.Cluster[*Node], id uint64, get func(n *Node) T) T {
	var v T
	inLoop(t, tc.Member(id), func() { v = get(tc.Member(id)) })
	return v
}

func isQuiet(n *Node) bool         { return n.loop.tick.Quiet() }
func tickWakes(n *Node) uint64     { return n.loop.stats.tickWakes }
func leaderChanges(n *Node) uint64 { return n.loop.stats.leaderChanges }

// TestQuietFollowersDoNotTick: an idle follower that hears its leader wakes
// its loop for no raft tick (quiettick.go), while the calm leader ticks once
// per heartbeat interval (HeartbeatTicks raft ticks at a time); when the
// leader crashes, the followers leave the quiet mode and elect a new
// leader (L1), and a lock taken before is still served by the new one.
func TestQuietFollowersDoNotTick(t *testing.T) {
	tc := quietCluster(t)
	lead := leader(t, tc)
	ctx := ctxT(t, 30*time.Second)
	f := otherThan(tc, lead)
	h, err := tc.Member(f).Acquire(ctx, "q", "f", true, 0)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		for id := range tc.All() {
			if id != lead && !loopValue(t, tc, id, isQuiet) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "idle followers should become quiet")

	const window = 3 * time.Second // 60 ticks
	before := map[uint64]uint64{}
	for id := range tc.All() {
		before[id] = loopValue(t, tc, id, tickWakes)
	}
	time.Sleep(window) // the quantity measured is what happens over a span of time
	for id := range tc.All() {
		got := loopValue(t, tc, id, tickWakes) - before[id]
		t.Logf("node %d (leader %v): %d tick wake-ups in %v", id, id == lead, got, window)
		if id == lead {
			// A calm leader ticks once per heartbeat: 30 here, not 60.
			require.GreaterOrEqual(t, got, uint64(20), "the leader ticks (the counter counts)")
			require.LessOrEqual(t, got, uint64(45), "a calm leader should tick once per heartbeat, not once per tick")
		} else {
			require.Less(t, got, uint64(15), "a quiet follower should not wake for ticks")
		}
	}

	// The leader crashes: the quiet followers must notice and elect.
	tc.Crash(lead)
	newLead := leader(t, tc)
	require.NotEqual(t, lead, newLead)
	require.NoError(t, h.Context().Err(), "the hold survives a failover")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, h.Release(rctx))
}

// TestStalledQuietFollowerDoesNotCampaign: a quiet follower whose loop
// stalls for longer than an election timeout (a paused process, a long
// fsync) counts at most an election timeout less a tick when it resumes
// (quiettick.go): the heartbeats that queued meanwhile show the leader was
// there all along, and it does not start a pre-vote against it (a ticker
// would have given it one tick). Leader changes seen by that follower are
// counted: a pre-vote would make it leaderless and then count the leader
// anew.
func TestStalledQuietFollowerDoesNotCampaign(t *testing.T) {
	tc := quietCluster(t)
	lead := leader(t, tc)
	f := otherThan(tc, lead)
	require.Eventually(t, func() bool { return loopValue(t, tc, f, isQuiet) }, 10*time.Second, 20*time.Millisecond,
		"the follower should become quiet")
	changes := loopValue(t, tc, f, leaderChanges)

	tc.Faults(f).PauseLoop()
	time.Sleep(2 * configOf(tc, f).electionTimeout()) // the stall itself is the condition under test
	tc.Faults(f).Resume()
	require.Eventually(t, func() bool { return tc.Member(f).Leader() == lead }, 5*time.Second, 10*time.Millisecond)
	// Give a spurious pre-vote, had there been one, time to show.
	never(t, func() bool { return loopValue(t, tc, f, leaderChanges) != changes },
		configOf(tc, f).electionTimeout(), 20*time.Millisecond, "the stalled follower campaigned against a live leader")
	require.Equal(t, lead, leader(t, tc))
}
