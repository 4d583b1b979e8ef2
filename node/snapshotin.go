package node

import (
	"fmt"
	"os"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/transport"
)

// Received snapshots
//
// The transport receives a snapshot's file under a temporary name of its own
// (one per transfer) and hands the MsgSnap and the file to the loop
// (ReceiveSnapshot). The loop judges the MsgSnap like any remote message
// (from the leader it follows, of the current term, a ConfState raft can
// restore: guard.go), steps it and keeps the file aside. Only if raft
// accepts the snapshot (the next Ready carries it to the appender) is the
// file renamed to SnapshotPath and the lock table restored from it; if raft
// ignores it (stale, or the log already covers it) the file is removed at
// the end of the turn. So a snapshot that raft refuses never replaces a
// local snapshot file, and a crash in between leaves only a temporary file,
// which the transport removes when it starts.

// stepSnapshot judges and steps a received MsgSnap whose file is at file
// (loop).
func (n *Node) stepSnapshot(m *raftpb.Message, file string) {
	if !n.members.Allows(m.GetFrom()) || !n.admit(m) {
		_ = os.Remove(file)
		return
	}
	idx := m.GetSnapshot().GetMetadata().GetIndex()
	if old, ok := n.loop.snapIn[idx]; ok {
		_ = os.Remove(old) // the same snapshot again in one turn: keep the newer file
	}
	if n.loop.snapIn == nil {
		n.loop.snapIn = map[uint64]string{}
	}
	n.loop.snapIn[idx] = file
	n.loop.guard.appStepped = true
	n.step([]*raftpb.Message{m})
}

// adoptSnapshotFile moves the received file of the snapshot raft accepted at
// index to SnapshotPath, before the lock table is restored from it (loop,
// handleReady). Nothing to do for a snapshot not received here.
func (n *Node) adoptSnapshotFile(index uint64) error {
	file, ok := n.loop.snapIn[index]
	if !ok {
		return nil
	}
	delete(n.loop.snapIn, index)
	if err := os.Rename(file, transport.SnapshotPath(n.snapDir, index)); err != nil {
		return fmt.Errorf("received snapshot %d: %w", index, err)
	}
	return syncDir(n.snapDir)
}

// dropUnacceptedSnapshot removes the files of received snapshots raft did
// not accept (loop, end of the turn: raft's verdict is in the turn's Readys).
func (n *Node) dropUnacceptedSnapshot() {
	for idx, file := range n.loop.snapIn {
		_ = os.Remove(file)
		delete(n.loop.snapIn, idx)
		n.log.Debug("received snapshot not taken by raft; file removed", "index", idx)
	}
}
