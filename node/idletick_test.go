package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
)

// tickPeriod reads the loop's current tick period.
func (n *Node) tickPeriod() time.Duration {
	ch := make(chan time.Duration, 1)
	if n.do(context.Background(), func() { ch <- n.loop.tick.Period() }) != nil {
		return 0
	}
	return <-ch
}

// An idle light member's loop wakes at lightIdleTick instead of every raft
// tick, also while it holds a lock without a lease; raft members keep
// raft's ticks. S5 holds on it all the same: cut off while idle and holding,
// its handle is told it lost the lock before a waiter elsewhere is granted
// it (the holder deadline has its own timer), and once healed it works
// again (L1).
func TestIdleLightMemberTicksSlowly(t *testing.T) {
	f, lights := lightFleet(t, "idletick", 6, nil)
	a := lights[0]
	require.Greater(t, a.cfg.lightIdleTick(), a.cfg.TickInterval, "the test needs a slower idle tick than the raft tick")
	require.Eventually(t, func() bool { return a.tickPeriod() == a.cfg.lightIdleTick() }, 10*time.Second, 10*time.Millisecond,
		"the idle light member ticks every %v", a.cfg.lightIdleTick())
	for _, n := range f.All() {
		if !n.light() {
			// Eventually: a member that just got raft state switches at the
			// end of its next loop turn. A raft member keeps raft's ticks:
			// every tick, once per heartbeat on a calm leader, or counted
			// from the clock on a quiet follower (period 0: quiettick.go).
			require.Eventually(t, func() bool {
				p := n.tickPeriod()
				return p == 0 || p == n.cfg.TickInterval || p == n.cfg.heartbeatInterval()
			}, 5*time.Second, 10*time.Millisecond, "raft member %x keeps the raft tick", n.ID())
		}
	}

	ctx := ctxT(t, 30*time.Second)
	h, err := a.Acquire(ctx, "idle", "a", true, 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.tickPeriod() == a.cfg.lightIdleTick() }, 10*time.Second, 10*time.Millisecond,
		"holding a lock without a lease is idle")
	lost := lostAt(h)
	lead := fleetLeader(t, f, 5*time.Second)
	got, grantedAt := grantAsync(t, lead, "idle", "b")
	require.Eventually(t, func() bool { return lead.waiters("idle") == 1 }, 10*time.Second, 5*time.Millisecond)
	var peers []uint64
	for _, n := range f.All() {
		if n != a {
			peers = append(peers, n.ID())
		}
	}
	faultsOf(f, a).BlockOut(peers...)
	faultsOf(f, a).BlockIn(peers...)
	h2 := toldBeforeGrant(t, "the idle light holder", h, lockerr.ErrSessionExpired, lost, got, grantedAt)
	require.Greater(t, h2.Token(), h.Token())
	require.NoError(t, h2.Release(ctx))

	faultsOf(f, a).Heal()
	h3, err := a.Acquire(ctx, "after-heal", "a", true, 0)
	require.NoError(t, err)
	require.NoError(t, h3.Release(ctx))
}
