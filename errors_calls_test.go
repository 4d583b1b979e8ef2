package lockraft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// TestLeaseFloor: with the default timings (100 ms tick, 200 ms heartbeat,
// 2 % drift) a lease under 600 ms is refused at the call with
// ErrInvalidLease naming the floor, before anything is proposed, by every
// call that takes WithLease; 600 ms is granted with a live Context. Below
// the floor such leases used to fail after the grant ("lease ran out before
// the grant could be handed out"), or be granted with a Context that ended
// a few dozen milliseconds later.
func TestLeaseFloor(t *testing.T) {
	addr := freeAddr(t)
	n, err := lockraft.Join([]string{addr}, lockraft.WithDataDir(t.TempDir()), lockraft.WithListenAddr(addr))
	require.NoError(t, err)
	t.Cleanup(func() { n.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, n.Ready(ctx))

	for _, d := range []time.Duration{time.Millisecond, 50 * time.Millisecond, 110 * time.Millisecond, 150 * time.Millisecond, 599 * time.Millisecond} {
		_, err := n.Lock(ctx, "leased", lockraft.WithLease(d))
		require.ErrorIs(t, err, lockraft.ErrInvalidLease, "Lock with a %v lease", d)
		require.Contains(t, err.Error(), "floor of 600ms")
		require.False(t, lockraft.IsRetryable(err))
		_, err = n.TryLock(ctx, "leased", lockraft.WithLease(d))
		require.ErrorIs(t, err, lockraft.ErrInvalidLease, "TryLock with a %v lease", d)
		_, err = n.Semaphore("pool", 2).Acquire(ctx, 1, lockraft.WithLease(d))
		require.ErrorIs(t, err, lockraft.ErrInvalidLease, "Acquire with a %v lease", d)
	}
	l, err := n.Lock(ctx, "leased", lockraft.WithLease(600*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, l.Context().Err(), "a lease at the floor is handed out live")
	require.NoError(t, l.Renew(ctx))
	require.NoError(t, l.Unlock(ctx))
}

// TestObserveWrongKind: Observe of a name in use as another kind of lock
// (here a mutex) ends at once with ErrWrongKind, as every other call of the
// wrong kind does, instead of reporting an election that nobody leads.
func TestObserveWrongKind(t *testing.T) {
	n := joinOne(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := n.Lock(ctx, "jobs")
	require.NoError(t, err)
	var got []error
	for ld, err := range n.Observe(ctx, "jobs") {
		got = append(got, err)
		if err == nil {
			t.Errorf("Observe of a mutex yielded %+v", ld)
			break
		}
	}
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], lockraft.ErrWrongKind)
	require.NoError(t, l.Unlock(ctx))
}

// TestIsRetryable: the calls worth making again as is. A Lock that failed
// because the node's session ended left nothing behind, and calling again
// waits for the new session, so ErrSessionExpired is retryable; an error
// that says the handle's lock is gone (ErrNotHeld, whatever it wraps) is
// not, or a retry loop around Renew would never end.
func TestIsRetryable(t *testing.T) {
	for err, want := range map[error]bool{
		lockraft.ErrLocked:         true,
		lockraft.ErrUnavailable:    true,
		lockraft.ErrSessionExpired: true,
		lockraft.ErrObserveLagged:  true,
		fmt.Errorf("%w: no leader: %w", lockraft.ErrUnavailable, lockraft.ErrSessionExpired): true,
		fmt.Errorf("%w: %w", lockraft.ErrLeaseExpired, lockraft.ErrUnavailable):              true,
		fmt.Errorf("%w: %w", lockraft.ErrNotHeld, lockraft.ErrSessionExpired):                false,
		lockraft.ErrNotHeld:       false,
		lockraft.ErrLeaseExpired:  false,
		lockraft.ErrClosed:        false,
		lockraft.ErrInvalidLease:  false,
		context.DeadlineExceeded:  false,
		lockraft.ErrOlderMembers:  false,
		lockraft.ErrQuotaExceeded: false,
	} {
		require.Equal(t, want, lockraft.IsRetryable(err), "IsRetryable(%q)", err)
	}
}
