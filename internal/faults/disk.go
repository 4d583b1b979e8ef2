package faults

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/raftlog"
)

// storeFaults stalls snapshot writes, fails configuration-state writes and
// rewrites incoming raft messages. The zero value injects nothing.
type storeFaults struct {
	mu      sync.Mutex
	stall   chan struct{} // non-nil: snapshot writes wait until it is closed
	stalled chan struct{} // closed when a snapshot write reaches the stall

	confState setting[error]                                 // non-nil: every SetConfState fails with it
	rewrite   setting[func(*raftpb.Message) *raftpb.Message] // nil: incoming messages as they are
}

// FailWrites makes every following raft log write fail with err (nil heals),
// as a full or failing disk would. The node must stop serving rather than
// acknowledge anything it could not make durable.
func (f *Faults) FailWrites(err error) { f.disk.set(err) }

// FailCommits makes every following lock-table commit (the periodic write
// of lockfsm's dirty records to locks.db) fail with err (nil heals).
func (f *Faults) FailCommits(err error) { f.commit.set(err) }

// StallSnapshots makes the disk work of every following lock-table snapshot
// (the file, its fsyncs, the raft log's snapshot record and compaction) and
// the commit of every restore's rewrite of locks.db (its table is in memory
// by then) wait, as a very slow disk would, until ReleaseSnapshots or the
// node stops. The returned channel is closed once a snapshot or a restore
// reaches the stall.
func (f *Faults) StallSnapshots() <-chan struct{} {
	s := &f.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall == nil {
		s.stall, s.stalled = make(chan struct{}), make(chan struct{})
	}
	return s.stalled
}

// ReleaseSnapshots ends StallSnapshots.
func (f *Faults) ReleaseSnapshots() {
	s := &f.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stall != nil {
		close(s.stall)
		s.stall, s.stalled = nil, nil
	}
}

// snapshotStall blocks while snapshots are stalled (or until stop closes).
func (f *Faults) snapshotStall(stop <-chan struct{}) {
	s := &f.store
	s.mu.Lock()
	stall, stalled := s.stall, s.stalled
	if stalled != nil {
		select {
		case <-stalled:
		default:
			close(stalled)
		}
	}
	s.mu.Unlock()
	awaitGate(stall, stop)
}

// FailConfStates makes every following write of the raft configuration
// (after each applied configuration change) fail with err (nil heals).
func (f *Faults) FailConfStates(err error) { f.store.confState.set(err) }

// RewriteIn passes every incoming raft message (after the blocks) through
// fn, which returns the message to deliver, changed or not, or nil to drop
// it; nil fn stops rewriting. For tests that need one message type or field
// to be lost, such as a follower that hears appends but not commits.
func (f *Faults) RewriteIn(fn func(*raftpb.Message) *raftpb.Message) { f.store.rewrite.set(fn) }

func (s *storeFaults) rewriteIn(msgs []*raftpb.Message) []*raftpb.Message {
	fn := s.rewrite.get()
	if fn == nil {
		return msgs
	}
	kept := msgs[:0]
	for _, m := range msgs {
		if m = fn(m); m != nil {
			kept = append(kept, m)
		}
	}
	return kept
}

// faultyLog is a raft log whose writes fail on demand (FailWrites,
// FailConfStates).
type faultyLog struct {
	raftlog.Log
	f *Faults
}

func (f *Faults) wrapLog(l raftlog.Log) raftlog.Log { return &faultyLog{Log: l, f: f} }

func (l *faultyLog) Save(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) error {
	if err := l.f.disk.get(); err != nil {
		return err
	}
	return l.Log.Save(snap, hs, ents)
}

func (l *faultyLog) SetConfState(cs *raftpb.ConfState, index uint64) error {
	if err := l.f.store.confState.get(); err != nil {
		return err
	}
	return l.Log.SetConfState(cs, index)
}
