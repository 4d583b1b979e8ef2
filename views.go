package lockraft

import (
	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/node"
)

// Views returned by the inspection API (inspect.go). JSON-ready: the admin
// handler serves them as they are, and lockraftctl reads them; member ids
// are 16-digit hex strings in JSON and text. Each is declared once, in
// internal/views beneath the engine that fills them, with its fields, JSON
// names and methods documented there; the aliases here give them their
// lockraft names, so a LockView from InspectLock and one decoded from the
// admin handler's JSON are the same type.

// MemberID is a member's raft id: 16 hex digits in text and JSON. Its
// String, MarshalText and UnmarshalText print and parse that form
// ([views.MemberID]).
type MemberID = views.MemberID

// ParseMemberID parses a member id written in hex (with or without 0x), as
// MemberID prints it. A bad id is ErrInvalidConfig.
func ParseMemberID(s string) (MemberID, error) { return views.ParseMemberID(s) }

// Member roles in MemberView.Role.
const (
	RoleVoter   = views.RoleVoter   // "voter"
	RoleLearner = views.RoleLearner // "learner"
	RoleLight   = views.RoleLight   // "light": in gossip, not in the raft configuration; forwards to the leader
	RoleRemoved = views.RoleRemoved // "removed": removed from the raft configuration, still in gossip; serves nothing
)

// MaxPageLimit bounds InspectLocks' limit.
const MaxPageLimit = node.MaxPageLimit

// LockView is one name as the lock table has it: its kind, holds, waiters
// in queue order, lock-delay, semaphore permits, election value. Fields:
// [views.LockView].
type LockView = views.LockView

// HolderView is one hold of a name: owner, session, member, fencing token,
// hold count, mode, permits, names, when granted, lease and deadline.
// Fields: [views.HolderView].
type HolderView = views.HolderView

// WaiterView is one queued acquire: its position (1 = next), owner,
// session, member and what it asks for. Fields: [views.WaiterView].
type WaiterView = views.WaiterView

// LocksPage is one page of a listing by prefix (InspectLocks), with the
// continuation token of the next. Fields: [views.LocksPage].
type LocksPage = views.LocksPage

// MembersView is the cluster's membership (InspectMembers): leader, term,
// commit and every member. Fields: [views.MembersView].
type MembersView = views.MembersView

// MemberView is one member as the leader (or, failing that, the member
// asked) sees it: role, addresses, gossip state, health, replication lag.
// Fields: [views.MemberView].
type MemberView = views.MemberView
