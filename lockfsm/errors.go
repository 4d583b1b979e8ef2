package lockfsm

import "errors"

// Sentinel errors. Every error in a Result is one of these (compare with errors.Is); every one of them is
// deterministic: each replica applying the same entry returns the same error. Errors from Open, Restore,
// Commit and WriteSnapshot may wrap them with more context.
var (
	// ErrBadCommand: an entry's bytes do not decode (unknown format version, unknown kind or field,
	// truncated, trailing bytes). The entry still counts as applied.
	ErrBadCommand = errors.New("lockfsm: bad command encoding")
	// ErrUnsupported: the command uses a reserved feature not built yet (Mode other than Exclusive,
	// Permits > 1, ExtraNames). Nothing changes.
	ErrUnsupported = errors.New("lockfsm: unsupported lock mode, permits or multi-name acquire")
	// ErrInvalidName: the lock name is empty, longer than MaxNameLen bytes or not valid UTF-8. Nothing changes.
	ErrInvalidName = errors.New("lockfsm: invalid lock name")
	// ErrInvalidOwner: the owner is empty or longer than MaxOwnerLen bytes. Nothing changes.
	ErrInvalidOwner = errors.New("lockfsm: invalid owner")
	// ErrNoSession: the command names a session that was never opened or has been closed or expired.
	// Nothing changes and nothing is recorded for deduplication.
	ErrNoSession = errors.New("lockfsm: no such session")
	// ErrLocked: a non-waiting acquire found the name held by someone else (Result.Holder says who) or in
	// its lock-delay. Nothing changes.
	ErrLocked = errors.New("lockfsm: lock is held")
	// ErrNotHolder: a release by someone who does not hold the name. Nothing changes.
	ErrNotHolder = errors.New("lockfsm: not the holder")
	// ErrTooManyHolds: a reentrant acquire would pass the acquire's MaxHolds. Nothing changes.
	ErrTooManyHolds = errors.New("lockfsm: too many reentrant holds")
	// ErrAlreadyWaiting: a waiting acquire by an owner that is already queued on that name. Nothing changes.
	ErrAlreadyWaiting = errors.New("lockfsm: owner already waiting for this lock")
	// ErrStaleSequence: the command's sequence number is below the session's retained window (the client
	// promised never to send it again, or its result was evicted). Nothing changes; the outcome of the
	// original command is unknown to this call.
	ErrStaleSequence = errors.New("lockfsm: stale sequence number")
	// ErrCancelled: the result of an acquire that was cancelled before it was applied (a tombstone) or
	// while it waited. A late copy of that acquire returns it and has no effect.
	ErrCancelled = errors.New("lockfsm: acquire was cancelled")
	// ErrAlreadyApplied: Apply was called with an index at or below AppliedIndex. Nothing changes.
	ErrAlreadyApplied = errors.New("lockfsm: index already applied")
	// ErrCorrupt: a state file or snapshot is damaged, truncated or not a lockfsm file.
	ErrCorrupt = errors.New("lockfsm: corrupt state")
)

// errCodes maps sentinels to the one-byte codes stored in retained results (bbolt and snapshots).
// Codes are part of the on-disk format: append only.
var errCodes = [...]error{
	nil,
	ErrBadCommand,
	ErrUnsupported,
	ErrInvalidName,
	ErrInvalidOwner,
	ErrNoSession,
	ErrLocked,
	ErrNotHolder,
	ErrTooManyHolds,
	ErrAlreadyWaiting,
	ErrStaleSequence,
	ErrCancelled,
	ErrAlreadyApplied,
	ErrCorrupt,
}

func errToCode(err error) uint8 {
	for i, e := range errCodes {
		if e == err {
			return uint8(i)
		}
	}
	return 0
}

func codeToErr(c uint8) (error, bool) {
	if int(c) >= len(errCodes) {
		return nil, false
	}
	return errCodes[c], true
}
