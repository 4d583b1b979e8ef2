package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
)

// stallBound bounds each call made while a test holds snapshots stalled. The
// stall lasts until the test releases it, so a loop that waited for it
// would not answer within any bound; this one is far beyond the scheduling
// and fsync hiccups of a loaded two-core machine running the race detector
// (a Status call bounded by a quarter of a TTL, 500 ms, once timed out there
// while the leader, not stalled at all, could not commit either).
const stallBound = 5 * time.Second

// TestL1LoopServesDuringSlowSnapshot (L1, and S5's premise that the loop
// keeps checking holders): the disk work of a lock-table snapshot (the
// lock-table commit, the snapshot file and its fsyncs, the raft log's
// snapshot record and compaction) is stalled on the leader for longer than
// a session TTL, as a very slow disk would. The leader's loop must keep
// serving meanwhile: Lock and Unlock on it complete, a lock held across the
// stall stays held (its keepalives are answered), and once the disk is back
// the snapshot completes. With the disk work on the loop, every operation
// waited for the disk.
func TestL1LoopServesDuringSlowSnapshot(t *testing.T) {
	tc := newCluster(t, 3, func(c *Config) {
		c.SnapshotEvery = 20
		c.CompactKeep = 10
	})
	lead := leader(t, tc)
	n := tc.Member(lead)
	ctx := ctxT(t, 60*time.Second)
	held, err := n.Acquire(ctx, "held", "holder", true, 0)
	require.NoError(t, err)

	stalled := tc.Faults(lead).StallSnapshots()
	t.Cleanup(tc.Faults(lead).ReleaseSnapshots)
	ttl := n.cfg.SessionTTL
	// lockUnlock is one Lock+Unlock on the leader, bounded by stallBound.
	lockUnlock := func(name string) error {
		octx, cancel := context.WithTimeout(ctx, stallBound)
		defer cancel()
		h, err := n.Acquire(octx, name, "o", true, 0)
		if err == nil {
			err = h.Release(octx)
		}
		return err
	}
	for i := 0; ; i++ {
		select {
		case <-stalled:
		default:
			require.Less(t, i, 500, "no snapshot started after 500 operations")
			err := lockUnlock("fill")
			select {
			case <-stalled:
				require.NoError(t, err, "a Lock+Unlock waited for the stalled snapshot")
			default:
				require.NoError(t, err)
			}
			continue
		}
		break
	}
	// The snapshot's disk work is now stalled. Serve for more than a TTL.
	start := time.Now()
	ops := 0
	for time.Since(start) < ttl+ttl/2 {
		require.NoError(t, lockUnlock(fmt.Sprintf("during-%d", ops%4)), "operation %d, %v into the stalled snapshot", ops, time.Since(start))
		ops++
	}
	require.NoError(t, context.Cause(held.Context()), "the lock held across the stall was lost")
	snap, err := n.storage.Snapshot()
	require.NoError(t, err)
	require.LessOrEqual(t, snap.GetMetadata().GetIndex(), uint64(1), "premise: the snapshot is still stalled (1 is the bootstrap's)")
	t.Logf("%d Lock+Unlock on the leader during a %v snapshot stall", ops, time.Since(start))

	tc.Faults(lead).ReleaseSnapshots()
	require.Eventually(t, func() bool {
		snap, err := n.storage.Snapshot()
		return err == nil && snap.GetMetadata().GetIndex() >= 20
	}, 10*time.Second, 10*time.Millisecond, "the snapshot never completed")
	require.NoError(t, held.Release(ctx))
}

// TestL1ReceivedSnapshotSurvivesOwnSnapshot (L1; review finding 7): the
// transport stores a snapshot the leader sends before the loop restores
// from it; a snapshot of this node's own, taken meanwhile (a follower far
// behind still applying its backlog), must not delete it, or the restore
// finds no file and the node stops serving. Files older than the previous
// own snapshot go; none newer than the newest own one.
func TestL1ReceivedSnapshotSurvivesOwnSnapshot(t *testing.T) {
	dir := t.TempDir()
	for _, idx := range []uint64{10, 20, 30, 500} { // 500: received, not yet restored
		require.NoError(t, os.WriteFile(transport.SnapshotPath(dir, idx), []byte("x"), 0o600))
	}
	removeOldSnapshots(dir, 30)
	var left []string
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	require.Equal(t, []string{"0000000000000014.snap", "000000000000001e.snap", "00000000000001f4.snap"}, left,
		"kept: the previous own snapshot (20), the newest (30) and the received one (500)")
}

