package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/node/internal/forward"
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
// applied index).
//
// A light member applies nothing: it mirrors the names its observers watch
// from the leader (the Observe call, node/internal/forward). Every raft
// member keeps the recent changes of each election, also after the
// election leaves the lock table, and knows which indexes its records cover
// (every change after the index it started or restored a snapshot at,
// except what it trimmed or evicted). The leader pushes each new change to
// the members that subscribed, with the index after which nothing changed
// before it; a member that finds a gap (a push lost, or a new leader it has
// not subscribed with yet) asks for the changes after the index up to which
// it knows them all, and re-subscribes with every new leader and every
// WaitCheck.
//
// No change is ever folded or skipped silently: when this node cannot show
// an observer every change after the last one it got (the leader's records
// do not cover that far back because it restarted or trimmed them, or this
// node's lock table was replaced by a snapshot covering changes it never
// applied), the observation ends with lockerr.ErrObserveLagged, and the caller
// observes again (its first item is then the current leader). An observer
// never gets an index it got before (deliver).

// MaxObserveBacklog is how many changes an observer may have undelivered
// before it is ended with lockerr.ErrObserveLagged.
const MaxObserveBacklog = 4096

// LeaderChange is one state of an election: who leads it from the entry
// Index on. Token 0 (and Session 0, Owner ""): nobody leads. (Its fields
// are forward.Change's, in the same order: each converts to the other.)
type LeaderChange struct {
	Name    string
	Index   uint64 // the entry that made the change; for a first or folded item, the index it was read at
	Session uint64
	Owner   string
	Token   uint64 // the leader's term: strictly increasing over the election's leaders
	Value   string
}

// leading reports whether someone leads.
func (c LeaderChange) leading() bool { return c.Token != 0 }

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
// its cause; the node stopped: lockerr.ErrClosed or its error; the consumer fell
// MaxObserveBacklog behind: lockerr.ErrObserveLagged).
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
		o.err = lockerr.ErrObserveLagged
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
	// chain: the index up to which the observers got every change (the
	// last one delivered, or later on a light member when the leader
	// answered that nothing changed since); a push continues it only if
	// nothing changed between chain and the pushed change.
	chain uint64
}

// Observe starts observing the election name: the first change is its
// current leader (or nobody) as this node has applied it (a follower may
// trail the leader by the entries it has not applied yet: those changes
// follow), then every change in log order. The observation lasts until ctx
// ends, Close, or the node stops (or at once: forward.WrongKind).
func (n *Node) Observe(ctx context.Context, name string) (*Observer, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	octx, cancel := context.WithCancel(ctx)
	o := &Observer{n: n, name: name, wake: make(chan struct{}, 1), cancel: cancel}
	if err := n.do(ctx, func() {
		if err := cmp.Or(n.err(), forward.WrongKind(n.loop.observe.fsm, name)); err != nil {
			o.end(err)
			return
		}
		n.loop.observe.add(o, n.light(), n.clock.Now())
	}); err != nil {
		cancel()
		return nil, err
	}
	context.AfterFunc(octx, func() {
		o.end(context.Cause(octx))
		_ = n.do(context.Background(), func() { n.loop.observe.remove(o) })
	})
	return o, nil
}

// observations are the elections this node's observers watch, by name.
// Owned by the loop.
type observations struct {
	byName map[string]*observed
	lags   uint64 // observations ended with lockerr.ErrObserveLagged because changes could not be shown

	// Set at start.
	fsm *lockfsm.FSM
	fwd *forward.State
}

// add registers o and gives it the current leader; a light member has no
// table and asks the leader.
func (obs *observations) add(o *Observer, light bool, now time.Time) {
	ob := obs.byName[o.name]
	if ob == nil {
		ob = &observed{}
		obs.byName[o.name] = ob
	}
	ob.observers = append(ob.observers, o)
	if light {
		if ob.known {
			o.push(ob.last)
		} else {
			obs.fwd.ObserveNow(now) // ask the leader now
		}
		return
	}
	cur := obs.current(o.name)
	o.push(cur)
	if !ob.known || cur.Index > ob.last.Index {
		ob.last, ob.known = cur, true
		ob.chain = max(ob.chain, cur.Index)
	}
}

func (obs *observations) remove(o *Observer) {
	ob := obs.byName[o.name]
	if ob == nil {
		return
	}
	if i := slices.Index(ob.observers, o); i >= 0 {
		ob.observers = slices.Delete(ob.observers, i, i+1)
	}
	if len(ob.observers) == 0 {
		delete(obs.byName, o.name)
	}
}

// current reads the election's current leader from the lock table.
func (obs *observations) current(name string) LeaderChange {
	return LeaderChange(forward.CurrentLeader(obs.fsm, name))
}

// deliver hands c to every observer of its name; never an index they got
// before.
func (ob *observed) deliver(c LeaderChange) {
	if ob.known && c.Index <= ob.last.Index {
		return
	}
	ob.last, ob.known = c, true
	ob.chain = max(ob.chain, c.Index)
	kept := ob.observers[:0]
	for _, o := range ob.observers {
		if o.push(c) {
			kept = append(kept, o)
		}
	}
	clear(ob.observers[len(kept):])
	ob.observers = kept
}

// onEvent records an election change applied at index (a raft member; the
// leader pushes it to light members that watch it) and hands it out.
func (obs *observations) onEvent(index uint64, ev *lockfsm.Event) {
	if index == 0 {
		return // an event pushed to a light member that just got raft state: it applies its own
	}
	c := LeaderChange{Name: ev.Name, Index: index, Session: ev.Session, Owner: ev.Owner, Token: ev.Token,
		Value: ev.Value}
	obs.fwd.OnLeaderChange(forward.Change(c))
	if ob := obs.byName[ev.Name]; ob != nil {
		ob.deliver(c)
	}
}

// onRestored: the lock table was replaced by a snapshot; the changes it
// covers were never applied here. An observer that got nothing yet gets the
// current leader; one that may have missed changes (the snapshot reaches
// past what it knows) is ended with lockerr.ErrObserveLagged.
func (obs *observations) onRestored() {
	applied := obs.fsm.AppliedIndex()
	obs.fwd.Restored(applied)
	for name, ob := range obs.byName {
		switch {
		case !ob.known:
			ob.deliver(obs.current(name))
		case applied > ob.chain:
			obs.lagged(name, ob)
		}
	}
}

// lagged ends every observation of name with lockerr.ErrObserveLagged: this
// node cannot show them every change after the last they got.
func (obs *observations) lagged(name string, ob *observed) {
	for _, o := range ob.observers {
		o.end(lockerr.ErrObserveLagged)
	}
	delete(obs.byName, name)
	obs.lags++
}

// endAll ends every observation with err (the node stopped).
func (obs *observations) endAll(err error) {
	for name, ob := range obs.byName {
		for _, o := range ob.observers {
			o.end(err)
		}
		delete(obs.byName, name)
	}
}

// String describes a change for logs and test messages.
func (c LeaderChange) String() string {
	if !c.leading() {
		return fmt.Sprintf("%s@%d: nobody leads", c.Name, c.Index)
	}
	return fmt.Sprintf("%s@%d: %s (session %d) leads, term %d, value %q", c.Name, c.Index, c.Owner, c.Session,
		c.Token, c.Value)
}
