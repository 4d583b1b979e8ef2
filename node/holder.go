package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node/internal/callerr"
)

// The holder side of S5 ("holder knows first"): a Hold's Context ends no
// later than the moment the cluster could grant its lock to someone else by
// expiry.
//
// Time. Every deadline here is a time.Time read from the node Clock and kept
// whole, so comparisons use its monotonic reading and a wall-clock step (NTP,
// a VM resume, date -s) moves none of them. Never store one as UnixNano or
// rebuild it with time.Unix: that drops the monotonic reading, and Before,
// After and Sub then compare wall clocks (review finding 2; the planted bug
// knobs.Node.WallClockDeadline does exactly that). The clock assumption is
// only that monotonic clocks run at rates within DriftRatio of each other.
//
// Deadlines. The session's is the send time of the last acknowledged
// keepalive plus the TTL, minus the drift margin (holderDeadline). A lock
// with its own lease has the lease's: its start on this node (the Acquire's
// first send, then each acknowledged renewal's send) plus the lease, minus
// its margin (grantLease.deadline). Both start no later than the leader's
// own deadline for the same thing (the leader counts from when it received
// the keepalive, or applied the grant, or received the renewal).
//
// Timers. Every Hold's Context is a child of its session's context (and of
// its grant's lease context), and a Clock timer per session and per leased
// grant cancels that context when the deadline passes: from the timer's
// goroutine, whatever the loop is doing (a long fsync, a snapshot, a GC
// pause of the loop alone). The loop then catches up: checkOwnSession, run
// on every tick too, gives the session up, fails its calls and opens a new
// one, or drops the lease's handles from the registry.
//
// Hand-out. A Hold is never handed out live after its deadline: newHold
// checks the session's deadline where the Hold is made, and a leased grant
// whose start this node cannot date closely (granted from the queue, a
// retained Duplicate result, a result re-learned through fwd-status, or one
// whose lease counted from the Acquire's first send has already run out) is
// first re-based by one renewal (confirmLeasedGrant), or given back.

// holderDeadline is when this node must consider its session lost: the send
// time of the last acknowledged keepalive plus the TTL, minus the drift
// margin (S5), on the node's monotonic clock.
func (n *Node) holderDeadline() time.Time {
	return n.k.Deadline(n.lastAcked.Load().Add(n.cfg.SessionTTL - n.cfg.holderMargin()))
}

// watchOwnSession gives the session just opened its context, the parent of
// every Hold of the session, and arms the timer that cancels it
// (lockerr.ErrSessionExpired) at the holder deadline.
func (n *Node) watchOwnSession() {
	s := &n.loop.own
	ctx, cancel := context.WithCancelCause(context.Background())
	s.ctx, s.cancel = ctx, cancel
	(&deadlineWatch{n: n, ctx: ctx, deadline: n.holderDeadline,
		expire: func() { cancel(lockerr.ErrSessionExpired) }}).start()
}

// endSessionCtx ends the session's context: it was given up, reset or closed.
func (s *ownSession) endSessionCtx(cause error) {
	if s.cancel != nil {
		s.cancel(cause)
	}
	s.ctx, s.cancel = nil, nil
}

// deadlineWatch calls expire once deadline() has passed, from a Clock
// timer, unless ctx (which expire cancels) ended first. The deadline may move
// forward meanwhile (acknowledged keepalives, renewals): the timer, armed for
// the deadline it last saw, then finds the later one and re-arms, so an
// acknowledgement costs nothing here.
type deadlineWatch struct {
	n        *Node
	ctx      context.Context
	deadline func() time.Time
	expire   func()
	mu       sync.Mutex
	stop     func() bool
}

func (w *deadlineWatch) start() {
	w.check()
	context.AfterFunc(w.ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.stop != nil {
			w.stop()
		}
	})
}

