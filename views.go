package lockraft

import (
	"time"

	"github.com/lockraft/lockraft/node"
)

// Views returned by the inspection API (inspect.go). JSON-ready: the admin
// handler serves them as they are; member ids are 16-digit hex strings in
// JSON and text.

// MemberID is a member's raft id. It prints and marshals as 16 hex digits,
// as in logs, gossip names and lockraftctl (a JSON number would lose
// precision above 2^53 in many readers).
type MemberID uint64

// String is the 16-digit hex form.
func (id MemberID) String() string { return node.ID(id).String() }

// MarshalText implements encoding.TextMarshaler.
func (id MemberID) MarshalText() ([]byte, error) { return node.ID(id).MarshalText() }

// UnmarshalText implements encoding.TextUnmarshaler; it accepts hex with or
// without 0x. A bad id is ErrInvalidConfig.
func (id *MemberID) UnmarshalText(b []byte) error {
	v, err := ParseMemberID(string(b))
	*id = v
	return err
}

// ParseMemberID parses a raft id written in hex (with or without 0x), as
// MemberID prints it. A bad id is ErrInvalidConfig.
func ParseMemberID(s string) (MemberID, error) {
	v, err := node.ParseID(s)
	return MemberID(v), err
}

// Member roles in MemberView.Role.
const (
	RoleVoter   = node.RoleVoter   // "voter"
	RoleLearner = node.RoleLearner // "learner"
	RoleLight   = node.RoleLight   // "light": in gossip, not in the raft configuration; forwards to the leader
)

// MaxPageLimit bounds InspectLocks' limit.
const MaxPageLimit = node.MaxPageLimit

// LockView is one name as the lock table has it.
type LockView struct {
	Name string `json:"name"`
	// Primitive is what the name is: "mutex" (also the names of a
	// multi-name lock), "rwlock", "semaphore" or "election".
	Primitive string `json:"primitive"`
	// Holder is the first hold (a mutex's or an election's only one); nil:
	// free (delayed, or waited for during a delay).
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
	Owner     string   `json:"owner"`
	Session   uint64   `json:"session"`
	Member    MemberID `json:"member"`     // the member whose session holds it
	Token     uint64   `json:"token"`      // fencing token = the raft index of the granting entry ("since", in log order)
	HoldCount uint32   `json:"hold_count"` // reentrant depth
	// Mode is "read" or "write" for a read-write lock, "" otherwise.
	Mode string `json:"mode,omitempty"`
	// Permits is the semaphore permits this hold takes (0: not a semaphore).
	Permits uint32 `json:"permits,omitempty"`
	// Names are all the names of a multi-name hold (LockAll); empty
	// otherwise.
	Names []string `json:"names,omitempty"`
	// GrantedAt is when the replica that answered applied the grant, to
	// within a quarter second for recent grants (zero: unknown, e.g. granted
	// before that replica started).
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
	Member      MemberID  `json:"member"`
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
	// ServedBy is the member whose table was read.
	ServedBy MemberID `json:"served_by"`
}

// MembersView is the cluster's membership.
type MembersView struct {
	Leader MemberID `json:"leader"` // 0: none known
	Term   uint64   `json:"term"`
	// ServedBy is the member that answered; FromLeader whether that is the
	// leader (only the leader knows raft health and lag).
	ServedBy   MemberID     `json:"served_by"`
	FromLeader bool         `json:"from_leader"`
	Commit     uint64       `json:"commit"`
	LastIndex  uint64       `json:"last_index"`
	Members    []MemberView `json:"members"` // by raft id
}

// MemberView is one member as the leader (or, failing that, the member
// asked) sees it.
type MemberView struct {
	ID         MemberID `json:"id"`
	Role       string   `json:"role"`
	Leader     bool     `json:"leader,omitempty"`
	RaftAddr   string   `json:"raft_addr,omitempty"`
	GossipName string   `json:"gossip_name,omitempty"`
	GossipAddr string   `json:"gossip_addr,omitempty"`
	// Gossip is the member's gossip state ("alive", "failed", "left"; ""
	// without gossip).
	Gossip string `json:"gossip,omitempty"`
	// Healthy: for voters and learners, the leader heard from it within the
	// last election timeout and gossip (if any) says alive; for light
	// members, gossip says alive. Only the leader knows raft health: from
	// another member it is the gossip state alone.
	Healthy bool `json:"healthy"`
	// Match is the highest log index known replicated to it, and Lag the
	// leader's last index minus Match; both only when the leader answered
	// (LagKnown) and only for voters and learners.
	Match    uint64 `json:"match,omitempty"`
	Lag      uint64 `json:"lag,omitempty"`
	LagKnown bool   `json:"lag_known,omitempty"`
}

func holderView(h node.HolderView) HolderView {
	return HolderView{Owner: h.Owner, Session: h.Session, Member: MemberID(h.Member), Token: h.Token,
		HoldCount: h.HoldCount, Mode: h.Mode, Permits: h.Permits, Names: h.Names, GrantedAt: h.GrantedAt,
		LeaseMillis: h.LeaseMillis, ExpiresAt: h.ExpiresAt}
}

func lockView(v node.LockView) LockView {
	out := LockView{Name: v.Name, Primitive: v.Primitive, Delayed: v.Delayed, Permits: v.Permits,
		PermitsInUse: v.PermitsInUse, Value: v.Value}
	if h := v.Holder; h != nil {
		hv := holderView(*h)
		out.Holder = &hv
	}
	if v.Holds != nil {
		out.Holds = make([]HolderView, 0, len(v.Holds))
	}
	for _, h := range v.Holds {
		out.Holds = append(out.Holds, holderView(h))
	}
	if v.Waiters != nil {
		out.Waiters = make([]WaiterView, 0, len(v.Waiters))
	}
	for _, w := range v.Waiters {
		out.Waiters = append(out.Waiters, WaiterView{Position: w.Position, Owner: w.Owner, Session: w.Session,
			Member: MemberID(w.Member), Enqueued: w.Enqueued, EnqueuedAt: w.EnqueuedAt, LeaseMillis: w.LeaseMillis,
			Mode: w.Mode, Permits: w.Permits, Value: w.Value, Names: w.Names})
	}
	return out
}

func locksPage(p node.LocksPage) LocksPage {
	out := LocksPage{Next: p.Next, Applied: p.Applied, ServedBy: MemberID(p.ServedBy)}
	if p.Locks != nil {
		out.Locks = make([]LockView, 0, len(p.Locks))
	}
	for _, l := range p.Locks {
		out.Locks = append(out.Locks, lockView(l))
	}
	return out
}

func membersView(v node.MembersView) MembersView {
	out := MembersView{Leader: MemberID(v.Leader), Term: v.Term, ServedBy: MemberID(v.ServedBy), FromLeader: v.FromLeader,
		Commit: v.Commit, LastIndex: v.LastIndex}
	if v.Members != nil {
		out.Members = make([]MemberView, 0, len(v.Members))
	}
	for _, m := range v.Members {
		out.Members = append(out.Members, MemberView{ID: MemberID(m.ID), Role: m.Role, Leader: m.Leader,
			RaftAddr: m.RaftAddr, GossipName: m.GossipName, GossipAddr: m.GossipAddr, Gossip: m.Gossip,
			Healthy: m.Healthy, Match: m.Match, Lag: m.Lag, LagKnown: m.LagKnown})
	}
	return out
}
