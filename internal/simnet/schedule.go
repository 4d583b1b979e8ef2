package simnet

import (
	"container/heap"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// The schedule
//
// Everything the network does happens as an event executed by its one
// delivery goroutine (run): a raft message arriving, a snapshot transfer
// arriving, a call arriving at its server, a call's outcome returning, a
// report to a sender. Events are queued by the goroutine that causes them
// (Send, a call, a served call returning) and ordered by their key: the due
// time, then the link that caused them (from, to, channel) and that link's
// sequence number, all of which the causing goroutine decides alone. No
// ordering depends on how goroutines of different links interleave.
//
// The delivery goroutine sleeps until the earliest event is due, plus
// Settle under synctest, then executes events one at a time, each after one
// more Settle, so each finds the bubble quiet. One unit of execution is one
// event, except that the raft messages of one link due at one instant are
// handed to Receive as one batch.

// kind says what an event is.
type kind uint8

const (
	evRaft        kind = iota + 1 // a raft message arriving at to
	evSnap                        // a snapshot transfer arriving at to
	evCall                        // a call arriving at to
	evReply                       // a call's outcome returning to its caller (from)
	evSnapReport                  // a snapshot's outcome returning to its sender (from)
	evUnreachable                 // ReportUnreachable(to) for the sender (from)
)

// backward reports whether the event is for the sender (from) rather than
// the receiver (to): a pause of from holds it.
func (k kind) backward() bool { return k >= evReply }

// event is one queued event. The fields after the key depend on the kind.
type event struct {
	at   time.Time
	from uint64
	to   uint64
	ch   channel // the link's channel, or the report's (channel.go)
	seq  uint64
	kind kind

	src *Endpoint // the sending endpoint (raft, snapshots), or nil
	env envelope  // what the sender's headers carried

	msg  *raftpb.Message // evRaft, evSnap: the receiver's own copy
	lost string          // evRaft, evSnap, evCall: lost on the way, decided when sent

	snapData []byte // evSnap: the file's bytes, read when sent

	call *call         // evCall, evReply
	resp proto.Message // evReply: the answer's copy

	// evSnapReport, evReply, evUnreachable: the outcome.
	failed bool
	code   codes.Code
	why    string
	err    error // evReply: the status error; evUnreachable: the refusal, if any

	back float64 // evSnap, evCall: the draw for the return delay
}

// before orders events by key.
func (a *event) before(b *event) bool {
	switch {
	case !a.at.Equal(b.at):
		return a.at.Before(b.at)
	case a.from != b.from:
		return a.from < b.from
	case a.to != b.to:
		return a.to < b.to
	case a.ch != b.ch:
		return a.ch < b.ch
	}
	return a.seq < b.seq
}

// target is the endpoint id whose handler the event runs.
func (ev *event) target() uint64 {
	if ev.kind.backward() {
		return ev.from
	}
	return ev.to
}

// eventQueue is a min-heap of events by key.
type eventQueue []*event

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].before(q[j]) }
func (q eventQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)        { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return ev
}

// scheduleLocked queues ev. n.mu held; the caller pokes after unlocking.
func (n *Network) scheduleLocked(ev *event) {
	if n.closed {
		return
	}
	heap.Push(&n.queue, ev)
}

// poke wakes the delivery goroutine to look at the queue again.
func (n *Network) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// run is the delivery goroutine.
func (n *Network) run() {
	defer close(n.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// dirty: something may have run since the bubble was last quiet (an
	// event was executed, or a goroutine queued one), so wait Settle even
	// for an event already due.
	dirty := true
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return
		}
		wait := time.Duration(-1)
		if len(n.queue) > 0 {
			now := time.Now()
			next := n.queue[0].at
			due := next
			if !next.After(now) {
				due = now
			}
			if dirty || next.After(now) {
				due = due.Add(n.settle)
			}
			wait = due.Sub(now)
			if wait <= 0 {
				unit := n.popUnitLocked(now)
				n.mu.Unlock()
				if len(unit) > 0 {
					n.execute(unit)
					dirty = true
				}
				continue
			}
		}
		n.mu.Unlock()
		if wait < 0 {
			select {
			case <-n.wake:
				dirty = true
			case <-n.done:
				return
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			dirty = false
		case <-n.wake:
			timer.Stop()
			dirty = true
		case <-n.done:
			timer.Stop()
			return
		}
	}
}

// popUnitLocked takes the next unit of execution due by now: events for a
// paused endpoint are set aside (held) on the way. n.mu held.
func (n *Network) popUnitLocked(now time.Time) []*event {
	for len(n.queue) > 0 && !n.queue[0].at.After(now) {
		ev := heap.Pop(&n.queue).(*event)
		if t := ev.target(); n.paused[t] {
			n.held[t] = append(n.held[t], ev)
			continue
		}
		unit := []*event{ev}
		if ev.kind != evRaft {
			return unit
		}
		for len(n.queue) > 0 {
			nx := n.queue[0]
			if nx.kind != evRaft || !nx.at.Equal(ev.at) || nx.from != ev.from || nx.to != ev.to || nx.src != ev.src {
				break
			}
			unit = append(unit, heap.Pop(&n.queue).(*event))
		}
		return unit
	}
	return nil
}

// execute runs one unit on the delivery goroutine.
func (n *Network) execute(unit []*event) {
	switch ev := unit[0]; ev.kind {
	case evRaft:
		n.deliverRaft(unit)
	case evSnap:
		n.arriveSnapshot(ev)
	case evCall:
		n.arriveCall(ev)
	case evReply:
		n.returnCall(ev)
	case evSnapReport:
		n.reportSnapshot(ev)
	case evUnreachable:
		n.reportUnreachable(ev)
	}
}
