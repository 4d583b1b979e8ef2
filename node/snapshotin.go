package node

import (
	"fmt"
	"log/slog"
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

// snapInbox holds the files of received snapshots by index until raft's
// verdict (loop).
type snapInbox struct {
	files map[uint64]string

	// Set at start.
	dir string // the node's snapshot directory
	log *slog.Logger
}

// stepSnapshot judges and steps a received MsgSnap whose file is at file
// (loop).
func (n *Node) stepSnapshot(m *raftpb.Message, file string) {
	if !n.members.Allows(m.GetFrom()) || !n.admit(m, n.loop.guard.view(n.rn, n.id)) {
		_ = os.Remove(file)
		return
	}
	n.loop.snapIn.keep(m.GetSnapshot().GetMetadata().GetIndex(), file)
	n.loop.guard.appStepped = true
	n.step([]*raftpb.Message{m})
}

// keep holds file, the snapshot of index, until raft's verdict.
func (b *snapInbox) keep(index uint64, file string) {
	if old, ok := b.files[index]; ok {
		_ = os.Remove(old) // the same snapshot again in one turn: keep the newer file
	}
	if b.files == nil {
		b.files = map[uint64]string{}
	}
	b.files[index] = file
}

// adopt moves the received file of the snapshot raft accepted at index to
// SnapshotPath, before the lock table is restored from it (handleReady).
// Nothing to do for a snapshot not received here.
func (b *snapInbox) adopt(index uint64) error {
	file, ok := b.files[index]
	if !ok {
		return nil
	}
	delete(b.files, index)
	if err := os.Rename(file, transport.SnapshotPath(b.dir, index)); err != nil {
		return fmt.Errorf("received snapshot %d: %w", index, err)
	}
	return syncDir(b.dir)
}

// dropUnaccepted removes the files of received snapshots raft did not
// accept (end of the turn: raft's verdict is in the turn's Readys).
func (b *snapInbox) dropUnaccepted() {
	for index, file := range b.files {
		_ = os.Remove(file)
		delete(b.files, index)
		b.log.Debug("received snapshot not taken by raft; file removed", "index", index)
	}
}
