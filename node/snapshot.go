package node

// Snapshots of the lock table, written off the loop.
//
// Every SnapshotEvery applied entries the node writes a snapshot file and
// compacts the raft log. All of the disk work runs on the committer
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
// the last, and a restore waits for it (waitFSMCommit).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
)

// snapJob is the snapshot part of a committer job.
type snapJob struct {
	index uint64            // the lock table's applied index when the batch was prepared
	cs    *raftpb.ConfState // the configuration applied at index
}

// maybeSnapshot starts a snapshot every SnapshotEvery applied entries, once
// the committer is free. Runs in the loop; it does no I/O.
func (n *Node) maybeSnapshot() error {
	if n.loop.sinceSnap < n.cfg.SnapshotEvery || n.loop.fsmBusy {
		return nil // not yet, or the committer is busy: a later turn starts it
	}
	idx := n.fsm.AppliedIndex()
	if idx == 0 {
		return nil
	}
	if err := n.k.CommitError(); err != nil {
		return err
	}
	n.loop.sinceSnap = 0
	n.loop.lastCommit = n.clock.Now()
	n.loop.stats.snapshots++ // started; a failure stops the node
	n.sendFSMJob(&fsmJob{
		batch: n.fsm.PrepareCommit(),
		snap:  &snapJob{index: idx, cs: proto.Clone(n.loop.confState).(*raftpb.ConfState)},
	})
	return nil
}

// writeSnapshot runs steps 2 to 4 for j, once its batch is committed. It
// runs on the committer goroutine.
func (n *Node) writeSnapshot(j *snapJob) error {
	n.k.StallSnapshot(n.stopc)
	path := transport.SnapshotPath(n.snapDir, j.index)
	var applied uint64
	if err := writeSnapshotFile(path, func(w *bufio.Writer) (err error) {
		applied, err = n.fsm.WriteDurableSnapshot(w)
		return err
	}); err != nil {
		return err
	}
	if applied != j.index {
		// The job's batch was the last write; nothing else commits meanwhile.
		return fmt.Errorf("snapshot: lock table file at %d, want %d", applied, j.index)
	}
	var desc [8]byte
	binary.BigEndian.PutUint64(desc[:], j.index)
	if _, err := n.storage.CreateSnapshot(j.index, j.cs, desc[:]); err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil // a newer snapshot (received from the leader) is in place
		}
		return err
	}
	if j.index > n.cfg.CompactKeep {
		if err := n.storage.Compact(j.index - n.cfg.CompactKeep); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	n.removeOldSnapshots(j.index)
	n.log.Debug("snapshot taken", "index", j.index)
	return nil
}

