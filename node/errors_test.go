package node

import (
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
