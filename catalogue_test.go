package lockraft_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

// TestRWLockAPI (S1, S2, L2): readers on two nodes share, a writer on the
// third waits and is fenced above them, a reader's WLock is ErrUpgrade, a
// mutex Lock of the name ErrWrongKind.
func TestRWLockAPI(t *testing.T) {
	cl := joinCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r1, err := cl.Member(1).RLock(ctx, "cfg")
	require.NoError(t, err)
	require.True(t, r1.Shared())
	r2, err := cl.Member(2).TryRLock(ctx, "cfg", lockraft.WithOwner("reader-2"))
	require.NoError(t, err)
	_, err = cl.Member(2).WLock(ctx, "cfg", lockraft.WithOwner("reader-2"))
	require.ErrorIs(t, err, lockraft.ErrUpgrade)
	_, err = cl.Member(3).TryWLock(ctx, "cfg")
	require.ErrorIs(t, err, lockraft.ErrLocked)
	require.True(t, lockraft.IsRetryable(err))
	_, err = cl.Member(3).TryLock(ctx, "cfg")
	require.ErrorIs(t, err, lockraft.ErrWrongKind)

	got := make(chan *lockraft.Lock, 1)
	go func() {
		w, err := cl.Member(3).WLock(ctx, "cfg")
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	require.NoError(t, r1.Unlock(ctx))
	select {
	case <-got:
		t.Fatal("the writer was granted beside a reader")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, r2.Unlock(ctx))
	w := <-got
	require.NotNil(t, w)
	require.False(t, w.Shared())
	require.Greater(t, w.Token(), r2.Token())
	require.NoError(t, w.Unlock(ctx))
}

// TestSemaphoreAPI (S1, S5): permits never exceed the size; each
// acquisition has its own lease: an unrenewed one ends (Context first) and
// its permits come back; bad input is refused.
func TestSemaphoreAPI(t *testing.T) {
	cl := joinCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pool := cl.Member(1).Semaphore("pool", 2)
	require.Equal(t, 2, pool.Size())
	a, err := pool.Acquire(ctx, 1, lockraft.WithLease(600*time.Millisecond))
	require.NoError(t, err)
	b, err := cl.Member(2).Semaphore("pool", 2).Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = cl.Member(3).Semaphore("pool", 2).TryAcquire(ctx, 1)
	require.ErrorIs(t, err, lockraft.ErrLocked)
	_, err = cl.Member(3).Semaphore("pool", 3).TryAcquire(ctx, 1)
	require.ErrorIs(t, err, lockraft.ErrPermitsMismatch)
	waiting := make(chan *lockraft.Permit, 1)
	go func() {
		p, err := cl.Member(3).Semaphore("pool", 2).Acquire(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		waiting <- p
	}()
	select {
	case <-a.Context().Done():
	case <-ctx.Done():
		t.Fatal("the leased permit never expired")
	}
	require.ErrorIs(t, context.Cause(a.Context()), lockraft.ErrLeaseExpired)
	c := <-waiting
	require.NotNil(t, c, "the expired permit went to the waiter")
	require.Greater(t, c.Token(), a.Token())
	require.ErrorIs(t, a.Release(ctx), lockraft.ErrNotHeld)
	require.NoError(t, b.Release(ctx))
	require.NoError(t, c.Release(ctx))

	for _, bad := range []struct{ size, k int }{{0, 1}, {-1, 1}, {2, 0}, {2, 3}, {2, -1}, {lockraft.MaxPermits + 1, 1}} {
		_, err := cl.Member(1).Semaphore("bad", bad.size).Acquire(ctx, bad.k)
		require.ErrorIs(t, err, lockraft.ErrBadPermits, "%+v", bad)
	}
}

// TestElectionAPI (S1, S2, S5, Observe): two campaigns on two nodes, the
// second waits; an observer on the third sees the current leader, the
// proclaimed value, then the handover when the leading node closes (its
// session ends: the next campaigner leads in that entry, with a higher
// term); the old leadership's Context ended first.
func TestElectionAPI(t *testing.T) {
	cl := joinCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l1, err := cl.Member(1).Campaign(ctx, "sched", "n0", lockraft.WithOwner("scheduler-0"))
	require.NoError(t, err)
	_, err = cl.Member(1).Campaign(ctx, "sched", "again", lockraft.WithOwner("scheduler-0"))
	require.ErrorIs(t, err, lockraft.ErrHoldConflict, "the leader campaigning again")
	type item struct {
		l   lockraft.Leader
		err error
	}
	items := make(chan item, 64)
	octx, ocancel := context.WithCancel(ctx)
	go func() {
		defer close(items)
		for l, err := range cl.Member(3).Observe(octx, "sched") {
			items <- item{l, err}
			if err != nil {
				return
			}
		}
	}()
	next := func() lockraft.Leader {
		t.Helper()
		select {
		case it := <-items:
			require.NoError(t, it.err)
			return it.l
		case <-ctx.Done():
			t.Fatal("no change observed")
		}
		return lockraft.Leader{}
	}
	first := next()
	if !first.Leading() { // node 2 had not applied the campaign yet
		first = next()
	}
	require.Equal(t, "n0", first.Value)
	require.Equal(t, l1.Token(), first.Token)
	second := make(chan *lockraft.Leadership, 1)
	go func() {
		l2, err := cl.Member(2).Campaign(ctx, "sched", "n1")
		if err != nil {
			t.Error(err)
		}
		second <- l2
	}()
	require.NoError(t, l1.Proclaim(ctx, "n0-b"))
	require.Equal(t, "n0-b", next().Value)
	// The second campaign waits in the queue before the leader's node closes,
	// so the close hands the election over in one entry (no "nobody" between).
	require.Eventually(t, func() bool {
		v, ok, err := cl.Member(1).InspectLock(ctx, "sched")
		return err == nil && ok && len(v.Waiters) == 1
	}, 10*time.Second, 5*time.Millisecond, "the second campaign waits")
	require.NoError(t, cl.Member(1).Close(ctx))
	cl.Stopped(1)
	require.ErrorIs(t, context.Cause(l1.Context()), lockraft.ErrClosed, "the old leader was told first")
	l2 := <-second
	require.NotNil(t, l2)
	require.Greater(t, l2.Token(), l1.Token())
	c := next()
	require.Equal(t, "n1", c.Value)
	require.Equal(t, l2.Token(), c.Token)
	require.NoError(t, l2.Resign(ctx))
	require.False(t, next().Leading())
	ocancel()
	for it := range items {
		if it.err != nil {
			require.ErrorIs(t, it.err, context.Canceled)
		}
	}
	_, err = cl.Member(2).Campaign(ctx, "sched", strings.Repeat("v", lockraft.MaxValueLen+1))
	require.ErrorIs(t, err, lockraft.ErrInvalidValue)
}

// TestLockAllAPI (S1, no deadlock): LockAll takes every name in one entry;
// opposite orders from three nodes under contention all complete; bad
// input is refused before anything is proposed.
func TestLockAllAPI(t *testing.T) {
	cl := joinCluster(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cl.Member(1).LockAll(ctx, []string{"a", "b", "c"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c"}, l.Names())
	_, err = cl.Member(2).TryLockAll(ctx, []string{"c", "d"})
	require.ErrorIs(t, err, lockraft.ErrLocked)
	d, err := cl.Member(2).TryLock(ctx, "d")
	require.NoError(t, err, "TryLockAll took none of its names")
	require.NoError(t, d.Unlock(ctx))
	require.NoError(t, l.Unlock(ctx))

	var inside atomic.Int32
	var overlaps atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		names := []string{"x", "y"}
		if i%2 == 1 {
			names = []string{"y", "x"}
		}
		n := cl.Member(uint64(i%3 + 1))
		wg.Go(func() {
			for j := 0; j < 3; j++ {
				l, err := n.LockAll(ctx, names)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlaps.Load())

	_, err = cl.Member(1).LockAll(ctx, nil)
	require.ErrorIs(t, err, lockraft.ErrInvalidName)
	_, err = cl.Member(1).LockAll(ctx, []string{"p", "p"})
	require.ErrorIs(t, err, lockraft.ErrDuplicateName)
	many := make([]string, lockraft.MaxMultiNames+1)
	for i := range many {
		many[i] = fmt.Sprint("n", i)
	}
	_, err = cl.Member(1).LockAll(ctx, many)
	require.ErrorIs(t, err, lockraft.ErrTooManyNames)
	sem, err := cl.Member(1).Semaphore("s", 1).Acquire(ctx, 1)
	require.NoError(t, err)
	_, err = cl.Member(1).TryLockAll(ctx, []string{"q", "s"})
	require.ErrorIs(t, err, lockraft.ErrWrongKind)
	require.NoError(t, sem.Release(ctx))
}

// TestLocker (S1 through sync.Locker): goroutines on three nodes never
// overlap; Unlock without Lock panics; Lock panics on an error it can never
// get past (a name in use as another kind, a closed node).
func TestLocker(t *testing.T) {
	cl := joinCluster(t, 3, 0)
	var inside, overlaps, count atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		mu := cl.Member(uint64(i%3 + 1)).Locker("shared")
		wg.Go(func() {
			for j := 0; j < 5; j++ {
				mu.Lock()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				count.Add(1)
				inside.Add(-1)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlaps.Load())
	require.EqualValues(t, 30, count.Load())

	require.Panics(t, func() { cl.Member(1).Locker("never-locked").Unlock() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sem, err := cl.Member(1).Semaphore("sem-name", 1).Acquire(ctx, 1)
	require.NoError(t, err)
	require.PanicsWithValue(t, `lockraft: Locker("sem-name").Lock: lockraft: name is in use as another kind of lock: "sem-name"`,
		func() { cl.Member(2).Locker("sem-name").Lock() })
	require.NoError(t, sem.Release(ctx))
	closed := cl.Member(3)
	require.NoError(t, closed.Close(ctx))
	cl.Stopped(3)
	require.Panics(t, func() { closed.Locker("after-close").Lock() })
}
