package node

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockraft/lockraft/lockfsm"
)

// Observing an election (Observe): every change of its leader, in log
// order, pushed from the node's own apply, never polled.
//
// On a raft member (voter or learner) every change is an EventLeader that
// this node applies itself: the loop hands it to the name's observers as it
// applies the entry, so a leader failover of the raft cluster changes
// nothing for them (the log is applied once, in order, whoever leads), and
// an observer sees every change after its first item exactly once. A new
// observer first gets the current leader (lockfsm's FSM.Leader at the
// applied index). After this node's lock table is replaced by a snapshot
// from the leader (it fell far behind), the changes the snapshot covers were
// never applied here: the observers get the current leader if it differs
// from the last one they got (those changes fold into one).
//
// A light member applies nothing: it mirrors the names its observers watch
// from the leader (the Observe call, fwdObserve*). The leader keeps, as every raft
// member does, the recent changes of each election (electionHistory) and
// pushes each new change to the members that subscribed, with the index of
// the change before it; a member that finds a gap (a push lost, or a new
// leader it has not subscribed with yet) asks for the changes after the last
// one it has, and re-subscribes with every new leader and every
// fwdWaitCheck. Only when the leader's history does not reach back that far
// (it restarted, or the election left the table meanwhile) does the member
// get the current leader instead, again only if it differs.

// MaxObserveBacklog is how many changes an observer may have undelivered
// before it is ended with ErrObserveLagged.
const MaxObserveBacklog = 4096

// electionHistoryLen is how many recent changes of each election every raft
// member keeps, for light members that missed a push.
const electionHistoryLen = 64

// LeaderChange is one state of an election: who leads it from the entry
// Index on. Token 0 (and Session 0, Owner ""): nobody leads.
type LeaderChange struct {
	Name    string
	Index   uint64 // the entry that made the change; for a first or folded item, the index it was read at
	Session uint64
	Owner   string
	Token   uint64 // the leader's term: strictly increasing over the election's leaders
	Value   string
}

// Leading reports whether someone leads.
func (c LeaderChange) Leading() bool { return c.Token != 0 }

func (c LeaderChange) same(d LeaderChange) bool {
	return c.Session == d.Session && c.Owner == d.Owner && c.Token == d.Token && c.Value == d.Value
}

// Observer receives the changes of one election's leader. Next is safe for
// use by one goroutine at a time; Close from any.
type Observer struct {
	n      *Node
	name   string
	mu     sync.Mutex
	queue  []LeaderChange
	err    error
	wake   chan struct{} // capacity 1: something queued or ended
	cancel context.CancelFunc
}

// Next returns the next change, blocking until there is one, ctx ends, or
// the observation ended (Close or the Observe context: context.Canceled or
// its cause; the node stopped: ErrClosed or its error; the consumer fell
// MaxObserveBacklog behind: ErrObserveLagged).
func (o *Observer) Next(ctx context.Context) (LeaderChange, error) {
	for {
		o.mu.Lock()
		if len(o.queue) > 0 {
			c := o.queue[0]
			o.queue[0] = LeaderChange{}
			o.queue = o.queue[1:]
			o.mu.Unlock()
			return c, nil
		}
		err := o.err
		o.mu.Unlock()
		if err != nil {
			return LeaderChange{}, err
		}
		select {
		case <-o.wake:
		case <-ctx.Done():
			return LeaderChange{}, context.Cause(ctx)
		}
	}
}

// Close ends the observation; Next then returns context.Canceled once the
// queued changes are taken.
func (o *Observer) Close() { o.cancel() }

// push queues c (loop); false if the observer ended.
func (o *Observer) push(c LeaderChange) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return false
	}
	if len(o.queue) >= MaxObserveBacklog {
		o.err = ErrObserveLagged
		o.queue = nil
	} else {
		o.queue = append(o.queue, c)
	}
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return o.err == nil
}

