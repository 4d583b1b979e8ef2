package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRestartEndsOldSession (L3): a member killed while holding a lock and
// restarted from its data directory ends its previous incarnation's session
// among its first committed entries: the next waiter is granted within about
// one commit of the restarted node knowing the leader, long before the old
// session's TTL. Measured: restart → next waiter's grant.
func TestRestartEndsOldSession(t *testing.T) {
	tc := newCluster(t, 3, func(c *Config) { c.SessionTTL = 10 * time.Second; c.KeepaliveInterval = time.Second })
	_, a, b := roles(t, tc)
	ctx := ctxT(t, 30*time.Second)
	h, got, grantedAt := queueBehind(t, ctx, "gamma", tc.Member(a), tc.Member(b))
	tc.Crash(a)
	restarted := time.Now()
	require.NoError(t, tc.Restart(a))
	h2 := grantWithin(t, got, configOf(tc, a).SessionTTL/2, "the old session's lock was not released within half its TTL of the restart")
	took := grantedAt().Sub(restarted)
	t.Logf("restart → next waiter's grant: %v (TTL %v)", took, configOf(tc, a).SessionTTL)
	require.Greater(t, h2.Token(), h.Token())
	// One commit after the restarted node hears from the leader: the
	// restart itself (opening the data directory, replay) plus a heartbeat
	// interval and a commit; a second is far more than that.
	require.Less(t, took, time.Second)
}

// TestLightMemberRestartEndsOldSession (L3): a light member (no raft state,
// so no lock table to find its old session in) killed while holding a lock
// and restarted from its data directory ends its previous session from the
// id it recorded there: the next waiter is granted well before the old
// session's TTL. Before, only a raft member's lock table was searched, and a
// light member's old locks stayed until the TTL.
func TestLightMemberRestartEndsOldSession(t *testing.T) {
	f, lights := lightFleet(t, "lrestart", 6, func(c *Config) { c.SessionTTL = 10 * time.Second; c.KeepaliveInterval = time.Second })
	light := lights[0]
	idx := slotOf(f, light)
	require.NotZero(t, idx)
	lead := fleetLeader(t, f, 10*time.Second)
	ctx := ctxT(t, 30*time.Second)
	h, got, grantedAt := queueBehind(t, ctx, "delta", light, lead)
	seed := lead.GossipAddr()
	f.Crash(idx)
	restarted := time.Now()
	n := startSlot(t, f, idx, seed)
	require.True(t, n.light(), "the restarted member is light again")
	h2 := grantWithin(t, got, 5*time.Second, "the light member's old session was not ended within 5 s of its restart (TTL 10 s)")
	t.Logf("light member restart → next waiter's grant: %v", grantedAt().Sub(restarted))
	require.Greater(t, h2.Token(), h.Token())
}
