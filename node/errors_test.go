package node

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/faults"
	"github.com/lockraft/lockraft/internal/lockerr"
)

// TestLeasedGrantUnconfirmedIsUnavailable: a leased grant from the wait
// queue is confirmed by one renewal before it is handed out; when that
// renewal cannot reach the leader, the grant is given back and the call's
// error says "lock lease expired: lockraft: cluster unavailable". It must
// then be lockerr.ErrUnavailable for errors.Is as well as
// lockerr.ErrLeaseExpired: its text says so, and a caller that retries on
// unavailability should retry it.
func TestLeasedGrantUnconfirmedIsUnavailable(t *testing.T) {
	tc, ctx, _, _, _ := trio(t)
	lead := leader(t, tc)
	b := otherThan(tc, lead)
	h, err := tc.Member(lead).Acquire(ctx, "x", "a", true, 0)
	require.NoError(t, err)

	res := make(chan error, 1)
	go func() {
		hb, err := tc.Member(b).Acquire(ctx, "x", "b", true, time.Second)
		if hb != nil {
			_ = hb.Release(ctx)
		}
		res <- err
	}()
	require.Eventually(t, func() bool {
		v, ok, err := tc.Member(lead).InspectLock(ctx, "x", ReadOptions{Stale: true})
		return err == nil && ok && len(v.Waiters) == 1
	}, 10*time.Second, 10*time.Millisecond, "b never queued")
	// b's renewals (and keepalives) to the leader are lost from now on;
	// the leader still pushes the grant to b.
	tc.Faults(b).SetMessagePolicy(faults.MessagePolicy{Seed: 1, Peers: []uint64{lead}, DropRate: 1})
	require.NoError(t, h.Release(ctx))

	select {
	case err := <-res:
		require.Error(t, err)
		require.ErrorIs(t, err, lockerr.ErrLeaseExpired)
		require.ErrorIs(t, err, lockerr.ErrUnavailable, "error %q", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the leased Lock never returned")
	}
}

// TestTryLockWithoutQuorumIsUnavailable: a member that lost the majority
// keeps answering TryLock with lockerr.ErrUnavailable, also across the moment
// its session lapses for want of acknowledged keepalives (the TTL after the
// last one): the calls pending then used to fail with only
// lockerr.ErrSessionExpired, which IsRetryable and errors.Is(ErrUnavailable)
// did not recognise as an outage.
func TestTryLockWithoutQuorumIsUnavailable(t *testing.T) {
	tc := newCluster(t, 3, func(c *Config) { c.TryLockTimeout = 300 * time.Millisecond })
	lead := leader(t, tc)
	s := otherThan(tc, lead)
	n := tc.Member(s)
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, n.Ready(ctx))
	before := n.sess.Load()
	for id := range tc.All() {
		if id != s {
			tc.Crash(id)
		}
	}
	until := time.Now().Add(configOf(tc, s).SessionTTL + 2*time.Second)
	errs := make(chan error, 1024)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(until); i++ {
				h, err := n.Acquire(ctx, fmt.Sprintf("x%d", g), fmt.Sprintf("o%d-%d", g, i), false, 0)
				if h != nil {
					errs <- fmt.Errorf("granted without a quorum")
					return
				}
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	calls := 0
	for err := range errs {
		calls++
		require.ErrorIs(t, err, lockerr.ErrUnavailable, "TryLock %d without a quorum", calls)
	}
	t.Logf("%d TryLocks without a quorum", calls)
	require.NotEqual(t, before, n.sess.Load(), "the session never lapsed during the test")
}
