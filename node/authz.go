package node

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lockraft/lockraft/internal/views"
	"github.com/lockraft/lockraft/lockfsm"
	"github.com/lockraft/lockraft/transport"
)

// Authorisation of what members ask the leader to do
//
// A member acts only on what is its own. The leader proposes a lock command
// on a member's behalf (a raft follower's forwarded MsgProp, a light
// member's FwdPropose) only if its kind is in forwardedKinds and the
// command's owner, as the leader's lock table says, is the calling member's
// authenticated id; it extends, renews or reports only the caller's own
// sessions and holds. Kinds the leader proposes itself (expiry, lease
// expiry, lifting a lock delay, session checkpoints) and configuration
// changes are never proposed on a member's word.
//
// The check runs when the command is proposed, against what the leader
// knows of the session (sessionOwner): a member learns its session id only
// once the session's opening is committed, and the leader knows every
// committed entry. Commands of a session the leader cannot place yet are held
// back (the member retries); those of a session owned by another member are
// refused; those of a session that is closed pass (lockfsm answers
// ErrNoSession). A session opened after the check cannot be one the check let
// through: its id would be beyond the commit index then.

// ownerRule says which field of a command names the member it belongs to.
type ownerRule uint8

const (
	bySession ownerRule = iota + 1 // Command.Session's node (lock table)
	byNode                         // Command.Node itself (opening a session)
)

// forwardedKinds is the one allow-list of the lock commands a member may
// have the leader propose for it. A new member-issued, sequenced kind is
// added here with the field that names its owner; a kind missing here is
// refused.
var forwardedKinds = map[lockfsm.Kind]ownerRule{
	lockfsm.KindOpenSession:  byNode,
	lockfsm.KindCloseSession: bySession,
	lockfsm.KindAcquire:      bySession,
	lockfsm.KindRelease:      bySession,
	lockfsm.KindCancel:       bySession,
	// The lock catalogue: Acquire and Release above carry its fields
	// (Primitive, Mode, Permits, Limit, Value, ExtraNames) under the same
	// rule, the session's; a Proclaim changes the value of an election the
	// session leads.
	lockfsm.KindProclaim: bySession,
}

var (
	// errNotYours: the command or call concerns another member's session or
	// hold.
	errNotYours = fmt.Errorf("%w: not the caller's own", transport.ErrPermissionDenied)
	// errKindRefused: a kind no member may have proposed for it.
	errKindRefused = fmt.Errorf("%w: command kind not forwardable", transport.ErrPermissionDenied)
	// errUnknownSession: the leader's table does not have the session (yet).
	errUnknownSession = errors.New("lockraft: session unknown to the leader")
	// errBadTTL: a session TTL outside [1 ms, maxSessionTTL].
	errBadTTL = fmt.Errorf("%w: session TTL out of range", transport.ErrInvalidRequest)
	// errUndecodable, errTooLarge: a forwarded command that is not one.
	errUndecodable = fmt.Errorf("%w: undecodable command", transport.ErrInvalidRequest)
	errTooLarge    = fmt.Errorf("%w: command over %d bytes", transport.ErrInvalidRequest, maxCommandSize)
)

// authorise decides whether member from may have the leader propose cmd
// (loop, leader): its own, and within its quotas (privilege.Quotas).
func (n *Node) authorise(from uint64, cmd *lockfsm.Command) error {
	if err := authoriseCommand(from, cmd, n.sessionOwner, n.k.FollowerExpiry); err != nil {
		return err
	}
	return n.quota.Admit(from, cmd, n.fsm)
}