// end ends the observation with err (the first one wins).
func (o *Observer) end(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// observed is one election name this node's observers watch (loop).
type observed struct {
	observers []*Observer
	last      LeaderChange // the last state delivered
	known     bool         // last is set (a light member: once the leader answered)
	// chain (light members): the index of the leader's last change the
	// mirror has; a push continues the chain only if its previous change
	// is this one.
	chain uint64
}

// electionHistory is a raft member's record of an election's recent
// changes, oldest first (light members' catch-up).
type electionHistory struct{ changes []LeaderChange }

// Observe starts observing the election name: the first change is its
// current leader (or nobody), then every change in log order. The
// observation lasts until ctx ends, Close, or the node stops.
func (n *Node) Observe(ctx context.Context, name string) (*Observer, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	octx, cancel := context.WithCancel(ctx)
	o := &Observer{n: n, name: name, wake: make(chan struct{}, 1), cancel: cancel}
	if err := n.do(ctx, func() { n.addObserver(o) }); err != nil {
		cancel()
		return nil, err
	}
	context.AfterFunc(octx, func() {
		o.end(context.Cause(octx))
		_ = n.do(context.Background(), func() { n.removeObserver(o) })
	})
	return o, nil
}

// addObserver registers o and gives it the current leader (loop).
func (n *Node) addObserver(o *Observer) {
	if err := n.err(); err != nil {
		o.end(err)
		return
	}
	ob := n.loop.observe[o.name]
	if ob == nil {
		ob = &observed{}
		n.loop.observe[o.name] = ob
	}
	ob.observers = append(ob.observers, o)
	if n.light() {
		if ob.known {
			o.push(ob.last)
		} else {
			n.loop.fwd.observeDue = true // ask the leader now
			n.fwdObserveTick(n.clock.Now())
		}
		return
	}
	cur := n.currentLeader(o.name)
	o.push(cur)
	if !ob.known || cur.Index > ob.last.Index {
		ob.last, ob.known = cur, true
	}
}

func (n *Node) removeObserver(o *Observer) {
	ob := n.loop.observe[o.name]
	if ob == nil {
		return
	}
	for i, x := range ob.observers {
		if x == o {
			ob.observers = append(ob.observers[:i], ob.observers[i+1:]...)
			break
		}
	}
	if len(ob.observers) == 0 {
		delete(n.loop.observe, o.name)
	}
}

// currentLeader reads the election's current leader from the lock table.
func (n *Node) currentLeader(name string) LeaderChange {
	c := LeaderChange{Name: name, Index: n.fsm.AppliedIndex()}
	if li, ok := n.fsm.Leader(name); ok {
		c.Session, c.Owner, c.Token, c.Value = li.Holder.Session, li.Holder.Owner, li.Token, li.Value
	}
	return c
}

// deliver hands c to every observer of its name (loop).
func (n *Node) deliver(ob *observed, c LeaderChange) {
	ob.last, ob.known = c, true
	kept := ob.observers[:0]
	for _, o := range ob.observers {
		if o.push(c) {
			kept = append(kept, o)
		}
	}
	clear(ob.observers[len(kept):])
	ob.observers = kept
}

// observeOnEvent records and hands out an election change applied at index
// (loop, every raft member), and pushes it to light members that watch it
// (leader).
func (n *Node) observeOnEvent(index uint64, ev *lockfsm.Event) {
	c := LeaderChange{Name: ev.Name, Index: index, Session: ev.Session, Owner: ev.Owner, Token: ev.Token,
		Value: ev.Value}
	h := n.loop.elections[ev.Name]
	var prev uint64
	if h != nil && len(h.changes) > 0 {
		prev = h.changes[len(h.changes)-1].Index
	}
	if _, inTable := n.fsm.Lock(ev.Name); !inTable && ev.Session == 0 {
		// The election left the table: forget its history (a member that
		// missed this change is told the current state instead).
		delete(n.loop.elections, ev.Name)
	} else {
		if h == nil {
			h = &electionHistory{}
			n.loop.elections[ev.Name] = h
		}
		if len(h.changes) == electionHistoryLen {
			copy(h.changes, h.changes[1:])
			h.changes = h.changes[:electionHistoryLen-1]
		}
		h.changes = append(h.changes, c)
	}
	if ob := n.loop.observe[ev.Name]; ob != nil && !n.light() && (!ob.known || index > ob.last.Index) {
		n.deliver(ob, c)
	}
	if n.loop.isLeader {
		n.fwdPushLeaderChange(c, prev)
	}
}

// observeOnRestored: the lock table was replaced by a snapshot; the changes
// it covers were never applied here (loop).
func (n *Node) observeOnRestored() {
	clear(n.loop.elections)
	for name, ob := range n.loop.observe {
		if cur := n.currentLeader(name); !ob.known || !cur.same(ob.last) {
			n.deliver(ob, cur)
		}
	}
}

// endObservers ends every observation with err (the node stopped).
func (n *Node) endObservers(err error) {
	for name, ob := range n.loop.observe {
		for _, o := range ob.observers {
			o.end(err)
		}
		delete(n.loop.observe, name)
	}
}

// String describes a change for logs and test messages.
func (c LeaderChange) String() string {
	if !c.Leading() {
		return fmt.Sprintf("%s@%d: nobody leads", c.Name, c.Index)
	}
	return fmt.Sprintf("%s@%d: %s (session %d) leads, term %d, value %q", c.Name, c.Index, c.Owner, c.Session,
		c.Token, c.Value)
}
