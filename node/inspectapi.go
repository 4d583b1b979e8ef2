package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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

// LockView is one name as the lock table has it.
type LockView struct {
	Name string `json:"name"`
	// Primitive is what the name is: "mutex" (also the names of a
	// multi-name lock), "rwlock", "semaphore" or "election".
	Primitive string `json:"primitive"`
	// Holder is the first hold, as before the lock catalogue (a mutex's or
	// an election's only one); nil: free (delayed, or waited for during a
	// delay).
	Holder *HolderView `json:"holder,omitempty"`
	// Holds are every hold in grant order: a read-write lock's writer or
	// readers, a semaphore's acquisitions; one for a mutex or an election.
	Holds   []HolderView `json:"holds,omitempty"`
	Waiters []WaiterView `json:"waiters"`           // queue order: Waiters[0] is next
	Delayed bool         `json:"delayed,omitempty"` // in its lock-delay after a holder's session expired
	// Semaphore: its size and the permits in use.
	Permits      uint32 `json:"permits,omitempty"`
	PermitsInUse uint32 `json:"permits_in_use,omitempty"`
	// Election: the leader's value.
	Value string `json:"value,omitempty"`
}

// HolderView is one hold of a name.
type HolderView struct {
	Owner     string `json:"owner"`
	Session   uint64 `json:"session"`
	Member    ID     `json:"member"`     // raft id of the node whose session holds it
	Token     uint64 `json:"token"`      // fencing token = the raft index of the granting entry ("since", in log order)
	HoldCount uint32 `json:"hold_count"` // reentrant depth
	// Mode is "read" or "write" for a read-write lock, "" otherwise.
	Mode string `json:"mode,omitempty"`
	// Permits is the semaphore permits this hold takes (0: not a semaphore).
	Permits uint32 `json:"permits,omitempty"`
	// Names are all the names of a multi-name hold (LockAll); empty
	// otherwise.
	Names []string `json:"names,omitempty"`
	// GrantedAt is when the replica that answered applied the grant, to
	// within a quarter second for recent grants (zero: unknown, e.g. granted before
	// that replica started). See applyTimes.
	GrantedAt time.Time `json:"granted_at,omitzero"`
	// LeaseMillis is the hold's own lease (WithLease); 0 when it lives as
	// long as its session.
	LeaseMillis uint64 `json:"lease_ms,omitempty"`
	// ExpiresAt is the leader's current deadline for this hold: its own
	// lease's, or else its session's (pushed back by every keepalive). Known
	// only when the leader answered (light members always ask it); zero
	// otherwise.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// WaiterView is one queued acquire.
type WaiterView struct {
	Position    int       `json:"position"` // 1 = next
	Owner       string    `json:"owner"`
	Session     uint64    `json:"session"`
	Member      ID        `json:"member"`
	Enqueued    uint64    `json:"enqueued"`             // raft index of the acquire that queued it
	EnqueuedAt  time.Time `json:"enqueued_at,omitzero"` // as GrantedAt
	LeaseMillis uint64    `json:"lease_ms,omitempty"`
	Mode        string    `json:"mode,omitempty"`    // "read" or "write" (read-write locks)
	Permits     uint32    `json:"permits,omitempty"` // semaphore permits asked for
	Value       string    `json:"value,omitempty"`   // election: the value it campaigns with
	Names       []string  `json:"names,omitempty"`   // a multi-name acquire: all its names
}

// LocksPage is one page of a listing by prefix.
type LocksPage struct {
	Locks []LockView `json:"locks"`
	// Next, when not empty, is the continuation token: pass it as after to
	// get the next page. Empty: this was the last page.
	Next string `json:"next,omitempty"`
	// Applied is the applied index of the table that was read.
	Applied uint64 `json:"applied"`
	// ServedBy is the raft id of the node whose table was read.
	ServedBy ID `json:"served_by"`
}

// MaxPageLimit bounds InspectLocks' limit.
const MaxPageLimit = 1000

// InspectLock returns one name's holder and waiters; ok is false when the
// name is neither held, waited for nor delayed. Linearizable unless
// opts.Stale. Errors: ErrInvalidName; ErrClosed; ctx's cause (a follower
// that cannot reach a leader waits until ctx ends); on a light member the
// leader call's error (ErrUnavailable when no leader answers).
func (n *Node) InspectLock(ctx context.Context, name string, opts ReadOptions) (LockView, bool, error) {
	if err := validName(name); err != nil {
		return LockView{}, false, err
	}
	if n.light() {
		var out inspectLockReply
		err := n.askLeader(ctx, inspectRequest{Op: "lock", Name: name, Stale: opts.Stale}, &out)
		return out.View, out.Found, err
	}
	type res struct {
		v  LockView
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
		return LockView{}, false, err
	}
	select {
	case r := <-reply:
		return r.v, r.ok, nil
	case <-ctx.Done():
		return LockView{}, false, context.Cause(ctx)
	case <-n.donec:
		return LockView{}, false, n.stoppedErr()
	}
}

// InspectLocks lists the names that start with prefix, sorted, at most limit
// (1..MaxPageLimit; 0 means 100) after the continuation token after ("" for
// the first page). The page is read in one loop turn (one pass over the
// table: O(names), about 50 ns of CPU a name: lockfsm BenchmarkScan), so a page is consistent; pages of
// a changing table may skip or repeat nothing but may each reflect a later
// state. Consistency and errors as InspectLock.
func (n *Node) InspectLocks(ctx context.Context, prefix, after string, limit int, opts ReadOptions) (LocksPage, error) {
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > MaxPageLimit {
		return LocksPage{}, fmt.Errorf("%w: limit %d outside [1, %d]", ErrInvalidConfig, limit, MaxPageLimit)
	}
	if n.light() {
		var out LocksPage
		err := n.askLeader(ctx, inspectRequest{Op: "locks", Prefix: prefix, After: after, Limit: limit, Stale: opts.Stale}, &out)
		return out, err
	}
	reply := make(chan LocksPage, 1)
	err := n.readTable(ctx, opts, func() {
		infos, more := n.fsm.LocksPage(prefix, after, limit)
		nodes := n.sessionNodes()
		p := LocksPage{Locks: make([]LockView, 0, len(infos)), Applied: n.fsm.AppliedIndex(), ServedBy: ID(n.id)}
		for _, li := range infos {
			p.Locks = append(p.Locks, n.lockView(li, nodes))
		}
		if more && len(infos) > 0 {
			p.Next = infos[len(infos)-1].Name
		}
		reply <- p
	})
	if err != nil {
		return LocksPage{}, err
	}
	select {
	case p := <-reply:
		return p, nil
	case <-ctx.Done():
		return LocksPage{}, context.Cause(ctx)
	case <-n.donec:
		return LocksPage{}, n.stoppedErr()
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
	return ErrClosed
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
func (n *Node) lockView(li lockfsm.LockInfo, nodes map[uint64]uint64) LockView {
	v := LockView{Name: li.Name, Primitive: li.Primitive.String(), Delayed: li.Delayed,
		Waiters: make([]WaiterView, 0, len(li.Waiters))}
	if li.Primitive == lockfsm.PrimSemaphore {
		v.Permits, v.PermitsInUse = li.Permits, li.PermitsInUse
	}
	if li.Primitive == lockfsm.PrimElection {
		v.Value = li.Value
	}
	for _, hi := range li.Holds {
		h := HolderView{Owner: hi.Owner, Session: hi.Session, Member: ID(nodes[hi.Session]), Token: hi.Token,
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
		v.Waiters = append(v.Waiters, WaiterView{Position: i + 1, Owner: w.Owner, Session: w.Session,
			Member: ID(nodes[w.Session]), Enqueued: w.Enqueued, EnqueuedAt: n.appliedAt(w.Enqueued),
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

// Member roles.
const (
	RoleVoter   = "voter"
	RoleLearner = "learner"
	RoleLight   = "light" // in gossip, not in the raft configuration: forwards to the leader
)

// MemberView is one member as the leader (or, failing that, this node) sees
// it.
type MemberView struct {
	ID         ID     `json:"id"`
	Role       string `json:"role"`
	Leader     bool   `json:"leader,omitempty"`
	RaftAddr   string `json:"raft_addr,omitempty"`
	GossipName string `json:"gossip_name,omitempty"`
	GossipAddr string `json:"gossip_addr,omitempty"`
	// Gossip is the member's gossip state ("alive", "failed", "left"; ""
	// without gossip).
	Gossip string `json:"gossip,omitempty"`
	// Healthy: for voters and learners, the leader heard from it within the
	// last election timeout (raft's RecentActive) and gossip (if any) says
	// alive; for light members, gossip says alive. Only the leader knows
	// raft health: from another node it is the gossip state alone.
	Healthy bool `json:"healthy"`
	// Match is the highest log index known replicated to it, and Lag the
	// leader's last index minus Match; both only when the leader answered
	// (LagKnown) and only for voters and learners.
	Match    uint64 `json:"match,omitempty"`
	Lag      uint64 `json:"lag,omitempty"`
	LagKnown bool   `json:"lag_known,omitempty"`
}

// MembersView is the cluster's membership.
type MembersView struct {
	Leader ID     `json:"leader"` // 0: none known
	Term   uint64 `json:"term"`
	// ServedBy is the node that answered; FromLeader whether that is the
	// leader (only the leader knows raft health and lag).
	ServedBy   ID           `json:"served_by"`
	FromLeader bool         `json:"from_leader"`
	Commit     uint64       `json:"commit"`
	LastIndex  uint64       `json:"last_index"`
	Members    []MemberView `json:"members"` // by raft id
}

// InspectMembers returns the members with their role, health and lag. A
// node that is not the leader asks the leader (the only one that knows raft
// health and lag); if the leader cannot be reached, or with opts.Stale, it
// answers from its own view (FromLeader false). Errors: ErrClosed, ctx's
// cause.
func (n *Node) InspectMembers(ctx context.Context, opts ReadOptions) (MembersView, error) {
	if !opts.Stale && n.Leader() != 0 && n.Leader() != n.id {
		var out MembersView
		if err := n.askLeader(ctx, inspectRequest{Op: "members"}, &out); err == nil {
			return out, nil
		} else if ctx.Err() != nil {
			return MembersView{}, err
		}
	}
	reply := make(chan MembersView, 1)
	if err := n.do(ctx, func() { reply <- n.membersView() }); err != nil {
		return MembersView{}, err
	}
	select {
	case v := <-reply:
		return v, nil
	case <-ctx.Done():
		return MembersView{}, context.Cause(ctx)
	case <-n.donec:
		return MembersView{}, n.stoppedErr()
	}
}

// membersView builds this node's view (loop).
func (n *Node) membersView() MembersView {
	st := n.rn.Status()
	v := MembersView{Leader: ID(n.loop.leader), Term: st.GetTerm(), ServedBy: ID(n.id), FromLeader: n.loop.isLeader,
		Commit: st.GetCommit()}
	byID := map[uint64]*MemberView{}
	get := func(id uint64) *MemberView {
		m := byID[id]
		if m == nil {
			m = &MemberView{ID: ID(id), Role: RoleLight}
			byID[id] = m
		}
		return m
	}
	cs := n.loop.confState
	for _, id := range cs.GetVoters() {
		get(id).Role = RoleVoter
	}
	for _, id := range cs.GetVotersOutgoing() {
		get(id).Role = RoleVoter
	}
	for _, id := range cs.GetLearners() {
		get(id).Role = RoleLearner
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
		case m.Role == RoleLight:
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
	slices.SortFunc(v.Members, func(a, b MemberView) int {
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

// ID is a raft id. In JSON and text it is 16 hex digits, as in logs, gossip
// names and profile labels (a JSON number would lose precision above 2^53
// in many readers).
type ID uint64

// String is the 16-digit hex form.
func (id ID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts hex with or
// without 0x.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	*id = v
	return err
}

// ParseID parses a raft id written in hex (with or without 0x), as ID prints
// it.
func ParseID(s string) (ID, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || s == "" {
		return 0, fmt.Errorf("%w: bad member id %q (want hex, as lockraftctl members shows)", ErrInvalidConfig, s)
	}
	return ID(v), nil
}
