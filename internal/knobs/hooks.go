package knobs

import (
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/raftlog"
	"github.com/lockraft/lockraft/transport"
)

// The node reads its knobs through these methods: each does what the
// production build does when its knob is unset (and on a nil *Node).

// StartNetwork starts the node's network: gRPC, unless Network stands
// another in.
func (k *Node) StartNetwork(cfg transport.Config) (transport.Network, error) {
	if k != nil && k.Network != nil {
		return k.Network(cfg)
	}
	return transport.Start(cfg)
}

// Wrap passes the node's raft log through WrapLog, if set.
func (k *Node) Wrap(l raftlog.Log) raftlog.Log {
	if k != nil && k.WrapLog != nil {
		return k.WrapLog(l)
	}
	return l
}

// Pause waits while Paused holds the node still (a stopped process).
func (k *Node) Pause(stop <-chan struct{}) {
	if k != nil && k.Paused != nil {
		k.Paused(stop)
	}
}

// PauseTurn runs at the top of every loop turn: LoopPaused (a loop stalled
// on its own), then Paused.
func (k *Node) PauseTurn(stop <-chan struct{}) {
	if k != nil && k.LoopPaused != nil {
		k.LoopPaused(stop)
	}
	k.Pause(stop)
}

// CommitError is FSMCommitError's failure for the next lock-table commit.
func (k *Node) CommitError() error {
	if k != nil && k.FSMCommitError != nil {
		return k.FSMCommitError()
	}
	return nil
}

// StallSnapshot waits while SnapshotStall stalls a snapshot's disk work.
func (k *Node) StallSnapshot(stop <-chan struct{}) {
	if k != nil && k.SnapshotStall != nil {
		k.SnapshotStall(stop)
	}
}

// PushesDropped reports whether DropPushes makes a light member deaf to
// pushes now.
func (k *Node) PushesDropped() bool {
	return k != nil && k.DropPushes != nil && k.DropPushes()
}

// Deadline is a holder-side deadline d as the node compares it: d itself,
// on the monotonic clock; with WallClockDeadline, d without its monotonic
// reading, so comparisons use the wall clock.
func (k *Node) Deadline(d time.Time) time.Time {
	if k != nil && k.WallClockDeadline {
		return d.Round(0)
	}
	return d
}

// StampEntries tells Stages that m's entries passed stage on node.
func (k *Node) StampEntries(node uint64, stage Stage, m *raftpb.Message) {
	if k == nil || k.Stages == nil {
		return
	}
	now := time.Now()
	for _, e := range m.GetEntries() {
		k.Stages.Stamp(node, e.GetIndex(), stage, now)
	}
}

// Returned tells Stages that a caller's command of index (0: none was
// applied for it) is back with its result.
func (k *Node) Returned(node, index uint64, called, proposed time.Time) {
	if k != nil && k.Stages != nil && index != 0 {
		k.Stages.Returned(node, index, called, proposed)
	}
}