// TestL1LoopServesDuringSlowRestore (L1): a follower that was down is sent
// a snapshot; its restore (reading the file, rewriting locks.db) is stalled
// for longer than a session TTL, as a very slow disk would. Its loop must
// keep answering meanwhile (here Status, a call through the loop, and the
// cluster around it keeps serving); once the disk is back it finishes the
// restore and ends byte-identical to the others. With the restore on the
// loop, every call to that node waited for the disk.
func TestL1LoopServesDuringSlowRestore(t *testing.T) {
	tc := newCluster(t, 3, snapshotOften)
	ctx := ctxT(t, 60*time.Second)
	f, lead, _ := leaveBehind(t, ctx, tc)
	stalled := tc.Faults(f).StallSnapshots()
	t.Cleanup(tc.Faults(f).ReleaseSnapshots)
	require.NoError(t, tc.Restart(f))
	n := tc.Member(f)
	select {
	case <-stalled:
	case <-ctx.Done():
		t.Fatal("the follower was never sent a snapshot")
	}
	ttl := n.cfg.SessionTTL
	start := time.Now()
	calls := 0
	for time.Since(start) < ttl+ttl/2 {
		sctx, cancel := context.WithTimeout(ctx, stallBound)
		st, err := n.Status(sctx)
		cancel()
		require.NoError(t, err, "Status %v into the stalled restore", time.Since(start))
		require.Zero(t, st.SnapshotsRestored, "premise: the restore is still stalled")
		lctx, cancel := context.WithTimeout(ctx, stallBound)
		h, err := lead.Acquire(lctx, "during", "o", true, 0)
		if err == nil {
			err = h.Release(lctx)
		}
		cancel()
		require.NoError(t, err)
		calls++
	}
	t.Logf("%d Status calls answered by the restoring follower during a %v stall", calls, time.Since(start))
	tc.Faults(f).ReleaseSnapshots()
	require.Eventually(t, func() bool {
		st, err := n.Status(ctx)
		return err == nil && st.SnapshotsRestored > 0
	}, 15*time.Second, 20*time.Millisecond, "the restore never finished")
	requireSameTables(t, tc)
	// It serves locks again. The session it opened on restart could not be
	// kept alive while it could not apply (it learns its session id by
	// applying the open), so the cluster may have expired it during the
	// stall: a Lock may first fail with lockerr.ErrSessionExpired, and the node opens
	// a new session.
	require.Eventually(t, func() bool {
		h, err := n.Acquire(ctx, "after-restore", "f", true, 0)
		if errors.Is(err, lockerr.ErrSessionExpired) {
			return false
		}
		require.NoError(t, err)
		require.NoError(t, h.Release(ctx))
		return true
	}, 20*time.Second, 10*time.Millisecond, "no lock after the restore")
}

// TestSnapshotIntervalGrowsWithTable (L1: a large table does not slow every
// operation down): snapshots come every SnapshotEvery applied entries while
// the table is smaller than that, and every as many entries as it has
// records once it is larger (up to ten times SnapshotEvery, which bounds the
// log kept in memory), so writing the whole table is spread over many
// entries. A member added after the latest snapshot still gets one at once.
func TestSnapshotIntervalGrowsWithTable(t *testing.T) {
	fsm, err := lockfsm.Open(filepath.Join(t.TempDir(), "locks.db"), lockfsm.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { fsm.Close() })
	jobs := make(chan *fsmJob, 1)
	f := fsmJobs{fsm: fsm, clock: systemClock{}, to: jobs, snapEvery: 20}
	started := func() bool {
		require.NoError(t, f.maybeSnapshot(&raftpb.ConfState{Voters: []uint64{1}}))
		select {
		case <-jobs:
			f.busy = false
			return true
		default:
			return false
		}
	}
	idx := uint64(1)
	fsm.ApplyCommand(idx, &lockfsm.Command{Kind: lockfsm.KindOpenSession, Node: 1, TTLMillis: 5000}, nil)
	f.sinceSnap = 19
	require.False(t, started(), "19 entries of a 1-record table")
	f.sinceSnap = 20
	require.True(t, started(), "SnapshotEvery entries of a small table")

	for i := range 99 { // 100 records: the session and 99 names
		idx++
		res, _ := fsm.ApplyCommand(idx, &lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 1, Seq: uint64(i + 1),
			Name: fmt.Sprintf("n/%d", i), Owner: "o"}, nil)
		require.NoError(t, res.Err)
	}
	require.Equal(t, 100, fsm.Records())
	f.sinceSnap = 99
	require.False(t, started(), "99 entries of a 100-record table")
	f.sinceSnap = 100
	require.True(t, started(), "as many entries as the table has records")

	for i := 99; i < 299; i++ { // 300 records: above ten times SnapshotEvery
		idx++
		res, _ := fsm.ApplyCommand(idx, &lockfsm.Command{Kind: lockfsm.KindAcquire, Session: 1, Seq: uint64(i + 1),
			Name: fmt.Sprintf("n/%d", i), Owner: "o"}, nil)
		require.NoError(t, res.Err)
	}
	f.sinceSnap = 199
	require.False(t, started(), "199 entries of a 300-record table")
	f.sinceSnap = 200
	require.True(t, started(), "at most ten times SnapshotEvery entries, however large the table")

	f.snapNow = true
	require.True(t, started(), "a snapshot for a new member, however few entries")
	require.False(t, f.snapNow)
}
