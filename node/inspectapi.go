package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
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
	type res struct {
		v  views.LockView
		ok bool
	}
	reply := make(chan res, 1)
	err := n.readTable(ctx, opts, func() {
		li, ok := n.fsm.Lock(name)
		if !ok {
			reply <- res{}
			return
		}
		reply <- res{n.lockView(li, n.sessionNodes()), true}
	})
	if err != nil {
		return views.LockView{}, false, err
	}
	select {
	case r := <-reply:
		return r.v, r.ok, nil
	case <-ctx.Done():
		return views.LockView{}, false, context.Cause(ctx)
	case <-n.donec:
		return views.LockView{}, false, n.stoppedErr()
	}
}

// InspectLocks lists the names that start with prefix, sorted, at most limit
// (1..MaxPageLimit; 0 means 100) after the continuation token after ("" for
// the first page). The page is read in one loop turn (one pass over the
// table: O(names), about 50 ns of CPU a name: lockfsm BenchmarkScan), so a page is consistent; pages of
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
	reply := make(chan views.LocksPage, 1)
	err := n.readTable(ctx, opts, func() {
		infos, more := n.fsm.LocksPage(prefix, after, limit)
		nodes := n.sessionNodes()
		p := views.LocksPage{Locks: make([]views.LockView, 0, len(infos)), Applied: n.fsm.AppliedIndex(), ServedBy: views.MemberID(n.id)}
		for _, li := range infos {
			p.Locks = append(p.Locks, n.lockView(li, nodes))
		}
		if more && len(infos) > 0 {
			p.Next = infos[len(infos)-1].Name
		}
		reply <- p
	})
	if err != nil {
		return views.LocksPage{}, err
	}
	select {
	case p := <-reply:
		return p, nil
	case <-ctx.Done():
		return views.LocksPage{}, context.Cause(ctx)
	case <-n.donec:
		return views.LocksPage{}, n.stoppedErr()
	}
}

// readTable runs fn in the loop, after a ReadIndex round unless stale.
func (n *Node) readTable(ctx context.Context, opts ReadOptions, fn func()) error {
	if opts.Stale {
		return n.do(ctx, fn)
	}
	return n.linearRead(ctx, fn)
}

func (n *Node) stoppedErr() error {
	if err := n.err(); err != nil {
		return err
	}
	return lockerr.ErrClosed
}

// sessionNodes maps every open session to its node (loop).
func (n *Node) sessionNodes() map[uint64]uint64 {
	ss := n.fsm.Sessions()
	m := make(map[uint64]uint64, len(ss))
	for _, s := range ss {
		m[s.Session] = s.Node
	}
	return m
}

// lockView converts one table entry (loop).
func (n *Node) lockView(li lockfsm.LockInfo, nodes map[uint64]uint64) views.LockView {
	v := views.LockView{Name: li.Name, Primitive: li.Primitive.String(), Delayed: li.Delayed,
		Waiters: make([]views.WaiterView, 0, len(li.Waiters))}
	if li.Primitive == lockfsm.PrimSemaphore {
		v.Permits, v.PermitsInUse = li.Permits, li.PermitsInUse
	}
	if li.Primitive == lockfsm.PrimElection {
		v.Value = li.Value
	}
	for _, hi := range li.Holds {
		h := views.HolderView{Owner: hi.Owner, Session: hi.Session, Member: views.MemberID(nodes[hi.Session]), Token: hi.Token,
			HoldCount: hi.HoldCount, Mode: modeName(li.Primitive, hi.Mode), Permits: hi.Permits,
			Names: slices.Clone(hi.Names), GrantedAt: n.appliedAt(hi.Token), LeaseMillis: hi.LeaseMillis}
		if hi.LeaseMillis > 0 {
			filed := li.Name // the leader files a multi-name hold's lease under its first name
			if len(hi.Names) > 0 {
				filed = hi.Names[0]
			}
			if at, ok := n.loop.lease.LeaseDeadline(filed, hi.Token, hi.Session, hi.Owner); ok {
				h.ExpiresAt = at
			}
		} else if at, ok := n.loop.lease.SessionDeadline(hi.Session); ok {
			h.ExpiresAt = at
		}
		v.Holds = append(v.Holds, h)
	}
	if len(v.Holds) > 0 {
		first := v.Holds[0]
		v.Holder = &first
	}
	for i, w := range li.Waiters {
		v.Waiters = append(v.Waiters, views.WaiterView{Position: i + 1, Owner: w.Owner, Session: w.Session,
			Member: views.MemberID(nodes[w.Session]), Enqueued: w.Enqueued, EnqueuedAt: n.appliedAt(w.Enqueued),
			LeaseMillis: w.LeaseMillis, Mode: modeName(li.Primitive, w.Mode), Permits: w.Permits, Value: w.Value,
			Names: slices.Clone(w.Names)})
	}
	return v
}

