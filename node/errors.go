package node

import "errors"

// Sentinel errors returned by the node. The lockraft package re-exports them;
// callers compare with errors.Is. Each comment says whether the outcome of the
// call that returned it is known, and whether retrying is safe.
var (
	// ErrClosed: the node was closed (or is closing). Outcome of an in-flight
	// call: a Lock that returns it leaves nothing behind once the node's
	// session is closed or expires. Not retryable on this node.
	ErrClosed = errors.New("lockraft: node closed")

	// ErrInvalidName: the lock name is empty, longer than MaxNameLen bytes or
	// not valid UTF-8. Nothing was proposed.
	ErrInvalidName = errors.New("lockraft: invalid lock name")

	// ErrInvalidOwner: the owner is longer than MaxOwnerLen bytes or not
	// valid UTF-8. Nothing was proposed.
	ErrInvalidOwner = errors.New("lockraft: invalid owner")

	// ErrInvalidConfig: a Config field is out of range; the message names it.
	ErrInvalidConfig = errors.New("lockraft: invalid config")

	// ErrLocked: TryLock found the name held by another owner. Nothing is held
	// or queued. Safe to retry.
	ErrLocked = errors.New("lockraft: locked by another owner")

	// ErrNotHeld: Unlock of a handle that no longer holds its lock (already
	// unlocked, released by expiry, or its session ended). Nothing changed.
	ErrNotHeld = errors.New("lockraft: lock not held")

	// ErrTooManyHolds: a reentrant acquire would pass the configured maximum
	// hold depth. Nothing changed; the existing holds remain.
	ErrTooManyHolds = errors.New("lockraft: reentrant hold limit reached")

	// ErrAlreadyWaiting: the same owner is already queued for this name (two
	// concurrent Lock calls with one explicit owner). Nothing changed.
	ErrAlreadyWaiting = errors.New("lockraft: owner already waiting for this lock")

	// ErrReleased is the cause of a handle's Context after Unlock released the
	// last hold.
	ErrReleased = errors.New("lockraft: lock released")

	// ErrLeaseExpired is the cause of a handle's Context when the lock's own
	// lease ran out; the cluster may grant it to another owner.
	ErrLeaseExpired = errors.New("lockraft: lock lease expired")

	// ErrSessionExpired: the node's session expired or could no longer be
	// kept alive (no keepalive acknowledged for the TTL, less the drift
	// margin: see Config.SessionTTL for how many failovers a session
	// survives). The cluster may grant the node's locks to other owners.
	//   - A handle's Context cause: the lock is lost.
	//   - A waiting Lock: its wait ended with the session; nothing is held or
	//     queued for it. Safe to retry: the node opens a new session, and the
	//     retry waits for it (bounded by its context).
	//   - Unlock: the session ended while the release was on its way (or
	//     before; the error then also wraps ErrNotHeld). The lock is released
	//     with the session (at once if the node closed it, else at the
	//     cluster's expiry): nothing to retry.
	ErrSessionExpired = errors.New("lockraft: session expired")

	// ErrUnavailable: the node could not reach a working cluster leader in
	// time. For Lock and TryLock the node cancels the request, so nothing is
	// left behind; for Unlock the outcome is unknown and the node keeps
	// retrying the release in the background.
	ErrUnavailable = errors.New("lockraft: cluster unavailable")

	// ErrStorage: a disk write failed. The node stops serving rather than
	// acknowledge anything it could not make durable.
	ErrStorage = errors.New("lockraft: storage failure")

	// ErrRemoved: the cluster removed this node from its configuration (for
	// example while it was down past the dead-member threshold) and it came
	// back with its old raft state. It stops serving; start it with a fresh
	// data directory to rejoin as a new member. Nothing it had was held.
	ErrRemoved = errors.New("lockraft: removed from the cluster; start with a fresh data directory to rejoin")

	// ErrDataDir: the data directory belongs to another node or cluster, is
	// locked by another process, or is corrupt. The message says which.
	ErrDataDir = errors.New("lockraft: unusable data directory")

	// ErrNewerVersion: the raft log holds an entry written by a newer
	// lockraft version than this node runs. The node stops applying at that
	// entry (applying the rest would make its lock table differ from the
	// replicas that understood it) and stops serving; upgrade it and restart
	// it on the same data directory. Nothing past that entry was applied.
	ErrNewerVersion = errors.New("lockraft: log entry from a newer lockraft version; upgrade this member")

	// ErrInternal: the raft loop hit a broken invariant (raft panicked on
	// input that passed validation). The node stopped serving rather than
	// go on with state it can no longer trust; its session expires and its
	// locks move on. The message carries the panic. Restart the node; report
	// the message: it is a bug.
	ErrInternal = errors.New("lockraft: internal error; node stopped")
)
