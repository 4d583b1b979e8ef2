// Package lockerr declares the sentinel errors a caller of lockraft can
// get, once, for the whole module: package node and the packages beneath it
// return them, and package lockraft gives them their public names
// (lockraft.ErrLocked, ...), which are the same values, so errors.Is holds
// whichever name a caller compares with.
//
// Each error is described once, where users read it: at its public name in
// package lockraft (what happened, whether the outcome is known, whether a
// retry is safe). The lines here only group them. The texts are part of
// what callers see; change them only with that in mind.
//
// lockerr imports nothing of lockraft's, so any package of the module can
// use it without an import cycle.
package lockerr

import "errors"

// Every call: lifecycle, input, outcome of a lock (lockraft's api.go).
var (
	ErrClosed         = errors.New("lockraft: node closed")
	ErrInvalidName    = errors.New("lockraft: invalid lock name")
	ErrInvalidOwner   = errors.New("lockraft: invalid owner")
	ErrInvalidConfig  = errors.New("lockraft: invalid config")
	ErrInvalidLease   = errors.New("lockraft: lease too short for the cluster's timings")
	ErrLocked         = errors.New("lockraft: locked by another owner")
	ErrNotHeld        = errors.New("lockraft: lock not held")
	ErrTooManyHolds   = errors.New("lockraft: reentrant hold limit reached")
	ErrAlreadyWaiting = errors.New("lockraft: owner already waiting for this lock")
	ErrReleased       = errors.New("lockraft: lock released")
	ErrLeaseExpired   = errors.New("lockraft: lock lease expired")
	ErrSessionExpired = errors.New("lockraft: session expired")
	ErrUnavailable    = errors.New("lockraft: cluster unavailable")
)

// The member stopped serving (lockraft's api.go).
var (
	ErrStorage      = errors.New("lockraft: storage failure")
	ErrRemoved      = errors.New("lockraft: removed from the cluster; start with a fresh data directory to rejoin")
	ErrDataDir      = errors.New("lockraft: unusable data directory")
	ErrNewerVersion = errors.New("lockraft: log entry from a newer lockraft version; upgrade this member")
	ErrInternal     = errors.New("lockraft: internal error; node stopped")
)

// The lock catalogue: refusals that are deterministic (lockraft's
// catalogue.go, rwlock.go, semaphore.go, multilock.go, election.go).
var (
	ErrWrongKind       = errors.New("lockraft: name is in use as another kind of lock")
	ErrUpgrade         = errors.New("lockraft: read-to-write upgrade refused")
	ErrHoldConflict    = errors.New("lockraft: owner already holds the name in a conflicting way")
	ErrBadPermits      = errors.New("lockraft: semaphore permits out of range")
	ErrPermitsMismatch = errors.New("lockraft: semaphore size differs from the name's")
	ErrTooManyNames    = errors.New("lockraft: too many names in one multi-name lock")
	ErrDuplicateName   = errors.New("lockraft: name repeated in one multi-name lock")
	ErrInvalidValue    = errors.New("lockraft: election value too long")
	ErrOlderMembers    = errors.New("lockraft: a cluster member runs an older lockraft version without this lock kind; finish the upgrade")
	ErrObserveLagged   = errors.New("lockraft: election observer fell too far behind")
)

// Quotas (lockraft's security.go): what one member may have the leader hold
// for it.
var (
	ErrQuotaExceeded = errors.New("lockraft: quota exceeded")
)

// Operator actions (lockraft's inspect.go).
var (
	ErrNotLeader = errors.New("lockraft: not the leader")
	ErrNotMember = errors.New("lockraft: not a member")
	ErrRefused   = errors.New("lockraft: refused")
)