// modeName is a hold's or waiter's mode as the views show it: "read" or
// "write" on a read-write lock, "" on other primitives.
func modeName(p lockfsm.Primitive, m lockfsm.Mode) string {
	if p != lockfsm.PrimRW {
		return ""
	}
	if m == lockfsm.ModeShared {
		return "read"
	}
	return "write"
}

// appliedAt dates an applied index (loop).
func (n *Node) appliedAt(index uint64) time.Time {
	return n.loop.times.when(index, n.loop.lastApplied, n.clock.Now())
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
	reply := make(chan views.MembersView, 1)
	if err := n.do(ctx, func() { reply <- n.membersView() }); err != nil {
		return views.MembersView{}, err
	}
	select {
	case v := <-reply:
		return v, nil
	case <-ctx.Done():
		return views.MembersView{}, context.Cause(ctx)
	case <-n.donec:
		return views.MembersView{}, n.stoppedErr()
	}
}

// membersView builds this node's view (loop).
func (n *Node) membersView() views.MembersView {
	st := n.rn.Status()
	v := views.MembersView{Leader: views.MemberID(n.loop.leader), Term: st.GetTerm(), ServedBy: views.MemberID(n.id), FromLeader: n.loop.isLeader,
		Commit: st.GetCommit()}
	byID := map[uint64]*views.MemberView{}
	get := func(id uint64) *views.MemberView {
		m := byID[id]
		if m == nil {
			m = &views.MemberView{ID: views.MemberID(id), Role: views.RoleLight}
			byID[id] = m
		}
		return m
	}
	cs := n.loop.confState
	for _, id := range cs.GetVoters() {
		get(id).Role = views.RoleVoter
	}
	for _, id := range cs.GetVotersOutgoing() {
		get(id).Role = views.RoleVoter
	}
	for _, id := range cs.GetLearners() {
		get(id).Role = views.RoleLearner
	}
	for _, m := range n.cfg.Members {
		if mv := byID[m.ID]; mv != nil {
			mv.RaftAddr = m.Addr
		}
	}
	get(n.id).RaftAddr = n.addr
	if n.ml != nil {
		for _, gm := range n.ml.Members() {
			id := gm.Meta.RaftID
			if old := byID[id]; old != nil && old.Gossip == membership.StateAlive.String() && gm.State != membership.StateAlive {
				continue // a stale entry of a restarted member under another name
			}
			if gm.State == membership.StateLeft && byID[id] == nil {
				continue // left for good and not in the configuration
			}
			m := get(id)
			m.RaftAddr, m.GossipName, m.GossipAddr, m.Gossip = gm.Meta.RaftAddr, gm.Name, gm.Addr, gm.State.String()
		}
	}
	last := uint64(0)
	if n.loop.isLeader {
		if pr, ok := st.Progress[n.id]; ok {
			last = pr.Match
		}
		v.LastIndex = last
	}
	for id, m := range byID {
		m.Leader = id == n.loop.leader
		gossipOK := m.Gossip == "" || m.Gossip == membership.StateAlive.String()
		switch {
		case m.Role == views.RoleLight:
			m.Healthy = gossipOK && m.Gossip != ""
		case n.loop.isLeader:
			pr, ok := st.Progress[id]
			m.Healthy = gossipOK && ok && (pr.RecentActive || n.peerActive(id, n.clock.Now()))
			if ok {
				m.Match, m.LagKnown = pr.Match, true
				m.Lag = last - min(last, pr.Match)
			}
		default:
			m.Healthy = gossipOK && (m.Gossip != "" || id == n.id || id == n.loop.leader)
		}
		v.Members = append(v.Members, *m)
	}
	slices.SortFunc(v.Members, func(a, b views.MemberView) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return v
}

// Serving reports what readiness needs: this node's session id (0 until it
// is open) and the leader it knows (0: none). Lock-free; safe anywhere.
func (n *Node) Serving() (session, leader uint64, err error) {
	return n.sess.Load(), n.lead.Load(), n.err()
}