// writeSnapshotFile writes a snapshot to path through a temporary file:
// write, fsync, rename, directory fsync.
func writeSnapshotFile(path string, write func(*bufio.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// removeOldSnapshots keeps the newest two of this node's snapshot files (one
// may be streaming to a follower while the next is written) and every file
// above newest: a snapshot above this node's own newest one can only have
// come from a leader, and it may be waiting for the loop to restore it.
// Once restored and later superseded by an own snapshot, it goes too.
func (n *Node) removeOldSnapshots(newest uint64) {
	entries, err := os.ReadDir(n.snapDir)
	if err != nil {
		return
	}
	var keep uint64
	for _, e := range entries {
		var idx uint64
		if _, err := fmt.Sscanf(e.Name(), "%016x.snap", &idx); err != nil || !strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		if idx < newest && idx > keep {
			keep = idx
		}
	}
	for _, e := range entries {
		var idx uint64
		if _, err := fmt.Sscanf(e.Name(), "%016x.snap", &idx); err != nil || !strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		if idx < keep {
			os.Remove(filepath.Join(n.snapDir, e.Name()))
		}
	}
}

// Restoring a snapshot from the leader, off the loop.
//
// A follower far behind is sent a snapshot; raft hands it to the loop as a
// MsgStorageAppend carrying it. The lock table must hold the snapshot's
// state before raft learns that the write is durable (raft then goes on
// from the snapshot's index), and the write must follow the restore so
// that a crash between them leaves a lock table that is ahead of the raft
// log (replay skips what it holds), never behind it. So the loop holds that
// write, and every raft log write after it, in order (holdForRestore); the
// committer reads and verifies the file and rewrites locks.db
// (restoreOnCommitter); then the loop swaps the restored table in and
// releases the writes (finishRestore). Meanwhile raft applies nothing (it
// applies no entry while a snapshot is pending) and cannot campaign, and
// the loop keeps ticking, answering and checking holders.

// restoreJob is a restore of the lock table from the snapshot file at index.
type restoreJob struct {
	index uint64
	cs    *raftpb.ConfState
	sent  bool              // handed to the committer
	rs    *lockfsm.Restored // set by the committer once locks.db holds it
}

// holdForRestore holds a raft log write m: a restore is under way, or m
// carries a snapshot with data, which starts one. Runs in the loop.
func (n *Node) holdForRestore(m *raftpb.Message) {
	n.loop.held = append(n.loop.held, m)
	if n.loop.restore != nil {
		return
	}
	md := m.Snapshot.GetMetadata()
	n.loop.restore = &restoreJob{index: md.GetIndex(), cs: md.GetConfState()}
	if !n.loop.fsmBusy {
		n.startRestore()
	} // else onFSMJobDone starts it once the committer is free
}

// startRestore hands the pending restore to the committer.
func (n *Node) startRestore() {
	n.loop.restore.sent = true
	n.sendFSMJob(&fsmJob{restore: n.loop.restore})
}

// restoreOnCommitter reads and verifies the snapshot file and rewrites
// locks.db with it. It runs on the committer goroutine and does not touch
// the in-memory lock table, which the loop may be reading.
func (n *Node) restoreOnCommitter(j *restoreJob) error {
	n.k.StallSnapshot(n.stopc)
	f, err := os.Open(transport.SnapshotPath(n.snapDir, j.index))
	if err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, j.index, err)
	}
	defer f.Close()
	rs, err := lockfsm.ReadRestore(f)
	if err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, j.index, err)
	}
	if rs.Applied() != j.index {
		return fmt.Errorf("%w: snapshot file %d holds the lock table at %d", lockerr.ErrDataDir, j.index, rs.Applied())
	}
	if err := n.fsm.WriteRestore(rs); err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, j.index, err)
	}
	j.rs = rs
	return nil
}

// finishRestore swaps the restored lock table in and releases the held
// raft log writes, the snapshot's first. Runs in the loop.
func (n *Node) finishRestore(j *restoreJob) {
	n.fsm.InstallRestore(j.rs)
	n.loop.confState = j.cs
	n.members.SetConf(n.loop.confState)
	n.loop.lastApplied = j.index
	n.snapshotsRestored.Add(1)
	n.loop.times.restart(j.index + 1)
	n.loop.lease.LoadTable(n.clock.Now())
	n.onRestored(j.index)
	held := n.loop.held
	n.loop.restore, n.loop.held = nil, nil
	for i, m := range held {
		if i > 0 && hasSnap(m) && len(m.Snapshot.GetData()) > 0 {
			// The leader sent a newer snapshot meanwhile: restore it too,
			// and hold what follows it.
			for _, later := range held[i:] {
				n.holdForRestore(later)
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
// next snapshot, SnapshotEvery entries later: it could not catch up
// meanwhile. So the send is reported failed (raft probes again) and a
// snapshot is taken now, at the applied index, whose configuration has the
// member in it; raft's next MsgSnap to it is that one. etcd builds the
// snapshot it sends at send time for the same reason. Loop.
func (n *Node) snapshotForNewMember(to, index uint64) {
	n.rn.ReportSnapshot(to, raft.SnapshotFailure)
	if n.loop.sinceSnap < n.cfg.SnapshotEvery {
		n.log.Info("snapshot for a member added after the latest one", "member", to, "latest", index)
		n.loop.sinceSnap = n.cfg.SnapshotEvery // maybeSnapshot at the end of this turn, or once the committer is free
	}
}
