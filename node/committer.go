package node

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/raftlog"
	"github.com/lockraft/lockraft/transport"
)

// The committer is the goroutine that does the lock table's disk work, so
// the loop never waits for it: the periodic commit of lockfsm's dirty
// records (fsmJobs.maybeCommit), the snapshots (snapshot.go) and the restores
// from a leader's snapshot. The loop prepares each job without I/O and
// hands it over; one job is in flight at a time, and its outcome comes back
// to the loop (fsmJobs.done), or stops the node. A restore also hands the
// loop its verified table before its write ends (restored).

// fsmJob is one job for the committer: a lock-table batch to write and,
// for a snapshot, what to do once it is written; or a restore.
type fsmJob struct {
	batch   *lockfsm.CommitBatch
	snap    *snapJob    // nil: just the batch
	restore *restoreJob // non-nil: restore the lock table (no batch)
}

// snapJob is the snapshot part of a committer job.
type snapJob struct {
	index uint64            // the lock table's applied index when the batch was prepared
	cs    *raftpb.ConfState // the configuration applied at index
}

// restoreJob is a restore of the lock table from the snapshot file at index.
type restoreJob struct {
	index uint64
	cs    *raftpb.ConfState
	sent  bool              // handed to the committer
	rs    *lockfsm.Restored // set by the committer's reader once the file is read and verified
	read  time.Duration     // the reading and verifying, for the log
}

// fsmJobs is the loop's side of the committer: the job in flight (one at a
// time), when the next periodic commit and snapshot are due, and the raft
// log writes held for a restore (snapshot.go). Owned by the loop.
type fsmJobs struct {
	busy       bool    // a job (commit, snapshot, restore) is with the committer
	job        *fsmJob // that job
	sinceSnap  uint64  // entries applied since the last snapshot
	snapNow    bool    // take one at the next chance, however few entries (snapshotForNewMember)
	snapshots  uint64  // snapshots started (metrics; a failed one stops the node)
	lastCommit time.Time
	// restore: a snapshot from the leader being restored into the lock
	// table; held: the raft log writes waiting for it.
	restore *restoreJob
	held    []*raftpb.Message

	// Set at start.
	fsm         *lockfsm.FSM
	k           *knobs.Node
	clock       Clock
	to          chan<- *fsmJob // the committer's jobs
	commitEvery time.Duration  // CommitInterval
	snapEvery   uint64         // SnapshotEvery
}

// send hands j to the committer. Only with none in flight.
func (f *fsmJobs) send(j *fsmJob) {
	f.busy, f.job = true, j
	f.to <- j // capacity 1 and nothing in flight: never blocks
}

// maybeCommit writes the lock table's dirty records to its bbolt file
// every CommitInterval. The raft log is the durability source, so this only
// bounds how much a restart replays. The records are encoded here and
// written (one bbolt transaction, two fdatasyncs) by the committer, so the
// loop does not stop for the disk; one job (a batch, or a batch and a
// snapshot) is in flight at a time.
func (f *fsmJobs) maybeCommit() error {
	now := f.clock.Now()
	if now.Sub(f.lastCommit) < f.commitEvery || f.busy {
		return nil // not yet, or still writing the last job: try again next time
	}
	f.lastCommit = now
	if f.fsm.DurableIndex() == f.fsm.AppliedIndex() {
		return nil
	}
	if err := f.k.CommitError(); err != nil {
		return err
	}
	f.send(&fsmJob{batch: f.fsm.PrepareCommit()})
	return nil
}

// maybeSnapshot starts a snapshot every SnapshotEvery applied entries, once
// the committer is free; cs is the configuration applied at the lock
// table's applied index. It does no I/O.
func (f *fsmJobs) maybeSnapshot(cs *raftpb.ConfState) error {
	if f.busy || !(f.snapNow || f.sinceSnap >= f.snapshotInterval()) {
		return nil // not yet, or the committer is busy: a later turn starts it
	}
	idx := f.fsm.AppliedIndex()
	if idx == 0 {
		return nil
	}
	if err := f.k.CommitError(); err != nil {
		return err
	}
	f.sinceSnap, f.snapNow = 0, false
	f.lastCommit = f.clock.Now()
	f.snapshots++
	f.send(&fsmJob{
		batch: f.fsm.PrepareCommit(),
		snap:  &snapJob{index: idx, cs: proto.Clone(cs).(*raftpb.ConfState)},
	})
	return nil
}