// authoriseCommand is authorise on a given view of the sessions (owner says
// whose a session is, as sessionOwner): the pure rule, fuzzed by
// FuzzFwdPropose. followerExpiry admits the planted bug's expiries.
func authoriseCommand(from uint64, cmd *lockfsm.Command, owner func(uint64) (uint64, bool), followerExpiry bool) error {
	rule, ok := forwardedKinds[cmd.Kind]
	if !ok {
		if cmd.Kind == lockfsm.KindExpireSession && followerExpiry {
			return nil // the planted bug proposes expiries from followers on purpose
		}
		return fmt.Errorf("%w: %v from %016x", errKindRefused, cmd.Kind, from)
	}
	switch rule {
	case byNode:
		if cmd.Node != from {
			return fmt.Errorf("%w: %v for member %016x by %016x", errNotYours, cmd.Kind, cmd.Node, from)
		}
		if cmd.Kind == lockfsm.KindOpenSession && !validTTL(cmd.TTLMillis) {
			return fmt.Errorf("%w: %d ms", errBadTTL, cmd.TTLMillis)
		}
		return nil
	case bySession:
		return sessionOf(from, cmd.Session, owner)
	}
	return errKindRefused
}

// ownsSession: nil if session belongs to member from, or is not open and
// never can be (lockfsm answers a command for it with ErrNoSession, which is
// harmless); errNotYours if it belongs to another member; errUnknownSession
// if this node cannot tell yet (loop).
func (n *Node) ownsSession(from, session uint64) error {
	return sessionOf(from, session, n.sessionOwner)
}

func sessionOf(from, session uint64, owner func(uint64) (uint64, bool)) error {
	who, known := owner(session)
	switch {
	case !known:
		return fmt.Errorf("%w: %d", errUnknownSession, session)
	case who != 0 && who != from:
		return fmt.Errorf("%w: session %d is member %016x's, caller is %016x", errNotYours, session, who, from)
	}
	return nil
}

// sessionOwner returns the member session belongs to, 0 if it is not open
// and never can be, and known false if this node cannot tell yet (loop).
//
// A session's id is the index of the entry that opened it. Open in the lock
// table: its node. At or below the applied index and not open: closed, or
// never a session. Committed but not yet applied here (a leader applies a
// little after it commits; with commit hints a follower may apply, learn its
// new session and forward a command before the leader has applied the
// opening): the committed entry at that index says, since it is final.
// Beyond the commit index: a session that may yet open, which no one can
// know of, so no one may act for it now.
func (n *Node) sessionOwner(session uint64) (owner uint64, known bool) {
	if s, ok := n.fsm.Session(session); ok {
		return s.Node, true
	}
	if session <= n.loop.lastApplied {
		return 0, true
	}
	if session > n.rn.BasicStatus().GetCommit() {
		return 0, false
	}
	ents, err := n.storage.Entries(session, session+1, maxCommandSize*2)
	if err != nil || len(ents) != 1 {
		return 0, false
	}
	if e := ents[0]; e.GetType() == raftpb.EntryNormal {
		if cmd, err := lockfsm.DecodeCommand(e.GetData()); err == nil && cmd.Kind == lockfsm.KindOpenSession {
			return cmd.Node, true
		}
	}
	return 0, true
}

// ownsHold: nil unless a hold the renewal may renew belongs to a session of
// another member than from (loop): the holds of name with that token and,
// if the renewal names its holder, that session and owner. Readers and
// semaphore permits granted in one entry share a token and may be several
// members' holds, so a renewal that names no holder is refused if any of
// them is another member's (the leader would renew the lease filed under the
// token whoever's it is). A free name or no such hold is left to the renewal
// itself, which answers "no such hold".
func (n *Node) ownsHold(from uint64, name string, token, session uint64, owner string) error {
	li, ok := n.fsm.Lock(name)
	if !ok {
		return nil
	}
	for _, h := range li.Holds {
		if h.Token != token || (session != 0 && (h.Session != session || h.Owner != owner)) {
			continue
		}
		if err := n.ownsSession(from, h.Session); errors.Is(err, errNotYours) {
			return err
		}
	}
	return nil
}

func validTTL(ms uint64) bool {
	return ms >= 1 && ms <= uint64(maxSessionTTL/time.Millisecond)
}

// refusedCall is the refuse.Log kind of refused node-to-node calls.
const refusedCall = "call"

// refuseCall logs a refused call once per caller and interval and returns
// err for the caller.
func (n *Node) refuseCall(from uint64, call string, err error) error {
	n.tr.Refuse(refusedCall, views.MemberID(from).String(), "call", call, "err", err)
	return err
}
