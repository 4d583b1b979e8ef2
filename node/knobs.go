package node

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/knobs"
	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/raftlog"
	"github.com/lockraft/lockraft/transport"
)

// Tests outside this package plant knobs in a Config with knobs.Plant.
func init() {
	knobs.Install(func(cfg any, k *knobs.Node) { cfg.(*Config).knobs = k })
}

// noKnobs is what a node without knobs reads: the production behaviour.
var noKnobs = &knobs.Node{}

// knobsOf returns cfg's knobs, never nil.
func knobsOf(cfg *Config) *knobs.Node {
	if cfg.knobs == nil {
		return noKnobs
	}
	return cfg.knobs
}

// startNetwork starts the node's network: gRPC, unless a knob stands
// another in.
func (n *Node) startNetwork(cfg transport.Config) (transport.Network, error) {
	if f := n.k.Network; f != nil {
		return f(cfg)
	}
	return transport.Start(cfg)
}

// wrapLog passes the node's raft log through the knob's wrapper, if any.
func (n *Node) wrapLog(l raftlog.Log) raftlog.Log {
	if f := n.k.WrapLog; f != nil {
		return f(l)
	}
	return l
}

// paused waits while a knob holds the node still (a stopped process).
func (n *Node) paused() {
	if f := n.k.Paused; f != nil {
		f(n.stopc)
	}
}

// beforeTurn runs at the top of every loop turn: a paused process, or a
// loop stalled on its own.
func (n *Node) beforeTurn() {
	if f := n.k.LoopPaused; f != nil {
		f(n.stopc)
	}
	n.paused()
}

// fsmCommitError is a knob's failure for the next lock-table commit.
func (n *Node) fsmCommitError() error {
	if f := n.k.FSMCommitError; f != nil {
		return f()
	}
	return nil
}

// snapshotStall waits while a knob stalls snapshot writes.
func (n *Node) snapshotStall() {
	if f := n.k.SnapshotStall; f != nil {
		f(n.stopc)
	}
}

// dropPushes: a knob makes this light member deaf to pushes.
func (n *Node) dropPushes() bool {
	f := n.k.DropPushes
	return f != nil && f()
}

// stampEntries tells the stage observer that m's entries passed stage.
func (n *Node) stampEntries(stage knobs.Stage, m *raftpb.Message) {
	s := n.k.Stages
	if s == nil {
		return
	}
	now := time.Now()
	for _, e := range m.GetEntries() {
		s.Stamp(n.id, e.GetIndex(), stage, now)
	}
}

// checkKnobs refuses knobs this build cannot honour.
func checkKnobs(k *knobs.Node) error {
	if k.FSM.Any() && !fsmKnobsBuilt {
		return fmt.Errorf("%w: planted lock-table bugs need a build with -tags lockraft_planted", lockerr.ErrInvalidConfig)
	}
	return nil
}

// stageReturned tells the stage observer that o's result is back (the
// caller's goroutine; the loop set o's fields before it sent the result).
func (n *Node) stageReturned(o *op) {
	if s := n.k.Stages; s != nil && o.index != 0 {
		s.Returned(n.id, o.index, o.calledAt, o.firstProposed)
	}
}
