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

	// The lock catalogue (read-write locks, semaphores, elections,
	// multi-name locks). Each is deterministic: every replica applying the
	// request refuses it the same way, and nothing changed. None is worth
	// retrying as is.

	// ErrWrongKind: the name is in use as another kind of lock (a mutex
	// taken as a semaphore, a read-write lock released as a mutex, a
	// multi-name lock naming a semaphore, ...). A name's kind lasts while it
	// has a holder, a waiter or a lock-delay.
	ErrWrongKind = errors.New("lockraft: name is in use as another kind of lock")

	// ErrUpgrade: a write acquire by an owner that holds the read side of
	// the same read-write lock. Refused rather than queued, since it could
	// only wait for itself: release the read side first.
	ErrUpgrade = errors.New("lockraft: read-to-write upgrade refused")

	// ErrHoldConflict: the owner already holds the name in a way this
	// request cannot extend: a single-name lock of a name it holds as part
	// of a multi-name lock (or the reverse, or another set), a campaign by
	// the current leader, a semaphore request that could only be granted if
	// the owner released its own permits.
	ErrHoldConflict = errors.New("lockraft: owner already holds the name in a conflicting way")

	// ErrBadPermits: a semaphore size of 0 or above MaxPermits, or a request
	// for no permits or for more than the size. Nothing was proposed (or,
	// if only the cluster could tell, nothing changed).
	ErrBadPermits = errors.New("lockraft: semaphore permits out of range")

	// ErrPermitsMismatch: a semaphore request whose size differs from the
	// size the name was created with (by the request that put it in the
	// table while it still has holders or waiters).
	ErrPermitsMismatch = errors.New("lockraft: semaphore size differs from the name's")

	// ErrTooManyNames: a multi-name lock of more than MaxMultiNames names.
	// Nothing was proposed.
	ErrTooManyNames = errors.New("lockraft: too many names in one multi-name lock")

	// ErrDuplicateName: a multi-name lock naming a name twice. Nothing was
	// proposed.
	ErrDuplicateName = errors.New("lockraft: name repeated in one multi-name lock")

	// ErrInvalidValue: an election value longer than MaxValueLen bytes.
	// Nothing was proposed.
	ErrInvalidValue = errors.New("lockraft: election value too long")

	// ErrOlderMembers: a member of the cluster's configuration runs (or may
	// run) a lockraft version without the lock catalogue, which would apply
	// the request as a no-op while this version applies it: nothing was
	// proposed. The catalogue opens once every configuration member is
	// known to run a version that has it (a rolling upgrade is complete);
	// retry then. The plain mutex is never affected.
	ErrOlderMembers = errors.New("lockraft: a cluster member runs an older lockraft version without this lock kind; finish the upgrade")

	// ErrObserveLagged ends an Observe that cannot be given every change:
	// its consumer fell more than MaxObserveBacklog changes behind, or the
	// node missed changes it cannot replay (a lock table restored from a
	// snapshot; a light member whose leader's records do not reach back,
	// observe.go). Rather than skip a change, the observation stops.
	// Observe again to resume from the current leader.
	ErrObserveLagged = errors.New("lockraft: election observer fell too far behind")
)