func (w *deadlineWatch) check() {
	if w.ctx.Err() != nil {
		return
	}
	select {
	case <-w.n.donec:
		return // stopped: stop* already ended every handle
	default:
	}
	now, d := w.n.clock.Now(), w.deadline()
	if !now.Before(d) {
		// At the deadline, not only after it: a timer armed for d fires at
		// d, and on a clock that does not move on by itself (the
		// simulation's) re-arming for 0 would fire again at the same
		// instant for ever. Giving up at d is the holder's side of S5 too.
		w.expire()
		// The loop catches up at once if it is free, else on its next
		// tick: it gives the session up (or drops the lease's handles).
		w.n.tryDo(func() { w.n.checkOwnSession(w.n.clock.Now()) })
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() == nil {
		w.stop = w.n.clock.AfterFunc(d.Sub(now), w.check)
	}
}

// checkOwnSession runs every tick, before every applied batch and wherever a
// grant may be handed out: the loop's side of S5. It gives the session up
// when its deadline passed (or its timer already did) and drops the handles
// of leases that ran out.
func (n *Node) checkOwnSession(now time.Time) {
	s := &n.loop.own
	if s.id != 0 && !s.closing && (now.After(n.holderDeadline()) || (s.ctx != nil && s.ctx.Err() != nil)) {
		n.log.Warn("session keepalives unacknowledged for too long; treating locks as lost",
			"session", s.id, "last_acked_send", n.lastAcked.Load())
		n.resetSession(lockerr.ErrSessionExpired)
		return
	}
	kept := s.leased[:0]
	for _, g := range s.leased {
		if g.ctx.Err() == nil && now.After(g.deadline()) {
			g.cancel(lockerr.ErrLeaseExpired)
		}
		if g.ctx.Err() == nil {
			kept = append(kept, g)
			continue
		}
		if hl := n.loop.holds.held[g.key]; hl != nil && hl.lease == g {
			n.loop.holds.lose(g.key, lockerr.ErrLeaseExpired)
		}
	}
	clear(s.leased[len(kept):])
	s.leased = kept
}

// grantLease is the holder side of a lock's own lease (an Acquire with a
// lease). It belongs to the grant, not to a Hold: reentrant Holds of the
// same grant share it, as lockfsm keeps one lease per lock.
type grantLease struct {
	n            *Node
	key          holdKey // the hold it is the lease of
	filed        string  // the name the leader files the lease under: the granting request's (first) name
	lease        time.Duration
	base         laterTime // when the lease started counting here: the Acquire's first send, then each acknowledged renewal's send
	ctx          context.Context
	cancel       context.CancelCauseFunc
	watchStarted bool // loop
}

// newGrantLease starts the holder side of a new leased grant of node n,
// counted from base; its context (the parent of the grant's Holds) is a
// child of the session's.
func newGrantLease(n *Node, session context.Context, key holdKey, filed string, lease time.Duration, base time.Time) *grantLease {
	g := &grantLease{n: n, key: key, filed: filed, lease: lease}
	g.base.Advance(base)
	g.ctx, g.cancel = context.WithCancelCause(session)
	return g
}

// deadline is the holder-side end of the lease: its start plus the lease,
// minus twice the drift share of the lease and a tick.
func (g *grantLease) deadline() time.Time {
	margin := time.Duration(2*g.n.cfg.DriftRatio*float64(g.lease)) + g.n.cfg.TickInterval
	return g.n.k.Deadline(g.base.Load().Add(g.lease - margin))
}

// start starts checking the lease (loop): on the loop's ticks and with a
// timer of its own that cancels the grant's Holds at the deadline.
func (g *grantLease) start() {
	if g.watchStarted {
		return
	}
	g.watchStarted = true
	g.n.loop.own.leased = append(g.n.loop.own.leased, g)
	(&deadlineWatch{n: g.n, ctx: g.ctx, deadline: g.deadline,
		expire: func() { g.cancel(lockerr.ErrLeaseExpired) }}).start()
}

// leaseDeadline is the Hold's lease deadline (zero without a lease).
func (h *Hold) leaseDeadline() time.Time {
	if h.lease == nil {
		return time.Time{}
	}
	return h.lease.deadline()
}

// handOut completes the granted Acquire o with its Hold (loop), checking the
// holder-side deadlines where the Hold is made. A grant that arrives after
// the session's deadline (a late push or fwd-status, a retry's retained
// result) is never handed out live: the call fails with lockerr.ErrSessionExpired,
// and the session is given up (its close releases the grant). A leased grant
// whose start this node cannot date closely (undated: from the queue, a
// Duplicate, re-learned; or its lease counted from the Acquire's first send
// already ran out) is re-based by one renewal before the call returns
// (confirmLeasedGrant), or given back as for a cancelled Lock.
func (n *Node) handOut(o *op, token uint64, undated bool) {
	r := &n.loop.ops
	h, fresh, err := n.newHold(o, token)
	if err != nil {
		delete(r.queued, o.cmd.Seq)
		r.complete(o, opResult{err: err})
		n.checkOwnSession(n.clock.Now())
		return
	}
	if fresh && (undated || n.clock.Now().After(h.lease.deadline())) {
		r.queued[o.cmd.Seq] = o // the renewal settles it, or abandon if the caller gives up first
		n.confirmLeasedGrant(o, h)
		return
	}
	if h.lease != nil {
		// A fresh lease starts here; a shared one is already watched,
		// unless its first Hold is still being confirmed: watch it now,
		// as this Hold is handed out.
		h.lease.start()
	}
	delete(r.queued, o.cmd.Seq)
	r.complete(o, opResult{hold: h})
}

// confirmLeasedGrant: before the Lock call returns, one renewal re-bases a
// leased grant's lease on a send time this node knows; if it fails the grant
// is undone as for a cancelled Lock, so the caller never holds a lease it
// could not date (S5). Until then o stays in the queued registry with
// o.granted set, so a second report of the same grant (a push and a
// fwd-status) makes no second Hold.
func (n *Node) confirmLeasedGrant(o *op, h *Hold) {
	o.granted = h
	timeout := min(h.lease.lease/2, n.cfg.electionTimeout())
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := h.Renew(ctx)
		cancel()
		_ = n.do(context.Background(), func() { n.onLeasedGrantConfirmed(o, h, err) })
	}()
}

func (n *Node) onLeasedGrantConfirmed(o *op, h *Hold, err error) {
	r := &n.loop.ops
	o.granted = nil
	if r.queued[o.cmd.Seq] != o {
		// The caller gave up (its Cancel releases the grant) or the
		// session was given up (its close does).
		h.lease.cancel(context.Canceled)
		return
	}
	if err == nil && h.endCause() == nil && !n.clock.Now().After(h.lease.deadline()) {
		delete(r.queued, o.cmd.Seq)
		h.lease.start()
		r.complete(o, opResult{hold: h})
		return
	}
	if err == nil {
		err = errors.New("lease ran out before the grant could be handed out")
	}
	n.log.Warn("leased grant could not be confirmed; giving it back", "name", h.name, "err", err)
	h.lease.cancel(lockerr.ErrLeaseExpired)
	done := o.done
	n.abandon(o) // proposes the Cancel that releases this grant
	n.loop.holds.lose(h.key(), lockerr.ErrLeaseExpired)
	if done != nil {
		finish(done, o, opResult{err: callerr.GivenBack(err)})
	}
}
