package lockraft

import (
	"context"

	"github.com/lockraft/lockraft/internal/lockerr"
	"github.com/lockraft/lockraft/node"
)

// Inspection: who holds a name, who waits and in which order, which names
// exist under a prefix, which members there are, how healthy and how far
// behind. Nothing here changes state.
//
// Reads are linearizable by default: they reflect every Lock and Unlock
// that returned before the read began, on whichever member serves them.
// Cost: one ReadIndex round (a heartbeat round trip to a quorum, plus one
// hop to the leader from a follower; no log entry, no disk write; reads made
// while a round is out share the next one), then a read of the local table
// inside the node's loop (InspectLocks: one pass over the table, about 20 ns
// a name). Stale() skips the round and reads this replica's table as
// applied, which may lag. A light member holds no table: it asks the leader.

// Errors of the operator actions. Compare with errors.Is; each leaves
// nothing changed.
var (
	// ErrNotLeader: the action needs the leader, and the member asked
	// could not relay it (with TLS, its certificate lacks the operator
	// role); the message names the leader. Outcome: known, nothing changed.
	// Retryable: no, not here: ask the leader.
	ErrNotLeader = lockerr.ErrNotLeader
	// ErrNotMember: no voter or learner with that id (for a transfer: no
	// voter). Outcome: known, nothing changed. Retryable: no, fix the id.
	ErrNotMember = lockerr.ErrNotMember
	// ErrRefused: the action would remove the leader itself or leave fewer
	// healthy voters than a quorum. Outcome: known, nothing changed.
	// Retryable: no, not as is.
	ErrRefused = lockerr.ErrRefused
)

// InspectOption configures one inspection read.
type InspectOption func(*inspectOptions)

type inspectOptions struct{ stale bool }

// Stale reads this replica's table without a ReadIndex round: no round
// trip, works without a leader, but may miss the latest changes.
func Stale() InspectOption { return func(o *inspectOptions) { o.stale = true } }

func readOpts(opts []InspectOption) node.ReadOptions {
	var o inspectOptions
	for _, f := range opts {
		f(&o)
	}
	return node.ReadOptions{Stale: o.stale}
}

// InspectLock returns name's holder (owner, member, token, hold count, when
// granted, lease and, from the leader, its expiry deadline) and its waiters
// in queue order with their positions. found is false when nobody holds,
// waits for or delays the name. Errors: ErrInvalidName, ErrClosed,
// ErrUnavailable (a light member reached no leader), ctx's cause (a
// linearizable read waits for a leader until ctx ends). Safe for concurrent
// use.
func (n *Node) InspectLock(ctx context.Context, name string, opts ...InspectOption) (v LockView, found bool, err error) {
	return n.n.InspectLock(ctx, name, readOpts(opts))
}

// InspectLocks lists the names starting with prefix in name order, at most
// limit (1..MaxPageLimit; 0 means 100) after the continuation token after
// ("" for the first page; then the previous page's Next). Errors as
// InspectLock, and ErrInvalidConfig for a limit out of range.
func (n *Node) InspectLocks(ctx context.Context, prefix, after string, limit int, opts ...InspectOption) (LocksPage, error) {
	return n.n.InspectLocks(ctx, prefix, after, limit, readOpts(opts))
}

// InspectMembers returns every member with its role (voter, learner, light,
// or removed: out of the configuration but still in gossip), health and
// replication lag, and the leader. A node that does not lead asks
// the leader (only it knows raft health and lag); if it cannot, or with
// Stale, it answers from its own view (FromLeader false). Errors: ErrClosed,
// ctx's cause.
func (n *Node) InspectMembers(ctx context.Context, opts ...InspectOption) (MembersView, error) {
	return n.n.InspectMembers(ctx, readOpts(opts))
}

// TransferLeader hands leadership to voter to (0: the most caught-up other
// voter) and returns the new leader once it leads. Any member may be asked
// (as for RemoveMember: ErrNotLeader if it may not ask the leader).
// Leadership moves cost about one election's pause in commits (well under
// an election timeout). Errors: ErrNotMember, ErrNotLeader, ErrUnavailable
// (no leader, or it did not move in time; it may still move), ErrClosed,
// ctx's cause.
func (n *Node) TransferLeader(ctx context.Context, to MemberID) (MemberID, error) {
	l, err := n.n.TransferLeader(ctx, uint64(to))
	return MemberID(l), err
}

// RemoveMember removes voter or learner id from the raft configuration for
// good and returns once the removal is applied. Any member may be asked: a
// member that does not lead asks the leader, which takes operator actions
// from another member only if its certificate has the operator role (with
// TLS): if not, ErrNotLeader names the leader to ask. The leader refuses to
// remove itself or to leave fewer healthy voters than a quorum
// (ErrRefused). A removed member that still runs stops serving (ErrRemoved)
// once told (gossip) — with static members stop its process. A member asked
// to remove itself may lose the leader's answer as it is cut off
// (ErrUnavailable): ask another. Errors: ErrNotLeader, ErrNotMember,
// ErrRefused, ErrUnavailable (no leader, another change pending, or not
// applied in time: it may still apply), ErrClosed, ctx's cause.
func (n *Node) RemoveMember(ctx context.Context, id MemberID) error {
	return n.n.RemoveMember(ctx, uint64(id))
}
