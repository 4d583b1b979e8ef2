package node

// Snapshots of the lock table, written off the loop.
//
// Every SnapshotEvery applied entries (a larger table: every as many as it
// has records, up to ten times SnapshotEvery; fsmJobs.snapshotInterval) the
// node writes a snapshot file and compacts the raft log. All of the disk work runs on the committer
// goroutine, never on the loop: the loop only encodes the lock table's dirty
// records (PrepareCommit, no I/O), clones the configuration and hands both
// over as one job; the loop goes on applying, ticking and answering while
// the disk works (TestL1LoopServesDuringSlowSnapshot). The committer runs a
// job in the order that keeps it crash-safe:
//
//  1. the batch is committed to locks.db (bbolt, fsync): the file now holds
//     the lock table as of index i, the loop's applied index when it
//     prepared the batch, and the job's configuration is the one applied
//     at i;
//  2. the snapshot is streamed from that file (one read transaction, so
//     later commits cannot mix in) to a temporary file, fsynced, renamed to
//     its final name and the directory fsynced: the file for index i is
//     durable before anything refers to it;
//  3. the raft log records the snapshot (CreateSnapshot, durable): from now
//     on raft may send it to followers;
//  4. the raft log is compacted to i − CompactKeep, and snapshot files older
//     than the previous one are deleted, never one newer than i (a snapshot
//     a leader sent this node may be waiting to be restored).
//
// A crash between any two steps leaves either no new snapshot (the raft log
// still starts before it) or a complete one. One job runs at a time; the
// loop sends the next commit or snapshot only once the committer reported
// the last, and a restore waits for it (fsmJobs.done).

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/views"
)

// Restoring a snapshot from the leader, off the loop.
//
// A follower far behind is sent a snapshot; raft hands it to the loop as a
// MsgStorageAppend carrying it. The lock table in memory must hold the
// snapshot's state before raft learns that the write is durable (raft then
// goes on from the snapshot's index and hands over the entries after it to
// apply). So the loop holds that write, and every raft log write after it,
// in order (fsmJobs.hold); the committer reads and verifies the file and
// hands the table to the loop, which swaps it in and releases the writes
// (finishRestore), while the committer goes on rewriting locks.db with it
// (committer.restore). Until then raft applies nothing (it applies no entry
// while a snapshot is pending) and cannot campaign, and the loop keeps
// ticking, answering and checking holders.
//
// locks.db may lag behind the raft log's snapshot for a while: the loop
// commits nothing to it (and takes no snapshot) until the committer has
// rewritten it. A crash in that window leaves locks.db at its old index and
// the raft log at the snapshot's; the received snapshot file, durable since
// it was adopted, is still there (only the committer removes snapshot files,
// after a snapshot of its own), and recover restores locks.db from it at
// start (TestRestoreCrashBeforeTheFileIsWritten).

// finishRestore swaps the restored lock table in and releases the held
// raft log writes, the snapshot's first. Runs in the loop.
func (n *Node) finishRestore(j *restoreJob) {
	start := time.Now()
	n.fsm.InstallRestore(j.rs)
	defer func() {
		n.log.Info("lock table restored from the leader's snapshot", "index", j.index,
			"read", j.read.Round(time.Millisecond), "installed", time.Since(start).Round(time.Millisecond))
	}()
	n.loop.confState = j.cs
	n.members.SetConf(n.loop.confState)
	n.loop.lastApplied = j.index
	n.snapshotsRestored.Add(1)
	n.loop.times.restart(j.index + 1)
	n.loop.lease.LoadTable(n.clock.Now())
	n.onRestored(j.index)
	held := n.loop.jobs.release()
	for i, m := range held {
		if i > 0 && hasSnap(m) && len(m.Snapshot.GetData()) > 0 {
			// The leader sent a newer snapshot meanwhile: restore it too,
			// and hold what follows it.
			for _, later := range held[i:] {
				n.loop.jobs.hold(later)
			}
			return
		}
		n.appendToLog(m)
	}
}

// snapshotIncludes reports whether the snapshot a MsgSnap carries has its
// recipient in its configuration. raft restores no snapshot without itself
// in it ("should never happen"), and the guard refuses one (guard.go).
func snapshotIncludes(m *raftpb.Message) bool {
	cs := m.GetSnapshot().GetMetadata().GetConfState()
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing()} {
		if slices.Contains(set, m.GetTo()) {
			return true
		}
	}
	return false
}

// snapshotForNewMember: raft wants to send member to the latest snapshot,
// taken at index, before to was added (a member added after the log was
// compacted: a light member promoted to learner, a replacement voter). The
// member would refuse it, and raft would send the same one again until the
// next snapshot, SnapshotEvery or more entries later: it could not catch up
// meanwhile. So the send is reported failed (raft probes again) and a
// snapshot is taken now, at the applied index, whose configuration has the
// member in it; raft's next MsgSnap to it is that one. etcd builds the
// snapshot it sends at send time for the same reason. Loop.
func (n *Node) snapshotForNewMember(to, index uint64) {
	n.rn.ReportSnapshot(to, raft.SnapshotFailure)
	if !n.loop.jobs.snapNow {
		n.log.Info("snapshot for a member added after the latest one", "member", views.MemberID(to), "latest", index)
		n.loop.jobs.snapNow = true // maybeSnapshot at the end of this turn, or once the committer is free
	}
}
