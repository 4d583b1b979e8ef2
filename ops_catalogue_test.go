package lockraft_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft"
)

func opsOf(prim, kind, result string) map[string]string {
	return map[string]string{"primitive": prim, "kind": kind, "result": result}
}

// TestCatalogueInspectionAndMetrics (L2, L4 as an operator sees them, for
// every primitive of the catalogue): on a 3-node cluster through the public
// API, each primitive holds and queues; the admin handler of another node
// (a linearizable read from a follower) shows each name's primitive, every
// hold (mode, permits, names, owner, token) and every waiter with its
// position and request; and the operations are counted under their own
// "primitive" label, never all as "mutex".
func TestCatalogueInspectionAndMetrics(t *testing.T) {
	regs := registries(3)
	c := joinCluster(t, 3, 0, withRegistries(regs))
	lead := leader(t, c)
	a, b := c.Member(after(lead, 1)), c.Member(after(lead, 2))
	reg := regs[after(lead, 1)]
	ro := b.AdminHandler()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	view := func(name string) lockraft.LockView {
		var lv lockraft.LockView
		require.Equal(t, 200, adminGet(t, ro, "GET", "/lock?name="+name, &lv))
		return lv
	}
	waitWaiters := func(name string, n int) {
		require.Eventually(t, func() bool {
			v, _, err := b.InspectLock(ctx, name)
			return err == nil && len(v.Waiters) == n
		}, 10*time.Second, 10*time.Millisecond, name)
	}
	// bg takes a hold in the background and gives it back once granted;
	// take returns its release (not called when take fails). The channel
	// gets the error of either.
	bg := func(take func() (release func(context.Context) error, err error)) chan error {
		ch := make(chan error, 1)
		go func() {
			release, err := take()
			if err == nil {
				err = release(ctx)
			}
			ch <- err
		}()
		return ch
	}

	// Read-write: two readers hold, a writer waits, a reader waits behind it.
	r1, err := a.RLock(ctx, "rw", lockraft.WithOwner("r1"))
	require.NoError(t, err)
	r2, err := a.RLock(ctx, "rw", lockraft.WithOwner("r2"), lockraft.WithLease(20*time.Second))
	require.NoError(t, err)
	wDone := bg(func() (func(context.Context) error, error) {
		w, err := b.WLock(ctx, "rw", lockraft.WithOwner("w"))
		return w.Unlock, err
	})
	waitWaiters("rw", 1)
	r3Done := bg(func() (func(context.Context) error, error) {
		r, err := b.RLock(ctx, "rw", lockraft.WithOwner("r3"))
		return r.Unlock, err
	})
	waitWaiters("rw", 2)
	v := view("rw")
	require.Equal(t, "rwlock", v.Primitive)
	require.Len(t, v.Holds, 2)
	require.Equal(t, []string{"r1", "r2"}, []string{v.Holds[0].Owner, v.Holds[1].Owner})
	require.Equal(t, "read", v.Holds[0].Mode)
	require.Equal(t, r1.Token(), v.Holds[0].Token)
	require.Equal(t, r2.Token(), v.Holds[1].Token)
	require.EqualValues(t, 20000, v.Holds[1].LeaseMillis)
	require.Equal(t, a.ID(), v.Holds[0].Member)
	require.Equal(t, "r1", v.Holder.Owner, "Holder is the first hold")
	require.Equal(t, []string{"w", "r3"}, []string{v.Waiters[0].Owner, v.Waiters[1].Owner})
	require.Equal(t, []int{1, 2}, []int{v.Waiters[0].Position, v.Waiters[1].Position})
	require.Equal(t, []string{"write", "read"}, []string{v.Waiters[0].Mode, v.Waiters[1].Mode})
	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r2.Unlock(ctx))
	require.NoError(t, <-wDone)
	require.NoError(t, <-r3Done)

	// Semaphore of 3: 2 + 1 held, a request for 2 waits.
	sem := a.Semaphore("sem", 3)
	p1, err := sem.Acquire(ctx, 2, lockraft.WithOwner("p1"))
	require.NoError(t, err)
	p2, err := sem.Acquire(ctx, 1, lockraft.WithOwner("p2"))
	require.NoError(t, err)
	pDone := bg(func() (func(context.Context) error, error) {
		p, err := b.Semaphore("sem", 3).Acquire(ctx, 2, lockraft.WithOwner("p3"))
		return p.Release, err
	})
	waitWaiters("sem", 1)
	_, err = b.Semaphore("sem", 4).TryAcquire(ctx, 1) // 1 × trylock invalid (size mismatch), on b
	require.ErrorIs(t, err, lockraft.ErrPermitsMismatch)
	v = view("sem")
	require.Equal(t, "semaphore", v.Primitive)
	require.EqualValues(t, 3, v.Permits)
	require.EqualValues(t, 3, v.PermitsInUse)
	require.Len(t, v.Holds, 2)
	require.Equal(t, []uint32{2, 1}, []uint32{v.Holds[0].Permits, v.Holds[1].Permits})
	require.Equal(t, "p3", v.Waiters[0].Owner)
	require.EqualValues(t, 2, v.Waiters[0].Permits)
	require.NoError(t, p1.Release(ctx))
	require.NoError(t, p2.Release(ctx))
	require.NoError(t, <-pDone)

	// Election: a leads with a value, b campaigns.
	ld, err := a.Campaign(ctx, "el", "addr-a", lockraft.WithOwner("cand-a"))
	require.NoError(t, err)
	require.NoError(t, ld.Proclaim(ctx, "addr-a2"))
	eDone := bg(func() (func(context.Context) error, error) {
		l, err := b.Campaign(ctx, "el", "addr-b", lockraft.WithOwner("cand-b"))
		return l.Resign, err
	})
	waitWaiters("el", 1)
	v = view("el")
	require.Equal(t, "election", v.Primitive)
	require.Equal(t, "addr-a2", v.Value)
	require.Len(t, v.Holds, 1)
	require.Equal(t, "cand-a", v.Holds[0].Owner)
	require.Equal(t, ld.Token(), v.Holds[0].Token)
	require.Equal(t, "cand-b", v.Waiters[0].Owner)
	require.Equal(t, "addr-b", v.Waiters[0].Value)
	require.NoError(t, ld.Resign(ctx))
	require.NoError(t, <-eDone)

	// Multi-name: a holds {m1, m2}; b waits for {m2, m3}.
	ml, err := a.LockAll(ctx, []string{"m1", "m2"}, lockraft.WithOwner("all-a"))
	require.NoError(t, err)
	mDone := bg(func() (func(context.Context) error, error) {
		l, err := b.LockAll(ctx, []string{"m2", "m3"}, lockraft.WithOwner("all-b"))
		return l.Unlock, err
	})
	waitWaiters("m2", 1)
	v = view("m2")
	require.Equal(t, "mutex", v.Primitive)
	require.Equal(t, []string{"m1", "m2"}, v.Holds[0].Names)
	require.Equal(t, ml.Token(), v.Holds[0].Token)
	require.Equal(t, []string{"m2", "m3"}, v.Waiters[0].Names)
	require.NoError(t, ml.Unlock(ctx))
	require.NoError(t, <-mDone)

	// Counted on a under each primitive.
	for _, m := range []struct {
		prim, kind, result string
		want               float64
	}{
		{"rwlock", "lock", "ok", 2}, {"rwlock", "unlock", "ok", 2},
		{"semaphore", "lock", "ok", 2}, {"semaphore", "unlock", "ok", 2},
		{"election", "lock", "ok", 1}, {"election", "proclaim", "ok", 1}, {"election", "unlock", "ok", 1},
		{"multilock", "lock", "ok", 1}, {"multilock", "unlock", "ok", 1},
		{"mutex", "lock", "ok", 0},
	} {
		require.Equal(t, m.want, value(t, reg, "lockraft_operations_total", opsOf(m.prim, m.kind, m.result)),
			fmt.Sprintf("%s %s %s", m.prim, m.kind, m.result))
	}
	require.Equal(t, 1.0, value(t, regs[after(lead, 2)], "lockraft_operations_total", opsOf("semaphore", "trylock", "invalid")))
}
