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
	SetConfState(cs *raftpb.ConfState) error
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
