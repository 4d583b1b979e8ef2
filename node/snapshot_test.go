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

	"github.com/lockraft/lockraft/internal/cluster"
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

// restoreStalled leaves follower f behind far enough to be sent a snapshot,
// stalls its disk work and restarts it; it returns once the rewrite of f's
// locks.db from the leader's snapshot reached the stall (the stall lasts
// until the test releases it or ends), with f's node n and the leader.
func restoreStalled(t *testing.T, ctx context.Context, tc *cluster.Cluster[*Node]) (f uint64, lead, n *Node) {
	t.Helper()
	f, lead, _ = leaveBehind(t, ctx, tc)
	stalled := tc.Faults(f).StallSnapshots()
	t.Cleanup(tc.Faults(f).ReleaseSnapshots)
	require.NoError(t, tc.Restart(f))
	select {
	case <-stalled:
	case <-ctx.Done():
		t.Fatal("the follower was never sent a snapshot")
	}
	return f, lead, tc.Member(f)
}

// TestL1LoopServesDuringSlowRestore (L1): a follower that was down is sent
// a snapshot, and the rewrite of its locks.db from it is stalled for longer
// than a session TTL, as a very slow disk would. The table goes in as soon
// as the snapshot file is read and verified, so the follower serves
// meanwhile: its loop answers, it applies what the cluster commits (its
// table equals the others') and a Lock through it succeeds, while locks.db
// still holds its old table. Once the disk is back the file catches up.
// With the restore on the loop, every call to that node waited for the
// disk; with the table swapped in only once the file was written, the node
// could not serve until then.
func TestL1LoopServesDuringSlowRestore(t *testing.T) {
	tc := newCluster(t, 3, snapshotOften)
	ctx := ctxT(t, 60*time.Second)
	f, lead, n := restoreStalled(t, ctx, tc)
	fileAt := n.fsm.DurableIndex() // atomic: the index locks.db holds
	st, err := n.Status(ctx)
	require.NoError(t, err)
	require.NotZero(t, st.SnapshotsRestored, "the table is in place once the snapshot is verified")
	snapAt := st.Applied
	require.Less(t, fileAt, snapAt, "premise: locks.db is behind the snapshot")

	ttl := n.cfg.SessionTTL
	start := time.Now()
	calls, locked := 0, false
	for time.Since(start) < ttl+ttl/2 || !locked {
		require.Less(t, time.Since(start), 20*time.Second, "no lock through the restoring follower")
		sctx, cancel := context.WithTimeout(ctx, stallBound)
		_, err := n.Status(sctx)
		cancel()
		require.NoError(t, err, "Status %v into the stalled write", time.Since(start))
		lctx, cancel := context.WithTimeout(ctx, stallBound)
		h, err := lead.Acquire(lctx, "during", "o", true, 0)
		if err == nil {
			err = h.Release(lctx)
		}
		require.NoError(t, err)
		// The session the follower opened on restart may have expired
		// while it was down to the cluster: it opens a new one.
		h, err = n.Acquire(lctx, fmt.Sprintf("through-f/%d", calls), "f", true, 0)
		if !errors.Is(err, lockerr.ErrSessionExpired) {
			require.NoError(t, err, "Lock through the follower %v into the stalled write", time.Since(start))
			require.NoError(t, h.Release(lctx))
			locked = true
		}
		cancel()
		calls++
	}
	requireSameTables(t, tc)
	require.Equal(t, fileAt, n.fsm.DurableIndex(), "premise: the write is still stalled")
	t.Logf("%d rounds of calls answered by the restoring follower during a %v stall of its file's rewrite",
		calls, time.Since(start))
	tc.Faults(f).ReleaseSnapshots()
	require.Eventually(t, func() bool { return n.fsm.DurableIndex() >= snapAt },
		15*time.Second, 20*time.Millisecond, "locks.db never caught up")
	requireSameTables(t, tc)
}

// TestRestoreCrashBeforeTheFileIsWritten (S3 and S7 across a crash): a
// follower swaps a leader's snapshot in and applies entries after it while
// the rewrite of its locks.db is stalled, then crashes before the rewrite
// commits: locks.db holds the table from before the snapshot, the raft log
// starts at the snapshot. On restart the node restores locks.db from the
// received snapshot file and replays the entries after it, and ends with
// the others' table, the names it applied after the snapshot included.
func TestRestoreCrashBeforeTheFileIsWritten(t *testing.T) {
	tc := newCluster(t, 3, snapshotOften)
	ctx := ctxT(t, 60*time.Second)
	f, lead, n := restoreStalled(t, ctx, tc)
	st, err := n.Status(ctx)
	require.NoError(t, err)
	snapAt := st.Applied
	var after []*Hold
	for i := range 5 {
		h, err := lead.Acquire(ctx, fmt.Sprintf("after-snapshot/%d", i), "o", true, 0)
		require.NoError(t, err)
		after = append(after, h)
	}
	lst, err := lead.Status(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := n.Status(ctx)
		return err == nil && st.Applied >= lst.Applied
	}, 10*time.Second, 10*time.Millisecond, "the follower did not apply on from the snapshot")
	tc.Crash(f)

	path := filepath.Join(tc.Dir(f), "locks.db")
	file, err := lockfsm.Open(path, lockfsm.Options{})
	require.NoError(t, err)
	fileAt := file.AppliedIndex()
	require.NoError(t, file.Close())
	require.Less(t, fileAt, snapAt, "premise: the crash came before locks.db was rewritten")

	tc.Faults(f).ReleaseSnapshots()
	require.NoError(t, tc.Restart(f))
	requireSameTables(t, tc) // the leader's holds the names acquired after the snapshot
	for _, h := range after {
		require.NoError(t, h.Release(ctx))
	}
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
