// Package views declares, once, what lockraft's inspection reads return:
// who holds a name and who waits for it (LockView), a page of names
// (LocksPage), the members (MembersView), and the member id they all print
// (MemberID). Package node fills them; package lockraft gives them their
// public names as type aliases (lockraft.LockView is views.LockView), so
// the admin handler, lockraftctl and the node-to-node inspect call all
// marshal the same types. The JSON names are part of the admin handler's
// output: change them only with that in mind.
//
// The types and their fields are documented here, once. views imports
// nothing of lockraft's but internal/lockerr.
package views

import "time"

// Member roles in MemberView.Role.
const (
	RoleVoter   = "voter"
	RoleLearner = "learner"
	RoleLight   = "light" // in gossip, not in the raft configuration: forwards to the leader
	// RoleRemoved: removed from the raft configuration, still in gossip. It
	// serves nothing (it stopped with ErrRemoved once told, or will); stop
	// it, or restart it with a fresh data directory to join as a new member.
	RoleRemoved = "removed"
)

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
	Role       string   `json:"role"` // RoleVoter, RoleLearner, RoleLight or RoleRemoved
	Leader     bool     `json:"leader,omitempty"`
	RaftAddr   string   `json:"raft_addr,omitempty"`
	GossipName string   `json:"gossip_name,omitempty"`
	GossipAddr string   `json:"gossip_addr,omitempty"`
	// Gossip is the member's gossip state ("alive", "failed", "left"; ""
	// without gossip).
	Gossip string `json:"gossip,omitempty"`
	// Healthy: for voters and learners, the leader heard from it within the
	// last election timeout and gossip (if any) says alive; for light
	// members, gossip says alive; never for a removed member. Only the
	// leader knows raft health: from another member it is the gossip state
	// alone.
	Healthy bool `json:"healthy"`
	// Match is the highest log index known replicated to it, and Lag the
	// leader's last index minus Match; both only when the leader answered
	// (LagKnown) and only for voters and learners.
	Match    uint64 `json:"match,omitempty"`
	Lag      uint64 `json:"lag,omitempty"`
	LagKnown bool   `json:"lag_known,omitempty"`
}
