package node

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/lockfsm"
)

// op is one session command on its way through the log: an Acquire, Release
// or Cancel. The loop gives it the next sequence number of the node's
// session, proposes it, proposes it again (same session and sequence, so
// lockfsm applies it at most once: S6) whenever its result is overdue, and
// completes it from its own node's apply. Nothing is polled.
type op struct {
	cmd lockfsm.Command

	// done is signalled exactly once, after out is set (finish); nil for
	// background ops (a Cancel or a Release whose caller gave up) that
	// nobody waits for. The caller reads out after it receives from done.
	done chan struct{}
	out  opResult

	proposedAt time.Time // zero until proposed; reset on every re-proposal
	// firstProposed: the first proposal (light members ask the leader about
	// an Acquire whose result is overdue).
	firstProposed time.Time
	queued        bool        // an Acquire applied as Queued: awaiting its grant event
	abandoned     bool        // the caller gave up; a Cancel for it is on its way
	parked        bool        // not re-proposed: the Cancel for it settles it
	cancelOf      *op         // for a Cancel: the Acquire it cancels
	hold          holdRequest // an Acquire's lease and first send
	granted       *Hold       // a leased grant being confirmed before it is handed out (holder.go)
	index         uint64      // the entry that carried its result
	calledAt      time.Time   // the caller's call began (StageProbe only)
}

// opResult is what a caller waiting on an op receives.
type opResult struct {
	res  lockfsm.Result
	hold *Hold // for a granted Acquire
	err  error // a node-level failure (closed, session expired)
}

// opRegistry tracks the node's session commands. All fields are owned by the
// loop goroutine.
type opRegistry struct {
	nextSeq uint64
	// inflight: ops whose own result has not been applied yet, by seq.
	inflight map[uint64]*op
	// queued: Acquires applied as Queued, waiting for a grant, by seq.
	queued map[uint64]*op
	// ackedBelow: every seq below it has a known result, so lockfsm may
	// forget their results (this bounds its per-session dedup memory).
	ackedBelow uint64
	// unsessioned: ops submitted before the session was open.
	unsessioned []*op
	scratch     []*op // inSeqOrder's result, reused
}

func (r *opRegistry) init() {
	r.inflight = map[uint64]*op{}
	r.queued = map[uint64]*op{}
	r.nextSeq = 1
	r.ackedBelow = 1
}

// inSeqOrder returns the in-flight ops that want, in the order they were
// called (their seq): re-proposed in that order, a node's commands reach
// the log as its callers made them, whatever the map's order (and a
// simulation's run does not depend on it).
func (r *opRegistry) inSeqOrder(want func(*op) bool) []*op {
	r.scratch = r.scratch[:0]
	for _, o := range r.inflight {
		if want(o) {
			r.scratch = append(r.scratch, o)
		}
	}
	slices.SortFunc(r.scratch, func(a, b *op) int { return cmp.Compare(a.cmd.Seq, b.cmd.Seq) })
	return r.scratch
}

func (r *opRegistry) complete(o *op, out opResult) {
	if o.done != nil {
		finish(o.done, o, out)
		o.done = nil
	}
}

// finish hands out to the caller waiting on done for o.
func finish(done chan<- struct{}, o *op, out opResult) {
	o.out = out
	done <- struct{}{}
}

// newCallerOp is an op for c whose caller waits on its done.
func newCallerOp(c lockfsm.Command) *op {
	return &op{cmd: c, done: make(chan struct{}, 1)}
}

// failAll completes every waiting op with err (node stopped or session lost).
func (r *opRegistry) failAll(err error) {
	for seq, o := range r.inflight {
		r.complete(o, opResult{err: err})
		delete(r.inflight, seq)
	}
	for seq, o := range r.queued {
		r.complete(o, opResult{err: err})
		delete(r.queued, seq)
	}
	for _, o := range r.unsessioned {
		r.complete(o, opResult{err: err})
	}
	r.unsessioned = nil
}

// advanceAck moves ackedBelow past every seq whose result is known. Seqs are
// issued in order, so this is amortised O(1) per op.
func (r *opRegistry) advanceAck() {
	for r.ackedBelow < r.nextSeq {
		if _, busy := r.inflight[r.ackedBelow]; busy {
			return
		}
		r.ackedBelow++
	}
}

// submit enqueues an op from the loop: it is proposed now if the session is
// open, or when it opens.
func (n *Node) submit(o *op) {
	if n.loop.own.id == 0 {
		n.loop.ops.unsessioned = append(n.loop.ops.unsessioned, o)
		return
	}
	n.assignAndPropose(o)
}

func (n *Node) assignAndPropose(o *op) {
	r := &n.loop.ops
	o.cmd.Session = n.loop.own.id
	if err := n.overOwnQuota(&o.cmd); err != nil {
		r.complete(o, opResult{err: err})
		return
	}
	o.cmd.Seq = r.nextSeq
	r.nextSeq++
	r.inflight[o.cmd.Seq] = o
	n.propose(o)
}

// propose (re)proposes an op with the current ackedBelow. A proposal raft
// drops (no leader yet) is retried on a later tick.
func (n *Node) propose(o *op) {
	o.cmd.AckedBelow = n.loop.ops.ackedBelow
	if o.cmd.AckedBelow > o.cmd.Seq {
		o.cmd.AckedBelow = o.cmd.Seq
	}
	data := n.loop.props.encode(&o.cmd)
	o.proposedAt = n.clock.Now()
	if o.firstProposed.IsZero() {
		o.firstProposed = o.proposedAt
	}
	if n.light() {
		n.fwd.Forward(data)
		return
	}
	n.loop.props.add(data, o)
}

