package node

import (
	"context"
	"fmt"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/node/internal/inspect"
	"github.com/lockraft/lockraft/node/internal/lease"
)

// Inspection: who holds a name, who waits for it and in which order, which
// names exist under a prefix, which members there are and how far behind
// each one is. For on-call engineers (the admin handler, lockraftctl) and
// tests. Nothing here changes state.
//
// Consistency. By default a read is linearizable: it reflects every change
// committed before it began (a ReadIndex round, readindex.go). With
// ReadOptions.Stale it reads this replica's table as applied, which may lag
// the leader by a commit or, on a partitioned follower, by more. A light
// member has no table: it asks the leader (inspectcall.go), which reads
// linearizably unless Stale is set.

// ReadOptions select how an inspection read is served.
type ReadOptions struct {
	// Stale reads this replica's table without a ReadIndex round: no network
	// round trip, but possibly behind the leader.
	Stale bool
}

// MaxPageLimit bounds InspectLocks' limit.
const MaxPageLimit = 1000

// InspectLock returns one name's holder and waiters; ok is false when the
// name is neither held, waited for nor delayed. Linearizable unless
// opts.Stale. Errors: lockerr.ErrInvalidName; lockerr.ErrClosed; ctx's cause (a follower
// that cannot reach a leader waits until ctx ends); on a light member the
// leader call's error (lockerr.ErrUnavailable when no leader answers).
func (n *Node) InspectLock(ctx context.Context, name string, opts ReadOptions) (views.LockView, bool, error) {
	if err := validName(name); err != nil {
		return views.LockView{}, false, err
	}
	if n.light() {
		var out inspectLockReply
		err := n.askLeader(ctx, inspectRequest{Op: "lock", Name: name, Stale: opts.Stale}, &out)
		return out.View, out.Found, err
	}
	r, err := readIn(ctx, n, opts, func() inspectLockReply {
		li, ok := n.fsm.Lock(name)
		if !ok {
			return inspectLockReply{}
		}
		return inspectLockReply{inspect.Lock(li, n.sessionNodes(), n.loop.dates(n.clock)), true}
	})
	return r.View, r.Found, err
}

// InspectLocks lists the names that start with prefix, sorted, at most limit
// (1..MaxPageLimit; 0 means 100) after the continuation token after ("" for
// the first page). The page is read in one loop turn, along the lock
// table file's sorted names (lockfsm.LocksPage: O(log names + limit +
// names changed since the last commit), not a pass over the table: 35 µs
// for a page of 100 of 100,000 names by lockfsm's BenchmarkScan), so a page is consistent; pages of
// a changing table may skip or repeat nothing but may each reflect a later
// state. Consistency and errors as InspectLock.
func (n *Node) InspectLocks(ctx context.Context, prefix, after string, limit int, opts ReadOptions) (views.LocksPage, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > MaxPageLimit {
		return views.LocksPage{}, fmt.Errorf("%w: limit %d outside [1, %d]", lockerr.ErrInvalidConfig, limit, MaxPageLimit)
	}
	if n.light() {
		var out views.LocksPage
		err := n.askLeader(ctx, inspectRequest{Op: "locks", Prefix: prefix, After: after, Limit: limit, Stale: opts.Stale}, &out)
		return out, err
	}
	return readIn(ctx, n, opts, func() views.LocksPage {
		infos, more := n.fsm.LocksPage(prefix, after, limit)
		nodes := n.sessionNodes()
		p := views.LocksPage{Locks: make([]views.LockView, 0, len(infos)), Applied: n.fsm.AppliedIndex(), ServedBy: views.MemberID(n.id)}
		for _, li := range infos {
			p.Locks = append(p.Locks, inspect.Lock(li, nodes, n.loop.dates(n.clock)))
		}
		if more && len(infos) > 0 {
			p.Next = infos[len(infos)-1].Name
		}
		return p
	})
}

