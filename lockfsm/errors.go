package lockfsm

import "errors"

// Sentinel errors. Every error in a Result is one of these (compare with errors.Is); every one of them is
// deterministic: each replica applying the same entry returns the same error. Errors from Open, Restore,
// commit and WriteSnapshot may wrap them with more context.
var (
	// errBadCommand: an entry's bytes are malformed (truncated, trailing bytes, version or kind 0, an
	// integer out of range, or an unknown kind or field in a version-1 command). Apply counts the entry as
	// applied and changes nothing, on every replica and every version alike: the node applies such an entry
	// as a no-op (Apply does that) and carries on.
	errBadCommand = errors.New("lockfsm: bad command encoding")
	// errUnsupported: the command combines fields its primitive does not have (ModeShared outside a
	// read-write lock, Permits > 1 outside a semaphore, ExtraNames outside a mutex, ...), or is a version-1
	// command using the fields version 1 reserved (Mode, Permits > 1, ExtraNames). Nothing changes.
	errUnsupported = errors.New("lockfsm: unsupported lock mode, permits or multi-name acquire")
	// ErrInvalidName: the lock name is empty, longer than MaxNameLen bytes or not valid UTF-8. Nothing changes.
	ErrInvalidName = errors.New("lockfsm: invalid lock name")
	// ErrInvalidOwner: the owner is empty or longer than MaxOwnerLen bytes (unlike a name's, an owner's
	// bytes are not checked for UTF-8). Nothing changes.
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
	// errStaleSequence: the command's sequence number is below the session's retained window (the client
	// promised never to send it again, or its result was evicted). Nothing changes; the outcome of the
	// original command is unknown to this call.
	errStaleSequence = errors.New("lockfsm: stale sequence number")
	// errCancelled: the result of an acquire that was cancelled before it was applied (a tombstone) or
	// while it waited. A late copy of that acquire returns it and has no effect.
	errCancelled = errors.New("lockfsm: acquire was cancelled")
	// errAlreadyApplied: Apply was called with an index at or below AppliedIndex. Nothing changes.
	errAlreadyApplied = errors.New("lockfsm: index already applied")
	// errCorrupt: a state file or snapshot is damaged, truncated or not a lockfsm file.
	errCorrupt = errors.New("lockfsm: corrupt state")
	// ErrWrongKind: the name is in the table as another primitive (a semaphore acquired as a mutex, a
	// release of a read-write lock as a mutex, a proclaim on a mutex, a multi-name acquire naming a
	// semaphore, ...). Nothing changes.
	ErrWrongKind = errors.New("lockfsm: name is held as another kind of lock")
	// ErrUpgrade: a write acquire by an owner that holds the read side of the same read-write lock. Refused
	// rather than queued, since it could only wait for itself. Nothing changes.
	ErrUpgrade = errors.New("lockfsm: read-to-write upgrade refused")
	// ErrHoldConflict: the owner already holds the name in a way this acquire cannot extend: a single-name
	// acquire of a name it holds as part of a multi-name hold, a multi-name acquire of names it holds
	// otherwise (a different set, or singly), a campaign by the current leader, or a semaphore acquire that
	// could only be granted if the owner released its own permits. Nothing changes.
	ErrHoldConflict = errors.New("lockfsm: owner already holds the name in a conflicting way")
	// ErrBadPermits: a semaphore acquire with Limit 0 or above MaxPermits, or Permits above Limit. Nothing
	// changes.
	ErrBadPermits = errors.New("lockfsm: semaphore permits out of range")
	// ErrPermitsMismatch: a semaphore acquire whose Limit differs from the one the name was created with.
	// Nothing changes.
	ErrPermitsMismatch = errors.New("lockfsm: semaphore limit differs from the name's")
	// ErrTooManyNames: a multi-name acquire with more than MaxMultiNames names. Nothing changes.
	ErrTooManyNames = errors.New("lockfsm: too many names in one acquire")
	// ErrDuplicateName: a multi-name acquire naming a name twice. Nothing changes.
	ErrDuplicateName = errors.New("lockfsm: name repeated in one acquire")
	// ErrInvalidValue: an election value longer than MaxValueLen bytes. Nothing changes.
	ErrInvalidValue = errors.New("lockfsm: election value too long")
	// ErrNewerFormat: the entry is well formed but of a newer format than this code knows (a higher
	// command version, or an unknown kind, field, mode or primitive in a version-2 command). Apply refuses
	// it without applying it, and refuses every later entry too (Halted reports the index): a replica that
	// skipped the entry would diverge from the replicas that applied it (S7). The node must stop applying
	// at that index, say so loudly (an error naming the index and the version), and wait to be upgraded;
	// after a restart with a newer version the entry applies normally. The node also must not propose
	// version-2 commands (the catalogue) until every replica runs a version that knows them, since a
	// version without this sentinel treats them as errBadCommand no-ops.
	ErrNewerFormat = errors.New("lockfsm: command of a newer format")
)

// errCodes maps sentinels to the one-byte codes stored in retained results (bbolt and snapshots).
// Codes are part of the on-disk format: append only.
var errCodes = [...]error{
	nil,
	errBadCommand,
	errUnsupported,
	ErrInvalidName,
	ErrInvalidOwner,
	ErrNoSession,
	ErrLocked,
	ErrNotHolder,
	ErrTooManyHolds,
	ErrAlreadyWaiting,
	errStaleSequence,
	errCancelled,
	errAlreadyApplied,
	errCorrupt,
	ErrWrongKind,
	ErrUpgrade,
	ErrHoldConflict,
	ErrBadPermits,
	ErrPermitsMismatch,
	ErrTooManyNames,
	ErrDuplicateName,
	ErrInvalidValue,
	ErrNewerFormat,
}

// ErrorCode returns the one-byte code of err for carrying a Result's error over the wire: 0 for nil, the
// code of the package sentinel err wraps, 255 for any other error. Codes never change meaning.
func ErrorCode(err error) uint8 {
	if err == nil {
		return 0
	}
	for i, e := range errCodes {
		if i > 0 && errors.Is(err, e) {
			return uint8(i)
		}
	}
	return 255
}

// ErrorForCode is the inverse of ErrorCode: the sentinel for c (nil for 0); false for unknown codes.
func ErrorForCode(c uint8) (error, bool) { return codeToErr(c) }

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