// snapshotInterval is how many applied entries separate two snapshots:
// SnapshotEvery, or as many as the table has records if that is more, up
// to ten times SnapshotEvery. A snapshot writes the whole table, so with a
// fixed interval its cost per entry grew with the table (a table of
// 900,000 locks was written every 10,000 entries). The cap bounds the other
// side of the trade: the log entries kept in memory between snapshots
// (raftlog keeps every entry after the compaction point).
func (f *fsmJobs) snapshotInterval() uint64 {
	return max(f.snapEvery, min(uint64(f.fsm.Records()), 10*f.snapEvery))
}

// hold holds a raft log write m: a restore is under way, or m carries a
// snapshot with data, which starts one.
func (f *fsmJobs) hold(m *raftpb.Message) {
	f.held = append(f.held, m)
	if f.restore != nil {
		return
	}
	md := m.Snapshot.GetMetadata()
	f.restore = &restoreJob{index: md.GetIndex(), cs: md.GetConfState()}
	if !f.busy {
		f.startRestore()
	} // else startPending starts it once the committer is free
}

// startRestore hands the pending restore to the committer.
func (f *fsmJobs) startRestore() {
	f.restore.sent = true
	f.send(&fsmJob{restore: f.restore})
}

// done records that the committer finished the job in flight without
// error; the loop then calls startPending. A restore's table went in
// before (finishRestore, when the committer's reader verified it): done is
// the end of its write to locks.db.
func (f *fsmJobs) done() {
	f.busy, f.job = false, nil
}

// startPending starts a restore that waited for the committer.
func (f *fsmJobs) startPending() {
	if r := f.restore; r != nil && !r.sent {
		f.startRestore()
	}
}

// release ends the restore under way and returns the raft log writes held
// for it, in order.
func (f *fsmJobs) release() []*raftpb.Message {
	held := f.held
	f.restore, f.held = nil, nil
	return held
}

// committer does the jobs. Its fields are set once, at start; the lock
// table's files are its own while a job runs (the loop reads only the
// in-memory table meanwhile).
type committer struct {
	dir     string // the snapshot files
	fsm     *lockfsm.FSM
	storage raftlog.Log
	keep    uint64 // CompactKeep: raft log entries kept behind a snapshot
	log     *slog.Logger
	k       *knobs.Node
	stop    <-chan struct{} // the node is stopping

	jobs     chan *fsmJob     // from the loop; capacity 1, one in flight
	done     chan error       // each job's outcome, to the loop
	restored chan *restoreJob // a restore's table, read and verified, to the loop; unbuffered
}

// run is the committer: it runs the jobs the loop prepares, one at a
// time, and reports each outcome back to the loop, until the node stops
// (stop) or the loop exits (loopDone).
func (c *committer) run(loopDone <-chan struct{}) {
	for {
		select {
		case j := <-c.jobs:
			var err error
			switch {
			case j.restore != nil:
				err = c.restore(j.restore, loopDone)
			default:
				err = c.fsm.WriteCommit(j.batch)
				if err == nil && j.snap != nil {
					err = c.writeSnapshot(j.snap)
				}
			}
			select {
			case c.done <- err:
			case <-c.stop:
				return
			}
		case <-c.stop:
			return
		case <-loopDone:
			return
		}
	}
}

