package node

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// b2bTTL is the session TTL of TestHealthySessionsSurviveBackToBackFailovers
// in election timeouts: the floor by default; LOCKRAFT_B2B_TTL_ET overrides it
// (3 reproduces issue 15's report on the old floor).
func b2bTTL(t *testing.T, et time.Duration) time.Duration {
	if s := os.Getenv("LOCKRAFT_B2B_TTL_ET"); s != "" {
		k, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err)
		return time.Duration(k * float64(et))
	}
	return MinSessionTTL(et)
}

// TestHealthySessionsSurviveBackToBackFailovers (L1, L3): a holder and a
// waiting Lock on healthy, never-paused nodes keep their session while the
// leader is killed and the next leader is killed as soon as it is elected
// (two back-to-back failovers, a majority up), with the TTL at its floor.
// Issue 15's report: with TTL 3 s (3 election timeouts) the waiting Locks got
// ErrSessionExpired after two quick leader kills.
func TestHealthySessionsSurviveBackToBackFailovers(t *testing.T) {
	const tick = 50 * time.Millisecond
	et := 10 * tick
	ttl := b2bTTL(t, et)
	tc := newTestCluster(t, 5, func(c *Config) {
		c.TickInterval = tick
		c.SessionTTL = ttl
		c.KeepaliveInterval = ttl / 10
		c.RetryInterval = 0 // default: 5 ticks
	})
	t.Logf("TTL %v = %.1f election timeouts", ttl, float64(ttl)/float64(et))
	ctx := ctxT(t, 60*time.Second)
	for attempt := 1; ; attempt++ {
		require.Less(t, attempt, 10, "the holder's or the waiter's node kept winning the elections")
		l1 := tc.leader()
		a := otherThan(tc, l1)
		b := otherThan(tc, l1, a)
		h, err := tc.nodes[a].Acquire(ctx, "x", "a", true, 0)
		require.NoError(t, err)
		waitErr := make(chan error, 1)
		go func() {
			h2, err := tc.nodes[b].Acquire(ctx, "x", "b", true, 0)
			if err == nil {
				err = h2.Release(ctx)
			}
			waitErr <- err
		}()
		requireWaiters(t, tc.nodes[b], "x", 1)
		// Two back-to-back failovers.
		tc.crash(l1)
		l2 := tc.leader()
		if l2 == a || l2 == b {
			t.Logf("attempt %d: n%d (holder or waiter) won; again", attempt, l2)
			require.NoError(t, h.Release(ctx))
			require.NoError(t, <-waitErr)
			tc.restart(l1)
			continue
		}
		killed2 := time.Now()
		tc.crash(l2)
		l3 := tc.leader()
		t.Logf("killed n%d, then n%d as soon as it led; n%d leads %v later", l1, l2, l3, time.Since(killed2))
		// Both sessions must outlive a TTL after that.
		require.Never(t, func() bool {
			select {
			case err := <-waitErr:
				waitErr <- err
				return true
			default:
			}
			return h.Context().Err() != nil
		}, ttl+ttl/2, 10*time.Millisecond, "a healthy session was lost to two back-to-back failovers")
		require.NoError(t, h.Release(ctx))
		require.NoError(t, <-waitErr, "the waiting Lock")
		return
	}
}

// TestSessionExpiredErrors (S5, S4): when a node's session can no longer be
// kept alive, a waiting Lock on it returns ErrSessionExpired with nothing
// left queued, and an Unlock of a lock it held reports ErrSessionExpired
// (and ErrNotHeld): the documented errors.
func TestSessionExpiredErrors(t *testing.T) {
	tc := newTestCluster(t, 3)
	lead := tc.leader()
	a := otherThan(tc, lead)
	ctx := ctxT(t, 30*time.Second)
	h, err := tc.nodes[a].Acquire(ctx, "held", "a", true, 0)
	require.NoError(t, err)
	hl, err := tc.nodes[lead].Acquire(ctx, "busy", "l", true, 0)
	require.NoError(t, err)
	waitErr := make(chan error, 1)
	go func() {
		_, err := tc.nodes[a].Acquire(ctx, "busy", "a-waits", true, 0)
		waitErr <- err
	}()
	requireWaiters(t, tc.nodes[lead], "busy", 1)
	tc.isolate(a)
	select {
	case err := <-waitErr:
		require.ErrorIs(t, err, ErrSessionExpired, "the waiting Lock")
	case <-time.After(2 * tc.config(a).SessionTTL):
		t.Fatal("the waiting Lock did not end with its session")
	}
	<-h.Context().Done()
	require.ErrorIs(t, context.Cause(h.Context()), ErrSessionExpired)
	err = h.Release(ctx)
	require.ErrorIs(t, err, ErrSessionExpired, "Unlock after the session ended")
	require.ErrorIs(t, err, ErrNotHeld)
	tc.heal()
	requireWaiters(t, tc.nodes[lead], "busy", 0)
	require.NoError(t, hl.Release(ctx))
}
