package node

import (
	"context"
	"time"
)

// Leader changes as the callers see them: the keepalive sender tells a new
// leader at once (and drops a call to the old one), so a healthy session
// loses as little as possible to each failover.

// setLeader records the leader this node sees and wakes whoever waits on a
// change. Called by the loop (and by a light member's forwarding).
func (n *Node) setLeader(id uint64) {
	if n.lead.Swap(id) == id {
		return
	}
	ch := make(chan struct{})
	if old := n.leadEpoch.Swap(&ch); old != nil {
		close(*old)
	}
}

// leaderEpoch returns a channel that is closed at the next leader change.
func (n *Node) leaderEpoch() <-chan struct{} {
	if p := n.leadEpoch.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if n.leadEpoch.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *n.leadEpoch.Load()
}

// ctxDone is a context that is done when ch is closed.
func ctxDone(ch <-chan struct{}) context.Context {
	return chanContext(ch)
}

type chanContext <-chan struct{}

func (c chanContext) Deadline() (deadline time.Time, ok bool) { return }
func (c chanContext) Done() <-chan struct{}                   { return c }
func (c chanContext) Err() error {
	select {
	case <-c:
		return context.Canceled
	default:
		return nil
	}
}
func (c chanContext) Value(any) any { return nil }