// retryProposals re-proposes ops whose result is overdue.
func (n *Node) retryProposals(now time.Time) {
	for _, o := range n.loop.ops.inSeqOrder(func(o *op) bool {
		return !o.parked && (o.proposedAt.IsZero() || now.Sub(o.proposedAt) >= n.cfg.RetryInterval)
	}) {
		n.propose(o)
	}
	n.retrySessionOpen(now)
	if n.light() {
		n.fwd.Tick(now)
	}
}

// reproposeAll re-proposes every in-flight op (after a leader change).
func (n *Node) reproposeAll() {
	if n.loop.leader == 0 {
		return
	}
	for _, o := range n.loop.ops.inSeqOrder(func(o *op) bool { return !o.parked }) {
		n.propose(o)
	}
	n.retrySessionOpen(time.Time{})
}

// onSessionOpen proposes the ops that waited for a session.
func (n *Node) onSessionOpen() {
	pending := n.loop.ops.unsessioned
	n.loop.ops.unsessioned = nil
	for _, o := range pending {
		if o.abandoned {
			n.loop.ops.complete(o, opResult{err: lockerr.ErrClosed})
			continue
		}
		n.assignAndPropose(o)
	}
}

// onResult routes the result of one of this node's commands to its waiter.
func (n *Node) onResult(index uint64, cmd *lockfsm.Command, res lockfsm.Result) {
	switch cmd.Kind {
	case lockfsm.KindLiftDelay:
		n.loop.lease.OnLiftDelay(cmd)
	case lockfsm.KindCheckpoint:
		n.loop.lease.OnCheckpoint(cmd, n.clock.Now())
		return
	}
	switch cmd.Kind {
	case lockfsm.KindCloseSession, lockfsm.KindExpireSession, lockfsm.KindEndSessionRun:
		if res.Err == nil {
			n.onSessionEndApplied(cmd)
		}
	}
	if cmd.Kind == lockfsm.KindCloseSession && res.Err != nil {
		// Already gone (expired, or closed by an earlier copy): stop
		// proposing its close; if it was ours and we are closing, done.
		s := &n.loop.own
		delete(s.toClose, cmd.Session)
		if cmd.Session == s.id && s.closing {
			n.onOwnSessionEnded(&lockfsm.Event{Kind: lockfsm.EventSessionEnded, Session: cmd.Session,
				Reason: lockfsm.ReasonSessionClosed})
		}
		return
	}
	if cmd.Session == 0 || cmd.Session != n.loop.own.id {
		return
	}
	r := &n.loop.ops
	o, ok := r.inflight[cmd.Seq]
	if !ok {
		return // a duplicate of something already completed
	}
	if o.abandoned && cmd.Kind == lockfsm.KindAcquire {
		// Its Cancel settles it; until that is applied the Acquire stays
		// unacknowledged so lockfsm still holds its result.
		o.parked = true
		return
	}
	delete(r.inflight, cmd.Seq)
	o.index = index
	if m := n.cfg.Metrics; m != nil && m.Commit != nil && !o.firstProposed.IsZero() {
		m.Commit(n.clock.Now().Sub(o.firstProposed))
	}
	switch cmd.Kind {
	case lockfsm.KindAcquire:
		n.onAcquireResult(o, res)
	case lockfsm.KindRelease, lockfsm.KindProclaim:
		r.complete(o, opResult{res: res})
	case lockfsm.KindCancel:
		if o.cancelOf != nil {
			// The cancelled Acquire's outcome is now settled in lockfsm.
			delete(r.inflight, o.cancelOf.cmd.Seq)
		}
	}
	r.advanceAck()
}

// abandon is called when the caller of an Acquire gave up (context done).
// Unless the Acquire is already settled as granted, a Cancel makes sure it
// leaves nothing behind (S4): it removes the waiter, or releases the level
// the Acquire added if the grant raced the cancellation, or, if the Acquire
// was never applied, leaves a tombstone so a late copy of it has no effect.
// An Acquire whose result is still unknown stays unacknowledged until the
// Cancel is applied, so lockfsm still knows what became of it.
func (n *Node) abandon(o *op) {
	if o.abandoned {
		return
	}
	o.abandoned = true
	o.done = nil
	if o.cmd.Seq == 0 {
		return // never proposed: onSessionOpen drops it
	}
	r := &n.loop.ops
	_, inflight := r.inflight[o.cmd.Seq]
	_, queued := r.queued[o.cmd.Seq]
	if !inflight && !queued {
		return // settled: the caller either got the hold or an error
	}
	delete(r.queued, o.cmd.Seq)
	if inflight {
		o.parked = true
	}
	c := &op{
		cmd: lockfsm.Command{
			Kind:   lockfsm.KindCancel,
			Name:   o.cmd.Name,
			Owner:  o.cmd.Owner,
			Target: o.cmd.Seq,
		},
		cancelOf: o,
	}
	n.assignAndPropose(c)
}

// overOwnQuota: an Acquire of this raft member's own session beyond its lock
// quota (privilege.Quotas, judged on the table as applied here) fails at
// once with lockerr.ErrQuotaExceeded, on every member alike: the leader
// would refuse it from a follower, whose caller would then wait out its
// context. A light member keeps no table; the leader judges its commands.
func (n *Node) overOwnQuota(c *lockfsm.Command) error {
	if c.Kind != lockfsm.KindAcquire || n.light() {
		return nil
	}
	if err := n.quota.Admit(n.id, c, n.fsm); errors.Is(err, lockerr.ErrQuotaExceeded) {
		return fmt.Errorf("%w: session %d already holds or waits for %d names", lockerr.ErrQuotaExceeded, c.Session, n.quota.Locks)
	}
	return nil
}