// readIn runs f in the loop as readTable does and returns what f gives, or
// ctx's cause, or the error the node stopped with.
func readIn[T any](ctx context.Context, n *Node, opts ReadOptions, f func() T) (T, error) {
	reply := make(chan T, 1)
	return awaitReply(ctx, n, reply, n.readTable(ctx, opts, func() { reply <- f() }), n.stoppedErr)
}

// readTable runs fn in the loop, after a ReadIndex round unless stale.
func (n *Node) readTable(ctx context.Context, opts ReadOptions, fn func()) error {
	if opts.Stale {
		return n.do(ctx, fn)
	}
	return n.linearRead(ctx, fn)
}

// linearRead runs fn inside the loop once this replica has applied
// everything committed before the call (a ReadIndex round). fn must not
// block. linearRead returns once fn has been scheduled or failed; the caller
// waits for fn's own reply. It fails with ctx's cause or lockerr.ErrClosed.
func (n *Node) linearRead(ctx context.Context, fn func()) error {
	return n.do(ctx, func() {
		n.loop.reads.next = append(n.loop.reads.next, pendingRead{ctx: ctx, run: fn})
		n.loop.reads.issue(n.clock.Now())
	})
}

func (n *Node) stoppedErr() error {
	if err := n.err(); err != nil {
		return err
	}
	return lockerr.ErrClosed
}

// sessionNodes maps every open session to its node (loop).
func (n *Node) sessionNodes() map[uint64]uint64 { return inspect.SessionNodes(n.fsm.Sessions()) }

// tableDates dates the lock views (inspect.Dates; loop): when this replica
// applied an index, and the deadlines the leader's lease engine keeps.
type tableDates struct {
	*lease.Engine
	times   *applyTimes
	applied uint64
	clock   Clock
}

// dates is the loop's tableDates, on clock.
func (l *loopState) dates(clock Clock) tableDates {
	return tableDates{Engine: l.lease, times: &l.times, applied: l.lastApplied, clock: clock}
}

func (d tableDates) AppliedAt(index uint64) time.Time {
	return d.times.when(index, d.applied, d.clock.Now())
}

// InspectMembers returns the members with their role, health and lag. A
// node that is not the leader asks the leader (the only one that knows raft
// health and lag); if the leader cannot be reached, or with opts.Stale, it
// answers from its own view (FromLeader false). Errors: lockerr.ErrClosed, ctx's
// cause.
func (n *Node) InspectMembers(ctx context.Context, opts ReadOptions) (views.MembersView, error) {
	if !opts.Stale && n.Leader() != 0 && n.Leader() != n.id {
		var out views.MembersView
		if err := n.askLeader(ctx, inspectRequest{Op: "members"}, &out); err == nil {
			return out, nil
		} else if ctx.Err() != nil {
			return views.MembersView{}, err
		}
	}
	return readIn(ctx, n, ReadOptions{Stale: true}, func() views.MembersView { return inspect.Members(n.inspectNode()) })
}

// inspectNode is what this node knows of the members (loop).
func (n *Node) inspectNode() *inspect.Node {
	in := &inspect.Node{ID: n.id, Addr: n.addr, Leader: n.loop.leader, Leading: n.loop.isLeader, Status: n.rn.Status(),
		Conf: n.loop.confState, Static: map[uint64]string{}, Gossip: n.Members(),
		Active:  func(id uint64) bool { return n.loop.peers.active(id, n.clock.Now()) },
		Removed: n.fleet.MemberSet().Removed}
	for _, m := range n.cfg.Members {
		in.Static[m.ID] = m.Addr
	}
	return in
}

// Serving reports what readiness needs: this node's session id (0 until it
// is open) and the leader it knows (0: none). Lock-free; safe anywhere.
func (n *Node) Serving() (session, leader uint64, err error) {
	return n.sess.Load(), n.lead.Load(), n.err()
}
