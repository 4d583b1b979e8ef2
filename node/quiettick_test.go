package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuietFollowersDoNotTick: an idle follower that hears its leader wakes
// its loop for no raft tick (quiettick.go), while the calm leader ticks once
// per heartbeat interval (HeartbeatTicks raft ticks at a time); when the
// leader crashes, the followers leave the
// quiet mode and elect a new leader (L1), and a lock taken before is still
// served by the new one. The timings are production's shape (heartbeat
// every 2 ticks, quiet for 2 heartbeats) at a 50 ms tick, so that a loaded
// machine's scheduling does not end the quiet spells.
func TestQuietFollowersDoNotTick(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.TickInterval = 50 * time.Millisecond
		c.ElectionTicks = 20
		c.HeartbeatTicks = 2
		c.SessionTTL = 6 * time.Second
		c.KeepaliveInterval = time.Second
	})
	lead := tc.leader()
	ctx := ctxT(t, 30*time.Second)
	f := otherThan(tc, lead)
	h, err := tc.nodes[f].Acquire(ctx, "q", "f", true, 0)
	require.NoError(t, err)

	wakes := func(id uint64) uint64 {
		var v uint64
		done := make(chan struct{})
		require.NoError(t, tc.nodes[id].do(ctx, func() { v = tc.nodes[id].loop.stats.tickWakes; close(done) }))
		<-done
		return v
	}
	quiet := func(id uint64) bool {
		var q bool
		done := make(chan struct{})
		require.NoError(t, tc.nodes[id].do(ctx, func() { q = tc.nodes[id].loop.tick.quiet; close(done) }))
		<-done
		return q
	}
	require.Eventually(t, func() bool {
		for id := range tc.nodes {
			if id != lead && !quiet(id) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "idle followers should become quiet")

	const window = 3 * time.Second // 60 ticks
	before := map[uint64]uint64{}
	for id := range tc.nodes {
		before[id] = wakes(id)
	}
	time.Sleep(window) // the quantity measured is what happens over a span of time
	for id := range tc.nodes {
		got := wakes(id) - before[id]
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
	tc.crash(lead)
	newLead := tc.leader()
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
	tc := newTestCluster(t, 3, func(c *Config) {
		c.TickInterval = 50 * time.Millisecond
		c.ElectionTicks = 20
		c.HeartbeatTicks = 2
		c.SessionTTL = 6 * time.Second
		c.KeepaliveInterval = time.Second
	})
	lead := tc.leader()
	f := otherThan(tc, lead)
	ctx := ctxT(t, 30*time.Second)
	read := func(get func(n *Node) uint64) uint64 {
		var v uint64
		done := make(chan struct{})
		require.NoError(t, tc.nodes[f].do(ctx, func() { v = get(tc.nodes[f]); close(done) }))
		<-done
		return v
	}
	require.Eventually(t, func() bool {
		return read(func(n *Node) uint64 {
			if n.loop.tick.quiet {
				return 1
			}
			return 0
		}) == 1
	}, 10*time.Second, 20*time.Millisecond, "the follower should become quiet")
	changes := read(func(n *Node) uint64 { return n.loop.stats.leaderChanges })

	tc.faults[f].PauseLoop()
	time.Sleep(2 * tc.config(f).electionTimeout()) // the stall itself is the condition under test
	tc.faults[f].Resume()
	require.Eventually(t, func() bool { return tc.nodes[f].Leader() == lead }, 5*time.Second, 10*time.Millisecond)
	// Give a spurious pre-vote, had there been one, time to show.
	require.Never(t, func() bool {
		return read(func(n *Node) uint64 { return n.loop.stats.leaderChanges }) != changes
	}, tc.config(f).electionTimeout(), 20*time.Millisecond, "the stalled follower campaigned against a live leader")
	require.Equal(t, lead, tc.leader())
}
