package raftlog

import (
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
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
