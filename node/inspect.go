package node

import (
	"bytes"
	"context"
	"time"

	"github.com/lockraft/lockraft/lockfsm"
)

// Status is a point-in-time view of the node for admin pages and tests.
type Status struct {
	ID                uint64
	Leader            uint64
	IsLeader          bool
	Session           uint64
	Applied           uint64
	SnapshotsRestored uint64
	// AppendsSent counts the raft appends (MsgApp carrying entries) this
	// node sent as leader, EntriesSent the entries they carried: their
	// ratio is how well the node batches commands under load.
	AppendsSent, EntriesSent uint64
	// CommitHintsSent counts the commit hints this node sent as leader,
	// CommitHintsUsed the hints that moved its commit index as a follower
	// (commithint.go).
	CommitHintsSent, CommitHintsUsed uint64
}

// Status reads the node's state inside its loop.
func (n *Node) Status(ctx context.Context) (Status, error) {
	reply := make(chan Status, 1)
	err := n.do(ctx, func() {
		reply <- Status{
			ID:                n.id,
			Leader:            n.loop.leader,
			IsLeader:          n.loop.isLeader,
			Session:           n.loop.own.id,
			Applied:           n.fsm.AppliedIndex(),
			SnapshotsRestored: n.snapshotsRestored.Load(),
			AppendsSent:       n.loop.appendsSent,
			EntriesSent:       n.loop.entriesSent,
			CommitHintsSent:   n.loop.hints.sent,
			CommitHintsUsed:   n.loop.hints.used,
		}
	})
	return awaitReply(ctx, n, reply, err, nil)
}

// LastKeepaliveSent is when this node last sent a keepalive for its session
// or a proposal to open one (acknowledged or not), on its clock; zero if
// never. It stays readable after
// Close or Crash: tests and the fault checker measure a crashed holder's
// release from it (L3).
func (n *Node) LastKeepaliveSent() time.Time {
	return n.lastSent.Load()
}

// SessionDeadline is when this node gives its locks up unless a keepalive
// is acknowledged before (S5: counted from the send time of its last
// acknowledged keepalive, less the drift margin). It stays readable after
// Crash: the fault checker compares a crashed holder's deadline with the
// moment its lock was granted to another.
func (n *Node) SessionDeadline() time.Time { return n.holderDeadline() }

// Locks returns this replica's view of the lock table (every name with a
// holder or waiters), sorted by name. It is what this replica has applied,
// not a linearizable read: right after a change it may lag the leader by a
// commit.
func (n *Node) Locks(ctx context.Context) ([]lockfsm.LockInfo, error) {
	reply := make(chan []lockfsm.LockInfo, 1)
	return awaitReply(ctx, n, reply, n.do(ctx, func() { reply <- n.fsm.Locks() }), nil)
}

// TableSnapshot returns the lock table's canonical snapshot bytes and the
// applied index they reflect. Replicas that applied the same index must
// return identical bytes (S7); tests and the fault checker compare them.
func (n *Node) TableSnapshot(ctx context.Context) ([]byte, uint64, error) {
	type out struct {
		b   []byte
		idx uint64
		err error
	}
	reply := make(chan out, 1)
	o, err := awaitReply(ctx, n, reply, n.do(ctx, func() {
		var buf bytes.Buffer
		err := n.fsm.WriteSnapshot(&buf)
		reply <- out{buf.Bytes(), n.fsm.AppliedIndex(), err}
	}), nil)
	if err != nil {
		return nil, 0, err
	}
	return o.b, o.idx, o.err
}
