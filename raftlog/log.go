package raftlog

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Log is what the node needs from a raft log engine: raft's reads plus the durable
// writes. Both engines implement it with the same semantics (see [Storage.Save] and the
// package documentation): [*Storage] (bbolt, one transaction = two fsyncs per write) and
// [*WAL] (append-only segments, one write + one fdatasync per write).
type Log interface {
	raft.Storage
	Save(snap *raftpb.Snapshot, hs *raftpb.HardState, ents []*raftpb.Entry) error
	CreateSnapshot(i uint64, cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error)
	Compact(index uint64) error
	// SetConfState records cs, the configuration after applying the entry at
	// index (call it after every ApplyConfChange); InitialState returns it
	// until a snapshot is installed through Save.
	SetConfState(cs *raftpb.ConfState, index uint64) error
	// ConfIndex is the index up to which InitialState's ConfState reflects
	// every configuration change in the log: the index given with the stored
	// ConfState, or the snapshot's if that is newer or none is stored (0 for
	// a ConfState stored without one). On restart raft re-delivers committed
	// entries after its applied index, and a configuration change at or
	// below ConfIndex must not be applied again: on top of a newer
	// configuration it would move back to an older one.
	ConfIndex() uint64
	HasState() bool
	Bootstrap(cs *raftpb.ConfState) error
	Close() error
}

var (
	_ Log = (*Storage)(nil)
	_ Log = (*WAL)(nil)
)

// nextSnapshot checks that a snapshot at i may replace cur (i newer than cur,
// not past last) and builds it with i's term, cs (or cur's ConfState) and a
// copy of data. Both engines store what it returns.
func nextSnapshot(cur *raftpb.Snapshot, last, i uint64, term func(uint64) (uint64, error),
	cs *raftpb.ConfState, data []byte) (*raftpb.Snapshot, error) {
	if i <= cur.GetMetadata().GetIndex() {
		return nil, raft.ErrSnapOutOfDate
	}
	if i > last {
		return nil, fmt.Errorf("raftlog: snapshot %d is out of bound last index %d", i, last)
	}
	t, err := term(i)
	if err != nil {
		return nil, err
	}
	snap := proto.Clone(cur).(*raftpb.Snapshot)
	snap.Metadata.Index, snap.Metadata.Term = new(i), new(t)
	if cs != nil {
		snap.Metadata.ConfState = proto.Clone(cs).(*raftpb.ConfState)
	}
	snap.Data = append([]byte(nil), data...)
	return snap, nil
}
