package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// TestMemberAddedAfterSnapshotCatchesUp (L1, L3): a member added after the
// leader's latest snapshot (here a light member promoted to learner, with a
// hold and a waiter) is sent a snapshot that has it in its configuration and
// catches up at once, keeping its hold and its place in the queue. Before,
// the leader sent its latest snapshot, taken before the member was added;
// the member refused it (raft restores no snapshot without itself in it)
// and the leader sent it again and again until its next snapshot,
// SnapshotEvery entries later: the member could not catch up meanwhile
// ("Condition never satisfied" below, for 20 s).
func TestMemberAddedAfterSnapshotCatchesUp(t *testing.T) {
	f, lights := lightFleet(t, "promo", 6, func(c *Config) {
		c.SnapshotEvery = 200
		c.CompactKeep = 5
	})
	require.NotEmpty(t, lights)
	a := lights[0]
	lead := fleetLeader(t, f, 5*time.Second)
	ctx := ctxT(t, 60*time.Second)
	// Enough entries for the leader to snapshot and compact.
	for i := 0; i < 120; i++ {
		h, err := lead.Acquire(ctx, fmt.Sprintf("fill/%d", i%4), "lead", true, 0)
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
	}
	snapIndex := func() uint64 {
		snap, err := lead.storage.Snapshot()
		require.NoError(t, err)
		return snap.GetMetadata().GetIndex()
	}
	require.Eventually(t, func() bool { return snapIndex() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the leader took a snapshot")
	st, err := lead.Status(ctx)
	require.NoError(t, err)
	// Now a grant and a waiter on the light member, newer than that
	// snapshot (fewer entries than SnapshotEvery follow), so the member is
	// added after it.
	held, err := a.Acquire(ctx, "promo/held", "a", true, 0)
	require.NoError(t, err)
	require.Greater(t, held.Token(), st.Applied)
	blocker, err := lead.Acquire(ctx, "promo/wait", "lead", true, 0)
	require.NoError(t, err)
	got, _ := grantAsync(t, a, "promo/wait", "a")
	requireWaiters(t, lead, "promo/wait", 1)

	_, learners, err := lead.ConfState(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, learners)
	crashed := false
	for slot, n := range f.All() {
		if n.ID() == learners[0] {
			f.Crash(slot)
			crashed = true
			break
		}
	}
	require.True(t, crashed)
	require.Eventually(t, func() bool { return !a.light() }, 60*time.Second, 20*time.Millisecond,
		"the light member is promoted to learner")
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx)
		return err == nil && st.SnapshotsRestored > 0 && st.Applied >= held.Token()
	}, 20*time.Second, 10*time.Millisecond, "the promoted member restored a snapshot and applied past its grant")
	t.Logf("applied %d before the grant (token %d); the latest snapshot is at %d now", st.Applied, held.Token(), snapIndex())
	require.NoError(t, context.Cause(held.Context()), "a grant newer than the restored snapshot is still held")
	require.NoError(t, blocker.Release(ctx))
	h := grantWithin(t, got, 10*time.Second, "the waiter queued after the snapshot was not granted")
	require.NoError(t, h.Release(ctx))
	require.NoError(t, held.Release(ctx))
}

// TestRestoreKeepsWhatIsNewerThanTheSnapshot (S5 without false alarms): a
// node that restores a snapshot at index i takes a hold or a queued Acquire
// of its session that the snapshot lacks for gone only if it is not newer
// than i; a newer one comes with the entries after i. (A light member
// promoted to learner may restore a snapshot older than its last grants.)
// White-box: one fabricated hold and one queued Acquire on each side of i.
func TestRestoreKeepsWhatIsNewerThanTheSnapshot(t *testing.T) {
	tc := newCluster(t, 3)
	n := tc.Member(leader(t, tc))
	ctx := ctxT(t, 20*time.Second)
	h, err := n.Acquire(ctx, "warm", "o", true, 0)
	require.NoError(t, err)
	require.NoError(t, h.Release(ctx))
	type outcome struct{ newerHold, olderHold, newerWait, olderWait error }
	got := make(chan outcome, 1)
	require.NoError(t, n.do(ctx, func() {
		i := n.fsm.AppliedIndex()
		hold := func(name string, token uint64) *Hold {
			h := &Hold{n: n, name: name, owner: "o", token: token, parent: context.Background()}
			n.loop.holds.add(h)
			return h
		}
		type call struct {
			o    *op
			done <-chan struct{} // o.done, which completing the op clears
		}
		wait := func(seq, index uint64) call {
			o := newCallerOp(lockfsm.Command{Kind: lockfsm.KindAcquire, Name: "q", Owner: "o", Seq: seq})
			o.queued, o.index = true, index
			n.loop.ops.queued[seq] = o
			return call{o, o.done}
		}
		newer, older := hold("newer", i+50), hold("older", i-1)
		newerW, olderW := wait(1<<40, i+10), wait(1<<40+1, i-1)
		n.onRestored(i)
		res := func(c call) error {
			select {
			case <-c.done:
				return c.o.out.err
			default:
				return nil
			}
		}
		got <- outcome{newer.endCause(), older.endCause(), res(newerW), res(olderW)}
		n.loop.holds.drop(newer)
		delete(n.loop.ops.queued, 1<<40)
	}))
	o := <-got
	require.NoError(t, o.newerHold, "a hold newer than the snapshot is kept")
	require.NoError(t, o.newerWait, "an Acquire queued after the snapshot keeps waiting")
	require.ErrorIs(t, o.olderHold, lockerr.ErrSessionExpired, "a hold the snapshot should have and lacks is gone")
	require.ErrorIs(t, o.olderWait, lockerr.ErrSessionExpired, "a wait the snapshot should have and lacks is gone")
}