// writeSnapshot runs steps 2 to 4 of a snapshot (snapshot.go) for j, once
// its batch is committed.
func (c *committer) writeSnapshot(j *snapJob) error {
	c.k.StallSnapshot(c.stop)
	path := transport.SnapshotPath(c.dir, j.index)
	var applied uint64
	if err := writeSnapshotFile(path, func(w *bufio.Writer) (err error) {
		applied, err = c.fsm.WriteDurableSnapshot(w)
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
	if _, err := c.storage.CreateSnapshot(j.index, j.cs, desc[:]); err != nil {
		if errors.Is(err, raft.ErrSnapOutOfDate) {
			return nil // a newer snapshot (received from the leader) is in place
		}
		return err
	}
	if j.index > c.keep {
		if err := c.storage.Compact(j.index - c.keep); err != nil && !errors.Is(err, raft.ErrCompacted) {
			return err
		}
	}
	removeOldSnapshots(c.dir, j.index)
	c.log.Debug("snapshot taken", "index", j.index)
	return nil
}

// restore reads and verifies the snapshot file of a restore from the
// leader's snapshot and rewrites locks.db with it, both at once: a goroutine
// reads and verifies while this one puts what it has read into one bbolt
// transaction (at a million names each half takes seconds). The reader hands
// the verified table to the loop (restored), which swaps it in and goes on
// applying while this goroutine finishes the file: memory is then ahead of
// locks.db, as between two commits, and the received snapshot file, durable
// since it was adopted, is what a crash before the commit restores from
// again (recover). The transaction commits only once the whole file is
// verified and the loop has the table.
func (c *committer) restore(j *restoreJob, loopDone <-chan struct{}) error {
	start := time.Now()
	f, err := os.Open(transport.SnapshotPath(c.dir, j.index))
	if err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, j.index, err)
	}
	defer f.Close()
	type read struct {
		rs  *lockfsm.Restored
		err error
	}
	runs := newRunQueue()
	done := make(chan read, 1)
	go func() {
		rs, err := lockfsm.ReadRestoreTo(f, runs.push)
		runs.close()
		if err == nil && rs.Applied() != j.index {
			err = fmt.Errorf("the file holds the lock table at %d", rs.Applied())
		}
		if err == nil {
			j.rs, j.read = rs, time.Since(start)
			select {
			case c.restored <- j:
			case <-c.stop:
				err = errRestoreStopped
			case <-loopDone:
				err = errRestoreStopped
			}
		}
		done <- read{rs, err}
	}()
	// WriteRestoreFrom takes every run and asks for the verdict whatever
	// happens, so the reader has finished with f when it returns.
	err = c.fsm.WriteRestoreFrom(runs.pop, func() (*lockfsm.Restored, error) {
		r := <-done
		if r.err == nil {
			c.k.StallSnapshot(c.stop) // a slow disk holds the commit, not the table
			select {
			case <-c.stop:
				r.err = errRestoreStopped // as a crash would: the file keeps its old table
			default:
			}
		}
		return r.rs, r.err
	})
	if err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, j.index, err)
	}
	c.log.Info("lock table file rewritten from the leader's snapshot", "index", j.index,
		"read", j.read.Round(time.Millisecond), "written", time.Since(start).Round(time.Millisecond))
	return nil
}

// errRestoreStopped: the node stopped before a restore's write committed.
var errRestoreStopped = errors.New("the node stopped")

// runQueue hands a restore's runs of records from its reader to its writer,
// in order. It is unbounded, so that the reader, which verifies the file
// and builds the table the loop swaps in, never waits for bbolt: the runs
// are all kept until the write's transaction commits anyway (bbolt refers
// to the bytes it is given until then).
type runQueue struct {
	mu     sync.Mutex
	runs   []*lockfsm.RestoreRecords
	closed bool
	wake   chan struct{} // capacity 1: a push or the close since the last pop looked
}

func newRunQueue() *runQueue { return &runQueue{wake: make(chan struct{}, 1)} }

func (q *runQueue) push(rr *lockfsm.RestoreRecords) {
	q.mu.Lock()
	q.runs = append(q.runs, rr)
	q.mu.Unlock()
	q.signal()
}

// close: no more runs.
func (q *runQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *runQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop waits for the next run; false once the queue is closed and empty.
func (q *runQueue) pop() (*lockfsm.RestoreRecords, bool) {
	for {
		q.mu.Lock()
		if len(q.runs) > 0 {
			rr := q.runs[0]
			q.runs[0] = nil
			q.runs = q.runs[1:]
			q.mu.Unlock()
			return rr, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		<-q.wake
	}
}

// recover brings the lock table up to the raft snapshot if a crash came
// between saving a received snapshot and restoring the table from it. It
// runs at start, before the committer and the loop.
func (c *committer) recover() error {
	snap, err := c.storage.Snapshot()
	if err != nil {
		return fmt.Errorf("%w: %v", lockerr.ErrDataDir, err)
	}
	index := snap.GetMetadata().GetIndex()
	if index == 0 || c.fsm.AppliedIndex() >= index || len(snap.GetData()) == 0 {
		// No snapshot, already applied, or the bootstrap snapshot (empty
		// Data: an empty lock table).
		return nil
	}
	c.log.Info("restoring lock table from snapshot", "index", index, "applied", c.fsm.AppliedIndex())
	f, err := os.Open(transport.SnapshotPath(c.dir, index))
	if err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, index, err)
	}
	defer f.Close()
	if err := c.fsm.Restore(f); err != nil {
		return fmt.Errorf("%w: snapshot %d: %v", lockerr.ErrDataDir, index, err)
	}
	if got := c.fsm.AppliedIndex(); got != index {
		return fmt.Errorf("%w: snapshot %d holds the lock table at index %d", lockerr.ErrDataDir, index, got)
	}
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

// removeOldSnapshots keeps the newest two of the snapshot files in dir (one
// may be streaming to a follower while the next is written) and every file
// above newest: a snapshot above this node's own newest one can only have
// come from a leader, and it may be waiting for the loop to restore it.
// Once restored and later superseded by an own snapshot, it goes too.
func removeOldSnapshots(dir string, newest uint64) {
	entries, err := os.ReadDir(dir)
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
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
