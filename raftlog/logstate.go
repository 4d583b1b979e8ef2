package raftlog

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// logState is what both engines keep in memory of a log, whatever holds it on disk, with the rules of
// raft.Storage that depend on it alone. Each engine embeds it and guards it with its own mutex.
type logState struct {
	hardState *raftpb.HardState // nil until one is saved
	confState *raftpb.ConfState // from SetConfState; nil means "use the snapshot's"
	confIndex uint64            // the index confState reflects (0: not recorded)
	snap      *raftpb.Snapshot  // never nil
	// dummyIndex/dummyTerm describe the entry just before FirstIndex: the compaction point.
	dummyIndex, dummyTerm uint64
	last                  uint64 // the last index
}

// initialState is InitialState's answer: copies of the HardState (nil if none was saved) and of the latest
// ConfState (the one of SetConfState, else the snapshot's).
func (ls *logState) initialState() (*raftpb.HardState, *raftpb.ConfState) {
	var hs *raftpb.HardState
	if ls.hardState != nil {
		hs = proto.Clone(ls.hardState).(*raftpb.HardState)
	}
	cs := ls.confState
	if cs == nil {
		cs = raftpb.EnsureConfState(ls.snap.GetMetadata().GetConfState())
	}
	return hs, proto.Clone(cs).(*raftpb.ConfState)
}

// hasState reports whether a HardState, an entry or a snapshot was ever saved.
func (ls *logState) hasState() bool {
	return ls.hardState != nil || ls.last > 0 || ls.snap.GetMetadata().GetIndex() > 0
}

// termBound answers Term(i) where the bounds alone do: raft.ErrCompacted below the compaction point, its
// term at it, raft.ErrUnavailable past the last index. stored reports that i is a stored entry, whose term
// the engine looks up.
func (ls *logState) termBound(i uint64) (term uint64, stored bool, err error) {
	switch {
	case i < ls.dummyIndex:
		return 0, false, raft.ErrCompacted
	case i == ls.dummyIndex:
		return ls.dummyTerm, false, nil
	case i > ls.last:
		return 0, false, raft.ErrUnavailable
	}
	return 0, true, nil
}

// checkEntries checks the range [lo, hi) of Entries: raft.ErrCompacted if lo is at or before the
// compaction point, raft.ErrUnavailable if hi is past the log's end or the log holds no entries.
func (ls *logState) checkEntries(lo, hi uint64) error {
	if lo <= ls.dummyIndex {
		return raft.ErrCompacted
	}
	if hi > ls.last+1 || lo > hi {
		return fmt.Errorf("%w: entries [%d, %d) out of bounds [%d, %d]", raft.ErrUnavailable, lo, hi, ls.dummyIndex+1, ls.last)
	}
	if ls.last == ls.dummyIndex {
		return raft.ErrUnavailable
	}
	return nil
}

// checkCompact checks Compact(index): raft.ErrCompacted at or before the compaction point, an error past
// the last index.
func (ls *logState) checkCompact(index uint64) error {
	if index <= ls.dummyIndex {
		return raft.ErrCompacted
	}
	if index > ls.last {
		return fmt.Errorf("raftlog: compact %d is out of bound last index %d", index, ls.last)
	}
	return nil
}

// saveChanges is what one Save writes, decided against the state before it.
type saveChanges struct {
	snap *raftpb.Snapshot  // the snapshot to install (a copy), or nil
	ents []*raftpb.Entry   // the entries to store, those before the log's start dropped
	hs   *raftpb.HardState // the HardState to store (a copy), or nil when unchanged
	// dummyIndex, dummyTerm and last once snap is installed (the state's own without one), before ents.
	dummyIndex, dummyTerm, last uint64
}

func (c *saveChanges) empty() bool { return c.snap == nil && len(c.ents) == 0 && c.hs == nil }

// planSave decides what Save(snap, hs, ents) changes, with Save's rules: a snapshot not newer than the
// current one gives raft.ErrSnapOutOfDate, entries must be contiguous and attach to the log (once the
// snapshot is installed), and a HardState equal to the stored one is not written again.
func (ls *logState) planSave(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) (saveChanges, error) {
	c := saveChanges{dummyIndex: ls.dummyIndex, dummyTerm: ls.dummyTerm, last: ls.last}
	if snap != nil && !raft.IsEmptySnap(snap) {
		cur, idx := ls.snap.GetMetadata().GetIndex(), snap.GetMetadata().GetIndex()
		if cur != 0 && cur >= idx {
			return saveChanges{}, raft.ErrSnapOutOfDate
		}
		c.snap = raftpb.EnsureSnapshot(proto.Clone(snap).(*raftpb.Snapshot))
		c.dummyIndex, c.dummyTerm, c.last = idx, snap.GetMetadata().GetTerm(), idx
	}
	var err error
	if c.ents, err = trimEntries(ents, c.dummyIndex+1, c.last); err != nil {
		return saveChanges{}, err
	}
	if hs != nil && !(ls.hardState != nil && proto.Equal(hs, ls.hardState)) {
		c.hs = proto.Clone(hs).(*raftpb.HardState)
	}
	return c, nil
}

// trimEntries checks ents are contiguous, drops those before first and checks the rest
// attach to a log ending at last.
func trimEntries(ents []*raftpb.Entry, first, last uint64) ([]*raftpb.Entry, error) {
	if len(ents) == 0 {
		return nil, nil
	}
	lo := ents[0].GetIndex()
	for i, e := range ents {
		if e.GetIndex() != lo+uint64(i) {
			return nil, fmt.Errorf("raftlog: entries not contiguous: index %d at position %d after %d", e.GetIndex(), i, lo)
		}
	}
	if lo+uint64(len(ents))-1 < first {
		return nil, nil
	}
	if lo < first {
		ents = ents[first-lo:]
		lo = first
	}
	if lo > last+1 {
		return nil, fmt.Errorf("raftlog: missing log entries: last is %d, append at %d", last, lo)
	}
	return ents, nil
}

// encodeConfState is what SetConfState(cs, index) stores: a copy of cs and its encoding with index.
func encodeConfState(cs *raftpb.ConfState, index uint64) (*raftpb.ConfState, []byte, error) {
	c := proto.Clone(cs).(*raftpb.ConfState)
	v, err := marshalConfState(c, index)
	return c, v, err
}

// checkBootstrap checks Bootstrap's configuration: at least one voter.
func checkBootstrap(cs *raftpb.ConfState) error {
	if cs == nil || len(cs.GetVoters()) == 0 {
		return fmt.Errorf("raftlog: bootstrap needs at least one voter")
	}
	return nil
}

// bootstrapState is what Bootstrap(cs) stores: a snapshot at index 1, term 1 with ConfState cs and no
// Data, and the HardState {Term: 1, Commit: 1}.
func bootstrapState(cs *raftpb.ConfState) (*raftpb.Snapshot, *raftpb.HardState) {
	snap := &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
		Index: new(uint64(1)), Term: new(uint64(1)), ConfState: proto.Clone(cs).(*raftpb.ConfState),
	}}
	return snap, &raftpb.HardState{Term: new(uint64(1)), Commit: new(uint64(1))}
}
