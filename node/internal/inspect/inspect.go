// Package inspect builds what a node shows operators: the views of a lock
// and of the members (internal/views) from its lock table, raft's status,
// its configuration and gossip, and the roles its metrics count. It only
// converts: the node reads its state inside its loop and hands it over, so
// nothing here touches the node's goroutines, clock or locks.
package inspect

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/membership"
)

// Dates dates what a lock view shows, on the node's clock.
type Dates interface {
	// AppliedAt is when this replica applied index (zero: unknown).
	AppliedAt(index uint64) time.Time
	// LeaseDeadline is when the leader expires the lease filed under filed
	// with token (and, for a shared token, session and owner); ok false
	// unless this node leads and has it.
	LeaseDeadline(filed string, token, session uint64, owner string) (time.Time, bool)
	// SessionDeadline is when the leader expires session; ok as above.
	SessionDeadline(session uint64) (time.Time, bool)
}

// SessionNodes maps every session to its node.
func SessionNodes(ss []lockfsm.SessionInfo) map[uint64]uint64 {
	m := make(map[uint64]uint64, len(ss))
	for _, s := range ss {
		m[s.Session] = s.Node
	}
	return m
}

// Lock is the view of one table entry; nodes maps sessions to their nodes
// (SessionNodes).
func Lock(li lockfsm.LockInfo, nodes map[uint64]uint64, d Dates) views.LockView {
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
			Names: slices.Clone(hi.Names), GrantedAt: d.AppliedAt(hi.Token), LeaseMillis: hi.LeaseMillis}
		if hi.LeaseMillis > 0 {
			filed := li.Name // the leader files a multi-name hold's lease under its first name
			if len(hi.Names) > 0 {
				filed = hi.Names[0]
			}
			if at, ok := d.LeaseDeadline(filed, hi.Token, hi.Session, hi.Owner); ok {
				h.ExpiresAt = at
			}
		} else if at, ok := d.SessionDeadline(hi.Session); ok {
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
			Member: views.MemberID(nodes[w.Session]), Enqueued: w.Enqueued, EnqueuedAt: d.AppliedAt(w.Enqueued),
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

// Node is what a node knows of the members, read in its loop.
type Node struct {
	ID      uint64
	Addr    string // its advertised raft address
	Leader  uint64 // the leader it follows (0: none)
	Leading bool
	Status  raft.Status // raft's full status (progress only on the leader)
	Conf    *raftpb.ConfState
	Static  map[uint64]string   // the static member list's addresses (Config.Members)
	Gossip  []membership.Member // the gossip view (nil without gossip)
	// Active reports whether the leader heard from peer id within the last
	// election timeout (raft's RecentActive alone resets every timeout).
	Active func(id uint64) bool
	// Removed reports whether this node applied id's removal (nil: none).
	Removed func(id uint64) bool
}

// removed says whether id, seen in gossip outside the configuration, was
// removed from it: this node applied its removal, or (on the leader, whose
// configuration is current) it has raft data, which only a member of the
// configuration ever gets. A light member has none.
func removed(n *Node, id uint64, hasData bool) bool {
	return n.Removed != nil && n.Removed(id) || n.Leading && hasData
}

// Members is the node's view of the members with their role, health and
// lag (health and lag only on the leader), sorted by id.
func Members(n *Node) views.MembersView {
	st := &n.Status
	v := views.MembersView{Leader: views.MemberID(n.Leader), Term: st.GetTerm(), ServedBy: views.MemberID(n.ID), FromLeader: n.Leading,
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
	cs := n.Conf
	for _, id := range cs.GetVoters() {
		get(id).Role = views.RoleVoter
	}
	for _, id := range cs.GetVotersOutgoing() {
		get(id).Role = views.RoleVoter
	}
	for _, id := range cs.GetLearners() {
		get(id).Role = views.RoleLearner
	}
	for id, addr := range n.Static {
		if mv := byID[id]; mv != nil {
			mv.RaftAddr = addr
		}
	}
	get(n.ID).RaftAddr = n.Addr
	hasData := map[uint64]bool{}
	for _, gm := range n.Gossip {
		id := gm.Meta.RaftID
		if old := byID[id]; old != nil && old.Gossip == membership.StateAlive.String() && gm.State != membership.StateAlive {
			continue // a stale entry of a restarted member under another name
		}
		if gm.State == membership.StateLeft && byID[id] == nil {
			continue // left for good and not in the configuration
		}
		m := get(id)
		m.RaftAddr, m.GossipName, m.GossipAddr, m.Gossip = gm.Meta.RaftAddr, gm.Name, gm.Addr, gm.State.String()
		hasData[id] = gm.Meta.HasData
	}
	last := uint64(0)
	if n.Leading {
		if pr, ok := st.Progress[n.ID]; ok {
			last = pr.Match
		}
		v.LastIndex = last
	}
	for id, m := range byID {
		m.Leader = id == n.Leader
		gossipOK := m.Gossip == "" || m.Gossip == membership.StateAlive.String()
		switch {
		case m.Role == views.RoleLight && removed(n, id, hasData[id]):
			m.Role, m.Healthy = views.RoleRemoved, false
		case m.Role == views.RoleLight:
			m.Healthy = gossipOK && m.Gossip != ""
		case n.Leading:
			pr, ok := st.Progress[id]
			m.Healthy = gossipOK && ok && (pr.RecentActive || n.Active(id))
			if ok {
				m.Match, m.LagKnown = pr.Match, true
				m.Lag = last - min(last, pr.Match)
			}
		default:
			m.Healthy = gossipOK && (m.Gossip != "" || id == n.ID || id == n.Leader)
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

// Roles counts the members by role as a node's configuration and gossip
// say (light: alive in gossip, not in the configuration, and not removed
// from it: isRemoved, nil for none), and names self's role ("" when
// removed).
func Roles(cs *raftpb.ConfState, gossip []membership.Member, self uint64, light bool, isRemoved func(uint64) bool) (role string, roles map[string]int) {
	roles = map[string]int{views.RoleVoter: len(cs.GetVoters()), views.RoleLearner: len(cs.GetLearners()), views.RoleLight: 0}
	switch {
	case light:
		role = views.RoleLight
	case slices.Contains(cs.GetVoters(), self) || slices.Contains(cs.GetVotersOutgoing(), self):
		role = views.RoleVoter
	case slices.Contains(cs.GetLearners(), self):
		role = views.RoleLearner
	}
	for _, m := range gossip {
		id := m.Meta.RaftID
		if m.State == membership.StateAlive && !slices.Contains(cs.GetVoters(), id) && !slices.Contains(cs.GetLearners(), id) &&
			!slices.Contains(cs.GetVotersOutgoing(), id) && (isRemoved == nil || !isRemoved(id)) {
			roles[views.RoleLight]++
		}
	}
	return role, roles
}
